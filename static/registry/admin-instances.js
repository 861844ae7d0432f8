// "Select all" for the registered-instances list in the admin.
(function () {
  "use strict";
  var all = document.getElementById("select-all");
  if (!all) return;
  all.addEventListener("change", function () {
    document.querySelectorAll("input.action-select").forEach(function (box) { box.checked = all.checked; });
  });
})();
