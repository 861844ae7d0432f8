"""Leases, lease expiry and the renewals-per-minute meter. Plain Python; time is always passed in (ms)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, TypeVar

from .instances import InstanceInfo

LEASE_EXPIRY_EXACT = "exact"
LEASE_EXPIRY_EUREKA = "eureka"

K = TypeVar("K")


# Renewal gaps kept per lease (the console's instance page draws the last hour's).
GAPS_KEPT = 10


class Lease:
    """A lease on one instance.

    ``last_renewal_ts`` is when the instance last proved it was alive. With Eureka's timing the
    Java server stores ``renewal + duration`` after a renew and adds the duration again when testing
    expiry (a known, deliberately unfixed bug): a renewed lease then lives for twice its duration.
    ``eureka_timing`` reproduces that, including the inflated ``lastRenewalTimestamp`` on the wire.
    """

    __slots__ = (
        "instance",
        "duration_ms",
        "registration_ts",
        "last_renewal_ts",
        "renewed",
        "eviction_ts",
        "service_up_ts",
        "gap_after_ms",
        "gaps",
    )

    def __init__(self, instance: InstanceInfo, duration_ms: int, now: int, service_up_ts: int = 0):
        self.instance = instance
        self.duration_ms = duration_ms
        self.registration_ts = now
        self.last_renewal_ts = now
        self.renewed = False
        self.eviction_ts = 0
        self.service_up_ts = service_up_ts
        # A renewal later than one and a half of the instance's renewal intervals after the one before
        # is a gap (a heartbeat or more went missing): the newest GAPS_KEPT are kept, for its page.
        self.gap_after_ms = max(instance.renewal_interval_secs, 1) * 1_500
        self.gaps: tuple[tuple[int, int], ...] = ()

    def renew(self, now: int) -> None:
        if now - self.last_renewal_ts > self.gap_after_ms:
            self.note_gap(self.last_renewal_ts, now)
        self.last_renewal_ts = now
        self.renewed = True

    def note_gap(self, since: int, until: int) -> None:
        """A stretch with no renewal (a new tuple each time: readers take it without the lock)."""
        self.gaps = (*self.gaps[-(GAPS_KEPT - 1) :], (since, until))

    def carry_gaps(self, previous: Lease, now: int) -> None:
        """A re-registration's new lease keeps the gaps of the lease it replaces, and one more when
        the registration itself came that late (the instance was gone, or its lease expired)."""
        self.gaps = previous.gaps
        if now - previous.last_renewal_ts > previous.gap_after_ms:
            self.note_gap(previous.last_renewal_ts, now)

    def cancel(self, now: int) -> None:
        if self.eviction_ts <= 0:
            self.eviction_ts = now

    def service_up(self, now: int) -> None:
        if self.service_up_ts == 0:
            self.service_up_ts = now

    def last_update_ts(self, eureka_timing: bool) -> int:
        if eureka_timing and self.renewed:
            return self.last_renewal_ts + self.duration_ms
        return self.last_renewal_ts

    def is_expired(self, now: int, eureka_timing: bool, additional_ms: int = 0) -> bool:
        # One definition of expiry: eviction's bulk form (expired_among) on this lease alone.
        return bool(expired_among(((None, self),), now, eureka_timing, additional_ms))

    def view(self, eureka_timing: bool) -> LeaseView:
        """The lease fields a payload needs, copied so they can be rendered outside the lock."""
        return views_of(((self.instance, self),), eureka_timing)[0]


def views_of(pairs: Iterable[tuple[InstanceInfo, Lease]], eureka_timing: bool) -> list[LeaseView]:
    """``Lease.view`` of many leases, each with the record given beside it (read earlier, under
    the lock that also counted its status), as one expression: a delta holding a whole fleet makes
    100,000 of these."""
    if eureka_timing:
        return [
            LeaseView(
                record,
                lease.registration_ts,
                lease.last_renewal_ts + lease.duration_ms if lease.renewed else lease.last_renewal_ts,
                lease.eviction_ts,
                lease.service_up_ts,
            )
            for record, lease in pairs
        ]
    return [
        LeaseView(
            record, lease.registration_ts, lease.last_renewal_ts, lease.eviction_ts, lease.service_up_ts
        )
        for record, lease in pairs
    ]


def expired_among(
    leases: Sequence[tuple[K, Lease]], now: int, eureka_timing: bool, additional_ms: int = 0
) -> list[tuple[K, Lease]]:
    """The (key, lease) pairs whose lease has expired at ``now``, in their order: cancelled, or
    ``now > last_update_ts + duration + additional_ms`` (``last_update_ts``: the renewal time plus,
    with Eureka's timing and once renewed, one more duration).

    The rule is written once, here, as one expression over many leases: eviction asks it of every
    lease every pass, and two method calls per lease would make a pass over a large map slow.
    ``Lease.is_expired`` asks it of one lease.
    """
    limit = now - additional_ms
    if eureka_timing:
        return [
            (key, lease)
            for key, lease in leases
            if lease.eviction_ts > 0
            or limit > lease.last_renewal_ts + (2 * lease.duration_ms if lease.renewed else lease.duration_ms)
        ]
    return [
        (key, lease)
        for key, lease in leases
        if lease.eviction_ts > 0 or limit > lease.last_renewal_ts + lease.duration_ms
    ]


class LeaseView(NamedTuple):
    """A tuple, not a frozen dataclass: payload builds make one per instance (18,000 for a busy delta)
    while holding the registry lock, and a tuple is several times cheaper to create."""

    instance: InstanceInfo
    registration_ts: int
    last_renewal_ts: int
    eviction_ts: int
    service_up_ts: int


class MeasuredRate:
    """Counts events per fixed bucket and reports the *previous* full bucket, like Netflix MeasuredRate.

    Buckets are aligned to ``start`` so the answer depends only on the timestamps passed in.
    """

    __slots__ = ("bucket_ms", "start", "_bucket", "_current", "_last")

    def __init__(self, bucket_ms: int, start: int):
        self.bucket_ms = bucket_ms
        self.start = start
        self._bucket = 0
        self._current = 0
        self._last = 0

    def _roll(self, now: int) -> None:
        bucket = max(0, (now - self.start) // self.bucket_ms)
        if bucket != self._bucket:
            self._last = self._current if bucket == self._bucket + 1 else 0
            self._current = 0
            self._bucket = bucket

    def increment(self, now: int) -> None:
        self._roll(now)
        self._current += 1

    def count(self, now: int) -> int:
        self._roll(now)
        return self._last

    def reset(self, start: int, last: int = 0) -> None:
        """Start counting again from ``start``; ``last`` is reported until the first bucket is full
        (a warm restart carries the previous run's measurement over)."""
        self.start = start
        self._bucket = self._current = 0
        self._last = last
