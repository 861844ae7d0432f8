"""The node's open change streams (Server-Sent Events), woken cheaply and in batches. Plain Python.

1. One listener on the change log (``subscribe_changes``) only sets an event: it runs under the
   registry lock, on the renew/register path.
2. One dispatcher (a greenlet under gunicorn's gevent worker, which patches ``threading``; a thread
   elsewhere) waits for that event, wakes every open stream, then sleeps ``coalesce_ms``: a burst of
   1,000 changes wakes each stream a few times, not 1,000 times.
3. Each stream, once woken, reads what came after its cursor with ``changes_since`` (one short lock
   hold per page) and writes it as one chunk; between changes it writes a comment line every
   ``keepalive_s`` — that write is also how a departed client is noticed.

A stream ends when the client goes away (the write fails and the server closes the generator), after
``max_seconds`` (EventSource clients reconnect with ``Last-Event-ID`` and lose nothing), and when the
worker stops: gunicorn waits for every request under way during a graceful stop, so the hub chains
the worker's SIGTERM handler and ends every stream at once instead of holding the stop for its
``graceful_timeout``.
"""

from __future__ import annotations

import enum
import logging
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import orjson

from registry.domain.changes import Change, TooOld
from registry.feed.query import FeedQuery, changes_json, last_change_id

logger = logging.getLogger(__name__)

# Changes read per lock hold while a stream catches up.
PAGE = 500
# EventSource waits this long before reconnecting after a stream ends.
RECONNECT_MS = 2_000
REFETCH_PATH = "/eureka/apps"


class Subscription:
    """One open stream's slot: the dispatcher sets ``wake``; the stream waits on it."""

    __slots__ = ("address", "wake")

    def __init__(self, address: str = "") -> None:
        self.address = address
        self.wake = threading.Event()

    def wait(self, timeout: float) -> bool:
        woke = self.wake.wait(timeout)
        self.wake.clear()
        return woke


class Refusal(enum.Enum):
    """Why ``StreamHub.open`` gave no slot."""

    # ``max_streams`` are open, or the node is stopping.
    FULL = "full"
    # The client's address holds ``max_per_address`` streams already.
    ADDRESS_FULL = "address_full"


class StreamHub:
    """The open streams of one node and the dispatcher that wakes them (see the module docstring).

    Streams are capped in all (``max_streams``) and per client address (``max_per_address``, 0: no
    cap): without the second, one client opening 2,000 streams held every slot, and every other
    client was refused for the streams' lifetime (30 minutes by default)."""

    def __init__(self, registry, max_streams: int, coalesce_ms: int, max_per_address: int = 0):
        self.registry = registry
        self.max_streams = max_streams
        self.max_per_address = max_per_address
        self.coalesce_s = coalesce_ms / 1000
        self.stopping = False
        # Counters for /metrics: streams refused because the hub was full, because the client's
        # address held its share, fan-outs done.
        self.refused = 0
        self.refused_per_address = 0
        self.wakeups = 0
        self._streams: set[Subscription] = set()
        # Open streams per client address; an address leaves when its last stream ends.
        self._per_address: dict[str, int] = {}
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._dispatcher: threading.Thread | None = None
        self._unsubscribe = registry.reads.subscribe_changes(self._on_change)
        _HUBS.add(self)
        _stop_hubs_on_sigterm()

    def _on_change(self, change: Change) -> None:
        # Under the registry lock: set a flag, nothing more.
        self._changed.set()

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def open(self, address: str = "") -> Subscription | Refusal:
        """A slot for a new stream from ``address``, or why there is none."""
        with self._lock:
            if self.stopping or len(self._streams) >= self.max_streams:
                self.refused += 1
                return Refusal.FULL
            held = self._per_address.get(address, 0)
            if self.max_per_address and held >= self.max_per_address:
                self.refused_per_address += 1
                return Refusal.ADDRESS_FULL
            subscription = Subscription(address)
            self._streams.add(subscription)
            self._per_address[address] = held + 1
            if self._dispatcher is None:
                self._dispatcher = threading.Thread(target=self._dispatch, name="change-streams", daemon=True)
                self._dispatcher.start()
            return subscription

    def release(self, subscription: Subscription) -> None:
        """Free the slot; more than once is harmless (a stream's generator and its body both call it)."""
        with self._lock:
            if subscription not in self._streams:
                return
            self._streams.remove(subscription)
            held = self._per_address[subscription.address] - 1
            if held:
                self._per_address[subscription.address] = held
            else:
                del self._per_address[subscription.address]

    def streams_from(self, address: str) -> int:
        with self._lock:
            return self._per_address.get(address, 0)

    def _dispatch(self) -> None:
        while not self.stopping:
            if not self._changed.wait(timeout=5.0):
                continue
            self._changed.clear()
            self.wake_all()
            # Coalesce: changes that come meanwhile are read by the next wake-up, all at once.
            time.sleep(self.coalesce_s)

    def wake_all(self) -> None:
        self.wakeups += 1
        for subscription in list(self._streams):
            subscription.wake.set()

    def stop(self) -> None:
        """End every stream (each sees ``stopping`` when it wakes) and refuse new ones."""
        self.stopping = True
        self._changed.set()
        self.wake_all()

    def close(self) -> None:
        self.stop()
        self._unsubscribe()
        _HUBS.discard(self)


# ------------------------------------------------------------------------------- the stream


class StreamBody:
    """A stream's bytes for the server, with a ``close`` that frees the slot even when the body was
    never iterated (a generator's ``finally`` would not run then)."""

    def __init__(self, chunks: Iterator[bytes], release: Callable[[], None]):
        self._chunks = chunks
        self._release = release

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks

    def close(self) -> None:
        try:
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()
        finally:
            self._release()


def sse_event(event: str, data: dict, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\n".encode() + b"data: " + orjson.dumps(data) + b"\n\n"


def too_old_event(last_id: int) -> bytes:
    # With the id, an EventSource that reconnects later resumes from here, not from the lost id.
    return sse_event("too-old", {"lastId": last_id, "refetch": REFETCH_PATH}, last_id)


def resume_point(registry, query: FeedQuery) -> tuple[int, int | None]:
    """Where a new stream starts: (cursor, the newest id when the asked resume point is too old).

    Without a resume point a stream starts at the newest change (only future changes are sent).
    """
    newest = last_change_id(registry)
    if query.since is None:
        return newest, None
    if query.since > newest:
        return newest, newest  # another node's id: its numbering is not this node's
    try:
        registry.reads.changes_since(query.since, 1)
    except TooOld as too_old:
        return too_old.last_id, too_old.last_id
    return query.since, None


def change_stream(
    hub: StreamHub,
    subscription: Subscription,
    query: FeedQuery,
    cursor: int,
    too_old_at: int | None,
    keepalive_s: float,
    max_seconds: float,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[bytes]:
    """The bytes of one SSE stream, from ``cursor`` on; releases its slot however it ends."""
    registry = hub.registry
    try:
        first = f"retry: {RECONNECT_MS}\n\n".encode()
        if too_old_at is not None:
            first += too_old_event(too_old_at)
        yield first
        ends_at = clock() + max_seconds
        while not hub.stopping:
            chunk, cursor = _read_after(registry, query, cursor)
            if chunk:
                yield chunk
                continue  # a full page: there may be more
            now = clock()
            if now >= ends_at:
                return
            if not subscription.wait(min(keepalive_s, ends_at - now)) and not hub.stopping:
                yield b": keep-alive\n\n"
    finally:
        hub.release(subscription)


def _read_after(registry, query: FeedQuery, cursor: int) -> tuple[bytes, int]:
    """The next page after ``cursor`` as SSE bytes (empty when nothing is left) and the new cursor."""
    last_before = last_change_id(registry)
    try:
        changes = registry.reads.changes_since(cursor, PAGE, query.apps, query.actions)
    except TooOld as too_old:
        # The client read too slowly for the retention window: it must refetch, then follows on.
        return too_old_event(too_old.last_id), too_old.last_id
    if not changes:
        return b"", max(cursor, last_before)
    shown = changes_json(registry, changes, query.instances)
    chunk = b"".join(
        sse_event("change", data, change.id) for change, data in zip(changes, shown, strict=True)
    )
    if len(changes) < PAGE:
        # Everything up to last_before was scanned: skip the entries the filters left out.
        return chunk, max(changes[-1].id, last_before)
    return chunk, changes[-1].id


# ------------------------------------------------------------------------------- worker stop

_HUBS: weakref.WeakSet[StreamHub] = weakref.WeakSet()
_hooked = False


def stop_all_hubs() -> None:
    for hub in list(_HUBS):
        hub.stop()


def _stop_hubs_on_sigterm() -> None:
    """Chain the worker's SIGTERM handler (gunicorn's graceful stop) so that streams end at once.

    Only a Python handler already in place is chained (a gunicorn worker's); signal.signal works in
    the main thread only, which is where gevent's greenlets run (elsewhere: no chaining, the streams
    end after ``max_seconds``).
    """
    global _hooked
    if _hooked:
        return
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous):
        return

    def on_sigterm(signum, frame):
        previous(signum, frame)
        # Out of the signal handler: setting events takes locks the interrupted code may hold.
        _run_soon(stop_all_hubs)

    try:
        signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread
        return
    _hooked = True


def _run_soon(function: Callable[[], None]) -> None:
    try:
        from gevent import monkey

        if monkey.is_module_patched("threading"):
            import gevent

            gevent.spawn(function)
            return
    except ImportError:  # pragma: no cover - gevent is a dependency
        pass
    threading.Thread(target=function, daemon=True).start()
