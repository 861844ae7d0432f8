"""Outgoing replication: from a write the registry accepted to the items of Eureka's batch format.

The registry hands every write that came from a client (never one that came from a peer) to
``ReplicationBuffer.add`` under its lock, so adding is a dictionary store and nothing more. Items are
keyed ``action#APP/id``, as in the Java server's batching dispatcher: a heartbeat that arrives while
an earlier heartbeat of the same instance still waits replaces it. A flusher takes the buffer every
``flush_ms`` (``take``), encodes the items (``encode``, outside the lock) and hands them to each
peer's outbox. The buffer is bounded: past ``capacity`` the oldest item is dropped and counted.

Plain Python: no Django, no I/O.
"""

from __future__ import annotations

import threading
from typing import Any

from registry.domain import constants as c
from registry.domain.core import ReplicationEvent
from registry.wire.codecs import instance_dict

DEFAULT_CAPACITY = 10_000
BATCH_SIZE = 250


class ReplicationBuffer:
    """Writes waiting for the next flush, coalesced per ``action#APP/id``, at most ``capacity``."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        self.capacity = capacity
        self._lock = threading.Lock()
        # A plain dict keeps insertion order, and a replaced key keeps its place.
        self._pending: dict[tuple[str, str, str], ReplicationEvent] = {}
        self.added = 0
        self.coalesced = 0
        self.dropped = 0

    def add(self, event: ReplicationEvent) -> None:
        key = (event.action, event.app, event.instance_id)
        with self._lock:
            self.added += 1
            if key in self._pending:
                # The newer write replaces the older one but keeps its place in the order.
                self._pending[key] = event
                self.coalesced += 1
                return
            if len(self._pending) >= self.capacity:
                del self._pending[next(iter(self._pending))]
                self.dropped += 1
            self._pending[key] = event

    def take(self) -> list[ReplicationEvent]:
        with self._lock:
            if not self._pending:
                return []
            pending, self._pending = self._pending, {}
        return list(pending.values())

    def __len__(self) -> int:
        return len(self._pending)


def encode(event: ReplicationEvent) -> dict[str, Any]:
    """One ``ReplicationInstance`` as the Java server writes it (``PeerEurekaNode``, reference 5.11)."""
    item: dict[str, Any] = {"appName": event.app, "id": event.instance_id}
    instance = event.instance
    if instance is not None:
        item["lastDirtyTimestamp"] = instance.last_dirty_timestamp
        item["status"] = instance.status
        if event.override not in (None, c.UNKNOWN):
            item["overriddenStatus"] = event.override
        if event.action == c.REPLICATE_REGISTER and event.view is not None:
            item["instanceInfo"] = instance_dict(event.view)
    item["action"] = event.action
    return item


def batches(items: list[dict[str, Any]], size: int = BATCH_SIZE) -> list[list[dict[str, Any]]]:
    return [items[start : start + size] for start in range(0, len(items), size)]
