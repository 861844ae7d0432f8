"""Which new connections a node takes: open connections counted per client address and in all.

A registry is the service every other one needs at start-up, so no single client may hold it: one
address that opens thousands of connections and sends nothing (or a body one byte at a time) would
otherwise fill gunicorn's ``worker_connections`` and leave the fleet's heartbeats waiting in the
kernel's accept queue. The gunicorn worker (``registry/serving/gunicorn_worker.py``) asks
``ConnectionAdmission.admit`` for every accepted connection before it reads a byte of it, and answers a
refused one with a short 503 and closes it: the refusal costs an accept and a write, no greenlet
stays, and the memory the node spends on connections is bounded by the caps times what one costs.

The total cap sits below ``worker_connections`` so the worker keeps accepting (a refused client gets
an answer, not a connect timeout) and the connections already open keep their slots. When the node
holds more than ``PRESSURE_SHARE`` of its total, it is under pressure: kept-alive connections then
wait for their next request only as long as a new connection waits for its first (Envoy's overload
manager shortens idle timeouts the same way), so idle clients make room for new ones.

Addresses that ``exempt`` says are proxies (EUREKA_TRUSTED_PROXIES: nginx, a reader, a load balancer
in front) carry many clients and are counted in the total only. Django-free; the worker counts on one
event loop, so no lock is taken.

Readers that do not read are let go (``SlowReaders``): a client that asks for the whole registry and
then takes none of it would otherwise hold its connection, the answer's bytes and a socket buffer full
of them for as long as it likes. A write is noted when the socket cannot take an answer whole; its
reader is then closed when it took nothing for the write timeout (nginx's ``send_timeout``); under
pressure, and at the cap in place of refusing a new connection, the readers blocked longest are closed
first; and the answers that stalled readers hold (each version of the registry a reader started on)
are bounded in bytes, the oldest let go first. A server gives its sockets ``limit_unsent`` so that the
kernel holds little more than a window of each answer (TCP_NOTSENT_LOWAT).
"""

from __future__ import annotations

import fcntl
import heapq
import socket
import struct
import termios
import time
from collections.abc import Callable

# Above this share of the total cap, idle kept-alive connections are given less time.
PRESSURE_SHARE = 0.8

PER_ADDRESS = "per_address"
TOTAL = "total"
# A ticket of a connection counted in the total only (no address, or an exempt one).
UNCOUNTED_ADDRESS = ""


class ConnectionAdmission:
    """Counts of open connections; ``admit`` a new one, ``release`` its ticket when it is closed.

    A cap of 0 is no cap."""

    def __init__(
        self,
        max_per_address: int,
        max_total: int,
        exempt: Callable[[str], bool] = lambda a: False,
        make_room: Callable[[], bool] | None = None,
    ):
        self.max_per_address = max_per_address
        self.max_total = max_total
        # Asked once per connection; EUREKA_TRUSTED_PROXIES' answer keeps its own cache per address.
        self._exempt = exempt
        # At the total cap: closes a connection to admit the new one in its place (the slowest reader,
        # ``SlowReaders.shed``), True if it did. The closed one is released a moment later, so the
        # total may pass the cap by the connections being closed.
        self._make_room = make_room
        self.pressure_at = int(max_total * PRESSURE_SHARE) if max_total else 0
        self.open_total = 0
        self.open_by_address: dict[str, int] = {}
        self.refused = {PER_ADDRESS: 0, TOTAL: 0}

    def admit(self, address: str | None) -> tuple[bool, str]:
        """``(True, ticket)``: admitted, ``release(ticket)`` when closed (the ticket is the address it
        counts against, or ``UNCOUNTED_ADDRESS``); ``(False, reason)``: refused, ``PER_ADDRESS`` or
        ``TOTAL`` (and counted in ``refused``)."""
        at_cap = self.max_total and self.open_total >= self.max_total
        if at_cap and self._make_room is None:
            self.refused[TOTAL] += 1
            return False, TOTAL
        ticket = UNCOUNTED_ADDRESS
        counted = address and self.max_per_address and not self._exempt(address)
        if counted:
            held = self.open_by_address.get(address, 0)
            if held >= self.max_per_address:
                self.refused[PER_ADDRESS] += 1
                return False, PER_ADDRESS
        # Only a connection the per-address cap admits is given another's place.
        if at_cap and not self._make_room():
            self.refused[TOTAL] += 1
            return False, TOTAL
        if counted:
            self.open_by_address[address] = held + 1
            ticket = address
        self.open_total += 1
        return True, ticket

    def release(self, ticket: str) -> None:
        self.open_total -= 1
        if ticket:
            held = self.open_by_address.get(ticket, 0) - 1
            if held > 0:
                self.open_by_address[ticket] = held
            else:
                self.open_by_address.pop(ticket, None)

    @property
    def under_pressure(self) -> bool:
        return bool(self.pressure_at) and self.open_total >= self.pressure_at


def refusal_answer(reason: str) -> bytes:
    """The bytes sent to a refused connection, before anything of it is read: a complete HTTP/1.1
    response that closes the connection; every client tells it from a network error."""
    return _ANSWERS[reason]


def _answer(reason: str) -> bytes:
    if reason == PER_ADDRESS:
        message = b"Too many open connections from this address; close some and retry.\n"
    else:
        message = b"The node holds as many connections as it may; retry shortly.\n"
    return (
        b"HTTP/1.1 503 Service Unavailable\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\n"
        b"Retry-After: 5\r\n"
        b"Connection: close\r\n"
        b"Content-Length: " + str(len(message)).encode() + b"\r\n\r\n" + message
    )


_ANSWERS = {reason: _answer(reason) for reason in (PER_ADDRESS, TOTAL)}

# The serving worker's admission, read by /metrics (None outside a gunicorn worker of ours).
CURRENT: ConnectionAdmission | None = None


# A write whose reader took nothing for this long is stalled: under pressure it is closed (longest
# stalled first), and the answer it holds counts against the bytes stalled readers may hold.
STALLED_S = 1.0
# What the kernel may hold of an answer beyond what is in flight (TCP_NOTSENT_LOWAT). A reader that
# keeps up is sent as much at a time as without it (what is in flight is not counted); one that reads
# nothing costs the kernel this, and the node the copying of it, instead of a whole socket buffer
# (megabytes on loopback), and a tiny window makes that copying several times dearer per byte.
UNSENT_BYTES = 16 * 1024

# Why a slow reader was closed (SlowReaders.closed; /metrics' reason label).
WRITE_TIMEOUT = "write_timeout"
SHED = "shed"
HELD_BYTES = "held_bytes"


def limit_unsent(sock) -> None:
    """Have the kernel take no more of an answer than ``UNSENT_BYTES`` beyond what it has sent, where
    the system has TCP_NOTSENT_LOWAT (Linux, macOS); without it, the socket's buffer is the limit."""
    option = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    if option is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, option, UNSENT_BYTES)
        except OSError:
            pass


def queued_bytes(sock) -> int | None:
    """Bytes written to a TCP socket that its reader has not acknowledged (Linux's SIOCOUTQ), None where
    that cannot be asked: a reader that takes any byte makes it smaller."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    except (OSError, AttributeError, ValueError):
        return None


_RESET_ON_CLOSE = struct.pack("ii", 1, 0)


def reset_on_close(sock) -> None:
    """Have the socket reset when it is closed (SO_LINGER 0): a graceful close would leave what a slow
    reader never took in the kernel until the connection times out."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    except OSError:
        pass


class Write:
    """One answer being written that the socket could not take at once (``SlowReaders.begin``).

    ``owner`` is what the server closes it through (the connection's greenlet), ``sock`` its socket,
    if the server has one. ``moved_at`` is when the reader last took something; ``closing`` the reason it
    is being closed, once it is."""

    __slots__ = ("owner", "sock", "body_id", "size", "began", "moved_at", "queued", "queued_at", "closing")

    def __init__(self, owner, sock, body_id: int, size: int, now: float):
        self.owner = owner
        self.sock = sock
        self.body_id = body_id
        self.size = size
        self.began = now
        self.moved_at = now
        # What the socket's queue held when last looked at (``SlowReaders._took_something``), and when.
        self.queued: int | None = None
        self.queued_at = float("-inf")
        self.closing: str | None = None


class SlowReaders:
    """The writes in progress whose readers do not keep up, and which of them to close.

    A server calls ``begin(owner, body, sock)`` when a socket does not take an answer whole, then
    ``moved(write)`` each time it took more and ``end(write)`` when the answer is written or the
    connection gone. It closes what ``due(admission)`` returns, from one sweeper (every second or so),
    and at its connection cap it may close ``shed()``'s write in place of refusing a new connection
    (``ConnectionAdmission(make_room=...)``). ``due`` names, each marked ``closing``:

    * a write whose reader took nothing for ``timeout_s`` (0: never); a reader that takes any byte is
      moving, also when the server could add nothing (its socket's queue got shorter: ``queue``,
      asked about a quiet write when it is first seen quiet and once it is past the timeout);
    * under pressure, the writes stalled for ``STALLED_S``, longest stalled first, until the open
      connections would be below the pressure mark again;
    * over ``max_held_bytes`` (0: no bound) of distinct answers held by stalled writes, the writes of
      the oldest answers: a registry rebuilt while slow readers hold the versions they started on
      would otherwise be held once per version. The newest answer, which the cache holds anyway, is
      never let go for this.

    Counts of what was closed and why are in ``closed``. One event loop calls it: no lock."""

    def __init__(
        self,
        timeout_s: float,
        max_held_bytes: int = 0,
        clock: Callable[[], float] = time.monotonic,
        queue: Callable[[object], int | None] = queued_bytes,
    ):
        self.timeout_s = timeout_s
        self.max_held_bytes = max_held_bytes
        self._clock = clock
        self._queue = queue
        self.writes: dict[object, Write] = {}
        self.closed = {WRITE_TIMEOUT: 0, SHED: 0, HELD_BYTES: 0}
        # The writes by when they last moved, as a heap (``shed`` takes the least): an entry is made when
        # a write begins, and brought up to date only when it comes to the top; the entries of writes
        # that ended are dropped there too, or all at once when they are most of the heap.
        self._by_moved: list[tuple[float, int, Write]] = []
        self._entries = 0

    def begin(self, owner, body, sock=None) -> Write:
        write = Write(owner, sock, id(body), len(body), self._clock())
        self.writes[owner] = write
        self._push(write)
        return write

    def moved(self, write: Write) -> None:
        write.moved_at = self._clock()

    def end(self, write: Write) -> None:
        if self.writes.get(write.owner) is write:
            del self.writes[write.owner]
        if len(self._by_moved) > 2 * len(self.writes) + 64:
            self._by_moved = []
            for current in self.writes.values():
                self._push(current)

    def _push(self, write: Write) -> None:
        self._entries += 1
        heapq.heappush(self._by_moved, (write.moved_at, self._entries, write))

    def current(self, owner) -> Write | None:
        return self.writes.get(owner)

    def due(self, admission: ConnectionAdmission | None = None) -> list[Write]:
        """The writes to close now (see the class), each marked ``closing`` and counted."""
        now = self._clock()
        closing: list[Write] = []
        stalled: list[Write] = []
        for write in self.writes.values():
            if write.closing is not None:
                continue
            idle = now - write.moved_at
            if idle < STALLED_S and not (self.timeout_s and idle >= self.timeout_s):
                continue
            if write.sock is not None and self._took_something(write, now, idle):
                continue
            if self.timeout_s and idle >= self.timeout_s:
                closing.append(self._close(write, WRITE_TIMEOUT))
            else:
                stalled.append(write)
        stalled.sort(key=lambda write: write.moved_at)
        if admission is not None and admission.under_pressure:
            excess = admission.open_total - admission.pressure_at + 1 - len(closing)
            for write in stalled[: max(0, excess)]:
                closing.append(self._close(write, SHED))
        if self.max_held_bytes:
            closing.extend(self._over_held_bytes([write for write in stalled if write.closing is None]))
        return closing

    def _took_something(self, write: Write, now: float, idle: float) -> bool:
        """Whether a write the server added nothing to for a while is moving all the same: its reader
        took bytes from the socket's queue. The queue is looked at twice per quiet spell, not at every
        sweep: when the write is first seen quiet (then it is not known yet, and not closed this
        sweep), and once it is past the write timeout."""
        if write.queued_at < write.moved_at:
            write.queued, write.queued_at = self._queue(write.sock), now
            return bool(self.timeout_s) and idle >= self.timeout_s
        if not (self.timeout_s and idle >= self.timeout_s):
            return False
        queued = self._queue(write.sock)
        if queued is None or write.queued is None or queued >= write.queued:
            return False
        write.moved_at = write.queued_at = now
        write.queued = queued
        return True

    def _over_held_bytes(self, stalled: list[Write]) -> list[Write]:
        answers: dict[int, list[Write]] = {}
        for write in stalled:
            answers.setdefault(write.body_id, []).append(write)
        held = sum(writes[0].size for writes in answers.values())
        if held <= self.max_held_bytes:
            return []
        newest = max(self.writes.values(), key=lambda write: write.began).body_id
        closing = []
        # The answer whose latest reader began longest ago is the oldest version.
        for body_id, writes in sorted(answers.items(), key=lambda item: max(w.began for w in item[1])):
            if held <= self.max_held_bytes:
                break
            if body_id == newest:
                continue
            closing.extend(self._close(write, HELD_BYTES) for write in writes)
            held -= writes[0].size
        return closing

    def shed(self) -> Write | None:
        """The write blocked longest (however briefly), marked ``closing``, for the server to close in
        place of refusing a new connection at its cap; None when no write is in progress."""
        heap = self._by_moved
        while heap:
            moved_at, _, write = heap[0]
            if write.closing is not None or self.writes.get(write.owner) is not write:
                heapq.heappop(heap)
            elif write.moved_at != moved_at:  # it moved since: its place is further down
                self._entries += 1
                heapq.heapreplace(heap, (write.moved_at, self._entries, write))
            else:
                heapq.heappop(heap)
                return self._close(write, SHED)
        return None

    def stalled(self) -> list[Write]:
        """Every write stalled for ``STALLED_S``, marked ``closing`` (shed): for a server that stops,
        whose stop would otherwise wait for clients that are not reading."""
        now = self._clock()
        return [
            self._close(write, SHED)
            for write in list(self.writes.values())
            if write.closing is None and now - write.moved_at >= STALLED_S
        ]

    def _close(self, write: Write, reason: str) -> Write:
        write.closing = reason
        self.closed[reason] += 1
        return write


# The serving worker's slow readers, read by /metrics (None outside a gunicorn worker of ours).
SLOW_READERS: SlowReaders | None = None
