"""Eureka's eviction run, in the pieces ``Registry.run_eviction`` calls: the compensation for a late
run, the scan for expired leases, and the capped random choice of which go. Plain Python, no
Django; time is passed in (ms).

The scan reads copies of each app's leases outside the registry's lock, giving others a turn every
``step`` leases: under the lock, a scan of a large map would hold every heartbeat for as long as it
takes. What it found is checked again under the lock (``still_expired``), so a lease renewed or
replaced meanwhile is not evicted.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .leases import Lease, expired_among


@dataclass(frozen=True, slots=True)
class EvictionRun:
    """What one eviction run found and did (``Registry.run_eviction``), read under the same lock: for
    the operator's log, which says which leases went and when self-preservation starts or stops."""

    evicted: list[tuple[str, str]]
    # Expired leases found, evicted or not.
    expired: int
    # Self-preservation is on and renews are not above the threshold: no lease expires.
    preserving: bool
    renews_last_minute: int
    renews_threshold: int
    expected_clients: int

    @property
    def limited(self) -> bool:
        """Fewer evicted than expired outside self-preservation: the per-run cap (size × (1 - pct))."""
        return not self.preserving and len(self.evicted) < self.expired


class Eviction:
    """When the last run started, and the random source that picks what a capped run evicts.

    Not thread-safe: the registry calls ``start`` and ``choose`` under its lock.
    """

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.last_run: int | None = None

    def start(self, now: int, interval_ms: int) -> int:
        """A run starts at ``now``; returns its compensation: how much later than ``interval_ms`` after
        the last run it is, which leases get on top of their duration (a node that paused, e.g. a
        long GC or a suspended VM, would otherwise evict leases whose renewals it could not see)."""
        last = self.last_run
        self.last_run = now
        return max(0, now - last - interval_ms) if last is not None else 0

    def choose(self, expired: list[tuple[str, str]], size: int, percent: float) -> list[tuple[str, str]]:
        """Eureka's cap: at most ``size - int(size * percent)`` of a map of ``size`` leases per run,
        chosen at random, so that a mass expiry (a network split) drains a batch at a time."""
        limit = size - int(size * percent)
        return self.rng.sample(expired, min(len(expired), limit))


def scan_expired(
    apps: Iterable[str],
    leases_of: Callable[[str], list[tuple[str, Lease]]],
    now: int,
    eureka_timing: bool,
    compensation: int,
    step: int,
    pause: Callable[[], None],
) -> list[tuple[str, str, Lease]]:
    """(app, id, lease) of every expired lease among ``leases_of(app)`` (a copy, taken under the
    registry's lock) of each app, in slices of at most ``step`` leases, with ``pause()`` after every
    ``step`` leases scanned (an application may hold many thousands)."""
    found: list[tuple[str, str, Lease]] = []
    unpaused = 0
    for app in apps:
        leases = leases_of(app)
        for start in range(0, len(leases), step):
            part = leases[start : start + step]
            found.extend(
                (app, instance_id, lease)
                for instance_id, lease in expired_among(part, now, eureka_timing, compensation)
            )
            unpaused += len(part)
            if unpaused >= step:
                unpaused = 0
                pause()
    return found


def still_expired(
    found: Iterable[tuple[str, str, Lease]],
    lease_at: Callable[[str, str], Lease | None],
    now: int,
    eureka_timing: bool,
    compensation: int,
) -> list[tuple[str, str]]:
    """(app, id) of the leases found that are still stored (``lease_at``) and still expired: called
    under the lock, after a scan that ran without it."""
    return [
        (app, instance_id)
        for app, instance_id, lease in found
        if lease_at(app, instance_id) is lease and lease.is_expired(now, eureka_timing, compensation)
    ]
