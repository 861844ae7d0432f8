"""Production mode's outboxes: one Redis list per peer, filled by the node, drained by Celery workers.

The node's flusher appends each flush window's items with one pipelined call per peer
(``NodeOutbox.push``): never a Redis round trip per heartbeat, never on the request path. When a list
goes from empty to non-empty the node kicks a drain task; Celery beat also drains every peer each
second, so a lost kick or a dead worker delays replication but never stops it.

A drain (``drain``, run by a Celery worker) takes the peer's lock (``SET NX`` with an expiry, released
only by its holder), sends the list's head batch by batch and trims what was answered, and reports
the answers' follow-ups to the node, which alone holds the map: two workers never send the same
batch twice. A send that fails leaves the batch at the head for the next drain, and marks the peer down:
while it is, a drain sends an empty batch first and the batch only if that is answered, so a dead peer
is never sent the batch again every second. The node probes a peer its workers found down every half
second and kicks a drain the moment it answers (``PeerSender``): the backlog does not wait for beat.

If Redis is unreachable the node keeps its items in a local queue and sends them from its own
thread (``NodeOutbox`` falls back; ``/readyz`` says so); what a crash loses is at most one flush
window, which the next heartbeats repair (a peer answers 404, the node sends a Register).

Plain Python: no Django. ``redis`` is the redis-py client.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from redis import Redis
from redis.exceptions import RedisError

from registry.cluster.replication import BATCH_SIZE
from registry.cluster.replicator import (
    DEFAULT_OUTBOX_CAPACITY,
    PROBE_INTERVAL_MS,
    FollowUps,
    MemoryOutbox,
    read_answers,
)
from registry.cluster.transport import PeerRefused, PeerTransport, PeerUnreachable, failure_text, probe
from registry.domain.endpoints import Peer
from registry.domain.redact import scrub_text

logger = logging.getLogger(__name__)

LOCK_MS = 30_000
# A drain stops after this long so that one worker is never held by one peer for ever.
DRAIN_BUDGET_S = 10.0
# A peer a send could not reach is marked down for this long (renewed by each failure): drains probe it
# before sending. Bounded so that a mark nobody clears (every worker gone) cannot outlive the outage.
DOWN_MARK_MS = 60_000

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


def queue_key(namespace: str, peer: Peer) -> str:
    return f"{namespace}:replication:{peer.key}"


def peers_key(namespace: str) -> str:
    return f"{namespace}:replication-peers"


def publish_peers(client: Redis, namespace: str, peers: list[Peer]) -> None:
    """The node's peers now, as {key: URL without credentials}, replacing what was there."""
    key = peers_key(namespace)
    pipe = client.pipeline(transaction=True)
    pipe.delete(key)
    if peers:
        pipe.hset(key, mapping={peer.key: peer.display_url for peer in peers})
    try:
        pipe.execute()
    except RedisError as exc:
        # Workers then know only the static peers until the next change; the node's own sender
        # thread sends what Redis refuses, so nothing is lost.
        logger.warning("could not publish the peers to Redis: %s", scrub_text(str(exc)))


def published_peers(client: Redis, namespace: str) -> dict[str, str]:
    """What ``publish_peers`` last wrote: {key: URL without credentials}."""
    raw = client.hgetall(peers_key(namespace))
    return {key.decode(): url.decode() for key, url in raw.items()}


class RedisQueue:
    """One peer's list: entries are ``[enqueued_ms, item]`` as JSON."""

    def __init__(self, client: Redis, key: str, capacity: int = DEFAULT_OUTBOX_CAPACITY):
        self.client = client
        self.key = key
        self.capacity = capacity

    def push(self, items: list[dict[str, Any]], now: int) -> tuple[int, int]:
        """Append in one round trip; returns (length after, dropped). Raises RedisError."""
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(self.key, *(orjson.dumps([now, item]) for item in items))
        pipe.ltrim(self.key, -self.capacity, -1)
        length = pipe.execute()[0]
        return min(length, self.capacity), max(0, length - self.capacity)

    def peek(self, count: int) -> list[dict[str, Any]]:
        return [orjson.loads(raw)[1] for raw in self.client.lrange(self.key, 0, count - 1)]

    def ack(self, count: int) -> None:
        self.client.ltrim(self.key, count, -1)

    def __len__(self) -> int:
        return int(self.client.llen(self.key))

    def oldest_at(self) -> int | None:
        head = self.client.lindex(self.key, 0)
        return None if head is None else int(orjson.loads(head)[0])

    def discard(self) -> int:
        """Delete the list; returns how many items it held. Raises RedisError."""
        pipe = self.client.pipeline(transaction=True)
        pipe.llen(self.key)
        pipe.delete(self.key)
        return int(pipe.execute()[0])


class NodeOutbox:
    """The node's outbox for one peer in production mode: Redis, or a local queue while Redis is down.

    ``peek``/``ack``/``len`` are the local queue's: the node's own sender thread only ever sends what
    Redis could not take. ``on_first_items`` is called when the Redis list was empty before a push.
    """

    def __init__(self, queue: RedisQueue, on_first_items: Callable[[], None], capacity: int):
        self.queue = queue
        self.on_first_items = on_first_items
        self.local = MemoryOutbox(capacity)
        self.redis_down_since: int | None = None
        # As the last push or the last worker's report left them.
        self.queued_in_redis = 0
        self.lag_in_redis_ms = 0

    def push(self, items: list[dict[str, Any]], now: int) -> int:
        try:
            length, dropped = self.queue.push(items, now)
        except RedisError as exc:
            if self.redis_down_since is None:
                error = scrub_text(f"{type(exc).__name__}: {exc}")
                logger.warning(
                    "Redis unreachable (%s): replicating from this process until it is back",
                    error,
                    extra={"event": "replication_redis_lost", "error": error},
                )
                self.redis_down_since = now
            return self.local.push(items, now)
        if self.redis_down_since is not None:
            logger.warning(
                "Redis is back: replication goes through Celery again",
                extra={"event": "replication_redis_back"},
            )
            self.redis_down_since = None
        self.queued_in_redis = length
        if length and length <= len(items):
            self.on_first_items()
        return dropped

    def peek(self, count: int) -> list[dict[str, Any]]:
        return self.local.peek(count)

    def ack(self, count: int) -> None:
        self.local.ack(count)

    def __len__(self) -> int:
        return len(self.local) + self.queued_in_redis

    def discard(self) -> int:
        dropped = self.local.discard()
        try:
            dropped += self.queue.discard()
        except RedisError as exc:
            # A list left behind is never drained (no worker knows the peer any more): only memory.
            logger.warning("could not delete %s from Redis: %s", self.queue.key, scrub_text(str(exc)))
        self.queued_in_redis = 0
        return dropped

    def oldest_at(self) -> int | None:
        local = self.local.oldest_at()
        if local is not None or not self.queued_in_redis:
            return local
        return int(time.time() * 1000) - self.lag_in_redis_ms


def _backlog(queue: RedisQueue) -> tuple[int, int]:
    """How many items wait, and for how long the oldest has (wall clock, as the node's)."""
    oldest = queue.oldest_at()
    lag = 0 if oldest is None else max(0, int(time.time() * 1000) - oldest)
    return len(queue), lag


def drain(
    client: Redis,
    queue: RedisQueue,
    peer: Peer,
    transport: PeerTransport,
    report: Callable[[FollowUps | None, str | None, int], None],
    budget_s: float = DRAIN_BUDGET_S,
) -> int:
    """Send the peer's queue batch by batch under its lock; returns how many items were sent.

    ``report(follow_ups, error, queued, lag_ms)`` tells the node after each batch (follow-ups) or
    failure (error). Returns 0 at once when another worker holds the lock.
    """
    lock_key = f"{queue.key}:lock"
    down_key = f"{queue.key}:down"
    token = uuid.uuid4().hex
    if not client.set(lock_key, token, nx=True, px=LOCK_MS):
        return 0
    sent = 0
    idle = True  # the queue was empty: nothing was tried
    emptied = False  # the loop ended on an empty queue (not on a failure or the budget)
    deadline = time.monotonic() + budget_s
    try:
        if client.exists(down_key) and len(queue):
            # The last send could not reach the peer: an empty batch first, the backlog only if answered.
            idle = False
            failure = probe(transport, peer)
            if isinstance(failure, PeerUnreachable):
                client.set(down_key, 1, px=DOWN_MARK_MS)
                report(None, failure_text(failure), *_backlog(queue))
                return 0
            client.delete(down_key)
        while time.monotonic() < deadline:
            items = queue.peek(BATCH_SIZE)
            if not items:
                emptied = True
                break
            idle = False
            try:
                answers = transport.post_batch(peer, items)
            except PeerUnreachable as exc:
                client.set(down_key, 1, px=DOWN_MARK_MS)
                report(None, str(exc), *_backlog(queue))
                break
            except PeerRefused as exc:
                queue.ack(len(items))
                report(FollowUps(sent=0, refused=len(items)), f"batch refused: {exc}", *_backlog(queue))
                continue
            queue.ack(len(items))
            sent += len(items)
            client.pexpire(lock_key, LOCK_MS)
            report(read_answers(items, answers), None, *_backlog(queue))
        # Idle: an empty batch every PROBE_INTERVAL_MS measures the peer. A failed one is not retried
        # sooner here: the node's sender probes a peer its workers found down every half second.
        probe_key = f"{queue.key}:probe"
        if idle and client.set(probe_key, 1, nx=True, px=PROBE_INTERVAL_MS):
            failure = probe(transport, peer)
            if failure is None:
                report(FollowUps(sent=0), None, *_backlog(queue))
            else:
                report(None, failure_text(failure), *_backlog(queue))
    finally:
        client.eval(_RELEASE, 1, lock_key, token)
    if emptied and len(queue):
        # Items pushed after the last look and before the release: their push kicked a drain that found
        # the lock taken and gave up, so they are this drain's to send (else they wait for beat's next).
        sent += drain(client, queue, peer, transport, report, max(0.0, deadline - time.monotonic()))
    return sent
