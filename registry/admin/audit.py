"""Status overrides made by operators: applied through ``operations`` (the protocol's own path) and
recorded in the database. Used by the admin; the protocol views never touch the database."""

from __future__ import annotations

import logging

from django.db import DatabaseError

from registry.domain import constants as c
from registry.models import StatusOverrideRecord
from registry.runtime import operations
from registry.runtime.node import Node

logger = logging.getLogger(__name__)

Action = StatusOverrideRecord.Action
Outcome = StatusOverrideRecord.Outcome

REASON_MAX_CHARS = 500


class AuditUnavailable(Exception):
    """The audit record could not be written, so the change was not applied."""


def target_status(action: str, status: str | None = None) -> str:
    """The status an action leaves; ``set_status`` needs ``status``."""
    if action == Action.TAKE_OUT_OF_SERVICE:
        return c.OUT_OF_SERVICE
    if action == Action.PUT_BACK_IN_SERVICE:
        return c.UP
    if action == Action.SET_STATUS and status in c.STATUSES:
        return status
    raise ValueError(f"Unknown action {action!r} or status {status!r}")


def apply_override(
    node: Node, user, app: str, instance_id: str, action: str, reason: str, status: str | None = None
) -> StatusOverrideRecord:
    """Apply one operator action and return its record.

    1. write the record as pending (a database failure stops here: nothing changed);
    2. apply it through ``operations``, exactly as ``PUT``/``DELETE .../status`` would;
    3. complete the record with what the registry actually found and left.
    """
    new_status = target_status(action, status)
    found = node.registry.reads.lease(app, instance_id)
    try:
        record = StatusOverrideRecord.objects.create(
            user=user,
            username=user.get_username(),
            app=app,
            instance_id=instance_id,
            action=action,
            old_status=found[0].instance.status if found else "",
            old_override=(found[1] or "") if found else "",
            new_status=new_status,
            reason=reason,
        )
    except DatabaseError as exc:
        logger.exception(
            "status override of %s/%s not applied: its record could not be written", app, instance_id
        )
        raise AuditUnavailable(str(exc)) from exc
    actor = f"admin:{user.get_username()}"
    if action == Action.PUT_BACK_IN_SERVICE:
        change = operations.remove_override(node, app, instance_id, c.UP, actor=actor)
    else:
        change = operations.override_status(node, app, instance_id, new_status, actor=actor)

    if change is None:
        record.outcome = Outcome.NOT_FOUND
    else:
        record.old_status = change.old_status
        record.old_override = change.old_override or ""
        record.new_status = change.new_status
        record.new_override = change.new_override or ""
        record.outcome = Outcome.APPLIED if change.changed else Outcome.UNCHANGED
    try:
        record.save(update_fields=["old_status", "old_override", "new_status", "new_override", "outcome"])
    except DatabaseError:
        # The change is in the registry and the pending record names it; say loudly that it is incomplete.
        logger.exception(
            "status override %s applied but its record %s could not be completed", actor, record.pk
        )
    return record


def records_for(app: str, instance_id: str, limit: int = 20) -> list[StatusOverrideRecord]:
    """The newest admin override records of one instance."""
    return list(StatusOverrideRecord.objects.filter(app=app, instance_id=instance_id)[:limit])
