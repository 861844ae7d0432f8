"""What one client may hold of a node served by granian, and for how long.

granian (2.8) reads and writes the sockets in Rust (hyper) and gives a WSGI application neither the
connection nor a timeout:

* a request body is read by ``wsgi.input.read(n)``, which holds the request thread (not the GIL)
  until ``n`` bytes have come or the connection is gone. The read cannot be left to another thread:
  when the callback returns, granian takes the body back, and waits, holding the GIL, for a read
  still under way;
* an answer handed over in one piece (``response_bytes``) is copied whole into Rust and kept until
  the client has taken it all; one handed over in pieces (``response_iter``) is pulled on the calling
  thread, which waits (without the GIL) while granian holds four pieces not yet sent;
* nothing in Python can close a connection. hyper closes one when its answer is written and its
  request read (or given up), when the client goes, and when an answer ends short of the length it
  announced.

So, here:

1. **Bodies.** A request with a body takes one of the threads kept for receiving bodies (``Shares``):
   at most a share of them per client address (addresses of EUREKA_TRUSTED_PROXIES count in the total
   only) and all of them in all; past either it is answered 503 at once, unread. A body is in the
   socket already when a client sends it at once, as every real client does, so a slot is held for
   microseconds, unless the client is slow. ``TimedBody`` reads the body in pieces, noting
   each, and ``Deadlines``, one thread, watches the bodies being received: one with no piece for
   EUREKA_BODY_IDLE_TIMEOUT_SECONDS, or not whole within EUREKA_BODY_TIMEOUT_SECONDS, is answered 408
   from that thread with the answer cut one byte short of its announced length (``answer_cut_short``),
   so that hyper closes the connection once the answer is written: the read under way ends, and the
   request thread is free again. A body the application answered without reading (401 before the
   body, 413 past the limit) is read first, up to ``DRAIN_BYTES`` within ``DRAIN_S``, so that the
   client gets the answer rather than a reset; one that takes longer gets the answer cut short the
   same way.
2. **Answers.** An answer over ``STREAM_ABOVE_BYTES`` is not copied into Rust whole: it is written
   from a thread of its own in ``STREAM_PIECE_BYTES`` pieces of the one payload every reader shares,
   so a client that reads slowly, or not at all, holds a few pieces and a thread (the writers are a
   ``Shares`` too: past a share, 503 at once). A
   client that takes no byte of its answer for EUREKA_WRITE_TIMEOUT_SECONDS is disconnected by the
   kernel: the listening socket's ``TCP_USER_TIMEOUT``, which every accepted connection inherits
   (``registry/serving/granian_server.py``; HAProxy's ``tcp-ut`` does the same), ends a connection whose
   sent bytes stay unacknowledged, or unsent behind a zero window, that long. The writer's thread
   then ends with it.

Refusals and late answers are counted and logged as every refusal is: at most one line a minute per
kind, with a count (``Tally``).
"""

from __future__ import annotations

import _thread
import collections
import logging
import math
import queue
import threading
import time
from collections.abc import Callable

from registry.domain.refusals import RefusalLines, refusal_fields, since_last_line
from registry.wire.request_bodies import BodyDeadlines, BodyTooSlow

logger = logging.getLogger("registry.serving.granian_server")

# A body is read a byte at a time until two reads in a row came at once (the bytes were there
# already), then in pieces that double while they come at once, up to this; a piece that had to wait
# starts again at one byte. So a body sent slowly is seen byte by byte (its idle deadline counts from
# the last one), and one sent at once is read in a few calls.
BODY_PIECE_BYTES = 64 * 1024
QUICK_READ_S = 0.001
# What is read of a body the application answered without reading, and for how long, before the
# answer (more, or longer: the answer goes cut short, and the connection is closed). As gunicorn's
# worker (registry/serving/gunicorn_worker.py).
DRAIN_BYTES = 64 * 1024
DRAIN_S = 2.0
# How long an answer cut short waits, written but not ended, before it ends (and hyper closes the
# connection): hyper writes what it holds when the answer has nothing more for it, and would not
# write an answer that ended in the same turn.
CUT_SHORT_DELAY_S = 0.25
# Answers larger than this are written in pieces of this size from a thread of their own.
STREAM_ABOVE_BYTES = 32 * 1024
STREAM_PIECE_BYTES = 64 * 1024

_UNCOUNTED = ""


class Tally:
    """Refusals and late answers, logged as the node logs every refusal (``registry/domain/refusals.py``):
    the first of each kind, then at most one line an interval, saying how many more came; every one is
    counted in ``totals``."""

    def __init__(self, lines: RefusalLines | None = None, log=logger):
        self.lines = lines or RefusalLines()
        self.log = log
        self.lock = threading.Lock()
        self.totals: dict[str, int] = {}

    def note(self, kind: str, address: str) -> None:
        with self.lock:
            self.totals[kind] = self.totals.get(kind, 0) + 1
        count = self.lines.note(kind)
        if count:
            self.log.warning(
                "%s (latest from %s)%s",
                _TALLIED[kind],
                address or "-",
                since_last_line(count),
                extra=refusal_fields(kind, count),
            )


# TLS handshakes granian's worker refused, as its log line names them (rustls's errors, tls-listener's
# timeout): the kind, the words that identify it (all of them), and the reason given. The first match
# wins. Each is counted and logged as the refusals above (``TlsRefusals``).
_TLS_REFUSALS = {
    "tls_timeout": (("HandshakeTimeout",), "not finished within granian's handshake timeout (10 s)"),
    "tls_not_tls": (("InvalidContentType",), "not TLS (plain HTTP sent to the HTTPS port?)"),
    "tls_oversized": (("TooLarge",), "a handshake message (a certificate chain) too large"),
    "tls_no_certificate": (("NoCertificatesPresented",), "no client certificate, and one is required"),
    "tls_unknown_ca": (("UnknownIssuer",), "a client certificate from a CA not in EUREKA_TLS_CLIENT_CA_FILE"),
    "tls_expired": (("InvalidCertificate(Expired",), "an expired client certificate"),
    "tls_not_yet_valid": (("InvalidCertificate(NotValidYet",), "a client certificate not valid yet"),
    "tls_bad_certificate": (("InvalidCertificate",), "a client certificate that does not verify"),
    "tls_incompatible": (("PeerIncompatible",), "no protocol version or cipher suite in common"),
    "tls_failed": (("TlsAcceptError",), "the handshake failed"),
}
# A connection closed before its handshake ended: what a port probe does. Not logged.
_TLS_CLOSED = ("UnexpectedEof", "ConnectionReset", "BrokenPipe")
TLS_CLOSED = "tls_closed"


TURN_REFUSED = "granian_turn"
BODY_REFUSED = "granian_body"
ANSWER_REFUSED = "granian_answer"
BODY_LATE = "granian_body_late"
DRAIN_LATE = "granian_drain_late"
_TALLIED = {
    TURN_REFUSED: "request refused with 503: too many from its address under way",
    BODY_REFUSED: "request body refused with 503, unread: its address's share of body threads, or all, taken",
    ANSWER_REFUSED: "large answer refused with 503: its address's share of the writers, or all, taken",
    BODY_LATE: "request body answered 408: not received within EUREKA_BODY_(IDLE_)TIMEOUT_SECONDS",
    DRAIN_LATE: "answer cut short: the body it left unread still coming after 2 s",
    **{kind: f"TLS handshake refused: {reason}" for kind, (_, reason) in _TLS_REFUSALS.items()},
}


class Shares:
    """Slots held per client address and in all: at most ``max_per_address`` per address (0: no cap;
    an address ``exempt`` says is a proxy, EUREKA_TRUSTED_PROXIES, counts in the total only) and
    ``max_total`` in all. ``admit`` takes one or refuses at once; ``done`` gives it back."""

    def __init__(self, max_total: int, max_per_address: int, exempt: Callable[[str], bool] = lambda a: False):
        self.max_total = max(1, max_total)
        self.max_per_address = max_per_address
        self.exempt = exempt
        self.lock = threading.Lock()
        self.held = 0
        self.by_address: dict[str, int] = {}
        self.refused = 0

    def admit(self, address: str) -> str | None:
        """A ticket for ``done`` (the address the slot counts against, or ""), or None: refused."""
        counted = address if address and self.max_per_address and not self.exempt(address) else _UNCOUNTED
        with self.lock:
            if self.held >= self.max_total or (
                counted and self.by_address.get(counted, 0) >= self.max_per_address
            ):
                self.refused += 1
                return None
            self.held += 1
            if counted:
                self.by_address[counted] = self.by_address.get(counted, 0) + 1
            return counted

    def done(self, ticket: str) -> None:
        with self.lock:
            self.held -= 1
            if ticket:
                left = self.by_address.get(ticket, 0) - 1
                if left > 0:
                    self.by_address[ticket] = left
                else:
                    self.by_address.pop(ticket, None)


class Pieces:
    """An answer's bytes handed to granian ``size`` at a time (``response_iter`` pulls them): granian
    holds a few pieces, not a copy of the whole answer, however slowly the client reads. (Pieces do
    not grow for a client that takes them fast: the socket's send buffer takes them as fast, up to
    megabytes, whether the client reads or not.)"""

    __slots__ = ("content", "offset", "size")

    def __init__(self, content: bytes, size: int = STREAM_PIECE_BYTES):
        self.content = content
        self.offset = 0
        self.size = size

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        start = self.offset
        if start >= len(self.content):
            raise StopIteration
        self.offset = start + self.size
        return self.content[start : self.offset]

    def close(self) -> None:
        self.content = b""


class WriterThreads:
    """Threads that write large answers (``Pieces``), started as needed and kept for the next: a write
    is handed to an idle one (no thread started per answer), or to a new one when none is idle. The
    writers' ``Shares`` bound how many write at once, and so how many there are."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.idle = 0
        self.started = 0

    def submit(self, write: Callable, *args) -> None:
        with self.lock:
            if self.idle:
                self.idle -= 1
            else:
                self.started += 1
                threading.Thread(target=self._serve, name="answer", daemon=True).start()
        self.jobs.put((write, args))

    def _serve(self) -> None:
        while True:
            write, args = self.jobs.get()
            try:
                write(*args)
            except Exception:  # a write that failed must not take the thread with it
                logger.exception("writing an answer failed")
            with self.lock:
                self.idle += 1


class _CutShort:
    """An answer's bytes, then, after ``delay_s``, its end: one byte short of the length announced."""

    __slots__ = ("content", "delay_s")

    def __init__(self, content: bytes, delay_s: float):
        self.content = content
        self.delay_s = delay_s

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        content = self.content
        if content is not None:
            self.content = None
            return content
        # Written meanwhile (hyper writes what it holds once the answer has nothing more for it).
        time.sleep(self.delay_s)
        raise StopIteration

    def close(self) -> None:
        pass


def answer_cut_short(proto, status: int, headers: list, content: bytes, delay_s: float = CUT_SHORT_DELAY_S):
    """Answer on ``proto`` and have granian close the connection after the answer: the answer announces
    one byte more than it sends, and hyper ends a connection whose answer ended short of its length.
    The client reads the status, the headers and ``content``, then the connection closes. Blocks the
    calling thread for ``delay_s`` (see ``CUT_SHORT_DELAY_S``)."""
    kept = [(name, value) for name, value in headers if name.lower() not in ("content-length", "connection")]
    kept += [("Content-Length", str(len(content) + 1)), ("Connection", "close")]
    proto.response_iter(status, kept, _CutShort(content, delay_s))


RECEIVING, DRAINING, SETTLED = "receiving", "draining", "settled"


class Deadlines:
    """The bodies being received (``TimedBody``), and the one thread that answers those past a deadline.

    The thread sleeps until the earliest deadline of the bodies watched (or until one is added whose
    deadline is earlier), answers the bodies past theirs (``TimedBody.answer_late``), and sleeps
    again; with nothing watched it waits without a timeout. ``background=False``: no thread, the
    caller runs ``expire()`` (tests, with their own clock)."""

    def __init__(self, clock=time.monotonic, background: bool = True, tally: Tally | None = None):
        self.clock = clock
        self.background = background
        self.tally = tally or Tally()
        self.lock = threading.Condition()
        self.watched: set[TimedBody] = set()
        self.wake_at = math.inf
        self.thread: threading.Thread | None = None
        self.late = 0

    def watch(self, body: TimedBody) -> None:
        with self.lock:
            self.watched.add(body)
            due = body.due()
            if due < self.wake_at and self.background:
                # Noted here too: the thread may be between two waits, and reads it before the next.
                self.wake_at = due
                if self.thread is None:
                    self.thread = threading.Thread(target=self._run, name="body deadlines", daemon=True)
                    self.thread.start()
                self.lock.notify()

    def unwatch(self, body: TimedBody) -> None:
        with self.lock:
            self.watched.discard(body)

    def expire(self) -> list[TimedBody]:
        """Answer the bodies past a deadline; those answered."""
        late = []
        with self.lock:
            now = self.clock()
            earliest = math.inf
            for body in list(self.watched):
                due = body.due()
                if due <= now:
                    self.watched.discard(body)
                    if body.mark_late(now):
                        late.append(body)
                else:
                    earliest = min(earliest, due)
            self.wake_at = earliest
        for body in late:
            self.late += 1
            body.answer_late()
        return late

    def _run(self) -> None:
        while True:
            self.expire()
            with self.lock:
                wait = self.wake_at - self.clock()
                if wait > 0:
                    self.lock.wait(None if self.wake_at == math.inf else wait)


class TimedBody:
    """``wsgi.input`` of a request whose body granian is receiving: read in pieces, each noted, within
    the body's deadlines (``limits``); ``Deadlines`` answers it 408 past one, and a read past one
    raises ``BodyTooSlow`` (``registry/wire/request_bodies.py`` answers that 408; that answer is not
    sent again).

    While the application runs, ``gate`` (the server's cap on threads running Python) is let go for
    as long as the body is being received, and taken again once it is in (``settle``): a slow body
    holds a request thread, never a turn of the application's."""

    def __init__(
        self,
        inner,
        proto,
        deadlines: Deadlines,
        limits: BodyDeadlines,
        length: int | None,
        address: str = "",
        clock=time.monotonic,
    ):
        self.inner = inner
        self.proto = proto
        self.deadlines = deadlines
        self.limits = limits
        self.length = length
        self.address = address
        self.clock = clock
        self.received = 0
        self.finished = length == 0
        self.phase: str | None = None
        self.began = self.last = 0.0
        self.drain_until = math.inf
        self.withheld: tuple[int, list, bytes] | None = None
        self.answered = False
        self.late: str | None = None
        # What goes to the client when late (set with ``late``): the 408, or the answer withheld.
        self.late_answer: tuple[int, list, bytes] = (408, [], b"")
        # With no deadline there is nothing to note: whole pieces at once.
        self.timed = bool(limits.idle_s or limits.total_s)
        self.step = 1 if self.timed else BODY_PIECE_BYTES
        self.quick_reads = 0
        self.gate = None
        self.gate_let_go = False

    # --- reading

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            # All of it (nothing of the node asks so; the WSGI contract does).
            return b"".join(iter(lambda: self.read(BODY_PIECE_BYTES), b""))
        if self.late:
            raise BodyTooSlow(self.late)
        if self.finished or size == 0:
            return b""
        wanted = size
        if self.length is not None:
            wanted = min(wanted, self.length - self.received)
        if self.phase is None:
            self._begin()
        asked = time.monotonic()
        data = self.inner.read(min(self.step, wanted))
        quick = time.monotonic() - asked < QUICK_READ_S
        if self.late:
            raise BodyTooSlow(self.late)
        if not self.timed:
            pass
        elif not quick:
            self.step, self.quick_reads = 1, 0
        else:
            self.quick_reads += 1
            if self.quick_reads >= 2:
                self.step = min(self.step * 2, BODY_PIECE_BYTES)
        self.received += len(data)
        self.last = self.clock()
        if not data or (self.length is not None and self.received >= self.length):
            self.finished = True
            self.settle()
        return data

    def readline(self, size: int | None = -1) -> bytes:
        # Nothing of the node reads a body by lines; a whole piece is a line's worth here.
        return self.read(size)

    def _begin(self) -> None:
        self.began = self.last = self.clock()
        if self.gate is not None and not self.gate_let_go:
            self.gate.release()
            self.gate_let_go = True
        if self.timed:
            with self.deadlines.lock:
                self.phase = RECEIVING
            self.deadlines.watch(self)
        else:
            self.phase = RECEIVING

    def settle(self) -> None:
        """The body is in, refused or left unread: no deadline watches it any more, and the request
        thread takes its turn of the application again."""
        with self.deadlines.lock:
            was = self.phase
            self.phase = SETTLED
        if was is not None:
            self.deadlines.unwatch(self)
        if self.gate_let_go:
            self.gate_let_go = False
            self.gate.acquire(self.address)

    def drain(self, status: int, headers: list, content: bytes) -> bool:
        """Before an answer given without reading the body: read the rest, up to ``DRAIN_BYTES`` within
        ``DRAIN_S``. True: all of it was read (the connection can serve another request); False:
        more was left (answer with ``Connection: close``), or it was late (the answer went cut short)."""
        if self.finished:
            return True
        if self.late:
            return False
        with self.deadlines.lock:
            self.phase = DRAINING
            self.drain_until = self.clock() + DRAIN_S
            self.withheld = (status, headers, content)
        self.deadlines.watch(self)
        drained = 0
        try:
            while drained <= DRAIN_BYTES:
                data = self.inner.read(BODY_PIECE_BYTES)
                if self.late:
                    return False
                if not data:
                    self.finished = True
                    return True
                drained += len(data)
            return False
        finally:
            self.settle()

    # --- answering

    def due(self) -> float:
        """When this body is late (called under ``deadlines.lock``)."""
        if self.phase == DRAINING:
            return self.drain_until
        if self.phase != RECEIVING:
            return math.inf
        idle_s, total_s = self.limits.idle_s, self.limits.total_s
        return min(self.last + idle_s if idle_s else math.inf, self.began + total_s if total_s else math.inf)

    def mark_late(self, now: float) -> bool:
        """Past a deadline: note why, unless answered already (called under ``deadlines.lock``)."""
        if self.answered or self.phase not in (RECEIVING, DRAINING):
            return False
        if self.phase == DRAINING:
            self.late = "the answer's unread body still coming"
            self.late_answer = self.withheld
            return True
        idle_s, total_s = self.limits.idle_s, self.limits.total_s
        if total_s and now >= self.began + total_s:
            self.late = f"not all of it within {total_s:g} s"
        else:
            self.late = f"no data for {idle_s:g} s"
        content = f"Request body not received in time: {self.late}\n".encode()
        self.late_answer = (408, [("Content-Type", "text/plain; charset=utf-8")], content)
        return True

    def answer_late(self) -> None:
        """The answer of a body past a deadline, from a thread of its own (it waits while hyper
        writes): 408 with the reason (as ``registry/wire/request_bodies.py`` words it), or the answer
        withheld while draining; cut short, so that the connection is closed after it."""
        status, headers, content = self.late_answer
        self.deadlines.tally.note(BODY_LATE if status == 408 else DRAIN_LATE, self.address)
        threading.Thread(
            target=answer_cut_short,
            args=(self.proto, status, headers, content),
            name="late answer",
            daemon=True,
        ).start()

    def claim(self) -> bool:
        """Whether the request thread may answer: not when the answer went late already."""
        with self.deadlines.lock:
            if self.late:
                return False
            self.answered = True
            return True


class Gate:
    """At most ``n`` threads at once run the application (granian's pool has more: those receiving
    bodies); the others wait, without the GIL, in turns by client address: a turn that ends goes to
    the longest-waiting request of the next address in rotation. So a client that sends many requests
    at once waits behind its own, and a request of any other address waits for at most one turn per
    address ahead of it. One thread serves the most heartbeats (no GIL handed between threads:
    registry/serving/granian_server.py), which is why the threads kept for bodies must not all run
    the application."""

    def __init__(self, n: int):
        self.lock = threading.Lock()
        self.free = max(1, n)
        # address -> its waiters' locks, oldest first; the dict's order is the rotation.
        self.waiting: dict[str, collections.deque] = {}

    def acquire(self, address: str = "") -> None:
        with self.lock:
            if self.free:
                self.free -= 1
                return
            turn = _thread.allocate_lock()
            turn.acquire()
            waiters = self.waiting.get(address)
            if waiters is None:
                self.waiting[address] = waiters = collections.deque()
            waiters.append(turn)
        # Released by release(): the turn is handed over, never free in between.
        turn.acquire()

    def release(self) -> None:
        with self.lock:
            if not self.waiting:
                self.free += 1
                return
            address = next(iter(self.waiting))
            waiters = self.waiting.pop(address)
            turn = waiters.popleft()
            if waiters:
                self.waiting[address] = waiters
        turn.release()


class TlsRefusals(logging.Handler):
    """Turns granian's log line for each TLS handshake its worker refused (a debug line of the
    ``_granian.workers`` logger, one per connection) into the node's refusal lines: counted in
    ``tally``, logged at most once an interval per kind with the count (``_TLS_REFUSALS``). Lines
    that are not about a handshake go on to ``forward`` (granian's own logger) as before."""

    LOGGER = "_granian.workers"

    def __init__(self, tally: Tally, forward: logging.Logger | None = None):
        super().__init__(logging.DEBUG)
        self.tally = tally
        self.forward = forward or logging.getLogger("_granian")
        self.closed = 0

    @classmethod
    def install(cls, tally: Tally) -> TlsRefusals:
        """Let granian's debug lines of refused handshakes through to a ``TlsRefusals`` instead of
        the console."""
        source = logging.getLogger(cls.LOGGER)
        handler = cls(tally)
        source.setLevel(logging.DEBUG)
        source.propagate = False
        source.addHandler(handler)
        return handler

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            return
        kind = tls_refusal_kind(message)
        if kind is None:
            if record.levelno >= logging.INFO:
                self.forward.handle(record)
            return
        if kind == TLS_CLOSED:
            self.closed += 1
            return
        self.tally.note(kind, _peer_address(message))


def tls_refusal_kind(message: str) -> str | None:
    """The refusal a granian log line tells of: a kind of ``_TLS_REFUSALS``, ``TLS_CLOSED`` for a
    connection closed during its handshake, None when it is not about a handshake."""
    if "HandshakeTimeout" not in message and "TlsAcceptError" not in message:
        return None
    if any(word in message for word in _TLS_CLOSED):
        return TLS_CLOSED
    for kind, (words, _) in _TLS_REFUSALS.items():
        if all(word in message for word in words):
            return kind
    return "tls_failed"


def _peer_address(message: str) -> str:
    """The client address in a granian line (``peer_addr: 10.0.0.1:51234``, ``[::1]:51234``)."""
    _, found, rest = message.partition("peer_addr: ")
    if not found:
        return ""
    address = rest.split(" ", 1)[0].rstrip(",}")
    host, _, _port = address.rpartition(":")
    return host.strip("[]")
