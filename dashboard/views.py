"""The status console: Eureka's status page and "Last 1000 since startup", plus search, instance
details, a self-preservation explanation and replica health.

Read-only: everything comes from ``registry``'s public read functions (``console``, ``queries``);
status changes are made in the admin, which the pages link to for staff.
"""

from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import get_script_prefix, reverse
from django.utils import timezone
from django.views.decorators.http import require_safe

from dashboard.shared_pages import Busy, Page, SharedPages
from registry import console_data
from registry.admin import audit
from registry.admin.forms import InstanceFilterForm
from registry.cache.pacing import PACER
from registry.domain.findings import find_suspicious
from registry.domain.refusals import RefusalLines
from registry.runtime.node import Node
from registry.runtime.process import get_node

# Suspicious registrations listed on the status page at most (the count of the rest is shown).
FINDINGS_SHOWN = 50


def console_page(view):
    """EUREKA_DASHBOARD_LOGIN_REQUIRED puts the page behind Django's login (the admin's sign-in form).

    Read per request, so the setting can be changed in tests and costs nothing when off."""
    guarded = login_required(view)

    @wraps(view)
    def page(request, *args, **kwargs):
        if settings.EUREKA.dashboard.login_required:
            return guarded(request, *args, **kwargs)
        return view(request, *args, **kwargs)

    return page


BUSY_TEXT = "The console is rendering another page; try again in a moment.\n"


def _shared_pages(node: Node) -> SharedPages:
    pages = node.console_pages
    if not isinstance(pages, SharedPages):
        pages = node.console_pages = SharedPages(
            node.config.dashboard.cache_ms,
            node.now,
            give_way=PACER.give_way,
            refusal_lines=RefusalLines(node.config.process.refusal_log_interval_seconds),
        )
    return pages


def shared(view):
    """The view's answer shared by every viewer of the same page for EUREKA_DASHBOARD_CACHE_MS, one
    page rendered at a time and, under gevent, one view at a time after the heartbeats that were ready
    (dashboard/shared_pages.py); 503 when a view got no turn and its page has no copy to give.

    A page differs by its path and query (the login link carries them too), the script prefix its
    links carry and whether the viewer is staff (admin links); nothing else of the viewer is on it."""

    @wraps(view)
    def page(request, *args, **kwargs):
        user = request.user
        key = (get_script_prefix(), request.get_full_path(), user.is_authenticated and user.is_staff)

        def render_page() -> Page:
            response = view(request, *args, **kwargs)
            return Page(response.status_code, response.content, response["Content-Type"])

        try:
            answer = _shared_pages(get_node()).get(key, render_page)
        except Busy:
            busy = HttpResponse(
                BUSY_TEXT, status=503, content_type="text/plain; charset=utf-8", headers={"Retry-After": "1"}
            )
            # Counted, and logged at most once an interval, by SharedPages; not a line each by django.request.
            busy._has_been_logged = True
            return busy
        return HttpResponse(answer.content, status=answer.status, content_type=answer.content_type)

    return page


def _base_context(node, now) -> dict:
    """What every page shows: System Status, the banner and DS Replicas."""
    return {
        "now": now,
        "system": console_data.system_status(node, now, timezone.get_current_timezone()),
        "recount": console_data.recount_schedule(node),
        "replicas": console_data.replica_health(node, now),
        "refresh_seconds": settings.EUREKA.dashboard.refresh_seconds,
    }


def _status_context(request) -> tuple[dict, int]:
    node = get_node()
    now = node.now()
    form = InstanceFilterForm(request.GET)
    context = {
        **_base_context(node, now),
        "form": form,
        "page": None,
        "registered": node.registry.reads.size(),
        "general_info": console_data.general_info(node, now),
        "instance_info": console_data.instance_info(node, now),
        "is_staff": request.user.is_authenticated and request.user.is_staff,
        "remote_regions": console_data.remote_regions(node),
        "charts": _charts(node, now),
    }
    if not form.is_valid():
        return context, 400
    data = form.cleaned_data
    query = form.query()
    everything = node.registry.reads.instances()
    findings = find_suspicious(everything, node.registration_sources.as_mapping(), PACER.tick)
    context["findings"] = findings[:FINDINGS_SHOWN]
    context["findings_more"] = max(0, len(findings) - FINDINGS_SHOWN)
    groups = console_data.select(everything, query, PACER.tick)
    per_page = data["per_page"] or settings.EUREKA.dashboard.page_size
    context["page"] = console_data.page_of(groups, data["page"] or 1, per_page, PACER.tick)
    context["filtered"] = query.active
    params = request.GET.copy()
    params.pop("page", None)
    context["query_without_page"] = params.urlencode()
    # Built once here, not by {% url %} per instance: a page may list a thousand ids.
    context["detail_prefix"] = reverse("dashboard:instances")
    context["admin_prefix"] = reverse("admin:registry_instances")
    return context, 200


def _charts(node, now) -> list:
    """The last hour's charts, or none when the node keeps no history."""
    if node.history is None:
        return []
    return console_data.node_charts(node.history.samples(), now, timezone.get_current_timezone(), PACER.tick)


def _timeline(node, app, instance_id, detail, now):
    """The instance's last hour (status changes, renewal gaps), or None without a history or lease."""
    gaps = node.registry.reads.renew_gaps(app, instance_id) if detail is not None else None
    if node.status_trail is None or gaps is None:
        return None
    return console_data.instance_chart(
        node.status_trail.of(app, instance_id, now),
        gaps.gaps,
        detail.view.instance.status,
        gaps.last_renewal_ts,
        gaps.gap_after_ms,
        now,
        timezone.get_current_timezone(),
    )


@console_page
@require_safe
@shared
def status_page(request):
    context, status = _status_context(request)
    return render(request, "dashboard/status.html", context, status=status)


@console_page
@require_safe
@shared
def status_fragment(request):
    """The live sections of the status page alone, for the page's auto-refresh."""
    context, status = _status_context(request)
    return render(request, "dashboard/_live.html", context, status=status)


@console_page
@require_safe
@shared
def lastn_page(request):
    node = get_node()
    now = node.now()
    context = {**_base_context(node, now), "recent": console_data.recent_lists(node)}
    return render(request, "dashboard/lastn.html", context)


@console_page
@require_safe
def instance_index(request):
    return HttpResponseRedirect(reverse("dashboard:status"))


@console_page
@require_safe
@shared
def instance_page(request, app, instance_id):
    node = get_node()
    now = node.now()
    detail = console_data.lease_detail(node, app, instance_id, now)
    context = {
        "now": now,
        "app": app,
        "instance_id": instance_id,
        "detail": detail,
        "fields": console_data.instance_fields(detail.view) if detail else [],
        "events": detail.events if detail else console_data.events_of(node, app, instance_id),
        "records": audit.records_for(app, instance_id),
        "is_staff": request.user.is_authenticated and request.user.is_staff,
        # Active health checks (registry/health/): None when off or the instance asks for none.
        "health": node.health.view(app, instance_id) if node.health is not None else None,
        "timeline": _timeline(node, app, instance_id, detail, now),
    }
    return render(request, "dashboard/instance.html", context, status=200 if detail else 404)
