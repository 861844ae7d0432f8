"""The read-only tier of the response cache in Redis (production mode).

Each cache key is one Redis hash: the payload bytes, their gzip copy (compressed once, by the node,
when it publishes), the build time, ``synced_at`` — when the node last confirmed that the hash holds
what it serves: at the put, then at every cache sync that found the payload unchanged — and a
``version`` that changes with every put. A reader process (``registry/reader/``) measures staleness
by ``synced_at``, not by ``built_at``: an unchanged payload is not published again, and the read-write
tier keeps it up to 180 s, so an old ``built_at`` is no sign of a stale payload; a ``synced_at`` that
stops moving is (the node or its cache sync has stopped). ``{namespace}:ro:_synced`` holds the time of
the last sync (the reader's /readyz). ``TierReader`` is that read side, for processes holding no node.

Readers serve keys the node never sees read, so they say so: ``{namespace}:ro:_read`` is a sorted set
of hash names scored by when a reader last served them, each reader process marking a key at most
once per ``mark_every_ms`` (a tenth of the expiry time: one write per key every 18 s, not per read).
The node asks for those marks only about the keys it has not seen read for the expiry time itself,
and takes out of Redis the ones nobody read (``ResponseCache.sync``).

Redis is a cache here, never the source of truth: when it fails the node serves from its in-process
copy of the tier, keeps accepting writes, logs once per episode, reports ``degraded`` on /readyz, and
goes back to Redis by itself once it answers again.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from redis import Redis
from redis.exceptions import RedisError

from registry.cache.response_cache import CacheKey, Payload, ReadOnlyTier
from registry.domain.redact import scrub_text

logger = logging.getLogger(__name__)

# After a failure, Redis is left alone this long, so an outage does not add a timeout to every read.
RETRY_AFTER_MS = 2000
# Short timeouts: a slow Redis must not hold up reads the node (or a reader) can answer otherwise.
SOCKET_TIMEOUT_S = 0.5


def connect(url: str) -> Redis:
    return Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT_S, socket_connect_timeout=SOCKET_TIMEOUT_S)


def hash_name(namespace: str, key: CacheKey) -> str:
    name = f"{namespace}:ro:{key.entity}:{key.fmt}:{int(key.compact)}:{key.name}"
    # Only ``GET apps`` and the delta (whose name is empty) carry regions: no app name can collide.
    return f"{name}@{','.join(key.regions)}" if key.regions else name


def last_sync_name(namespace: str) -> str:
    # Under the tier's prefix (a new node's clear() drops it too); no entity is called "_synced".
    return f"{namespace}:ro:_synced"


def read_marks_name(namespace: str) -> str:
    # Under the tier's prefix too; no entity is called "_read".
    return f"{namespace}:ro:_read"


class RedisHealth:
    """Whether Redis answered last time, for the node's tier and the readers alike: after a failure
    Redis is left alone for ``RETRY_AFTER_MS`` (an outage must not add a timeout to every read), and
    each outage is logged once when it starts and once when it ends."""

    # What the process does meanwhile, for the log lines.
    while_lost = "serving from the in-process copy"
    once_back = "serving from Redis"

    def __init__(self, who: str = ""):
        self._who = who
        self.healthy = True
        self.failures = 0
        self.last_error: str | None = None
        self._retry_at = 0

    def usable(self, now: int) -> bool:
        return self.healthy or now >= self._retry_at

    def failed(self, exc: RedisError, now: int) -> None:
        self.failures += 1
        # Errors name the server (host:port), never the URL's password; scrubbed all the same.
        self.last_error = scrub_text(f"{type(exc).__name__}: {exc}")
        self._retry_at = now + RETRY_AFTER_MS
        if self.healthy:
            logger.error(
                "%sRedis read-only cache unreachable (%s): %s",
                self._who,
                self.last_error,
                self.while_lost,
                extra={"event": "redis_lost", "error": self.last_error},
            )
        self.healthy = False

    def recovered(self) -> None:
        if not self.healthy:
            logger.warning(
                "%sRedis read-only cache reachable again: %s",
                self._who,
                self.once_back,
                extra={"event": "redis_back"},
            )
        self.healthy = True

    def status(self) -> dict:
        return {"healthy": self.healthy, "failures": self.failures, "last_error": self.last_error}


class RedisReadOnlyTier(ReadOnlyTier):
    # Readers (registry/reader/) read Redis without the node: every key stays refreshed.
    sees_every_read = False

    def __init__(self, client: Redis, namespace: str, clock: Callable[[], int]):
        super().__init__()  # the in-process copy, served while Redis is unreachable
        self._redis = client
        self._namespace = namespace
        self._clock = clock
        self.health = RedisHealth()
        # What Redis is known to hold, per key. Forgotten on any failure, so that the first sync
        # after an outage publishes everything again.
        self._published: dict[CacheKey, Payload] = {}
        # Versions: this process's token and a count of puts (readers compare them, never order them).
        self._token = secrets.token_hex(6)
        self._puts = 0

    def _name(self, key: CacheKey) -> str:
        return hash_name(self._namespace, key)

    @property
    def healthy(self) -> bool:
        return self.health.healthy

    @property
    def last_error(self) -> str | None:
        return self.health.last_error

    @property
    def failures(self) -> int:
        return self.health.failures

    def _usable(self) -> bool:
        return self.health.usable(self._clock())

    def _failed(self, exc: RedisError) -> None:
        self._published.clear()
        self.health.failed(exc, self._clock())

    def _recovered(self) -> None:
        self.health.recovered()

    def get(self, key: CacheKey, gzip: bool = False) -> Payload | None:
        if not self._usable():
            return super().get(key)
        # Only the copy this reader sends: the raw full registry is many times the size of its gzip copy.
        field = "gzip" if gzip else "body"
        try:
            found, built_at, data = self._redis.hmget(self._name(key), "found", "built_at", field)
        except RedisError as exc:
            self._failed(exc)
            return super().get(key)
        self._recovered()
        if built_at is None:
            return None
        if found != b"1":
            return Payload(None, int(built_at))
        return Payload(None, int(built_at), data) if gzip else Payload(data, int(built_at))

    def put(self, key: CacheKey, payload: Payload) -> None:
        super().put(key, payload)
        if not self._usable():
            return
        self._puts += 1
        fields = {
            "built_at": payload.built_at,
            "found": int(payload.found),
            "synced_at": self._clock(),
            "version": f"{self._token}.{self._puts}",
        }
        if payload.found:
            fields.update(body=payload.body, gzip=payload.gzipped())
        try:
            self._redis.hset(self._name(key), mapping=fields)
        except RedisError as exc:
            self._failed(exc)
            return
        self._published[key] = payload
        self._recovered()

    def holds(self, key: CacheKey, payload: Payload) -> bool:
        return self._published.get(key) is payload

    def discard(self, key: CacheKey) -> None:
        self.discard_many([key])

    def discard_many(self, keys: list[CacheKey]) -> None:
        """Out of the process's copy and out of Redis, with the readers' marks, in one round trip.
        While Redis cannot be reached the hashes stay there, unconfirmed: readers stop serving them
        within their staleness bound, and the next node's start clears the tier."""
        for key in keys:
            super().discard(key)
            self._published.pop(key, None)
        if not keys or not self._usable():
            return
        names = [self._name(key) for key in keys]
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.delete(*names)
            pipe.zrem(read_marks_name(self._namespace), *names)
            pipe.execute()
        except RedisError as exc:
            self._failed(exc)
            return
        self._recovered()

    def read_times(self, keys: list[CacheKey], older_than: int) -> dict[CacheKey, int] | None:
        """The readers' marks of ``keys``, in one round trip; marks older than ``older_than`` are
        dropped meanwhile (a mark a reader left as its key was being taken out, say). None while
        Redis cannot be asked: the node then keeps the keys rather than guess."""
        if not self._usable():
            return None
        marks = read_marks_name(self._namespace)
        try:
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                pipe.zscore(marks, self._name(key))
            pipe.zremrangebyscore(marks, "-inf", f"({older_than}")
            *scores, _ = pipe.execute()
        except RedisError as exc:
            self._failed(exc)
            return None
        self._recovered()
        return {key: int(score) for key, score in zip(keys, scores, strict=True) if score is not None}

    def confirm(self, keys: Iterable[CacheKey], now: int) -> None:
        """After a cache sync: ``synced_at = now`` on each of ``keys`` Redis holds as the node serves
        it, and the time of this sync; one pipelined round trip."""
        if not self._usable():
            return
        try:
            pipe = self._redis.pipeline(transaction=False)
            for key in keys:
                if key in self._published:
                    pipe.hset(self._name(key), "synced_at", now)
            pipe.set(last_sync_name(self._namespace), now)
            pipe.execute()
        except RedisError as exc:
            self._failed(exc)
            return
        self._recovered()

    def clear(self) -> None:
        super().clear()
        self._published.clear()
        try:
            names = list(self._redis.scan_iter(f"{self._namespace}:ro:*"))
            if names:
                self._redis.delete(*names)
        except RedisError as exc:
            self._failed(exc)

    def status(self) -> dict:
        return self.health.status()

    def check(self) -> bool:
        """Ask Redis now and record the answer as a read would (a scrape of /metrics asks: with
        nothing to read or publish, ``healthy`` would otherwise keep its last value for ever)."""
        if not self._usable():
            return False
        try:
            self._redis.ping()
        except RedisError as exc:
            self._failed(exc)
            return False
        self._recovered()
        return True


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a hash says about its payload, without the bytes."""

    found: bool
    built_at: int
    # None: written by a node that did not stamp it (treated as stale).
    synced_at: int | None
    version: bytes | None


_STAMP_FIELDS = ("found", "built_at", "synced_at", "version")


def _stamp(found, built_at, synced_at, version) -> Stamp | None:
    if built_at is None:
        # No hash, or only a sync's stamp left on a hash Redis lost: a miss either way.
        return None
    return Stamp(found == b"1", int(built_at), None if synced_at is None else int(synced_at), version)


class TierReader:
    """The tier as a process that holds no node reads it (``registry/reader/``). Nothing is written and
    nothing kept; Redis errors are raised to the caller, which has no copy of its own to fall back on."""

    def __init__(self, client: Redis, namespace: str):
        self._redis = client
        self._namespace = namespace

    def stamp(self, key: CacheKey) -> Stamp | None:
        return _stamp(*self._redis.hmget(hash_name(self._namespace, key), *_STAMP_FIELDS))

    def fetch(self, key: CacheKey, gzip: bool) -> tuple[Stamp, Payload] | None:
        """The stamp and the payload with the one copy a client gets (gzip or not), read at once."""
        found, built_at, synced_at, version, data = self._redis.hmget(
            hash_name(self._namespace, key), *_STAMP_FIELDS, "gzip" if gzip else "body"
        )
        stamp = _stamp(found, built_at, synced_at, version)
        if stamp is None:
            return None
        if not stamp.found:
            return stamp, Payload(None, stamp.built_at)
        if data is None:
            return None
        return stamp, (Payload(None, stamp.built_at, data) if gzip else Payload(data, stamp.built_at))

    def mark_read(self, key: CacheKey, now: int) -> None:
        """Tell the node that ``key`` was served at ``now`` (it does not see these reads)."""
        self._redis.zadd(read_marks_name(self._namespace), {hash_name(self._namespace, key): now})

    def last_sync(self) -> int | None:
        value = self._redis.get(last_sync_name(self._namespace))
        return None if value is None else int(value)

    def ping(self) -> bool:
        return bool(self._redis.ping())
