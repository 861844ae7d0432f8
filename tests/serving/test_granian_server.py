"""registry/serving/granian_server.py and granian_limits.py without granian's server: the callback's
dispatch (answers in one piece, large ones in pieces and streams from threads of their own, bodies in
slots per address, the application's turns), the body deadlines on an injected clock and the answers
they send, the access log, and the listening socket's send timeout."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
import weakref

import pytest
from django.conf import settings

from registry.domain.refusals import RefusalLines
from registry.serving.connections import UNSENT_BYTES
from registry.serving.granian_limits import (
    BODY_LATE,
    BODY_PIECE_BYTES,
    BODY_REFUSED,
    DRAIN_BYTES,
    STREAM_ABOVE_BYTES,
    STREAM_PIECE_BYTES,
    Deadlines,
    Gate,
    Shares,
    Tally,
    TimedBody,
    WriterThreads,
)
from registry.serving.granian_server import (
    AccessLog,
    listening_socket,
    make_runner,
    parse_bind,
    refuse_a_taken_port,
)
from registry.wire.handlers import RoutingApplication
from registry.wire.request_bodies import BODY_RECEIVED, BodyDeadlines, BodyTooSlow
from tests.deploy.test_wsgi_routing import call
from tests.factories import instance_body


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeProto:
    """granian's WSGI protocol object: the answer handed over (the first one only, as granian takes it),
    a stream's chunks pulled as granian does."""

    def __init__(self):
        self.answered = threading.Event()
        self.status = None
        self.headers = None
        self.body = None
        self.chunks: list[bytes] = []
        self.thread = None
        self.closed = False
        self.answers = 0

    def response_bytes(self, status, headers, body):
        self.answers += 1
        if self.answers > 1:
            return
        self.status, self.headers, self.body = status, dict(headers), bytes(body)
        self.thread = threading.current_thread()
        self.answered.set()

    def response_iter(self, status, headers, chunks):
        self.answers += 1
        if self.answers > 1:
            return
        self.status, self.headers = status, dict(headers)
        self.thread = threading.current_thread()
        while True:
            try:
                self.chunks.append(chunks.__next__())
            except StopIteration:
                break
        chunks.close()
        self.closed = True
        self.body = b"".join(self.chunks)
        self.answered.set()


def scope(method="GET", path="/eureka/apps", body=b"", address="10.0.0.1", **extra):
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8761",
        "REMOTE_ADDR": address,
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        **extra,
    }
    if body:
        environ["CONTENT_LENGTH"] = str(len(body))
    return environ


class HeldBody(io.BytesIO):
    """A body whose client sends ``sent`` and then waits for ``release`` before sending the rest (or, when
    ``release`` is not set, nothing more: the read returns what came, as granian's does when the
    connection is closed)."""

    def __init__(self, sent: bytes, rest: bytes = b""):
        super().__init__(sent + rest)
        self.sent = len(sent)
        self.release = threading.Event()
        self.waiting = threading.Event()
        self.reads: list[int] = []

    def read(self, size=-1):
        self.reads.append(size)
        if not self.release.is_set():
            if self.tell() >= self.sent:
                self.waiting.set()
                self.release.wait(10)
            else:
                left = self.sent - self.tell()
                size = left if size is None or size < 0 else min(size, left)
        return super().read(size)


# ------------------------------------------------------------------------------------------ Shares


def test_one_address_holds_at_most_its_share_and_others_find_slots():
    shares = Shares(max_total=3, max_per_address=2)
    first, second = shares.admit("10.0.0.1"), shares.admit("10.0.0.1")
    assert first == second == "10.0.0.1"
    assert shares.admit("10.0.0.1") is None
    assert shares.admit("10.0.0.2") == "10.0.0.2"
    # All three slots taken: every address is refused now.
    assert shares.admit("10.0.0.3") is None
    assert shares.refused == 2
    shares.done(first)
    assert shares.admit("10.0.0.3") == "10.0.0.3"
    assert shares.by_address == {"10.0.0.1": 1, "10.0.0.2": 1, "10.0.0.3": 1}


def test_a_proxy_counts_in_the_total_only():
    shares = Shares(max_total=4, max_per_address=1, exempt=lambda address: address == "10.9.9.9")
    tickets = [shares.admit("10.9.9.9") for _ in range(4)]
    assert tickets == [""] * 4 and shares.admit("10.0.0.1") is None
    for ticket in tickets:
        shares.done(ticket)
    assert shares.held == 0 and shares.by_address == {}


# ------------------------------------------------------------------------------------------ Gate


def test_the_gate_lets_n_in_and_hands_turns_round_the_addresses():
    gate = Gate(1)
    gate.acquire("holder")
    order: list[str] = []
    threads = []

    def take(name: str, address: str) -> None:
        gate.acquire(address)
        order.append(name)
        gate.release()

    for name, address in (("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B")):
        threads.append(threading.Thread(target=take, args=(name, address)))
        threads[-1].start()
        deadline = time.monotonic() + 5
        # Each waits in turn before the next comes (the order they queue in).
        while sum(len(waiters) for waiters in gate.waiting.values()) < len(threads):
            assert time.monotonic() < deadline
            time.sleep(0.001)
    gate.release()
    for thread in threads:
        thread.join(5)
    # B's one request went before A's second: a turn goes to the next address, not the next request.
    assert order == ["a1", "b1", "a2", "a3"]
    assert gate.free == 1 and gate.waiting == {}


# ------------------------------------------------------------------------------------------ deadlines


DEADLINES = BodyDeadlines(20, 60)


def timed(body: bytes, limits=DEADLINES, clock=None, length=None):
    clock = clock or Clock()
    deadlines = Deadlines(clock=clock, background=False)
    proto = FakeProto()
    timed_body = TimedBody(
        io.BytesIO(body), proto, deadlines, limits, len(body) if length is None else length, "10.0.0.1", clock
    )
    return timed_body, deadlines, proto, clock


def answered_late(proto: FakeProto) -> None:
    assert proto.answered.wait(5), "no answer from the deadline's thread"


def test_a_body_with_no_byte_for_the_idle_deadline_is_answered_408_cut_short():
    body, deadlines, proto, clock = timed(b'{"instance":', length=100)
    assert body.read(100) == b"{"
    clock.now += 19.9
    assert deadlines.expire() == []
    clock.now += 0.2
    assert deadlines.expire() == [body]
    answered_late(proto)
    message = b"Request body not received in time: no data for 20 s\n"
    assert (proto.status, proto.body) == (408, message)
    # One byte more announced than sent: hyper closes the connection once the answer is written.
    assert proto.headers["Content-Length"] == str(len(message) + 1)
    assert proto.headers["Connection"] == "close" and proto.thread.name == "late answer"
    # What the request thread reads next is refused the same way, and its own answer is not sent.
    with pytest.raises(BodyTooSlow, match="no data for 20 s"):
        body.read(100)
    assert not body.claim()
    assert deadlines.late == 1 and deadlines.tally.totals


def test_a_body_that_keeps_coming_is_cut_at_the_total_deadline():
    body, deadlines, proto, clock = timed(b"x" * 100)
    for _ in range(6):
        assert body.read(100)
        clock.now += 9  # a byte now and then: never idle for 20 s
        assert deadlines.expire() == []
    assert body.read(100)
    clock.now += 7  # 61 s since the first byte
    assert deadlines.expire() == [body]
    answered_late(proto)
    assert proto.body == b"Request body not received in time: not all of it within 60 s\n"


def test_a_body_in_whole_is_watched_no_more_and_answered_by_its_request_thread():
    body, deadlines, proto, clock = timed(b"x" * 5000)
    received = b""
    while data := body.read(5000 - len(received)):
        received += data
    assert received == b"x" * 5000 and body.finished
    assert deadlines.watched == set()
    clock.now += 3600
    assert deadlines.expire() == [] and body.claim()


def test_a_body_sent_at_once_is_read_in_a_few_pieces_and_a_trickle_byte_by_byte():
    fast, _, _, _ = timed(b"x" * 1_000_000)
    pieces = 0
    while fast.read(1_000_000):
        pieces += 1
    assert pieces < 40

    sizes = []

    class Trickle(io.BytesIO):
        def read(self, size=-1):
            sizes.append(size)
            time.sleep(0.002)  # each byte has to be waited for
            return super().read(min(size, 1))

    slow, *_ = timed(b"")
    slow.inner, slow.length, slow.finished = Trickle(b"y" * 20), 20, False
    assert b"".join(iter(lambda: slow.read(20), b"")) == b"y" * 20
    assert set(sizes) == {1}, sizes


def test_deadlines_off_watch_nothing():
    body, deadlines, _, clock = timed(b"x" * 10, limits=BodyDeadlines(0, 0), length=100)
    assert body.read(100) == b"x" * 10
    assert deadlines.watched == set()


def test_an_unread_body_is_drained_before_the_answer_or_the_answer_goes_cut_short():
    body, deadlines, proto, clock = timed(b"y" * 10)
    assert body.drain(401, [("Content-Length", "0")], b"") is True
    assert deadlines.watched == set() and proto.status is None

    held = HeldBody(b"{")
    body, deadlines, proto, clock = timed(b"")
    body.inner, body.length, body.finished = held, 100, False
    draining = threading.Thread(target=lambda: body.drain(401, [("WWW-Authenticate", "Basic")], b"no\n"))
    draining.start()
    assert held.waiting.wait(5)
    clock.now += 2.1
    assert deadlines.expire() == [body]
    answered_late(proto)
    # The withheld answer, cut short: the client reads it, then the connection closes.
    assert (proto.status, proto.body, proto.headers["Content-Length"]) == (401, b"no\n", "4")
    held.release.set()  # the connection closed: granian's read returns
    draining.join(5)
    assert not body.claim()


def test_the_deadline_thread_answers_a_body_past_its_deadline_by_itself():
    deadlines = Deadlines()
    proto = FakeProto()
    held = HeldBody(b"{")
    body = TimedBody(held, proto, deadlines, BodyDeadlines(0.05, 0), 100, "10.0.0.1")
    refused = []

    def receive():
        try:
            while body.read(100):
                pass
        except BodyTooSlow as late:
            refused.append(str(late))

    reader = threading.Thread(target=receive)
    reader.start()
    assert proto.answered.wait(5)
    assert proto.status == 408
    held.release.set()  # the connection closed: granian's read returns
    reader.join(5)
    assert refused == ["no data for 0.05 s"]


def test_refusals_are_logged_as_every_refusal_is_at_most_once_an_interval_with_a_count():
    clock = Clock()
    lines = []

    class Log:
        def warning(self, message, *args, extra):
            lines.append((message % args, extra))

    tally = Tally(RefusalLines(60, clock=clock), log=Log())
    for _ in range(500):
        tally.note(BODY_REFUSED, "10.0.0.1")
        clock.now += 0.01
    tally.note(BODY_LATE, "10.0.0.3")
    assert len(lines) == 2 and "unread" in lines[0][0] and "408" in lines[1][0]
    clock.now += 60
    tally.note(BODY_REFUSED, "10.0.0.2")
    assert len(lines) == 3
    message, extra = lines[2]
    assert "latest from 10.0.0.2" in message and "(499 more since the last such line)" in message
    assert extra == {"event": "refusals", "kind": BODY_REFUSED, "refusals": 500}
    assert tally.totals == {BODY_REFUSED: 501, BODY_LATE: 1}


# ------------------------------------------------------------------------------------------ the runner


def test_a_list_answer_is_handed_over_in_one_piece_on_the_request_thread():
    def application(environ, start_response):
        start_response("200 OK", [("Content-Length", "5")])
        return [b"he", b"llo"]

    proto = FakeProto()
    make_runner(application, threads=4)(proto, scope())
    assert (proto.status, proto.body) == (200, b"hello")
    assert proto.thread is threading.current_thread()


def test_an_iterable_answer_is_joined_and_closed():
    closed = []

    class Answer:
        def __iter__(self):
            return iter([b"a", b"b"])

        def close(self):
            closed.append(True)

    def application(environ, start_response):
        start_response("404 Not Found", [])
        return Answer()

    proto = FakeProto()
    make_runner(application, threads=4)(proto, scope())
    assert (proto.status, proto.body, closed) == (404, b"ab", [True])


def test_a_streaming_answer_is_written_from_a_thread_of_its_own():
    release = threading.Event()

    class Stream:
        streaming = True

        def __iter__(self):
            yield b"retry: 2000\n\n"
            # A stream waits for changes: the request thread must not wait with it.
            release.wait(5)
            yield b"data: 1\n\n"

        def close(self):
            pass

    def application(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        return Stream()

    proto = FakeProto()
    make_runner(application, threads=4)(proto, scope(path="/api/v1/changes/stream"))
    # The callback has returned although the stream is still open.
    assert not proto.answered.is_set()
    release.set()
    assert proto.answered.wait(5)
    assert proto.body == b"retry: 2000\n\ndata: 1\n\n" and proto.closed
    assert proto.thread is not threading.current_thread() and proto.thread.name == "stream"


def large_application(size: int):
    content = bytes(range(256)) * (size // 256)

    def application(environ, start_response):
        start_response("200 OK", [("Content-Length", str(len(content)))])
        return [content]

    return application, content


def test_a_large_answer_is_written_in_pieces_from_a_thread_of_its_own():
    application, content = large_application(4 * 1024 * 1024)
    run = make_runner(application, threads=1)
    proto = FakeProto()
    run(proto, scope())
    assert proto.answered.wait(5)
    assert proto.body == content and proto.thread.name == "answer"
    # granian is handed a piece at a time, never a copy of the whole answer.
    assert max(map(len, proto.chunks)) == STREAM_PIECE_BYTES
    deadline = time.monotonic() + 5
    while run.writers.held:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # A small answer is handed over whole.
    application, content = large_application(STREAM_ABOVE_BYTES - 256)
    proto = FakeProto()
    make_runner(application, threads=1)(proto, scope())
    assert proto.chunks == [] and proto.body == content


class Answer:
    """An answer that a test can hold a weak reference to (bytes cannot be)."""


def test_an_idle_writer_keeps_nothing_of_its_last_answer_and_ends_after_its_idle_time():
    writers = WriterThreads(idle_s=0.3)
    written = threading.Event()
    content = Answer()
    kept = weakref.ref(content)
    writers.submit(lambda answer: written.set(), content)
    assert written.wait(5)
    del content
    deadline = time.monotonic() + 5
    while kept() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kept() is None, "an idle writer thread still holds its last answer"
    assert writers.running == 1
    while writers.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writers.running == 0 and writers.idle == 0
    # A later answer gets a thread again.
    written.clear()
    writers.submit(lambda: written.set())
    assert written.wait(5) and writers.started == 2


def test_a_writer_promised_a_job_as_its_idle_time_ends_takes_it():
    writers = WriterThreads(idle_s=0.05)
    done = []
    for round_ in range(50):
        finished = threading.Event()
        writers.submit(lambda n=round_, event=finished: (done.append(n), event.set()))
        assert finished.wait(5), f"answer {round_} was never written"
        time.sleep(0.04 + (round_ % 3) * 0.01)
    assert done == list(range(50))


def test_large_answers_past_an_addresses_share_of_writers_are_refused_at_once():
    application, _ = large_application(1024 * 1024)
    run = make_runner(application, threads=1, writers=Shares(10, 2))
    run.writers.admit("10.0.0.1")
    run.writers.admit("10.0.0.1")
    proto = FakeProto()
    run(proto, scope(address="10.0.0.1"))
    assert proto.status == 503 and proto.headers["Retry-After"] == "5"
    assert b"large answers" in proto.body
    other = FakeProto()
    run(other, scope(address="10.0.0.2"))
    assert other.answered.wait(5) and other.status == 200


def test_requests_past_an_addresses_share_of_turns_are_refused_before_the_application():
    called = []

    def application(environ, start_response):
        called.append(environ["REMOTE_ADDR"])
        start_response("200 OK", [])
        return [b""]

    run = make_runner(application, threads=1, turns=Shares(100, 1))
    run.turns.admit("10.0.0.1")  # one request of the address under way
    proto = FakeProto()
    run(proto, scope(address="10.0.0.1"))
    assert proto.status == 503 and called == []
    run(FakeProto(), scope(address="10.0.0.2"))
    assert called == ["10.0.0.2"]


def test_a_body_past_its_addresses_share_is_answered_503_unread_and_the_application_not_called():
    called = []

    def application(environ, start_response):
        called.append(environ["PATH_INFO"])
        start_response("204 No Content", [])
        return []

    run = make_runner(application, threads=2, bodies=Shares(4, 1))
    run.bodies.admit("10.0.0.1")  # a body of this address being received
    proto = FakeProto()
    environ = scope("POST", "/eureka/apps/A", b"{}", address="10.0.0.1")
    unread = environ["wsgi.input"]
    run(proto, environ)
    assert proto.status == 503 and proto.headers["Retry-After"] == "1"
    assert proto.headers["Connection"] == "close" and b"request bodies" in proto.body
    assert called == [] and unread.tell() == 0
    # Another address's body is received, and a request without a body is served all the same.
    proto = FakeProto()
    run(proto, scope("POST", "/eureka/apps/A", b"{}", address="10.0.0.2"))
    assert proto.status == 204
    proto = FakeProto()
    run(proto, scope("PUT", "/eureka/apps/A/a1", address="10.0.0.1"))
    assert proto.status == 204 and called == ["/eureka/apps/A", "/eureka/apps/A/a1"]


def test_a_slow_body_holds_its_request_thread_not_the_applications_turn():
    """Issue 44, item 4: one thread runs the application; a body that stops coming holds the thread
    that receives it, and every other request, registrations too, is served meanwhile."""
    served = []

    def application(environ, start_response):
        wanted, received = int(environ.get("CONTENT_LENGTH") or 0), b""
        while len(received) < wanted and (data := environ["wsgi.input"].read(wanted - len(received))):
            received += data
        served.append(environ["REMOTE_ADDR"])
        start_response("204 No Content", [])
        return []

    run = make_runner(application, threads=1)
    slow = HeldBody(b"{", b" " * 99)
    environ = scope("POST", "/eureka/apps/A", address="10.0.0.1", CONTENT_LENGTH="100")
    environ["wsgi.input"] = slow
    receiving = threading.Thread(target=run, args=(FakeProto(), environ))
    receiving.start()
    assert slow.waiting.wait(5)
    for _ in range(20):
        proto = FakeProto()
        run(proto, scope("POST", "/eureka/apps/B", b"{}", address="10.0.0.2"))
        assert proto.status == 204
    assert served == ["10.0.0.2"] * 20
    slow.release.set()
    receiving.join(5)
    assert served[-1] == "10.0.0.1" and run.bodies.held == 0


def test_the_application_releases_the_body_slot_once_the_body_is_in():
    seen = []

    def application(environ, start_response):
        seen.append(run.bodies.held)
        environ.pop(BODY_RECEIVED)()
        seen.append(run.bodies.held)
        start_response("204 No Content", [])
        return []

    run = make_runner(application, threads=4)
    proto = FakeProto()
    run(proto, scope("POST", "/eureka/apps/A", b"{}"))
    assert proto.status == 204 and seen == [1, 0]
    assert run.bodies.held == 0


def test_replication_batches_run_on_one_thread_of_two_and_heartbeats_on_the_other():
    """A batch's view runs long: with two application threads, a second batch waits for the first
    (without holding a turn of the application) and a heartbeat runs beside the first."""
    inside, entered, finish = [], threading.Semaphore(0), threading.Event()

    def application(environ, start_response):
        if environ["PATH_INFO"].endswith("/peerreplication/batch"):
            environ.pop(BODY_RECEIVED)()
            inside.append(environ["REMOTE_ADDR"])
            entered.release()
            finish.wait(10)
        start_response("200 OK", [])
        return [b"{}"]

    run = make_runner(application, threads=2)
    batches = [
        threading.Thread(
            target=run,
            args=(FakeProto(), scope("POST", "/eureka/peerreplication/batch", b"{}", address=f"10.0.0.{n}")),
        )
        for n in (1, 2)
    ]
    for batch in batches:
        batch.start()
    assert entered.acquire(timeout=5)
    assert not entered.acquire(timeout=0.5), "two batches ran at once"
    heartbeat = FakeProto()
    beating = threading.Thread(
        target=run, args=(heartbeat, scope("PUT", "/eureka/apps/A/i-1", address="10.0.0.3"))
    )
    beating.start()
    assert heartbeat.answered.wait(5) and heartbeat.status == 200
    finish.set()
    for batch in batches:
        batch.join(5)
    assert len(inside) == 2 and run.bodies.held == 0


def test_the_routing_application_says_when_the_body_is_in(node):
    released = []
    body = json.dumps(instance_body()).encode()
    status, _, _ = call(
        RoutingApplication(),
        "POST",
        "/eureka/apps/ORDERS",
        body,
        CONTENT_TYPE="application/json",
        **{BODY_RECEIVED: lambda: released.append(True)},
    )
    assert status == 204 and released == [True]
    # Refused while it is read (a chunked body over the limit: 413): released all the same.
    released.clear()
    status, _, _ = call(
        RoutingApplication(),
        "POST",
        "/eureka/apps/ORDERS",
        b"x" * (settings.EUREKA.connections.max_body_bytes + 1),
        chunked=True,
        CONTENT_TYPE="application/json",
        **{BODY_RECEIVED: lambda: released.append(True)},
    )
    assert status == 413 and released == [True]


def test_a_body_the_application_left_unread_is_read_before_the_answer_up_to_a_bound():
    reads = []

    class Body(io.BytesIO):
        def read(self, size=-1):
            reads.append((size, proto.status))
            return super().read(size)

    def application(environ, start_response):
        start_response("401 Unauthorized", [("Content-Length", "0")])
        return []

    proto = FakeProto()
    environ = scope("POST", "/eureka/apps/A", b"{}")
    environ["wsgi.input"] = Body(b"{}")
    make_runner(application, threads=2)(proto, environ)
    # The rest of the body was read first (so the client gets the 401, not a reset), then the answer
    # went, the connection kept.
    assert reads and all(status is None for _, status in reads)
    assert proto.status == 401 and "Connection" not in proto.headers

    # More than DRAIN_BYTES left: the answer closes the connection instead of reading on.
    proto = FakeProto()
    environ = scope("POST", "/eureka/apps/A", b"x" * (DRAIN_BYTES * 4))
    make_runner(application, threads=2)(proto, environ)
    assert proto.status == 401 and proto.headers["Connection"] == "close"
    assert environ["wsgi.input"].tell() <= DRAIN_BYTES + BODY_PIECE_BYTES


def test_the_access_log_writes_gunicorn_atoms(tmp_path):
    path = tmp_path / "access.log"
    log = AccessLog(str(path), "%(m)s\t%(U)s\t%(q)s\t%(s)s\t%(B)s\t%(x)s")

    def application(environ, start_response):
        start_response("200 OK", [])
        return [b"12345"]

    run = make_runner(application, threads=4, access_log=log)
    run(FakeProto(), scope("GET", "/eureka/apps/A", QUERY_STRING="regions=x"))
    assert path.read_text() == "GET\t/eureka/apps/A\tregions=x\t200\t5\t-\n"


# ------------------------------------------------------------------------------------------ the socket


def test_the_listening_socket_disconnects_clients_that_take_no_byte_for_the_send_timeout():
    from granian._granian import ListenerSpec

    holder = listening_socket(ListenerSpec("127.0.0.1", 0, 16), 2.5)
    with socket.socket(fileno=holder.get_fd()) as listening:
        try:
            assert listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 2500
            # And the kernel takes little of an answer beyond what is in flight, as under gunicorn.
            assert listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT) == UNSENT_BYTES
        finally:
            listening.detach()  # granian's descriptor stays granian's


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0.0.0.0:8761", ("0.0.0.0", 8761)), ("[::1]:9000", ("::1", 9000)), ("localhost:1", ("localhost", 1))],
)
def test_bind_is_host_and_port(value, expected):
    assert parse_bind(value) == expected


@pytest.mark.parametrize("value", ["8761", ":8761", "host:", "host:0", "host:70000", "host:http"])
def test_a_bad_bind_is_refused(value):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="HOST:PORT"):
        parse_bind(value)


@pytest.mark.parametrize("reuse_port", [False, True])
def test_a_port_another_process_listens_on_is_refused_even_with_reuse_port(reuse_port):
    with socket.socket() as taken:
        if reuse_port:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit, match=f"cannot listen on 127.0.0.1:{port}"):
            refuse_a_taken_port("127.0.0.1", port)
    # Free again: no complaint.
    refuse_a_taken_port("127.0.0.1", port)
