"""A warm restart's side of the lease map: ``SavedStateTransfer``, which ``Registry`` (core.py) builds
over its own state and hands out as ``registry.saved_state``. It copies out what a snapshot saves and
takes a saved state back into the map. The format itself (parsing, checks, the header) is
snapshot_format.py's; the writer and its stores are registry/runtime/snapshots.py's.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from .changes import ChangeLog
from .config import RegistryRules
from .lease_map import LeaseMap, ScanPacing
from .leases import Lease, expired_among
from .overrides import OverrideMap
from .preservation import Preservation
from .snapshot_format import Restored, SavedParts, SavedState, saved_header


class SavedStateTransfer:
    """``export_parts`` for the snapshot writer and ``restore`` for a warm restart, under the
    registry's lock, on the state the registry that builds it hands over (the same objects its writes
    change). ``restored`` says what a restore took back: None for a node that started empty."""

    def __init__(
        self,
        *,
        lock: threading.Lock,
        leases: LeaseMap,
        overrides: OverrideMap,
        preservation: Preservation,
        changes: ChangeLog,
        config: RegistryRules,
        pacing: ScanPacing,
    ):
        self._lock = lock
        self._map = leases
        self._overrides = overrides
        self._preservation = preservation
        self._changes = changes
        self._config = config
        self._pacing = pacing
        self.restored: Restored | None = None

    def export_parts(self, now: int) -> SavedParts:
        """What a snapshot saves, as references: the records by app, each lease's times (in the same
        order), the overrides, the self-preservation numbers and the change log. Not the delta
        queue: a restored node starts with an empty delta, whose hashcode is then the full
        registry's.

        Under the lock only each application's leases are listed, so a writer waits for a list copy
        per application, not for the encoding (the snapshot writer's, registry/runtime/snapshots.py).
        Each lease's record and times are read after the lock, with a turn for the event loop every
        ``ScanPacing.step`` leases (``SavedParts.collect``): a lease renewed meanwhile is saved with
        that renewal, which is newer than ``saved_at``, and as true; the set of leases and the
        change log are as of the lock."""
        with self._lock:
            listed = self._map.listed()
            preservation = self._preservation
            header = saved_header(
                now,
                self._overrides.rows(),
                preservation.expected_clients,
                preservation.renews_threshold,
                preservation.renews_last_minute(now),
            )
            last_change_id, changes = self._changes.copy()
        return SavedParts.collect(
            header, listed, last_change_id, changes, self._pacing.step, self._pacing.pause
        )

    def restore(self, state: Mapping, now: int, max_age_ms: int | None = None) -> int:
        """Take back what ``export_parts`` saved (warm restart); returns how many instances.

        1. refuse (``BadSnapshot``) another format, a state older than ``max_age_ms``, or any part not
           of the shape written: everything is parsed before the map is touched, so a refusal
           leaves the node as it was (empty, at start-up);
        2. leases keep their renewal times, so an instance that died before the restart expires
           when it would have;
        3. the node opens for traffic at once, counting the saved expected clients and carrying the
           last minute's renews over, so self-preservation neither fires nor waits on the restart;
        4. leases already expired at ``now`` are dropped, by eviction's rule (``expired_among``, with
           the node's lease timing; none while those numbers put the node in self-preservation,
           which evicts nothing), each taken off the expected clients as an eviction would: served
           until the first eviction run, they listed instances whose clients had stopped renewing
           (``Restored.expired`` counts them).

        An instance the map already holds is kept as it is (it was written after the snapshot).
        """
        saved = SavedState.parse(state, now, max_age_ms)
        with self._lock:
            leases = [lease for lease in saved.leases if not self._map.holds(*_key_of(lease))]
            preservation = self._preservation
            preservation.restore(max(saved.expected_clients, len(leases)), saved.renews_last_minute, now)
            expired: set[int] = set()
            if preservation.lease_expiration_enabled(now):
                timing = self._config.eureka_timing
                pairs = [(None, lease) for lease in leases]
                expired = {id(lease) for _, lease in expired_among(pairs, now, timing)}
            dropped_ids = set()
            restored = 0
            for lease in leases:
                if id(lease) in expired:
                    dropped_ids.add(lease.instance.instance_id)
                    preservation.client_removed()
                    continue
                self._map.put(lease)
                restored += 1
            for instance_id, status, last_access, actor in saved.overrides:
                if instance_id not in dropped_ids:
                    self._overrides.set_default(instance_id, status, last_access, actor)
            self._changes.restore(saved.changes)
            self.restored = Restored(restored, saved.saved_at, now, expired=len(expired))
            return restored


def _key_of(lease: Lease) -> tuple[str, str]:
    return lease.instance.app, lease.instance.instance_id
