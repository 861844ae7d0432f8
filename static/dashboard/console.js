// Status console: auto-refresh of the live sections, and the tabs of "Last 1000 since startup".
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  // --- Tabs (the page lists every pane without JavaScript) ---
  var tabs = document.querySelectorAll(".tab[data-tab]");
  function show(name) {
    tabs.forEach(function (tab) { tab.classList.toggle("active", tab.dataset.tab === name); });
    document.querySelectorAll(".tab-pane").forEach(function (pane) {
      pane.classList.toggle("active", pane.dataset.pane === name);
    });
  }
  if (tabs.length) {
    tabs.forEach(function (tab) {
      tab.addEventListener("click", function (event) {
        event.preventDefault();
        show(tab.dataset.tab);
        history.replaceState(null, "", "#" + tab.dataset.tab);
      });
    });
    var wanted = location.hash.slice(1);
    show(document.querySelector('.tab[data-tab="' + wanted + '"]') ? wanted : "registered");
  }

  // --- Auto-refresh: every N s while visible; doubling up to 5 min while the tab is hidden ---
  var box = document.getElementById("auto-refresh");
  if (!box) return;
  var base = Number(box.dataset.refresh) * 1000;
  var url = box.dataset.liveUrl;
  var state = document.getElementById("refresh-state");
  var toggle = document.getElementById("refresh-toggle");
  var MAX_DELAY = 300000;
  var delay = base;
  var timer = null;
  var paused = false;
  if (!base || !url) return;

  function refresh() {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        doc.querySelectorAll("[data-live]").forEach(function (fresh) {
          var current = document.querySelector('[data-live="' + fresh.dataset.live + '"]');
          if (current) {
            // Keep the self-preservation panel open or closed as the reader left it.
            var panel = current.querySelector("details#self-preservation");
            var freshPanel = fresh.querySelector("details#self-preservation");
            if (panel && freshPanel) freshPanel.open = panel.open;
            current.replaceWith(fresh);
          }
        });
        state.textContent = "updated " + new Date().toLocaleTimeString();
      })
      .catch(function (error) {
        state.textContent = "refresh failed (" + error.message + "), retrying";
      });
  }

  function schedule() {
    clearTimeout(timer);
    if (paused) return;
    timer = setTimeout(function () {
      refresh().then(function () {
        delay = document.hidden ? Math.min(delay * 2, MAX_DELAY) : base;
        schedule();
      });
    }, delay);
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden || paused) return;
    delay = base;
    clearTimeout(timer);
    refresh().then(schedule);
  });
  toggle.addEventListener("click", function () {
    paused = !paused;
    toggle.textContent = paused ? "Resume" : "Pause";
    state.textContent = paused ? "paused" : "";
    if (!paused) { delay = base; schedule(); }
  });
  box.dataset.ready = "true";
  schedule();
})();
