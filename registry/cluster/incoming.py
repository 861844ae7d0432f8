"""Incoming replication: a peer's batch applied item by item (``PeerReplicationResource``, ref. 5.11).

Every item is a replicated write (``is_replication=True``): it changes this node's map but is never
sent on, so writes cannot loop between peers. Answers come in request order. An item that cannot be
read gets its own 400 and the rest of the batch still applies; the Java server would answer such a
Register 200 and drop it silently, which hides a broken peer.

A batch is work a client chooses the size of, so:

1. A batch of more than ``max_items`` items is refused whole before any applies (``BatchTooLarge``).
   The Java server's peer batches hold at most 250 items, as this project's do (replication.py).
2. Between two items the registry's ``pacing.pause`` gives the event loop a turn once a slice of time is used
   up (registry/cache/pacing.py): heartbeats are answered while a batch is applied.
3. Refused and failed items are counted and logged in one line per batch, not one per item: a batch of
   bad items would otherwise write a line for each. Anyone who may send batches can send one after another,
   so the lines about refused items come at most once an interval (``refusal_lines``,
   registry/domain/refusals.py), saying how many batches had some since the last.

Plain Python: no Django, no I/O.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from registry.domain import constants as c
from registry.domain.core import Registry, Renew
from registry.domain.refusals import RefusalLines
from registry.domain.write_rules import LimitExceeded
from registry.wire.codecs import BadInput, build_instance, instance_dict, parse_long, parse_status

logger = logging.getLogger(__name__)


class BadBatch(ValueError):
    """The batch document as a whole cannot be read (the request is answered 400)."""


class BatchTooLarge(BadBatch):
    """A batch of more items than this node applies in one request (answered 413, nothing applied)."""


def batch_items(document: Any, max_items: int | None = None) -> list[Any]:
    if not isinstance(document, dict) or not isinstance(document.get("replicationList"), list):
        raise BadBatch('Malformed replication batch: expected {"replicationList": [...]}')
    items = document["replicationList"]
    if max_items is not None and len(items) > max_items:
        raise BatchTooLarge(
            f"A replication batch holds at most {max_items} items, this one holds {len(items)}: "
            "nothing was applied (EUREKA_REPLICATION_BATCH_MAX_ITEMS)"
        )
    return items


def _text(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"Missing {key}")
    return value.strip()


def _last_dirty(item: dict[str, Any]) -> int | None:
    value = item.get("lastDirtyTimestamp")
    return None if value in (None, "") else parse_long(value, "lastDirtyTimestamp")


def apply_item(registry: Registry, item: Any, now: int) -> dict[str, Any]:
    """Apply one ``ReplicationInstance``; returns its ``{"statusCode": N[, "responseEntity": ...]}``."""
    if not isinstance(item, dict):
        raise BadInput("A replication item must be an object")
    action = item.get("action")
    # A list or an object is unhashable: tested against the set it would raise, not refuse.
    if not isinstance(action, str) or action not in c.REPLICATION_ACTIONS:
        raise BadInput(f"Unknown replication action {str(action)[:40]!r}")
    app = _text(item, "appName").upper()
    instance_id = _text(item, "id")

    if action == c.REPLICATE_REGISTER:
        raw = item.get("instanceInfo")
        if not isinstance(raw, dict):
            raise BadInput("Register needs instanceInfo")
        instance = build_instance(raw, now, path_app=app)
        if instance.instance_id != instance_id:
            raise BadInput(f"instanceInfo is {instance.instance_id!r}, the item names {instance_id!r}")
        try:
            registry.register(instance, now, is_replication=True)
        except LimitExceeded as exc:
            # A record over the size limit (counted by the registry): refused like an unreadable one.
            raise BadInput(str(exc)) from None
        return {"statusCode": 200}
    if action == c.REPLICATE_HEARTBEAT:
        overridden = item.get("overriddenStatus")
        overridden = parse_status(overridden, "overriddenStatus", c.UNKNOWN) if overridden else None
        result = registry.renew(app, instance_id, now, _last_dirty(item), overridden, is_replication=True)
        if result.outcome is Renew.CONFLICT and result.current is not None:
            # The peer holds an older copy: ours goes back so that it can adopt it.
            return {"statusCode": 409, "responseEntity": instance_dict(result.current)}
        return {"statusCode": result.outcome.value}
    if action == c.REPLICATE_CANCEL:
        return {"statusCode": 200 if registry.cancel(app, instance_id, now, is_replication=True) else 404}
    if action == c.REPLICATE_STATUS_UPDATE:
        status = parse_status(item.get("status"), "status", "")
        if not status:
            raise BadInput("StatusUpdate needs a status")
        change = registry.set_status_override(
            app, instance_id, status, now, _last_dirty(item), actor="peer", is_replication=True
        )
        return {"statusCode": 404 if change is None else 200}
    # DeleteStatusOverride: the status the sender's removal asked for (UNKNOWN when none).
    status = parse_status(item.get("status"), "status", c.UNKNOWN) or c.UNKNOWN
    change = registry.remove_status_override(
        app, instance_id, now, status, _last_dirty(item), actor="peer", is_replication=True
    )
    return {"statusCode": 404 if change is None else 200}


def _action(item: Any) -> str:
    """The item's action as a log line counts it: a known one, or "unknown"."""
    action = item.get("action") if isinstance(item, dict) else None
    return action if isinstance(action, str) and action in c.REPLICATION_ACTIONS else "unknown"


def apply_batch(
    registry: Registry,
    document: Any,
    clock: Callable[[], int],
    max_items: int | None = None,
    sender: str = "",
    refusal_lines: RefusalLines | None = None,
) -> dict[str, Any]:
    """``{"replicationList": [...]}`` → ``{"responseList": [...]}``, one answer per item, in order.

    ``clock`` is read once per item: the loop may serve others between two items. ``sender`` (the
    peer's address) is only shown in the log line; ``refusal_lines`` decides whether refused items
    get one (every batch that has some, without it)."""
    answers = []
    refused: Counter[str] = Counter()
    first_refusal = ""
    failed: Counter[str] = Counter()
    first_failure: Exception | None = None
    for item in batch_items(document, max_items):
        try:
            answers.append(apply_item(registry, item, clock()))
        except BadInput as exc:
            refused[_action(item)] += 1
            first_refusal = first_refusal or str(exc)[:200]
            answers.append({"statusCode": 400})
        except Exception as exc:
            failed[_action(item)] += 1
            first_failure = first_failure or exc
            answers.append({"statusCode": 500})
        registry.pacing.pause()
    # Every batch with refused items without ``refusal_lines``; with it, at most one an interval.
    batches = refusal_lines.note("replication_items") if refused and refusal_lines is not None else 1
    if refused and batches:
        logger.warning(
            "replication batch from %s: %d of %d items refused (%s); the first: %s%s",
            sender or "a peer",
            refused.total(),
            len(answers),
            _counts(refused),
            first_refusal,
            f" ({batches - 1} more such batches since the last such line)" if batches > 1 else "",
            extra={
                "event": "replication_items_refused",
                "sender": sender,
                "refused": dict(refused),
                "batches": batches,
            },
        )
    if failed:
        logger.error(
            "replication batch from %s: %d of %d items failed (%s); the first:",
            sender or "a peer",
            failed.total(),
            len(answers),
            _counts(failed),
            exc_info=first_failure,
            extra={"event": "replication_items_failed", "sender": sender, "failed": dict(failed)},
        )
    return {"responseList": answers}


def _counts(counts: Counter[str]) -> str:
    return ", ".join(f"{action} {count}" for action, count in counts.most_common())
