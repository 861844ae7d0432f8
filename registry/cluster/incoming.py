"""Incoming replication: a peer's batch applied item by item (``PeerReplicationResource``, ref. 5.11).

Every item is a replicated write (``is_replication=True``): it changes this node's map but is never
sent on, so writes cannot loop between peers. Answers come in request order. An item that cannot be
read gets its own 400 and the rest of the batch still applies; the Java server would answer such a
Register 200 and drop it silently, which hides a broken peer.

Plain Python: no Django, no I/O.
"""

from __future__ import annotations

import logging
from typing import Any

from registry import constants as c
from registry.core import Registry, Renew
from registry.wire.codecs import BadInput, build_instance, instance_dict, parse_long, parse_status

logger = logging.getLogger(__name__)


class BadBatch(ValueError):
    """The batch document as a whole cannot be read (the request is answered 400)."""


def batch_items(document: Any) -> list[Any]:
    if not isinstance(document, dict) or not isinstance(document.get("replicationList"), list):
        raise BadBatch('Malformed replication batch: expected {"replicationList": [...]}')
    return document["replicationList"]


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
        registry.register(instance, now, is_replication=True)
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


def apply_batch(registry: Registry, document: Any, now: int) -> dict[str, Any]:
    """``{"replicationList": [...]}`` → ``{"responseList": [...]}``, one answer per item, in order."""
    answers = []
    for item in batch_items(document):
        try:
            answers.append(apply_item(registry, item, now))
        except BadInput as exc:
            logger.warning("replication item refused: %s", exc)
            answers.append({"statusCode": 400})
        except Exception:
            logger.exception("replication item failed")
            answers.append({"statusCode": 500})
    return {"responseList": answers}
