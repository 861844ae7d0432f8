"""The change feed in Redis (production mode): the node publishes, any process follows. No Django.

Publishing: the change log's listener appends each change to a bounded in-memory buffer (it runs
under the registry lock: no I/O there); a background thread — a greenlet under gunicorn's gevent
worker — sends the buffer every ``flush_ms`` with one pipelined call of ``XADD ... MAXLEN ~ cap``
to the stream ``{namespace}:changes``. Never a Redis round trip per change on the request path.
When the buffer is full the oldest change is dropped and counted (logged at most every few seconds);
when Redis fails the node keeps serving its in-process feed, counts the error, logs the outage once,
and tries again after ``RETRY_AFTER_MS`` with what the buffer still holds.

Following: entries get Redis's own stream ids (several nodes may publish to one stream; their
change ids are not one sequence), and each holds ``node`` (who published it) and ``change`` (the
change as the HTTP feed shows it, JSON). A follower keeps the last entry id it read and asks for
what came after it: ``read_changes`` (XRANGE, or XREAD BLOCK to wait for more).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import orjson
from redis import Redis
from redis.exceptions import RedisError

from registry.domain.changes import Change
from registry.domain.redact import scrub_text

if TYPE_CHECKING:
    from registry.config.eureka import EurekaConfig

logger = logging.getLogger(__name__)

DEFAULT_MAXLEN = 100_000
DEFAULT_BUFFER = 10_000
DEFAULT_FLUSH_MS = 100
# At most this many changes per pipelined call (a long outage's backlog goes out in a few calls).
FLUSH_BATCH = 2_000
RETRY_AFTER_MS = 2_000
DROP_LOG_EVERY_MS = 10_000


def stream_key(namespace: str) -> str:
    return f"{namespace}:changes"


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class RedisChangePublisher:
    """Buffers the node's changes and sends them to a Redis Stream from a background thread."""

    def __init__(
        self,
        client: Redis,
        key: str,
        node_name: str,
        maxlen: int = DEFAULT_MAXLEN,
        buffer_size: int = DEFAULT_BUFFER,
        flush_ms: int = DEFAULT_FLUSH_MS,
        clock: Callable[[], int] = _wall_ms,
    ):
        self.client = client
        self.key = key
        self.node_name = node_name
        self.maxlen = maxlen
        self.flush_ms = flush_ms
        self.clock = clock
        self._buffer: deque[Change] = deque(maxlen=buffer_size)
        # Counters (read by /metrics and /readyz).
        self.published = 0
        self.dropped = 0
        self.errors = 0
        self.last_error: str | None = None
        self.redis_down_since: int | None = None
        self._retry_at = 0
        self._dropped_logged = 0
        self._drop_logged_at = 0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None

    # ------------------------------------------------------------------ the listener (registry lock)

    def on_change(self, change: Change) -> None:
        buffer = self._buffer
        if len(buffer) == buffer.maxlen:
            self.dropped += 1  # the append below pushes the oldest out
        buffer.append(change)

    # ------------------------------------------------------------------------------ the flusher

    def start(self, registry) -> None:
        self._unsubscribe = registry.reads.subscribe_changes(self.on_change)
        self._thread = threading.Thread(target=self._run, name="change-feed-redis", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stopped.wait(self.flush_ms / 1000):
            self.flush()
        self.flush()  # what came before the stop

    def flush(self) -> int:
        """Send what the buffer holds (up to ``FLUSH_BATCH``) in one pipelined call; returns how many."""
        now = self.clock()
        self._log_drops(now)
        if not self._buffer or (self.redis_down_since is not None and now < self._retry_at):
            return 0
        batch = list(islice(self._buffer, FLUSH_BATCH))
        pipe = self.client.pipeline(transaction=False)
        for change in batch:
            fields = {"node": self.node_name, "change": orjson.dumps(change.as_json())}
            pipe.xadd(self.key, fields, maxlen=self.maxlen, approximate=True)
        try:
            pipe.execute()
        except RedisError as exc:
            self._failed(exc, now)
            return 0
        self._sent(batch[-1].id)
        if self.redis_down_since is not None:
            logger.warning(
                "Redis is back: the change feed is published again",
                extra={"event": "change_feed_redis_back"},
            )
            self.redis_down_since = None
        self.published += len(batch)
        return len(batch)

    def _sent(self, last_sent_id: int) -> None:
        # The listener may have pushed some of the batch out meanwhile (a full buffer): drop by id,
        # never by count, so that nothing unsent is lost here.
        buffer = self._buffer
        while buffer and buffer[0].id <= last_sent_id:
            buffer.popleft()

    def _failed(self, exc: RedisError, now: int) -> None:
        self.errors += 1
        # Errors name the server (host:port), never the URL's password; scrubbed all the same.
        self.last_error = scrub_text(f"{type(exc).__name__}: {exc}")
        self._retry_at = now + RETRY_AFTER_MS
        if self.redis_down_since is None:
            self.redis_down_since = now
            logger.error(
                "Redis unreachable (%s): the change feed is not published to Redis until it is back; "
                "the node's own /api/v1/changes keeps serving",
                self.last_error,
                extra={"event": "change_feed_redis_lost", "error": self.last_error},
            )

    def _log_drops(self, now: int) -> None:
        if self.dropped > self._dropped_logged and now - self._drop_logged_at >= DROP_LOG_EVERY_MS:
            logger.warning(
                "change feed buffer full: %d changes dropped before reaching Redis",
                self.dropped - self._dropped_logged,
                extra={"event": "change_feed_dropped", "dropped": self.dropped},
            )
            self._dropped_logged = self.dropped
            self._drop_logged_at = now

    def status(self) -> dict[str, Any]:
        return {
            "stream": self.key,
            "healthy": self.redis_down_since is None,
            "buffered": len(self._buffer),
            "published": self.published,
            "dropped": self.dropped,
            "errors": self.errors,
            "last_error": self.last_error,
        }


# ------------------------------------------------------------------------------ the follower


def read_changes(
    client: Redis, key: str, after: str = "0-0", count: int = 500, block_ms: int | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """Up to ``count`` entries after the entry id ``after``, oldest first, as (entry id, change)
    with the publishing node under ``"node"``. ``block_ms`` waits that long for a first entry (XREAD
    BLOCK); without it the answer is immediate (XRANGE). ``after="$"`` with ``block_ms``: only new ones.
    """
    if block_ms is None:
        if after == "$":
            raise ValueError("'$' needs block_ms (XREAD); use latest_entry_id() to start at the end")
        raw = client.xrange(key, min=f"({after}", max="+", count=count)
    else:
        answer = client.xread({key: after}, count=count, block=block_ms)
        raw = answer[0][1] if answer else []
    return [(_text(entry_id), _entry(fields)) for entry_id, fields in raw]


def latest_entry_id(client: Redis, key: str) -> str:
    """The newest entry's id ("0-0" when the stream is empty or missing): follow from there."""
    newest = client.xrevrange(key, count=1)
    return _text(newest[0][0]) if newest else "0-0"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _entry(fields: dict) -> dict[str, Any]:
    decoded = {_text(name): value for name, value in fields.items()}
    change = orjson.loads(decoded["change"])
    change["node"] = _text(decoded.get("node", ""))
    return change


def start_publisher(registry, config: EurekaConfig) -> RedisChangePublisher:
    """The node's publisher for production mode, started."""
    from registry.cache.redis_tier import connect

    feed = config.change_feed
    publisher = RedisChangePublisher(
        connect(config.redis.url),
        stream_key(config.redis.namespace),
        node_name=_node_name(config.cluster.self_url),
        maxlen=feed.redis_maxlen,
        buffer_size=feed.redis_buffer,
        flush_ms=feed.redis_flush_ms,
    )
    publisher.start(registry)
    return publisher


def _node_name(self_url: str) -> str:
    """The node's own URL without credentials, else its host name: who published an entry."""
    if self_url:
        parts = urlsplit(self_url)
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return socket.gethostname()
