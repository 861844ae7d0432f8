"""The reads of the lease map: ``MapReads``, which ``Registry`` (core.py) builds over its own state
and hands out as ``registry.reads``, so that core.py keeps the writes and their rules.

Each read takes the registry's lock, which the two share, and returns copies or immutable views. A
read holds the lock for a copy of references (one list per application at most), never for encoding:
long reads (the delta's views) read lease times after the lock, with a turn for others every
``ScanPacing.step`` leases.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from .changes import Change, ChangeLog
from .config import RegistryRules
from .counters import Counters, EventCounts, RecentEvent
from .delta import DeltaParts, DeltaQueue, changed_views
from .instances import InstanceInfo
from .lease_map import LeaseMap, ScanPacing, group_by_app, reconcile_hashcode
from .leases import Lease, LeaseView
from .overrides import OverrideMap
from .preservation import Preservation, SelfPreservation


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Instances grouped by app plus the reconcile hashcode, all read under one lock acquisition."""

    apps: list[tuple[str, list[LeaseView]]]
    hashcode: str
    version: int = 1


class RenewGaps(NamedTuple):
    """A lease's recent stretches without renewal (``Lease.gaps``), for the console's instance page."""

    gaps: tuple[tuple[int, int], ...]
    last_renewal_ts: int
    gap_after_ms: int


def visible_lease(
    leases: LeaseMap, preservation: Preservation, config: RegistryRules, app: str, instance_id: str, now: int
) -> Lease | None:
    """The lease as single-instance reads and the status and metadata calls see it: an expired lease
    is hidden, unless the node is in self-preservation. Called under the registry's lock."""
    lease = leases.get(app, instance_id)
    if lease is None:
        return None
    expiring = preservation.lease_expiration_enabled
    if lease.is_expired(now, config.eureka_timing) and expiring(now):
        return None
    return lease


class MapReads:
    """What the lease map holds, read under the registry's lock.

    It changes nothing: the registry that builds it hands it the lock and the parts of its state the
    reads look at (the same objects its writes change), and keeps every write.
    """

    def __init__(
        self,
        *,
        lock: threading.Lock,
        leases: LeaseMap,
        overrides: OverrideMap,
        counters: Counters,
        preservation: Preservation,
        delta: DeltaQueue,
        changes: ChangeLog,
        config: RegistryRules,
        pacing: ScanPacing,
    ):
        self._lock = lock
        self._map = leases
        self._overrides = overrides
        self._counters = counters
        self._preservation = preservation
        self._delta = delta
        self._changes = changes
        self._config = config
        self._pacing = pacing

    def self_preservation(self, now: int) -> SelfPreservation:
        with self._lock:
            return self._preservation.report(now)

    def overrides(self) -> dict[str, str]:
        with self._lock:
            return self._overrides.statuses()

    def override_actor(self, instance_id: str) -> str | None:
        """Who set the id's override (``Override.actor``); None when there is none."""
        with self._lock:
            return self._overrides.actor(instance_id)

    def changes_since(
        self,
        after_id: int,
        limit: int,
        apps: Iterable[str] | None = None,
        actions: Iterable[str] | None = None,
    ) -> list[Change]:
        """``ChangeLog.since`` under the lock (raises ``TooOld``)."""
        with self._lock:
            return self._changes.since(after_id, limit, apps, actions)

    def subscribe_changes(self, listener: Callable[[Change], None]) -> Callable[[], None]:
        """Have ``listener`` called (under the lock: cheap, no I/O) for every change; returns the
        function that stops it."""
        with self._lock:
            return self._changes.subscribe(listener)

    def snapshot(self) -> Snapshot:
        """Every lease, including expired ones not yet evicted (as Eureka's full fetch)."""
        timing = self._config.eureka_timing
        with self._lock:
            return Snapshot(self._map.views(timing), self._map.hashcode())

    def instances(self) -> list[tuple[str, list[InstanceInfo]]]:
        """Every instance record by app, expired or not: references only, so the lock is held for
        one list per app (the console filters many of these per page view)."""
        with self._lock:
            return self._map.records()

    def app_names(self) -> list[str]:
        """Applications in the order a full snapshot lists them."""
        with self._lock:
            return self._map.app_names()

    def snapshot_app(self, app: str) -> list[LeaseView]:
        timing = self._config.eureka_timing
        with self._lock:
            return self._map.app_views(app, timing)

    def snapshot_delta(self) -> Snapshot:
        """Changed instances of the retention window with their *current* data, and the full-registry hash."""
        parts = self.delta_parts({})
        apps = [(app, parts.changed[app]) for app, _ in parts.outline]
        return Snapshot(apps, parts.hashcode, parts.version)

    def delta_parts(self, known: Mapping[str, int]) -> DeltaParts:
        """The delta as ``snapshot_delta`` gives it, but with instances only for the apps whose part
        changed since the versions in ``known`` (app -> version): one lock, one consistent delta.

        Under the lock each changed lease is listed with its record, which is what the hashcode
        counts (a status change replaces the record, so a record read later could disagree with
        it). Its times are read after the lock, a turn for the event loop every ``ScanPacing.step``
        leases (``changed_views``): building every view under it held every heartbeat while a
        whole fleet that had just registered was in the delta. A lease renewed meanwhile shows
        that renewal, which is newer and as true."""
        with self._lock:
            outline, listed, version = self._delta.read(known)
            hashcode = self._map.hashcode()
        changed = changed_views(listed, self._config.eureka_timing, self._pacing.step, self._pacing.pause)
        return DeltaParts(outline, changed, hashcode, version)

    def snapshot_vip(self, vip: str, secure: bool) -> Snapshot:
        """Instances whose (secure) vip list contains ``vip`` exactly; the hash covers only them."""
        timing = self._config.eureka_timing
        with self._lock:
            views = self._map.vip_views(vip, secure, timing)
        counts = Counter(view.instance.status for view in views)
        return Snapshot(group_by_app(views), reconcile_hashcode(counts), -1)

    def get_instance(self, app: str, instance_id: str, now: int) -> LeaseView | None:
        with self._lock:
            lease = visible_lease(self._map, self._preservation, self._config, app, instance_id, now)
            return lease.view(self._config.eureka_timing) if lease is not None else None

    def find_instance(self, instance_id: str, now: int) -> LeaseView | None:
        """``GET instances/{id}``: the first app holding the id."""
        with self._lock:
            app = self._map.find(instance_id)
            lease = None
            if app is not None:
                lease = visible_lease(self._map, self._preservation, self._config, app, instance_id, now)
            return lease.view(self._config.eureka_timing) if lease is not None else None

    def lease(self, app: str, instance_id: str) -> tuple[LeaseView, str | None] | None:
        """The lease and its recorded override, expired or not (the console's instance page)."""
        with self._lock:
            lease = self._map.get(app, instance_id)
            if lease is None:
                return None
            return lease.view(self._config.eureka_timing), self._overrides.status(instance_id)

    def renew_gaps(self, app: str, instance_id: str) -> RenewGaps | None:
        """The lease's recent stretches without renewal, its last renewal (never Eureka's inflated
        one) and how late a renewal counts as a gap; None without a lease."""
        with self._lock:
            lease = self._map.get(app, instance_id)
            if lease is None:
                return None
            return RenewGaps(lease.gaps, lease.last_renewal_ts, lease.gap_after_ms)

    def recent_events(self) -> tuple[list[RecentEvent], list[RecentEvent], list[RecentEvent]]:
        """Copies of the registered, cancelled and override lists, oldest first."""
        with self._lock:
            return self._counters.recent()

    def size(self) -> int:
        return len(self._map)

    def event_counts(self) -> EventCounts:
        """Cumulative counts of writes, evictions and prevented evictions since the map was made."""
        with self._lock:
            return self._counters.counts()

    def stats(self, now: int) -> dict:
        """Numbers the status console and /status show."""
        preservation = self._preservation
        with self._lock:
            return {
                "instances": len(self._map),
                "applications": self._map.app_count(),
                "expected_clients": preservation.expected_clients,
                "renews_threshold": preservation.renews_threshold,
                "renews_last_minute": preservation.renews_last_minute(now),
                "lease_expiration_enabled": preservation.lease_expiration_enabled(now),
                "self_preservation_enabled": self._config.enable_self_preservation,
                "delta_queue_length": len(self._delta),
                "overrides": len(self._overrides),
                "status_counts": self._map.status_counts(),
                "start_ts": preservation.start_ts,
            }
