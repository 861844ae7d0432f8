"""Template filters for registry times: epoch milliseconds, shown as Eureka's console shows them."""

from django import template
from django.utils import timezone

from registry.console_data import format_time

register = template.Library()


@register.filter
def eureka_time(ms):
    """``1796000000000`` → ``2026-11-30T06:13:20 +0000`` (in the site's time zone); 0 or None → "—"."""
    try:
        value = int(ms)
    except (TypeError, ValueError):
        return "—"
    return format_time(value, timezone.get_current_timezone()) if value > 0 else "—"


@register.filter
def relative_to(ms, now):
    """``12 s ago`` / ``in 1 min 18 s``, from the epoch milliseconds ``ms`` seen at ``now``."""
    try:
        delta = (int(ms) - int(now)) // 1000
    except (TypeError, ValueError):
        return ""
    seconds = abs(delta)
    if seconds < 60:
        text = f"{seconds} s"
    elif seconds < 3600:
        text = f"{seconds // 60} min {seconds % 60} s"
    elif seconds < 86400:
        text = f"{seconds // 3600} h {seconds % 3600 // 60} min"
    else:
        text = f"{seconds // 86400} d {seconds % 86400 // 3600} h"
    return f"in {text}" if delta > 0 else f"{text} ago"
