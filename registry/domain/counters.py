"""What the console and /metrics count of a node's writes: the "last 1000" lists of registrations,
cancellations and overrides, and cumulative counts of writes and evictions. Plain Python, no Django;
time is passed in (ms).

Not thread-safe: the registry bumps these under its own lock where each write is decided, so that
the request path pays for no metrics library, and copies them out under it (``MapReads.recent_events``,
``MapReads.event_counts``).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace

from . import constants as c

# Why an entry entered one of the "last 1000" lists (the console's cause column).
CAUSE_REGISTER = "register"
CAUSE_REREGISTER = "re-register"
CAUSE_METADATA = "metadata"
CAUSE_CANCEL = "cancel"
CAUSE_EVICTION = "eviction"
CAUSE_OVERRIDE = "override"
CAUSE_OVERRIDE_REMOVED = "override removed"


@dataclass(frozen=True, slots=True)
class RecentEvent:
    """One entry of the "last 1000" lists. ``status`` is the status the change left (overrides only);
    ``actor`` says who asked when it was not the instance itself (e.g. an admin user)."""

    timestamp: int
    app: str
    instance_id: str
    cause: str = CAUSE_REGISTER
    status: str = ""
    actor: str = ""
    # Order across the three lists (timestamps tie within a millisecond).
    seq: int = 0


@dataclass(slots=True)
class WriteCounts:
    """Cumulative counts of one origin's writes (clients, or peers replicating) since the map was made."""

    registers: int = 0
    # Heartbeats that renewed a lease (what "renews in the last minute" counts).
    renews: int = 0
    # Heartbeats answered 404: unknown instance, status UNKNOWN, or a newer copy at the sender.
    renews_not_found: int = 0
    cancels: int = 0
    overrides_set: int = 0
    overrides_removed: int = 0
    # Registrations and metadata updates refused for the record's size (RegistryRules.max_instance_bytes).
    too_large: int = 0


@dataclass(frozen=True, slots=True)
class EventCounts:
    """A copy of the map's cumulative counts (``MapReads.event_counts``)."""

    from_clients: WriteCounts
    from_peers: WriteCounts
    evictions: int
    # Expired leases an eviction run kept (self-preservation, or the per-run cap), each counted once
    # per stretch of being kept; ``expired_kept`` is how many the latest run kept.
    evictions_prevented: int
    expired_kept: int


class Counters:
    """The "last 1000" lists and the cumulative counts of one registry."""

    def __init__(self, kept: int = c.RECENT_EVENTS_KEPT):
        self.recent_registered: deque[RecentEvent] = deque(maxlen=kept)
        self.recent_cancelled: deque[RecentEvent] = deque(maxlen=kept)
        self.recent_overrides: deque[RecentEvent] = deque(maxlen=kept)
        self._seq = itertools.count(1)
        # Indexed by ``is_replication``: writes from clients, then writes replicated from peers.
        self.writes = (WriteCounts(), WriteCounts())
        self.evictions = 0
        self.evictions_prevented = 0
        # Expired leases the latest eviction run kept, so each is counted as prevented once.
        self._expired_kept: set[tuple[str, str]] = set()

    def registered(self, now: int, app: str, instance_id: str, cause: str) -> None:
        self.recent_registered.append(RecentEvent(now, app, instance_id, cause, seq=next(self._seq)))

    def cancelled(self, now: int, app: str, instance_id: str, cause: str) -> None:
        self.recent_cancelled.append(RecentEvent(now, app, instance_id, cause, seq=next(self._seq)))

    def overridden(self, now: int, app: str, instance_id: str, cause: str, status: str, actor: str) -> None:
        self.recent_overrides.append(
            RecentEvent(now, app, instance_id, cause, status, actor, next(self._seq))
        )

    def eviction_run(self, expired: Iterable[tuple[str, str]], evicted: list[tuple[str, str]]) -> None:
        """An eviction run evicted ``evicted`` of the ``expired`` (app, id) pairs; the others were
        kept, and count as prevented unless the run before kept them already."""
        kept = set(expired).difference(evicted)
        self.evictions += len(evicted)
        self.evictions_prevented += len(kept - self._expired_kept)
        self._expired_kept = kept

    def recent(self) -> tuple[list[RecentEvent], list[RecentEvent], list[RecentEvent]]:
        """Copies of the registered, cancelled and override lists, oldest first."""
        return list(self.recent_registered), list(self.recent_cancelled), list(self.recent_overrides)

    def counts(self) -> EventCounts:
        return EventCounts(
            from_clients=replace(self.writes[False]),
            from_peers=replace(self.writes[True]),
            evictions=self.evictions,
            evictions_prevented=self.evictions_prevented,
            expired_kept=len(self._expired_kept),
        )
