"""The read-only tier of the response cache in Redis (production mode).

Each cache key is one Redis hash: the payload bytes, their gzip copy (compressed once, by the node,
when it publishes) and the build time, so a reader — this node or a separate reader process — can
see how stale a payload is. Redis is a cache here, never the source of truth: when it fails the node
serves from its in-process copy of the tier, keeps accepting writes, logs once per episode, reports
``degraded`` on /readyz, and goes back to Redis by itself once it answers again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from redis import Redis
from redis.exceptions import RedisError

from registry.cache.response_cache import CacheKey, Payload, ReadOnlyTier

logger = logging.getLogger(__name__)

# After a failure, Redis is left alone this long, so an outage does not add a timeout to every read.
RETRY_AFTER_MS = 2000


class RedisReadOnlyTier(ReadOnlyTier):
    def __init__(self, client: Redis, namespace: str, clock: Callable[[], int]):
        super().__init__()  # the in-process copy, served while Redis is unreachable
        self._redis = client
        self._namespace = namespace
        self._clock = clock
        self._retry_at = 0
        self.healthy = True
        self.last_error: str | None = None
        self.failures = 0
        # What Redis is known to hold, per key. Forgotten on any failure, so that the first sync
        # after an outage publishes everything again.
        self._published: dict[CacheKey, Payload] = {}

    def _name(self, key: CacheKey) -> str:
        return f"{self._namespace}:ro:{key.entity}:{key.fmt}:{int(key.compact)}:{key.name}"

    def _usable(self) -> bool:
        return self.healthy or self._clock() >= self._retry_at

    def _failed(self, exc: RedisError) -> None:
        self._published.clear()
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._retry_at = self._clock() + RETRY_AFTER_MS
        if self.healthy:
            logger.error("Redis read-only cache unreachable (%s): serving from the in-process copy", exc)
        self.healthy = False

    def _recovered(self) -> None:
        if not self.healthy:
            logger.warning("Redis read-only cache reachable again: serving from Redis")
        self.healthy = True

    def get(self, key: CacheKey, gzip: bool = False) -> Payload | None:
        if not self._usable():
            return super().get(key)
        # Only the copy this reader sends: the raw full registry is ~20x the size of its gzip copy.
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
        fields = {"built_at": payload.built_at, "found": int(payload.found)}
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
        return {"healthy": self.healthy, "failures": self.failures, "last_error": self.last_error}
