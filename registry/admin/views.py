"""Admin pages for the live lease map: list and search registered instances, override their status.

Every change goes through ``audit.apply_override`` (the protocol's own override path, recorded in the
database). Viewing needs staff; changing needs the ``registry.override_instance_status`` permission.
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import quote, unquote

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views import View

from registry import console_data
from registry.admin import audit
from registry.admin.forms import InstanceFilterForm, OverrideForm
from registry.models import StatusOverrideRecord
from registry.runtime.process import get_node

OVERRIDE_PERMISSION = "registry.override_instance_status"
ADMIN_PAGE_SIZE = 100
RECORDS_SHOWN = 20

Outcome = StatusOverrideRecord.Outcome


def selection_key(app: str, instance_id: str) -> str:
    """A checkbox value naming one instance; neither part can hold a raw "/" once quoted."""
    return f"{quote(app, safe='')}/{quote(instance_id, safe='')}"


def parse_selection_key(key: str) -> tuple[str, str] | None:
    app, sep, instance_id = key.partition("/")
    if not sep or not app or not instance_id or "/" in instance_id:
        return None
    return unquote(app), unquote(instance_id)


def _summary(records: list[StatusOverrideRecord]) -> str:
    counts = Counter(record.get_outcome_display() for record in records)
    return ", ".join(f"{label}: {count}" for label, count in counts.items())


def _audit_down_message(done: list[StatusOverrideRecord], asked: int) -> str:
    applied = f" {len(done)} of {asked} were applied and recorded before it failed." if done else ""
    return (
        "The audit record could not be written to the database, so the change was not made."
        f"{applied} Try again once the database is reachable."
    )


def _console_url(app: str, instance_id: str) -> str | None:
    if not settings.EUREKA.dashboard.enabled:
        return None
    return reverse("dashboard:instance", args=[app, instance_id])


class _AdminPage(View):
    site = None
    template_name = ""

    def render(self, request, context, status=200):
        return TemplateResponse(
            request, self.template_name, {**self.site.each_context(request), **context}, status=status
        )

    def apply(self, request, form, targets: list[tuple[str, str]]) -> tuple[list[StatusOverrideRecord], bool]:
        """The form's action on each ``(app, id)``. Stops at the first record the database refuses
        (that change is not made) and says so on the form: then ``complete`` is False."""
        node = get_node()
        data = form.cleaned_data
        records: list[StatusOverrideRecord] = []
        for app, instance_id in targets:
            try:
                records.append(
                    audit.apply_override(
                        node,
                        request.user,
                        app,
                        instance_id,
                        data["action"],
                        data["reason"],
                        data["status"] or None,
                    )
                )
            except audit.AuditUnavailable:
                form.add_error(None, _audit_down_message(records, len(targets)))
                return records, False
        return records, True

    def check_may_override(self, request):
        if not request.user.has_perm(OVERRIDE_PERMISSION):
            raise PermissionDenied("You may view instances but not change their status.")


class InstanceListAdminView(_AdminPage):
    """``/admin/registry/instances/``: the instances, filterable, with bulk override actions."""

    template_name = "admin/registry/instances.html"

    def get(self, request, action_form=None, status=200):
        node = get_node()
        form = InstanceFilterForm(request.GET)
        rows, page = [], None
        if form.is_valid():
            groups = console_data.select(node.registry.reads.instances(), form.query())
            flat = [instance for _, instances in groups for instance in instances]
            page = Paginator(flat, ADMIN_PAGE_SIZE).get_page(form.cleaned_data["page"] or 1)
            for instance in page.object_list:
                # The lease of each listed row (its override, last renewal); gone since the listing = skipped.
                found = node.registry.reads.lease(instance.app, instance.instance_id)
                if found is not None:
                    view, override = found
                    rows.append((view, override, selection_key(instance.app, instance.instance_id)))
        else:
            status = 400
        query = request.GET.copy()
        query.pop("page", None)
        context = {
            "title": "Registered instances",
            "filter_form": form,
            "action_form": action_form or OverrideForm(),
            "rows": rows,
            "page": page,
            "query_without_page": query.urlencode(),
            "may_override": request.user.has_perm(OVERRIDE_PERMISSION),
            "registered": node.registry.reads.size(),
        }
        return self.render(request, context, status)

    def post(self, request):
        self.check_may_override(request)
        form = OverrideForm(request.POST)
        form.is_valid()
        keys = [parse_selection_key(key) for key in request.POST.getlist("selected")]
        if not keys:
            form.add_error(None, "Select at least one instance.")
        elif None in keys:
            form.add_error(None, "The selection names an instance in a form this page did not send.")
        if form.errors:
            return self.get(request, action_form=form, status=400)
        records, complete = self.apply(request, form, keys)
        if not complete:
            return self.get(request, action_form=form, status=503)
        data = form.cleaned_data
        label = dict(StatusOverrideRecord.Action.choices)[data["action"]]
        level = messages.SUCCESS if all(r.outcome != Outcome.NOT_FOUND for r in records) else messages.WARNING
        messages.add_message(request, level, f"{label} on {len(records)} instance(s) — {_summary(records)}.")
        return HttpResponseRedirect(request.get_full_path())


class InstanceAdminView(_AdminPage):
    """``/admin/registry/instances/{app}/{id}/``: one instance, its override actions and its records."""

    template_name = "admin/registry/instance.html"

    def get(self, request, app, instance_id, action_form=None, status=200):
        node = get_node()
        detail = console_data.lease_detail(node, app, instance_id, node.now())
        records = audit.records_for(app, instance_id, RECORDS_SHOWN)
        context = {
            "title": f"{app} / {instance_id}",
            "app": app,
            "instance_id": instance_id,
            "detail": detail,
            "action_form": action_form or OverrideForm(),
            "records": records,
            "may_override": request.user.has_perm(OVERRIDE_PERMISSION),
            "console_url": _console_url(app, instance_id) if detail is not None else None,
        }
        return self.render(request, context, 404 if detail is None and status == 200 else status)

    def post(self, request, app, instance_id):
        self.check_may_override(request)
        form = OverrideForm(request.POST)
        if not form.is_valid():
            return self.get(request, app, instance_id, action_form=form, status=400)
        records, complete = self.apply(request, form, [(app, instance_id)])
        if not complete:
            return self.get(request, app, instance_id, action_form=form, status=503)
        (record,) = records
        if record.outcome == Outcome.NOT_FOUND:
            messages.warning(request, f"{app} / {instance_id} is not registered: nothing changed.")
        else:
            messages.success(
                request,
                f"{record.get_action_display()}: {record.old_status} → {record.new_status} "
                f"({record.get_outcome_display().lower()}).",
            )
        return HttpResponseRedirect(request.get_full_path())
