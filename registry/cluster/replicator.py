"""The node's side of replication: buffer → per-peer outboxes → batches → what the answers ask for.

``Replicator.flush`` moves the coalesced buffer into every peer's outbox (one bounded queue per peer,
so a peer that is down never holds up the others and never grows memory without bound).
``send_next_batch`` sends up to 250 items of one outbox; ``read_answers`` turns the per-item answers
into follow-ups, which ``apply_follow_ups`` carries out on this node, as the Java server does:

* a heartbeat answered 404 (the peer does not know the instance) → a Register with the full local
  instance goes to that peer;
* a heartbeat answered 409 with an entity (the peer holds a newer copy) → this node takes that copy
  (registered as a replicated write, so not sent on);
* any other 4xx for an item → dropped and counted.

Transport errors and 5xx leave the batch in the outbox to be tried again later; when, and whether a
cheap probe goes first, is ``RetryPolicy``'s call (retry.py): a peer that is down is probed every half
second, and gets its backlog the moment it answers. ``PeerSender`` is one peer's sending, a step at a
time. In embedded mode ``EmbeddedReplication`` runs the flusher and one sender per peer as threads
(greenlets under gunicorn's gevent worker); in production mode the outboxes live in Redis and Celery
workers send (runtime/), and the same threads send only what Redis could not take, and probe a peer the
workers found down so that a drain starts as soon as it answers.

Plain Python: no Django.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

from registry.cache.pacing import PACER
from registry.cluster.peers import PeerSet
from registry.cluster.replication import BATCH_SIZE, ReplicationBuffer, encode
from registry.cluster.retry import PROBE_WHILE_DOWN_MS, RetryPolicy
from registry.cluster.transport import PeerRefused, PeerTransport, PeerUnreachable, failure_text, probe
from registry.domain import constants as c
from registry.domain.core import Registry, ReplicationEvent
from registry.domain.endpoints import Peer
from registry.domain.refusals import RefusalLines, refusal_fields, since_last_line
from registry.domain.write_rules import LimitExceeded
from registry.wire.codecs import BadInput, build_instance

logger = logging.getLogger(__name__)

DEFAULT_OUTBOX_CAPACITY = 10_000
# A healthy peer nothing was sent to for this long gets an empty batch: its health on the console is
# then measured even in an idle cluster (it counts as available for AVAILABILITY_WINDOW_MS after). A peer
# that is down is probed far more often, by its sender's RetryPolicy.
PROBE_INTERVAL_MS = 30_000
# A sender with nothing to do looks this often whether a Celery worker found its peer down.
IDLE_TICK_MS = PROBE_WHILE_DOWN_MS
# After an error that is not the peer's (a bug): wait this long rather than spin on it.
UNEXPECTED_ERROR_RETRY_MS = 5_000


class Outbox(Protocol):
    """A peer's queue of encoded items, oldest first."""

    def push(self, items: list[dict[str, Any]], now: int) -> int: ...  # returns how many were dropped
    def peek(self, count: int) -> list[dict[str, Any]]: ...
    def ack(self, count: int) -> None: ...
    def __len__(self) -> int: ...
    def oldest_at(self) -> int | None: ...
    def discard(self) -> int: ...  # drops every item (a peer that left); returns how many


class MemoryOutbox:
    """Embedded mode: the queue lives in this process. Past ``capacity`` the oldest items go."""

    def __init__(self, capacity: int = DEFAULT_OUTBOX_CAPACITY):
        self.capacity = capacity
        self._items: deque[tuple[int, dict[str, Any]]] = deque()
        self._lock = threading.Lock()

    def push(self, items: list[dict[str, Any]], now: int) -> int:
        with self._lock:
            self._items.extend((now, item) for item in items)
            dropped = max(0, len(self._items) - self.capacity)
            for _ in range(dropped):
                self._items.popleft()
            return dropped

    def peek(self, count: int) -> list[dict[str, Any]]:
        with self._lock:
            # islice, not a copy of the whole queue: it may hold 10,000 items while a peer is down.
            return [item for _, item in islice(self._items, count)]

    def ack(self, count: int) -> None:
        with self._lock:
            for _ in range(min(count, len(self._items))):
                self._items.popleft()

    def __len__(self) -> int:
        return len(self._items)

    def oldest_at(self) -> int | None:
        with self._lock:
            return self._items[0][0] if self._items else None

    def discard(self) -> int:
        with self._lock:
            count = len(self._items)
            self._items.clear()
            return count


@dataclass
class FollowUps:
    """What a peer's answers to one batch ask this node to do."""

    sent: int = 0
    refused: int = 0
    reregister: list[tuple[str, str]] = field(default_factory=list)
    sync_back: list[dict[str, Any]] = field(default_factory=list)
    # How many answers the peer gave when they were not one per item (then none is followed up).
    ignored: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FollowUps:
        return cls(
            sent=int(data.get("sent", 0)),
            refused=int(data.get("refused", 0)),
            reregister=[(str(app), str(instance_id)) for app, instance_id in data.get("reregister", [])],
            sync_back=[entity for entity in data.get("sync_back", []) if isinstance(entity, dict)],
            ignored=int(data.get("ignored", 0)),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "refused": self.refused,
            "reregister": [list(pair) for pair in self.reregister],
            "sync_back": self.sync_back,
            "ignored": self.ignored,
        }


def read_answers(items: list[dict[str, Any]], answers: list[Any]) -> FollowUps:
    follow_ups = FollowUps(sent=len(items))
    if len(answers) != len(items):
        # The Java sender ignores such an answer too: nothing to follow up, nothing to resend (the
        # replicator logs it, at most once an interval).
        follow_ups.ignored = len(answers)
        return follow_ups
    for item, answer in zip(items, answers, strict=True):
        code = answer.get("statusCode") if isinstance(answer, dict) else None
        if isinstance(code, int) and 200 <= code < 300:
            continue
        if item.get("action") == c.REPLICATE_HEARTBEAT and code == 404:
            follow_ups.reregister.append((item["appName"], item["id"]))
        elif item.get("action") == c.REPLICATE_HEARTBEAT and code == 409 and answer.get("responseEntity"):
            follow_ups.sync_back.append(answer["responseEntity"])
        elif item.get("action") == c.REPLICATE_CANCEL and code == 404:
            pass  # already gone there
        else:
            follow_ups.refused += 1
    return follow_ups


@dataclass
class PeerCounters:
    sent: int = 0
    refused: int = 0
    dropped: int = 0
    failures: int = 0


class Replicator:
    def __init__(
        self,
        registry: Registry,
        peers: list[Peer],
        peer_set: PeerSet,
        outbox_factory: Callable[[Peer], Outbox],
        transport: PeerTransport | None = None,
        buffer_capacity: int = DEFAULT_OUTBOX_CAPACITY,
        refusal_lines: RefusalLines | None = None,
    ):
        self.registry = registry
        self.peer_set = peer_set
        self.buffer = ReplicationBuffer(buffer_capacity)
        self.outbox_factory = outbox_factory
        self.transport = transport
        self.peers: dict[str, Peer] = {}
        self.outboxes: dict[str, Outbox] = {}
        self.counters: dict[str, PeerCounters] = {}
        self.refusal_lines = refusal_lines or RefusalLines()
        for peer in peers:
            self.add_peer(peer)

    def add_peer(self, peer: Peer) -> bool:
        """Start replicating to ``peer`` (from the next flush on); False if it is a peer already."""
        if peer.key in self.peers:
            return False
        # Outbox and counters first: whoever finds the key in ``peers`` finds them too.
        self.outboxes[peer.key] = self.outbox_factory(peer)
        self.counters[peer.key] = PeerCounters()
        self.peer_set.add(peer.url)
        self.peers[peer.key] = peer
        return True

    def remove_peer(self, key: str, discard_queue: bool = False) -> Peer | None:
        """Forget a peer (it is this node itself, or DNS no longer lists it). ``discard_queue``: its
        queued items go too (in Redis as well): no one will send them. Returns the peer, if known."""
        peer = self.peers.pop(key, None)
        outbox = self.outboxes.pop(key, None)
        self.counters.pop(key, None)
        if peer is not None:
            self.peer_set.remove(peer.url)
        if discard_queue and outbox is not None:
            dropped = outbox.discard()
            if dropped and peer is not None:
                logger.info("replication queue of %s discarded: %d items", peer.display_url, dropped)
        return peer

    # ------------------------------------------------------------------ from writes to outboxes

    def record(self, event: ReplicationEvent) -> None:
        """The registry's replication hook (called under its lock: one dictionary store)."""
        self.buffer.add(event)

    def flush(self, now: int) -> int:
        """Move what the buffer holds into every peer's outbox; returns how many items."""
        events = self.buffer.take()
        if not events:
            return 0
        items = [encode(event) for event in events]
        # A copy: peers come and go (DNS) while a push to Redis waits on the network.
        for key, outbox in list(self.outboxes.items()):
            self._push(key, outbox, items, now)
        return len(items)

    def _push(self, key: str, outbox: Outbox, items: list[dict[str, Any]], now: int) -> None:
        dropped = outbox.push(items, now)
        peer = self.peers.get(key)
        if peer is None:  # it left while the items were pushed
            return
        if dropped:
            self.counters[key].dropped += dropped
            logger.warning("replication queue of %s full: %d oldest items dropped", peer.display_url, dropped)
        self.peer_set.set_queued(peer.url, len(outbox), self.lag_ms(key, now))

    # ------------------------------------------------------------------------------- sending

    def send_next_batch(self, key: str, now: int) -> int:
        """Send one batch of the peer's outbox; returns how many items left it (0: nothing to send).
        Raises PeerUnreachable (the batch stays queued) and records the outcome on the peer set."""
        peer = self.peers[key]
        outbox = self.outboxes[key]
        items = outbox.peek(BATCH_SIZE)
        if not items:
            return 0
        assert self.transport is not None
        try:
            answers = self.transport.post_batch(peer, items)
        except PeerUnreachable as exc:
            self.counters[key].failures += 1
            self.peer_set.record_failure(peer.url, now, str(exc))
            raise
        except PeerRefused as exc:
            # The peer will not take this batch whatever we do: drop it, count it, say so.
            outbox.ack(len(items))
            self.counters[key].refused += len(items)
            self.peer_set.record_failure(peer.url, now, f"batch refused: {exc}")
            self.peer_set.set_queued(peer.url, len(outbox), self.lag_ms(key, now))
            return len(items)
        outbox.ack(len(items))
        self.apply_follow_ups(key, read_answers(items, answers), now)
        return len(items)

    def probe(self, key: str, now: int) -> PeerUnreachable | PeerRefused | None:
        """Send the peer an empty batch and record the outcome; None when it answered."""
        peer = self.peers[key]
        assert self.transport is not None
        failure = probe(self.transport, peer)
        if failure is None:
            self.peer_set.record_success(peer.url, now)
        else:
            self.peer_set.record_failure(peer.url, now, failure_text(failure))
        return failure

    def probe_if_idle(self, key: str, now: int) -> bool:
        """Send an empty batch when the peer's outbox is empty and nothing was tried for
        ``PROBE_INTERVAL_MS``; records the outcome. Returns whether it probed."""
        peer = self.peers[key]
        if len(self.outboxes[key]):
            return False
        state = self.peer_set.state(peer.url)
        last_try = max(state.last_success or 0, state.last_failure or 0) if state is not None else 0
        if now - last_try < PROBE_INTERVAL_MS:
            return False
        self.probe(key, now)
        return True

    def has_items_to_send(self, key: str) -> bool:
        """Whether this process holds items for the peer (in production mode: only what Redis refused)."""
        return bool(self.outboxes[key].peek(1))

    def failed_since(self, key: str, since: int) -> bool:
        """The peer's latest result is a failure recorded after ``since`` (a Celery worker's, say)."""
        state = self.peer_set.state(self.peers[key].url)
        return state is not None and state.failing and (state.last_failure or 0) > since

    def apply_follow_ups(self, key: str, follow_ups: FollowUps, now: int) -> None:
        """What a peer's answers asked for, whoever sent the batch (a sender thread or a Celery worker)."""
        peer = self.peers[key]
        counters = self.counters[key]
        counters.sent += follow_ups.sent
        counters.refused += follow_ups.refused
        registers = []
        for app, instance_id in follow_ups.reregister:
            found = self.registry.reads.lease(app, instance_id)
            if found is not None:
                view, override = found
                event = ReplicationEvent(
                    c.REPLICATE_REGISTER, app, instance_id, view.instance, view, override
                )
                registers.append(encode(event))
        if registers:
            self._push(key, self.outboxes[key], registers, now)
        if follow_ups.ignored:
            self._trouble(
                peer, "answers ignored", f"{follow_ups.ignored} answers to a batch of {follow_ups.sent}"
            )
        for entity in follow_ups.sync_back:
            trouble = self._sync_back(entity, now)
            if trouble is not None:
                self._trouble(peer, *trouble)
            PACER.tick()
        self.peer_set.record_success(peer.url, now)
        self.peer_set.set_queued(peer.url, len(self.outboxes[key]), self.lag_ms(key, now))

    def _sync_back(self, entity: dict[str, Any], now: int) -> tuple[str, str] | None:
        """Take a peer's newer copy; what went wrong, if anything: (what, why)."""
        try:
            instance = build_instance(entity, now)
        except BadInput as exc:
            return "newer copy unreadable", str(exc)
        try:
            self.registry.register(instance, now, is_replication=True)
        except LimitExceeded as exc:
            return "newer copy refused", str(exc)
        return None

    def _trouble(self, peer: Peer, what: str, why: str) -> None:
        """What went wrong with a peer's answers: a peer answering every batch badly costs a line per
        kind and peer each interval (registry/domain/refusals.py), not one per batch or per item."""
        kind = f"peer answer: {what}"
        count = self.refusal_lines.note(f"{kind} {peer.key}")
        if count:
            logger.warning(
                "peer %s: %s: %s%s",
                peer.display_url,
                what,
                why[:200],
                since_last_line(count),
                extra=refusal_fields(kind, count),
            )

    def lag_ms(self, key: str, now: int) -> int:
        outbox = self.outboxes.get(key)
        oldest = outbox.oldest_at() if outbox is not None else None
        return 0 if oldest is None else max(0, now - oldest)

    def peer_keys(self) -> list[str]:
        return list(self.peers)


class PeerSender:
    """One peer's sending, one step at a time; ``step`` says how long to wait before the next.

    While the peer answers, a step sends everything queued. After a failure ``RetryPolicy`` decides:
    the batch again 100 ms later (twice), then only a probe every 500 ms while the peer is down, and
    the backlog the moment a probe is answered; 1 s after a 503 or a timeout. In production mode the
    Celery workers send and report their failures to the node (``failed_since``): the sender then
    probes the peer the same way and ``on_recovered`` starts a drain as soon as it answers, instead of
    leaving the backlog to beat's next drain.
    """

    def __init__(
        self,
        replicator: Replicator,
        key: str,
        clock: Callable[[], int],
        on_recovered: Callable[[str], None] | None = None,
    ):
        self.replicator = replicator
        self.key = key
        self.clock = clock
        self.on_recovered = on_recovered
        self.retry = RetryPolicy()
        # Nothing known yet: the first step probes, so that the console shows the peer's real health
        # from the start and a peer that starts later than this node is found within half a second.
        self.retry.reported_down()
        self.last_tried = 0

    def step(self) -> int | None:
        """Probe or send what is due. Returns the milliseconds to wait before the next step, or None
        when nothing is due until new items come (the caller still steps every ``IDLE_TICK_MS``)."""
        replicator, key = self.replicator, self.key
        if not self.retry.down and replicator.failed_since(key, self.last_tried):
            self.retry.reported_down()
        if self.retry.down and (self.retry.probe_first or not replicator.has_items_to_send(key)):
            self.last_tried = now = self.clock()
            failure = replicator.probe(key, now)
            if isinstance(failure, PeerUnreachable):
                return self.retry.failed(failure.congested)
            # Answered (a refusal too: the batch will be refused and counted as such).
            self.retry.recovered()
            if self.on_recovered is not None:
                self.on_recovered(key)
        try:
            while True:
                self.last_tried = now = self.clock()
                if not replicator.send_next_batch(key, now):
                    break
        except PeerUnreachable as exc:
            return self.retry.failed(exc.congested)
        self.retry.recovered()
        replicator.probe_if_idle(key, self.clock())
        return None


class EmbeddedReplication:
    """Embedded mode's drivers: a flusher every ``flush_ms`` and one sender per peer, as threads.
    In production mode the same threads send what Redis could not take and watch peers that are down
    (``on_recovered`` starts a Celery drain for a peer that answers again)."""

    def __init__(
        self,
        replicator: Replicator,
        clock: Callable[[], int],
        flush_ms: int = 100,
        on_recovered: Callable[[str], None] | None = None,
    ):
        self.replicator = replicator
        self.clock = clock
        self.flush_ms = flush_ms
        self.on_recovered = on_recovered
        self._stop = threading.Event()
        self._wake: dict[str, threading.Event] = {}
        self.senders: dict[str, PeerSender] = {}
        self._threads: list[threading.Thread] = []
        self._started = False
        for key in replicator.peer_keys():
            self.add_sender(key)

    def start(self) -> None:
        self._started = True
        self._spawn(threading.Thread(target=self._flush_loop, name="replication-flush", daemon=True))
        for key in list(self.senders):
            self._spawn_sender(key)

    def add_sender(self, key: str) -> None:
        """A sender for a peer the replicator has just been given (started now if the drivers run)."""
        if key in self.senders:
            return
        self._wake[key] = threading.Event()
        self.senders[key] = PeerSender(self.replicator, key, self.clock, self.on_recovered)
        if self._started:
            self._spawn_sender(key)

    def remove_sender(self, key: str) -> None:
        """Stop the peer's sender (the replicator has forgotten the peer); it ends after its step."""
        self.senders.pop(key, None)
        event = self._wake.pop(key, None)
        if event is not None:
            event.set()

    def _spawn_sender(self, key: str) -> None:
        self._spawn(
            threading.Thread(target=self._send_loop, args=(key,), name=f"replication-{key}", daemon=True)
        )

    def _spawn(self, thread: threading.Thread) -> None:
        self._threads.append(thread)
        thread.start()

    def stop(self) -> None:
        self._stop.set()
        for event in list(self._wake.values()):
            event.set()

    def nudge(self, key: str) -> None:
        """Step the peer's sender now if it is idle (a worker just reported a failure)."""
        event = self._wake.get(key)
        if event is not None:
            event.set()

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_ms / 1000):
            try:
                if self.replicator.flush(self.clock()):
                    for event in list(self._wake.values()):
                        event.set()
            except Exception:
                logger.exception("replication flush failed")

    def _send_loop(self, key: str) -> None:
        wake = self._wake[key]
        sender = self.senders[key]
        # Until stopped, or until the peer is removed (its sender replaced or gone).
        while not self._stop.is_set() and self.senders.get(key) is sender:
            # Cleared before the step: items flushed while it runs wake the next wait at once.
            wake.clear()
            try:
                wait_ms = sender.step()
            except Exception:
                peer = self.replicator.peers.get(key)
                if peer is None:
                    return  # removed while it sent: nothing more to do for it
                logger.exception("replication to %s failed", peer.display_url)
                wait_ms = UNEXPECTED_ERROR_RETRY_MS
            if wait_ms is None:
                wake.wait(IDLE_TICK_MS / 1000)
            else:
                # A retry is due after this long whatever is flushed meanwhile: new items never make
                # the sender hammer a peer that is down.
                self._stop.wait(wait_ms / 1000)
