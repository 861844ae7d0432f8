"""What a change feed request asks for, and the JSON shape of a change. Plain Python: no Django.

Both endpoints take the same parameters: ``since`` (a change id; the ``Last-Event-ID`` header wins
over it, because a browser's EventSource reconnects with that header to the URL it first opened,
whose ``since`` is stale by then), ``app`` and ``action`` (comma-separated, case-insensitive) and,
for the JSON endpoint, ``limit``. A bad value raises ``BadParameter`` naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from registry.domain.changes import ACTIONS, Change, TooOld
from registry.wire.codecs import applications_dict, instance_dict

DEFAULT_LIMIT = 500
MAX_LIMIT = 5_000
# Bounds on a filter, so that a request cannot make each stream's reads arbitrarily costly.
MAX_FILTER_VALUES = 100
MAX_APP_NAME = 200
# A change id is a positive 64-bit integer (start ms × 1,000 + n): anything longer is not one.
MAX_ID_DIGITS = 19


class BadParameter(Exception):
    """A request parameter the feed cannot use: answered 400 with ``parameter`` and ``detail``."""

    def __init__(self, parameter: str, detail: str):
        super().__init__(f"{parameter}: {detail}")
        self.parameter = parameter
        self.detail = detail


@dataclass(frozen=True)
class FeedQuery:
    since: int | None  # None: no resume point given
    apps: frozenset[str] | None  # upper-cased; None: every app
    actions: frozenset[str] | None  # None: every action
    limit: int = DEFAULT_LIMIT
    # Each change carries the instance as the map holds it when the change is read (``instance``:
    # Eureka's JSON form, null once it left): what a follower keeping its own copy needs (manage.py mesh).
    instances: bool = False

    def matches(self, change: Change) -> bool:
        return (self.apps is None or change.app.upper() in self.apps) and (
            self.actions is None or change.action in self.actions
        )


def _values(query: Mapping[str, Any], name: str) -> list[str]:
    """Every value of a parameter (``?app=a&app=b`` adds up like ``?app=a,b``)."""
    getlist = getattr(query, "getlist", None)
    if getlist is not None:
        return list(getlist(name))
    value = query.get(name)
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def parse_change_id(value: str, parameter: str) -> int:
    text = value.strip()
    if not text.isdigit() or not text.isascii() or len(text) > MAX_ID_DIGITS:
        raise BadParameter(parameter, f"expected a change id (a non-negative integer), got {value[:40]!r}")
    return int(text)


def _list_param(query: Mapping[str, Any], name: str) -> list[str] | None:
    raw = _values(query, name)
    if not raw:
        return None
    items = [item.strip() for value in raw for item in value.split(",") if item.strip()]
    if not items:
        raise BadParameter(name, "give at least one value (comma-separated), or leave the parameter out")
    if len(items) > MAX_FILTER_VALUES:
        raise BadParameter(name, f"at most {MAX_FILTER_VALUES} values")
    return items


def parse_query(
    query: Mapping[str, Any], last_event_id: str | None = None, max_limit: int = MAX_LIMIT
) -> FeedQuery:
    """The feed request in ``query`` (a QueryDict or a plain mapping); raises BadParameter."""
    since = None
    if last_event_id is not None and last_event_id.strip():
        since = parse_change_id(last_event_id, "Last-Event-ID")
    else:
        values = _values(query, "since")
        if values:
            since = parse_change_id(values[-1], "since")

    apps = _list_param(query, "app")
    if apps is not None:
        too_long = next((app for app in apps if len(app) > MAX_APP_NAME), None)
        if too_long is not None:
            raise BadParameter("app", f"application names are at most {MAX_APP_NAME} characters")

    actions = _list_param(query, "action")
    if actions is not None:
        actions = [action.upper() for action in actions]
        unknown = [action for action in actions if action not in ACTIONS]
        if unknown:
            raise BadParameter(
                "action", f"unknown action {unknown[0][:40]!r}: expected some of {', '.join(ACTIONS)}"
            )

    limit = DEFAULT_LIMIT
    limits = _values(query, "limit")
    if limits:
        text = limits[-1].strip()
        if not (text.isdigit() and text.isascii() and len(text) <= 6 and 1 <= int(text) <= max_limit):
            raise BadParameter("limit", f"expected an integer from 1 to {max_limit}, got {limits[-1][:40]!r}")
        limit = int(text)

    instances = False
    switches = _values(query, "instances")
    if switches:
        text = switches[-1].strip().lower()
        if text not in ("true", "false"):
            raise BadParameter("instances", f"expected true or false, got {switches[-1][:40]!r}")
        instances = text == "true"

    return FeedQuery(
        since=since,
        apps=frozenset(app.upper() for app in apps) if apps is not None else None,
        actions=frozenset(actions) if actions is not None else None,
        limit=limit,
        instances=instances,
    )


def last_change_id(registry) -> int:
    return registry.changes.last_id


def oldest_change_id(registry) -> int | None:
    try:
        return registry.changes.oldest_id()
    except IndexError:  # pruned to empty between the check and the read (another thread)
        return None


def check_resume_point(registry, since: int) -> None:
    """Raise TooOld when this node cannot go on from ``since``: its successors left the log, or it is
    ahead of every id this node handed out (an id of another node, whose numbering is not ours)."""
    last_id = last_change_id(registry)
    if since > last_id:
        raise TooOld(since, oldest_change_id(registry), last_id)
    registry.reads.changes_since(since, 1)


def read_page(registry, query: FeedQuery) -> dict[str, Any]:
    """One page of ``GET /api/v1/changes``; raises TooOld (→ 410).

    ``next`` is the id to pass as ``since`` next time: the last change returned when the page is full,
    else the newest id seen before the read, so that a filtered reader does not scan again through
    changes it has no interest in (and does not fall out of the retention window because of them).
    """
    for _attempt in range(2):
        last_before = last_change_id(registry)
        if query.since is None:
            oldest = oldest_change_id(registry)
            since = last_before if oldest is None else oldest - 1
        elif query.since > last_before:
            raise TooOld(query.since, oldest_change_id(registry), last_before)
        else:
            since = query.since
        try:
            changes = registry.reads.changes_since(since, query.limit, query.apps, query.actions)
            break
        except TooOld:
            # Without a resume point the oldest entry may have been pruned meanwhile: start again.
            if query.since is not None:
                raise
    else:  # pragma: no cover - pruned twice in a row between two reads
        raise TooOld(since, oldest_change_id(registry), last_change_id(registry))
    full = len(changes) >= query.limit
    next_id = changes[-1].id if full else max(last_before, changes[-1].id if changes else since)
    return {
        "changes": changes_json(registry, changes, query.instances),
        "lastId": last_change_id(registry),
        "oldestId": oldest_change_id(registry),
        "next": next_id,
    }


def changes_json(registry, changes: list[Change], with_instances: bool) -> list[dict[str, Any]]:
    """The changes as the feed shows them; with ``with_instances``, each with its instance's record as
    the map holds it now (one short lock hold per change), or None once it left the map."""
    if not with_instances:
        return [change.as_json() for change in changes]
    out = []
    for change in changes:
        shown = change.as_json()
        held = registry.reads.lease(change.app, change.instance_id)
        shown["instance"] = instance_dict(held[0]) if held is not None else None
        out.append(shown)
    return out


def registry_page(registry) -> dict[str, Any]:
    """``GET /api/v1/registry``: every instance as the map holds it now (not the response cache's copy,
    which may be a cache-sync interval old), and ``lastId``, the newest change before the read. A
    follower applies this, then follows the feed from ``lastId``: changes it then reads again are
    already in the copy, and applying an instance's current record twice changes nothing."""
    last_id = last_change_id(registry)
    return {"lastId": last_id, "applications": applications_dict(registry.reads.snapshot())}
