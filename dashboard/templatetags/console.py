"""The console's long lists built in Python: the instance links of the status cells and the rows of
the "Last 1000" lists; and ``{% pace %}``, a turn for others in a long render.

A page lists up to a thousand ids with two or three links each, "Last 1000 since startup" three
thousand rows; as template loops they were most of their pages' render time. A render holds the
node's event loop (gevent), so these give it a turn whenever the render's slice is used up
(registry/cache/pacing.py): heartbeats wait a slice at most.
"""

from urllib.parse import quote

from django import template
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString

from registry.cache.pacing import PACER
from registry.console_data import format_time

register = template.Library()


@register.simple_tag(takes_context=True)
def instance_links(context, group) -> SafeString:
    """``id1, id2`` for one status group: each id to its status page (new tab) when it is http(s),
    then a details link, and for staff a link to the admin's override page."""
    detail_prefix = escape(context["detail_prefix"])
    admin_prefix = escape(context["admin_prefix"]) if context.get("is_staff") else None
    parts = []
    for link in group.instances:
        name = escape(link.instance_id)
        path = f"{quote(link.app, safe='')}/{quote(link.instance_id, safe='')}/"
        if link.url:
            label = f'<a href="{escape(link.url)}" target="_blank" rel="noopener">{name}</a>'
        else:
            label = name
        details = (
            f'<a class="details" href="{detail_prefix}{path}" title="Details of {name}" '
            f'aria-label="Details of {name}"></a>'
        )
        manage = (
            f'<a class="manage" href="{admin_prefix}{path}" title="Change the status of {name}" '
            f'aria-label="Change the status of {name}"></a>'
            if admin_prefix is not None
            else ""
        )
        parts.append(f'<span class="instance">{label}{details}{manage}</span>')
    # A turn for others between the table's cells (a render holds the event loop: pacing.py).
    PACER.tick()
    return SafeString(", ".join(parts))


@register.simple_tag
def event_rows(events) -> SafeString:
    """The rows of a "Last 1000" list (Timestamp | Lease | Cause), or its "No results available"."""
    tz = timezone.get_current_timezone()
    rows = []
    for event in events:
        when = format_time(event.timestamp, tz) if event.timestamp > 0 else "—"
        cause = escape(event.cause)
        if event.status:
            cause += f" → {escape(event.status)}"
        if event.actor:
            cause += f' <span class="muted">by {escape(event.actor)}</span>'
        rows.append(
            f"<tr><td>{when}</td><td>{escape(event.app)}({escape(event.instance_id)})</td><td>{cause}</td></tr>"
        )
        PACER.tick()
    if not rows:
        return SafeString('<tr><td colspan="3">No results available</td></tr>')
    return SafeString("\n".join(rows))


@register.simple_tag
def pace() -> str:
    """Nothing; gives the event loop a turn if the render's slice is used up (in a template loop)."""
    PACER.tick()
    return ""
