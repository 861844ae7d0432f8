"""What a reader may serve: payloads in the Redis tier that the node confirmed recently enough.

A lookup reads the key's stamp (``found``, ``built_at``, ``synced_at``, ``version``: a few bytes, one
round trip) and checks ``synced_at`` against the bound. The bytes themselves are fetched only when
the version changed: each worker keeps the last copy of each key it served (a registry's gzip copy is
far larger than its stamp, and fetching it per request would make Redis the bottleneck). A key
the node never published, a stale one, and Redis failing all mean "ask the node" (``None``).

Within ``revalidate_ms`` of reading a stamp, a worker serves its copy without asking Redis again (the
round trip is a large part of a request's CPU). Staleness is still judged at every request, against the
``synced_at`` read then, which is never later than the real one: the bound holds exactly. What the
interval costs is how soon a new payload replaces the copy: at most ``revalidate_ms`` after the node
serves it (by default a tenth of the cache-sync interval, at most 100 ms; 0 asks Redis every time).

The node drops a key nobody read for its expiry time, and it does not see a reader's reads: a worker
marks each key it serves in Redis (``TierReader.mark_read``), at most once per ``mark_every_ms`` per
key (a tenth of the expiry time), so a key read only at readers stays, at the cost of one small write
per key every 18 s per worker rather than one per read.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from redis.exceptions import RedisError

from registry.cache.redis_tier import RedisHealth, Stamp, TierReader
from registry.cache.response_cache import CacheKey, Payload

logger = logging.getLogger(__name__)

SERVED = "served"
MISSING = "missing"
STALE = "stale"
REDIS_DOWN = "redis_down"
REASONS = (SERVED, MISSING, STALE, REDIS_DOWN)

# Copies kept per worker at most (keys x encodings actually asked for); past it they start over.
MAX_COPIES = 4096
# A worker marks a key it serves this many times per expiry time at most (module docstring): the node
# sees a read at most a tenth of that time late, well before it would drop the key.
MARKS_PER_EXPIRY = 10


def wall_clock_ms() -> int:
    # The node stamps synced_at with its wall clock: hosts need synchronized clocks (NTP), and any
    # skew between them adds to or takes from the bound.
    return time.time_ns() // 1_000_000


class PayloadSource:
    def __init__(
        self,
        tier: TierReader,
        max_staleness_ms: int,
        clock: Callable[[], int] = wall_clock_ms,
        max_copies: int = MAX_COPIES,
        revalidate_ms: int = 0,
        mark_every_ms: int = 180_000 // MARKS_PER_EXPIRY,
    ):
        self._tier = tier
        self.max_staleness_ms = max_staleness_ms
        self.revalidate_ms = revalidate_ms
        self.mark_every_ms = mark_every_ms
        # key -> when this worker last marked it read in Redis
        self._marked: dict[CacheKey, int] = {}
        self._clock = clock
        self._max_copies = max_copies
        # (key, gzip) -> the payload holding that one copy, its stamp, and when that stamp was read
        self._copies: dict[tuple[CacheKey, bool], tuple[Payload, Stamp, int]] = {}
        self.health = RedisHealth("reader: ")
        self.health.while_lost = "forwarding reads to the node"
        self.counts: Counter[str] = Counter({reason: 0 for reason in REASONS})

    def _stale(self, stamp: Stamp, now: int) -> bool:
        return stamp.synced_at is None or now - stamp.synced_at > self.max_staleness_ms

    def lookup(self, key: CacheKey, gzip: bool) -> tuple[Payload | None, str]:
        """The payload to serve and ``SERVED``, or None and why the node must answer instead."""
        now = self._clock()
        if not self.health.usable(now):
            return self._count(None, REDIS_DOWN)
        copy = self._copies.get((key, gzip))
        if copy is not None and now - copy[2] < self.revalidate_ms and not self._stale(copy[1], now):
            return self._served(key, copy[0], now)
        try:
            stamp = self._tier.stamp(key)
            if stamp is None:
                return self._count(None, MISSING)
            if self._stale(stamp, now):
                return self._count(None, STALE)
            if copy is not None and stamp.version is not None and copy[1].version == stamp.version:
                payload = copy[0]
            else:
                fetched = self._tier.fetch(key, gzip)
                if fetched is None:
                    return self._count(None, MISSING)
                stamp, payload = fetched
                # A put between the two reads brings a newer payload, stamped at its put: fresh.
                if self._stale(stamp, now):
                    return self._count(None, STALE)
            if stamp.version is not None:
                if len(self._copies) >= self._max_copies:
                    self._copies.clear()
                self._copies[(key, gzip)] = (payload, stamp, now)
        except RedisError as exc:
            self._failed(exc, now)
            return self._count(None, REDIS_DOWN)
        self._recovered()
        return self._served(key, payload, now)

    def _served(self, key: CacheKey, payload: Payload, now: int) -> tuple[Payload | None, str]:
        """Serve ``payload``, marking ``key`` read in Redis if this worker has not done so lately."""
        marked = self._marked.get(key)
        if marked is None or now - marked >= self.mark_every_ms:
            try:
                self._tier.mark_read(key, now)
            except RedisError as exc:
                # The payload was read and is fresh: served all the same (the node keeps a key for
                # the whole expiry time, and the next read marks it again).
                self._failed(exc, now)
            else:
                if len(self._marked) >= self._max_copies:
                    self._marked.clear()
                self._marked[key] = now
        return self._count(payload, SERVED)

    def _count(self, payload: Payload | None, reason: str) -> tuple[Payload | None, str]:
        self.counts[reason] += 1
        return payload, reason

    @property
    def healthy(self) -> bool:
        return self.health.healthy

    def _failed(self, exc: RedisError, now: int) -> None:
        self._copies.clear()
        self.health.failed(exc, now)

    def _recovered(self) -> None:
        self.health.recovered()

    def status(self) -> dict:
        """Redis asked now (a probe), and how long ago the node last synced the tier."""
        now = self._clock()
        last_sync = None
        try:
            self._tier.ping()
            last_sync = self._tier.last_sync()
        except RedisError as exc:
            self._failed(exc, now)
        else:
            self._recovered()
        return {
            **self.health.status(),
            "last_sync_ms_ago": None if last_sync is None else now - last_sync,
        }
