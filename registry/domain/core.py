"""The authoritative lease map of one node, with Eureka's server rules. Plain Python, no Django.

Every operation takes ``now`` (epoch milliseconds) from the caller and reads no clock of its own, so
the rules are unit-tested with a fake clock. One lock guards all state; operations hold it for O(1)
work, except the periodic jobs (eviction, recount) and the snapshot copies behind cache misses.

``Registry`` holds the lock, the state it guards and the writes (register, renew, cancel, override,
evict). Two parts built over the same lock and state hold the rest: ``registry.reads``
(``MapReads``, map_reads.py) answers every read, and ``registry.saved_state``
(``SavedStateTransfer``, saved_state.py) copies the state out for a warm restart's snapshot and takes
a snapshot back. What the writes also move lives in small classes they call under the lock, each with
its own tests: the map's leases and counts (``lease_map.py``), the override map (``overrides.py``),
the limits and status rules a write obeys (``write_rules.py``), the eviction run's pieces
(``eviction.py``), the delta queue (``delta.py``), the self-preservation arithmetic
(``preservation.py``), the console's counters (``counters.py``), and the warm-restart format
(``snapshot_format.py``).
"""

from __future__ import annotations

import enum
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from . import constants as c
from .changes import (
    CANCELLED,
    EVICTED,
    METADATA_CHANGED,
    REGISTERED,
    STATUS_CHANGED,
    ChangeLog,
)
from .config import RegistryRules
from .counters import (
    CAUSE_CANCEL,
    CAUSE_EVICTION,
    CAUSE_METADATA,
    CAUSE_OVERRIDE,
    CAUSE_OVERRIDE_REMOVED,
    CAUSE_REGISTER,
    CAUSE_REREGISTER,
    Counters,
)
from .delta import DeltaQueue
from .eviction import Eviction, EvictionRun, scan_expired, still_expired
from .instances import InstanceInfo, freeze
from .lease_map import LeaseMap, ScanPacing
from .leases import Lease, LeaseView
from .map_reads import MapReads, visible_lease
from .overrides import OverrideMap
from .preservation import Preservation
from .saved_state import SavedStateTransfer
from .write_rules import RecordTooLarge, WriteLimits, copy_was_cancelled, resolve_status


class Renew(enum.Enum):
    OK = 200
    NOT_FOUND = 404
    CONFLICT = 409


@dataclass(frozen=True, slots=True)
class RenewResult:
    outcome: Renew
    # The node's own copy, returned with a 409 so a replicating peer can adopt it.
    current: LeaseView | None = None


@dataclass(frozen=True, slots=True)
class StatusChange:
    """What a status override call found and left; ``changed`` is False for a no-op."""

    old_status: str
    new_status: str
    old_override: str | None
    new_override: str | None

    @property
    def changed(self) -> bool:
        return self.old_status != self.new_status or self.old_override != self.new_override


@dataclass(frozen=True, slots=True)
class ReplicationEvent:
    """A write accepted from a client (never from a peer), to be sent on to the peers.

    ``instance`` is the stored (immutable) record as the write left it, None for a cancel; items are
    built from it later, outside the lock. ``view`` adds the lease times, for the writes that send
    the whole instance (Register). ``override`` is the id's entry in the override map (heartbeats
    carry it, so that a peer that lost it gets it back).
    """

    action: str
    app: str
    instance_id: str
    instance: InstanceInfo | None = None
    view: LeaseView | None = None
    override: str | None = None


ChangeListener = Callable[[str, Iterable[str]], None]
ReplicationListener = Callable[[ReplicationEvent], None]


class Registry:
    """``app -> {instance id -> Lease}`` plus the state Eureka keeps beside it, and the writes to them.

    Reads go through ``reads`` and a warm restart's export and restore through ``saved_state``: parts
    it builds over its own lock and state, which they get in their constructors.

    ``on_change(app, vips)`` is called (under the lock, so it must be cheap) after every change that
    the response cache must see: it receives the app name and the raw vip/secure-vip strings involved.
    ``on_replicate(event)`` is called (under the lock too) for every write that came from a client
    rather than a peer: register, renew, cancel, status override set or removed, metadata change.
    Evictions are not replicated: each node evicts on its own (protocol reference 5.7.3).
    """

    def __init__(
        self,
        config: RegistryRules,
        now: int,
        on_change: ChangeListener | None = None,
        rng: random.Random | None = None,
        on_replicate: ReplicationListener | None = None,
    ):
        self._config = config
        self._lock = threading.Lock()
        self._map = LeaseMap()
        self._overrides = OverrideMap(config.override_idle_expiry_ms)
        self._limits = WriteLimits(config)
        self._delta = DeltaQueue()
        self._eviction = Eviction(rng or random.Random())
        self._on_change = on_change or (lambda app, vips: None)
        self._on_replicate = on_replicate
        # The console's "last 1000" lists and the cumulative counts /metrics reads.
        self._counters = Counters()
        # How long scans (eviction here, the delta's views, a snapshot's lease times) give others a
        # turn; the node sets its pacer's tick as ``pacing.pause``.
        self.pacing = ScanPacing()
        # Expected clients, the renewal threshold and the renewals per minute (self-preservation).
        self._preservation = Preservation(config, now)
        # Every change, numbered, for the change feed and webhooks (registry/domain/changes.py).
        self.changes = ChangeLog(now, config.delta_retention_ms)
        # Every read (map_reads.py), and a warm restart's export and restore (saved_state.py): parts
        # that take this lock and look at the same state the writes change.
        self.reads = MapReads(
            lock=self._lock,
            leases=self._map,
            overrides=self._overrides,
            counters=self._counters,
            preservation=self._preservation,
            delta=self._delta,
            changes=self.changes,
            config=config,
            pacing=self.pacing,
        )
        self.saved_state = SavedStateTransfer(
            lock=self._lock,
            leases=self._map,
            overrides=self._overrides,
            preservation=self._preservation,
            changes=self.changes,
            config=config,
            pacing=self.pacing,
        )
        # True from the node's start until its start-up sync from peers is done or has given up
        # (``await_start_up_sync``): no registry read is served meanwhile (``allows_reads``).
        self.awaiting_sync = False
        self.open_for_traffic(0, now)

    @property
    def config(self) -> RegistryRules:
        return self._config

    def set_replication_listener(self, listener: ReplicationListener | None) -> None:
        """Where client writes go to be replicated (None: a standalone node, nothing is recorded)."""
        with self._lock:
            self._on_replicate = listener

    # ----------------------------------------------------------------- lifecycle and arithmetic

    def open_for_traffic(self, synced_count: int, now: int) -> None:
        """Start serving after the startup sync copied ``synced_count`` instances from peers."""
        with self._lock:
            restored = self.saved_state.restored is not None
            self._preservation.open_for_traffic(synced_count, now, restored=restored)
            self.awaiting_sync = False

    def await_start_up_sync(self) -> None:
        """Serve no read until ``start_up_sync_done`` or ``open_for_traffic``: what the map holds before
        the start-up sync (a warm restart's snapshot, or nothing) is not what the cluster holds. Writes
        are accepted meanwhile."""
        self.awaiting_sync = True

    def start_up_sync_done(self) -> None:
        """The start-up sync has merged what its peers hold, or has given up: reads are served."""
        self.awaiting_sync = False

    def allows_reads(self, now: int) -> bool:
        """Closed until the start-up sync is done (``await_start_up_sync``), then Eureka's read gate:
        closed for a while after a startup sync that found no instances."""
        return not self.awaiting_sync and self._preservation.allows_reads(now)

    # ------------------------------------------------------------------------------- writes

    def register(self, instance: InstanceInfo, now: int, is_replication: bool = False) -> None:
        """Raises ``LimitExceeded`` (``RegistryFull``) for a client's registration over the limits, having
        changed nothing. A peer's is refused only for the record's size (``RecordTooLarge``, counted):
        the peer accepted it from its client, and refusing it for a limit the peer may set otherwise
        would only keep the nodes apart; but the size bounds this node's memory and every fetch, and
        with API accounts off anyone may send a "replicated" registration."""
        if not is_replication:
            self._limits.check_metadata(instance.metadata)
        # Measured outside the lock: a peer's record may hold many metadata entries.
        too_large = self._limits.too_large(instance)
        with self._lock:
            if too_large:
                self._counters.writes[is_replication].too_large += 1
                raise RecordTooLarge(too_large)
            if not is_replication:
                registered = self._map.holds(instance.app, instance.instance_id)
                self._limits.check_room(instance, len(self._map), registered)
            self._register(instance, now, is_replication)
            self._counters.writes[is_replication].registers += 1

    def _register(
        self, instance: InstanceInfo, now: int, is_replication: bool, cause: str | None = None
    ) -> None:
        """Eureka ``AbstractInstanceRegistry.register`` (protocol reference 5.2)."""
        instance = self._limits.within_bounds(instance, now)
        existing = self._map.get(instance.app, instance.instance_id)
        if existing is None:
            self._preservation.client_added()
        elif existing.instance.last_dirty_timestamp > instance.last_dirty_timestamp:
            # The copy with the newer client-side clock wins; a tie goes to the incoming payload.
            instance = existing.instance

        override = self._overrides.use(instance.instance_id, now)
        if override is None and instance.overridden_status != c.UNKNOWN:
            override = instance.overridden_status
            self._overrides.set(instance.instance_id, override, now)
        status = resolve_status(instance, existing, override, is_replication)
        instance = instance.evolve(
            status=status,
            overridden_status=override or instance.overridden_status,
            action_type=c.ADDED,
            last_updated_timestamp=now,
        )
        service_up_ts = existing.service_up_ts if existing is not None else 0
        lease = Lease(instance, instance.duration_secs * 1000, now, service_up_ts=service_up_ts)
        if existing is not None:
            lease.carry_gaps(existing, now)
        if status == c.UP:
            lease.service_up(now)
        self._map.put(lease)
        self._delta.append(now, lease)
        if cause is None:
            cause = CAUSE_REGISTER if existing is None else CAUSE_REREGISTER
        self._counters.registered(now, instance.app, instance.instance_id, cause)
        old = existing.instance if existing is not None else instance
        self._on_change(instance.app, {*_vips_of(instance), *_vips_of(old)})
        self.changes.append(
            now,
            instance.app,
            instance.instance_id,
            METADATA_CHANGED if cause == CAUSE_METADATA else REGISTERED,
            existing.instance.status if existing is not None else None,
            status,
            override,
            is_replication,
        )
        if not is_replication:
            self._replicate(c.REPLICATE_REGISTER, lease)

    def _replicate(self, action: str, lease: Lease, override: str | None = None) -> None:
        if self._on_replicate is not None:
            instance = lease.instance
            # A heartbeat (most of the traffic) needs no lease copy: the record itself is immutable.
            view = lease.view(self.config.eureka_timing) if action == c.REPLICATE_REGISTER else None
            self._on_replicate(
                ReplicationEvent(action, instance.app, instance.instance_id, instance, view, override)
            )

    def renew(
        self,
        app: str,
        instance_id: str,
        now: int,
        last_dirty_timestamp: int | None = None,
        overridden_status: str | None = None,
        is_replication: bool = False,
    ) -> RenewResult:
        """Eureka ``renew`` plus the resource's dirty-timestamp check (protocol reference 5.3)."""
        writes = self._counters.writes[is_replication]
        config = self.config
        with self._lock:
            lease = self._map.get(app, instance_id)
            if lease is None:
                writes.renews_not_found += 1
                return RenewResult(Renew.NOT_FOUND)
            instance = lease.instance
            status = resolve_status(instance, lease, self._overrides.use(instance_id, now), is_replication)
            if status == c.UNKNOWN:
                # After an override removal without a value: make the client re-register.
                writes.renews_not_found += 1
                return RenewResult(Renew.NOT_FOUND)
            if status != instance.status:
                # Eureka changes the status silently here: no delta entry, no cache invalidation.
                override = self._overrides.status(instance_id)
                self.changes.append(
                    now, app, instance_id, STATUS_CHANGED, instance.status, status, override, is_replication
                )
                self._map.replace_record(lease, instance.evolve(status=status))
                instance = lease.instance
            self._preservation.renews.increment(now)
            writes.renews += 1
            lease.renew(now)
            if not is_replication:
                # Sent whatever the dirty-timestamp check below answers, as Eureka does.
                self._replicate(c.REPLICATE_HEARTBEAT, lease, self._overrides.status(instance_id))

            if last_dirty_timestamp is None or not config.sync_when_timestamp_differs:
                return RenewResult(Renew.OK)
            if last_dirty_timestamp > self._limits.latest_dirty(now):
                # From a clock far ahead of ours: the stored copy was lowered to now + the limit when
                # it was registered, so a comparison would answer 404 (re-register) to every heartbeat.
                # Skipping it keeps nothing from the sender: a renewal stores no timestamp.
                return RenewResult(Renew.OK)
            if last_dirty_timestamp > instance.last_dirty_timestamp:
                if is_replication and overridden_status not in (None, c.UNKNOWN):
                    self._overrides.set_default(instance_id, overridden_status, now)
                writes.renews_not_found += 1
                return RenewResult(Renew.NOT_FOUND)
            if last_dirty_timestamp < instance.last_dirty_timestamp and is_replication:
                return RenewResult(Renew.CONFLICT, lease.view(config.eureka_timing))
            return RenewResult(Renew.OK)

    def cancel(self, app: str, instance_id: str, now: int, is_replication: bool = False) -> bool:
        with self._lock:
            cancelled = self._cancel(app, instance_id, now, CAUSE_CANCEL)
            if cancelled:
                self._counters.writes[is_replication].cancels += 1
            if cancelled and not is_replication and self._on_replicate is not None:
                self._on_replicate(ReplicationEvent(c.REPLICATE_CANCEL, app, instance_id))
            return cancelled

    def _cancel(self, app: str, instance_id: str, now: int, cause: str) -> bool:
        """Eureka ``internalCancel``: the override goes even when there is no lease."""
        self._overrides.remove(instance_id)
        lease = self._map.pop(app, instance_id)
        if lease is None:
            return False
        lease.cancel(now)
        lease.instance = lease.instance.evolve(action_type=c.DELETED, last_updated_timestamp=now)
        self._delta.append(now, lease)
        self._counters.cancelled(now, app, instance_id, cause)
        self._preservation.client_removed()
        self._on_change(app, _vips_of(lease.instance))
        action = EVICTED if cause == CAUSE_EVICTION else CANCELLED
        self.changes.append(now, app, instance_id, action, lease.instance.status, None)
        return True

    def recent_cancel(self, app: str, instance_id: str) -> tuple[int, int] | None:
        """(last dirty timestamp, cancelled at) of the id's cancel or eviction when that is its latest
        entry in the delta queue (the retention window); None otherwise."""
        with self._lock:
            lease = self._delta.latest(app, instance_id)
            if lease is None or lease.eviction_ts <= 0 or lease.instance.action_type != c.DELETED:
                return None
            return lease.instance.last_dirty_timestamp, lease.instance.last_updated_timestamp

    def cancel_if_not_newer(
        self, app: str, instance_id: str, last_dirty: int, cancelled_at: int, now: int
    ) -> bool:
        """Cancel (as a peer's cancel: never sent on) the id's lease if a peer cancelled that copy of
        it: one whose dirty timestamp is not after ``last_dirty`` and that was not written after
        ``cancelled_at``. A lease registered again since (a newer copy, or written here later) stays."""
        with self._lock:
            lease = self._map.get(app, instance_id)
            if lease is None or not copy_was_cancelled(
                lease.instance.last_dirty_timestamp,
                lease.instance.last_updated_timestamp,
                last_dirty,
                cancelled_at,
            ):
                return False
            self._cancel(app, instance_id, now, CAUSE_CANCEL)
            self._counters.writes[True].cancels += 1
            return True

    def _visible_lease(self, app: str, instance_id: str, now: int) -> Lease | None:
        return visible_lease(self._map, self._preservation, self.config, app, instance_id, now)

    def _modify(
        self, lease: Lease, now: int, last_dirty_timestamp: int | None, replicated: bool = False, **changes
    ) -> None:
        old = lease.instance
        if last_dirty_timestamp is not None:
            # A status call's timestamp is stored, so it is held to the same bound as a registration's.
            last_dirty_timestamp = min(last_dirty_timestamp, self._limits.latest_dirty(now))
            if last_dirty_timestamp > old.last_dirty_timestamp:
                changes["last_dirty_timestamp"] = last_dirty_timestamp
        new = old.evolve(action_type=c.MODIFIED, last_updated_timestamp=now, **changes)
        self._map.replace_record(lease, new)
        self._delta.append(now, lease)
        self._on_change(new.app, _vips_of(new))
        if new.status != old.status:
            override = self._overrides.status(new.instance_id)
            self.changes.append(
                now, new.app, new.instance_id, STATUS_CHANGED, old.status, new.status, override, replicated
            )

    def _status_call(
        self, app: str, instance_id: str, now: int, action: str, status: str, is_replication: bool
    ) -> Lease | None:
        """What both status calls do first: find the visible lease (None: a 404) and renew it, and
        send a client's call on to the peers with the status it asks for, whatever this node's copy
        ends up showing (even when nothing changes here, as Eureka does: the peer may differ)."""
        lease = self._visible_lease(app, instance_id, now)
        if lease is None:
            return None
        lease.renew(now)
        if not is_replication and self._on_replicate is not None:
            instance = lease.instance.evolve(status=status)
            self._on_replicate(ReplicationEvent(action, instance.app, instance.instance_id, instance))
        return lease

    def set_status_override(
        self,
        app: str,
        instance_id: str,
        status: str,
        now: int,
        last_dirty_timestamp: int | None = None,
        actor: str = "",
        is_replication: bool = False,
    ) -> StatusChange | None:
        """``PUT .../status?value=X``. None when no visible instance (404); a no-op when already X."""
        with self._lock:
            lease = self._status_call(
                app, instance_id, now, c.REPLICATE_STATUS_UPDATE, status, is_replication
            )
            if lease is None:
                return None
            old = lease.instance
            old_override = self._overrides.status(instance_id)
            self._counters.writes[is_replication].overrides_set += 1
            if old.status == status:
                return StatusChange(old.status, status, old_override, old_override)
            if status == c.UP:
                lease.service_up(now)
            self._overrides.set(instance_id, status, now, actor)
            self._modify(
                lease, now, last_dirty_timestamp, is_replication, status=status, overridden_status=status
            )
            self._counters.overridden(now, app, instance_id, CAUSE_OVERRIDE, status, actor)
            return StatusChange(old.status, status, old_override, status)

    def remove_status_override(
        self,
        app: str,
        instance_id: str,
        now: int,
        new_status: str = c.UNKNOWN,
        last_dirty_timestamp: int | None = None,
        actor: str = "",
        is_replication: bool = False,
    ) -> StatusChange | None:
        """``DELETE .../status``. None when no visible instance (404); a missing override is still 200."""
        action = c.REPLICATE_DELETE_STATUS_OVERRIDE
        with self._lock:
            lease = self._status_call(app, instance_id, now, action, new_status, is_replication)
            if lease is None:
                return None
            old_status = lease.instance.status
            removed = self._overrides.remove(instance_id)
            self._counters.writes[is_replication].overrides_removed += 1
            if removed is None:
                return StatusChange(old_status, old_status, None, None)
            self._modify(
                lease,
                now,
                last_dirty_timestamp,
                is_replication,
                status=new_status,
                overridden_status=c.UNKNOWN,
            )
            self._counters.overridden(now, app, instance_id, CAUSE_OVERRIDE_REMOVED, new_status, actor)
            return StatusChange(old_status, new_status, removed, None)

    def update_metadata(
        self, app: str, instance_id: str, entries: Mapping[str, str], now: int, is_replication: bool = False
    ) -> bool:
        """``PUT .../metadata``: merge the entries and re-register (an ADDED delta entry, as in Eureka);
        peers get the whole instance again (a Register). A client's merge over the metadata limits, or
        anyone's over the record's size, raises ``LimitExceeded`` and changes nothing."""
        with self._lock:
            lease = self._visible_lease(app, instance_id, now)
            if lease is None:
                return False
            instance = lease.instance
            merged_metadata = {**instance.metadata, **entries}
            if not is_replication:
                self._limits.check_metadata(merged_metadata)
            merged = instance.evolve(metadata=freeze(merged_metadata))
            too_large = self._limits.too_large(merged)
            if too_large:
                self._counters.writes[is_replication].too_large += 1
                raise RecordTooLarge(too_large)
            self._register(merged, now, is_replication=is_replication, cause=CAUSE_METADATA)
            return True

    # ------------------------------------------------------------------------ periodic jobs

    def run_eviction(self, now: int) -> EvictionRun:
        """Eureka's eviction: expired leases, at most ``size - int(size * pct)`` per run, chosen at
        random; with what the run found (how many had expired, whether self-preservation kept them).

        Expired leases are listed in self-preservation too (a pass Eureka skips there), so that what
        it keeps is counted. The scan runs outside the lock (``scan_expired``)."""
        timing = self.config.eureka_timing
        with self._lock:
            compensation = self._eviction.start(now, self.config.eviction_interval_ms)
            apps = self._map.app_names()
        pacing = self.pacing
        found = scan_expired(apps, self._leases_of, now, timing, compensation, pacing.step, pacing.pause)
        with self._lock:
            expired = still_expired(found, self._map.get, now, timing, compensation)
            preservation = self._preservation
            chosen: list[tuple[str, str]] = []
            if expired and preservation.lease_expiration_enabled(now):
                size, percent = len(self._map), self.config.renewal_percent_threshold
                chosen = self._eviction.choose(expired, size, percent)
            for app, instance_id in chosen:
                self._cancel(app, instance_id, now, CAUSE_EVICTION)
            self._counters.eviction_run(expired, chosen)
            return EvictionRun(
                evicted=chosen,
                expired=len(expired),
                preserving=not preservation.lease_expiration_enabled(now),
                renews_last_minute=preservation.renews_last_minute(now),
                renews_threshold=preservation.renews_threshold,
                expected_clients=preservation.expected_clients,
            )

    def _leases_of(self, app: str) -> list[tuple[str, Lease]]:
        with self._lock:
            return self._map.leases_of(app)

    def recount_expected_clients(self, now: int) -> None:
        """The periodic recount: adopt the local registry size unless it fell below the threshold share."""
        with self._lock:
            self._preservation.recount(len(self._map))

    def prune(self, now: int) -> int:
        """Drop delta-queue entries past retention and override entries idle too long."""
        with self._lock:
            dropped = self._delta.prune(now, self.config.delta_retention_ms)
            self._overrides.prune(now)
            self.changes.prune(now)
            return dropped


def _vips_of(instance: InstanceInfo) -> tuple[str, ...]:
    return tuple(vip for vip in (instance.vip_address, instance.secure_vip_address) if vip)
