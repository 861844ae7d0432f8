"""The node's last hour, sampled: what the console's charts draw. Plain Python, no Django.

A sampler job calls ``History.record`` every ``interval_ms`` (10 s by default) with numbers the node
already keeps — renews last minute and the threshold, whether self-preservation holds eviction, the
instances by status, the cumulative write and eviction counts, each peer's queue and lag, each
remote region's fetch age — and the history keeps the newest ``capacity`` samples (360: an hour).
Nothing here runs on the heartbeat path; a sample costs one read of counts the registry keeps anyway.

Cumulative counts are kept as they were read, so the charts show per-minute rates as differences
between samples; a count that went down (the counters were reset, e.g. by a restart without a warm
restart) is read as a new start, never as a negative rate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from registry.domain import constants as c
from registry.domain.changes import METADATA_CHANGED, Change, repeats

# The order of statuses in a sample (and in the stacked chart, bottom up): the healthy state first.
STATUS_ORDER = (c.UP, c.STARTING, c.OUT_OF_SERVICE, c.DOWN, c.UNKNOWN)
# What the console draws: the last hour.
WINDOW_MS = 3_600_000
DEFAULT_INTERVAL_MS = 10_000
DEFAULT_CAPACITY = WINDOW_MS // DEFAULT_INTERVAL_MS
HISTORY_FORMAT = 1


@dataclass(frozen=True, slots=True)
class PeerPoint:
    url: str  # without credentials
    queued: int
    lag_ms: int


@dataclass(frozen=True, slots=True)
class RegionPoint:
    region: str
    # Since the region's last successful fetch; None while it has never been fetched.
    age_ms: int | None


@dataclass(frozen=True, slots=True)
class Sample:
    at_ms: int
    renews_last_minute: int
    renews_threshold: int
    # Self-preservation enabled and renews at or below the threshold: expired leases are kept.
    preservation_holding: bool
    # Instances by status, in STATUS_ORDER.
    statuses: tuple[int, ...]
    # Cumulative since the node started (client and peer writes together).
    registrations: int
    cancels: int
    evictions: int
    peers: tuple[PeerPoint, ...] = ()
    regions: tuple[RegionPoint, ...] = ()

    @property
    def instances(self) -> int:
        return sum(self.statuses)


def status_tuple(counts: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(int(counts.get(status, 0)) for status in STATUS_ORDER)


class History:
    """The newest ``capacity`` samples, oldest first. Not thread-safe by itself: the sampler is the
    only writer and readers take ``samples()``, a copy (a deque's append and copy are atomic under the
    GIL, which is all the console needs)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, interval_ms: int = DEFAULT_INTERVAL_MS):
        if capacity < 2:
            raise ValueError("a history needs room for at least two samples")
        if interval_ms <= 0:
            raise ValueError("the sampling interval must be positive")
        self.capacity = capacity
        self.interval_ms = interval_ms
        self._samples: deque[Sample] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._samples)

    def record(self, sample: Sample) -> bool:
        """Add a sample; one not newer than the newest (a clock step back) is dropped: False."""
        if self._samples and sample.at_ms <= self._samples[-1].at_ms:
            return False
        self._samples.append(sample)
        return True

    def samples(self, since_ms: int | None = None) -> list[Sample]:
        taken = list(self._samples)
        if since_ms is None:
            return taken
        return [sample for sample in taken if sample.at_ms >= since_ms]

    def export(self) -> dict[str, Any]:
        """A JSON-ready copy, for the warm-restart snapshot."""
        return {
            "format": HISTORY_FORMAT,
            "interval_ms": self.interval_ms,
            "statuses": list(STATUS_ORDER),
            "samples": [_sample_to_list(sample) for sample in self._samples],
        }

    def restore(self, data: Mapping[str, Any], now: int) -> int:
        """Take the samples of an exported history that are within the last ``capacity`` intervals
        before ``now``; a different format or status order restores nothing. Returns how many."""
        if not isinstance(data, Mapping) or data.get("format") != HISTORY_FORMAT:
            return 0
        rows = data.get("samples")
        if data.get("statuses") != list(STATUS_ORDER) or not isinstance(rows, list):
            return 0
        oldest = now - self.capacity * self.interval_ms
        restored = 0
        for row in rows:
            try:
                sample = _sample_from_list(row)
            except (TypeError, ValueError, IndexError):
                continue
            if oldest <= sample.at_ms <= now and self.record(sample):
                restored += 1
        return restored


class StatusTrail:
    """Each instance's status changes of the last hour, for its page: registrations, status changes,
    cancels and evictions, as the change log tells them (``MapReads.subscribe_changes``).

    The change log itself keeps only the delta's few minutes. This keeps the newest ``kept`` changes
    of each instance, and ``prune`` forgets instances whose newest change is older than the window.
    A change that repeats the instance's previous one (a client re-registering over and over) takes
    its place, as in the change log: the trail shows the instance's changes, not a client's loop, and
    keeps no more than it shows. ``note`` runs under the registry's lock: a dict lookup and a deque
    append, nothing on renews.
    """

    def __init__(self, window_ms: int = WINDOW_MS, kept: int = 60):
        self.window_ms = window_ms
        self.kept = kept
        self._trails: dict[tuple[str, str], deque[Change]] = {}

    def __len__(self) -> int:
        return len(self._trails)

    def note(self, change: Change) -> None:
        if change.action == METADATA_CHANGED:
            return
        key = (change.app.upper(), change.instance_id)
        trail = self._trails.get(key)
        if trail is None:
            # Made holding its first change, so that ``prune`` (another thread) never sees it empty.
            self._trails[key] = deque((change,), maxlen=self.kept)
        elif repeats(change, trail[-1]):
            trail[-1] = change
        else:
            trail.append(change)

    def of(self, app: str, instance_id: str, now: int) -> list[Change]:
        """The instance's changes within the window, oldest first."""
        trail = self._trails.get((app.upper(), instance_id))
        if not trail:
            return []
        return [change for change in list(trail) if now - change.timestamp <= self.window_ms]

    def prune(self, now: int) -> int:
        """Forget instances with no change within the window; returns how many."""
        stale = [
            key for key, trail in list(self._trails.items()) if now - trail[-1].timestamp > self.window_ms
        ]
        for key in stale:
            self._trails.pop(key, None)
        return len(stale)


def per_minute(samples: list[Sample], field: str) -> list[tuple[int, float]]:
    """(at_ms, rate per minute) for each sample after the first: the growth of a cumulative count
    since the previous sample, scaled to a minute. A count that went down is a restart: 0."""
    rates: list[tuple[int, float]] = []
    for before, after in zip(samples, samples[1:], strict=False):
        grown = getattr(after, field) - getattr(before, field)
        elapsed = after.at_ms - before.at_ms
        rates.append((after.at_ms, max(grown, 0) * 60_000 / elapsed if elapsed > 0 else 0.0))
    return rates


def holding_stretches(samples: list[Sample]) -> list[tuple[int, int]]:
    """[(from_ms, to_ms)] where self-preservation held eviction, each stretch running from its first
    holding sample to the first sample after it that does not hold (or the last sample)."""
    stretches: list[tuple[int, int]] = []
    start: int | None = None
    for sample in samples:
        if sample.preservation_holding and start is None:
            start = sample.at_ms
        elif not sample.preservation_holding and start is not None:
            stretches.append((start, sample.at_ms))
            start = None
    if start is not None and samples:
        stretches.append((start, samples[-1].at_ms))
    return stretches


def _sample_to_list(sample: Sample) -> list[Any]:
    return [
        sample.at_ms,
        sample.renews_last_minute,
        sample.renews_threshold,
        sample.preservation_holding,
        list(sample.statuses),
        sample.registrations,
        sample.cancels,
        sample.evictions,
        [[peer.url, peer.queued, peer.lag_ms] for peer in sample.peers],
        [[region.region, region.age_ms] for region in sample.regions],
    ]


def _sample_from_list(row: Iterable[Any]) -> Sample:
    at_ms, renews, threshold, holding, statuses, registrations, cancels, evictions, peers, regions = row
    statuses = tuple(int(count) for count in statuses)
    if len(statuses) != len(STATUS_ORDER):
        raise ValueError("status counts do not match the status order")
    return Sample(
        at_ms=int(at_ms),
        renews_last_minute=int(renews),
        renews_threshold=int(threshold),
        preservation_holding=bool(holding),
        statuses=statuses,
        registrations=int(registrations),
        cancels=int(cancels),
        evictions=int(evictions),
        peers=tuple(PeerPoint(str(url), int(queued), int(lag)) for url, queued, lag in peers),
        regions=tuple(RegionPoint(str(region), None if age is None else int(age)) for region, age in regions),
    )
