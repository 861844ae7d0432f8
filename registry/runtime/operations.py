"""Status overrides: the one path that ``PUT/DELETE .../status`` and the Django admin both take.

Anything every override must do beyond the lease map belongs here, so that a change made by an
operator in the admin behaves exactly like one made over the wire (peer replication included: the
registry hands every non-replicated write to the node's replication hook).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from registry.domain import constants as c
from registry.domain.core import StatusChange

if TYPE_CHECKING:
    from registry.runtime.node import Node


def override_status(
    node: Node,
    app: str,
    instance_id: str,
    status: str,
    last_dirty_timestamp: int | None = None,
    actor: str = "",
    is_replication: bool = False,
) -> StatusChange | None:
    """``PUT apps/{app}/{id}/status?value=status``; None when the instance is not there (404).
    Peers hear of it unless it came from one (the registry's replication hook)."""
    return node.registry.set_status_override(
        app, instance_id, status, node.now(), last_dirty_timestamp, actor=actor, is_replication=is_replication
    )


def remove_override(
    node: Node,
    app: str,
    instance_id: str,
    new_status: str = c.UNKNOWN,
    last_dirty_timestamp: int | None = None,
    actor: str = "",
    is_replication: bool = False,
) -> StatusChange | None:
    """``DELETE apps/{app}/{id}/status[?value=new_status]``; None when the instance is not there (404)."""
    return node.registry.remove_status_override(
        app,
        instance_id,
        node.now(),
        new_status,
        last_dirty_timestamp,
        actor=actor,
        is_replication=is_replication,
    )
