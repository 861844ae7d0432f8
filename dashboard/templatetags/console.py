"""The instance links of the console's status cells, built in Python.

A page lists up to a thousand ids with two or three links each; as template loops they were most of
the page's render time (and a render holds the node's event loop, so heartbeats wait for it).
"""

from urllib.parse import quote

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString

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
    return SafeString(", ".join(parts))
