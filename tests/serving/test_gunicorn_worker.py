"""The worker's rule for what is left of a request body after the response.

Subject: registry/serving/gunicorn_worker.py.

These use gunicorn's own body readers over in-memory input; the live behaviour (a refused body that is
not read to its end, answers that reach clients still sending) is in test_http_framing.py.
"""

from __future__ import annotations

import time
import types

import gevent
import gevent.event
import pytest
from gunicorn.http.body import Body, ChunkedReader, LengthReader
from gunicorn.http.unreader import IterUnreader

from registry.domain.refusals import RefusalLines
from registry.serving import connections, gunicorn_worker
from registry.serving.connections import SHED, WRITE_TIMEOUT, ConnectionAdmission, SlowReaders
from registry.serving.gunicorn_worker import DRAIN_BYTES, discard_unread_body


def length_body(data: bytes, length: int | None = None) -> Body:
    return Body(LengthReader(IterUnreader([data]), len(data) if length is None else length))


def chunked_body(wire: bytes) -> Body:
    request = types.SimpleNamespace(limit_request_field_size=8190, max_buffer_headers=8190 * 32, trailers=[])
    return Body(ChunkedReader(request, IterUnreader([wire])))


@pytest.fixture
def no_timer(monkeypatch):
    """Fail the test if the slow (timed) path is taken."""

    def refuse(*args, **kwargs):
        raise AssertionError("a timer was armed for a body that was already read")

    monkeypatch.setattr(gunicorn_worker.gevent, "Timeout", refuse)


def test_a_body_read_to_its_end_costs_no_timer(no_timer):
    body = length_body(b"x" * 100)
    assert body.read() == b"x" * 100
    assert discard_unread_body(body) is True
    assert discard_unread_body(length_body(b"")) is True, "no body at all"


def test_a_chunked_body_read_to_its_end_costs_no_timer(no_timer):
    body = chunked_body(b"5\r\nhello\r\n0\r\n\r\n")
    assert body.read() == b"hello"
    assert discard_unread_body(body) is True


def test_a_short_unread_rest_is_discarded_and_the_connection_kept():
    body = length_body(b"y" * 5000)
    assert body.read(10) == b"y" * 10
    assert discard_unread_body(body) is True
    assert body.read() == b""


def test_an_unread_rest_longer_than_the_drain_closes_the_connection():
    body = length_body(b"z" * (DRAIN_BYTES + 20_000))
    assert discard_unread_body(body) is False


def test_broken_chunk_framing_in_the_rest_closes_the_connection():
    assert discard_unread_body(chunked_body(b"5\r\nhello\r\nzz\r\n")) is False


def test_a_body_that_failed_while_the_application_read_it_closes_the_connection():
    body = chunked_body(b"5\r\nhello\r\nzz\r\n")
    with pytest.raises(Exception, match="chunk"):
        body.read()
    assert body.failed
    assert discard_unread_body(body) is False


def test_a_rest_that_never_arrives_gives_up_after_the_drain_time(monkeypatch):
    class Stalled:
        def read(self, size):
            gevent.sleep(10)
            return b"never"

    monkeypatch.setattr(gunicorn_worker, "DRAIN_SECONDS", 0.05)
    started = time.monotonic()
    assert discard_unread_body(Body(Stalled())) is False
    assert time.monotonic() - started < 5


# ---------------------------------------------------------------------------- who may forward


def test_peer_trust_is_gunicorns_answer_kept_per_address():
    from gunicorn.http import message

    asked = []

    def decide(ip, allow_list, networks):
        asked.append(ip)
        return ip == "10.0.0.1"

    remembered = gunicorn_worker.remember_peer_trust(decide)
    allow, networks = ["10.0.0.1"], []
    assert remembered("10.0.0.1", allow, networks) is True
    assert remembered("10.0.0.2", allow, networks) is False
    assert remembered("10.0.0.1", allow, networks) is True
    assert remembered("10.0.0.2", allow, networks) is False
    assert asked == ["10.0.0.1", "10.0.0.2"]
    # Another allow list is another question.
    assert remembered("10.0.0.1", ["*"], networks) is True
    assert asked == ["10.0.0.1", "10.0.0.2", "10.0.0.1"]
    # The worker module installs it in place of gunicorn's, once.
    assert isinstance(message._ip_in_allow_list, gunicorn_worker.RememberedTrust)
    assert gunicorn_worker.remember_peer_trust(message._ip_in_allow_list) is message._ip_in_allow_list


def test_remembered_trust_agrees_with_gunicorn_and_stays_bounded(monkeypatch):
    from gunicorn.config import Config

    cfg = Config()
    cfg.set("forwarded_allow_ips", "127.0.0.1,10.1.0.0/16")
    original = gunicorn_worker.message._ip_in_allow_list.decide
    monkeypatch.setattr(gunicorn_worker, "REMEMBERED_PEERS", 8)
    remembered = gunicorn_worker.remember_peer_trust(original)
    addresses = ["127.0.0.1", "10.1.2.3", "10.2.0.1", "::1", "not-an-ip"] + [f"10.1.9.{i}" for i in range(20)]
    for _ in range(2):
        for ip in addresses:
            expected = original(ip, cfg.forwarded_allow_ips, cfg.forwarded_allow_networks())
            assert remembered(ip, cfg.forwarded_allow_ips, cfg.forwarded_allow_networks()) is expected
    assert 0 < len(remembered.answers) <= 8


def test_the_deploy_conf_parses_http_with_gunicorns_c_parser():
    # gunicorn-h1c is a dependency: with http_parser "auto" gunicorn uses it (~20 % more heartbeats).
    from pathlib import Path

    from gunicorn.config import Config
    from gunicorn.http.message import _check_fast_parser

    cfg = Config()
    conf = Path(__file__).resolve().parents[2] / "deploy" / "gunicorn.conf.py"
    source = {"__file__": str(conf)}
    exec(compile(conf.read_text(), str(conf), "exec"), source)
    for name, value in source.items():
        if name in cfg.settings:
            cfg.set(name, value)
    assert _check_fast_parser(cfg)


def test_one_errors_stream_per_worker_writes_where_gunicorns_would_even_after_the_log_reopens(tmp_path):
    import logging

    from gunicorn.config import Config
    from gunicorn.http import wsgi

    cfg = Config()
    cfg.set("errorlog", str(tmp_path / "error.log"))
    logger = logging.getLogger("gunicorn.error")
    first = logging.FileHandler(tmp_path / "error.log")
    logger.addHandler(first)
    try:
        errors = wsgi.base_environ(cfg)["wsgi.errors"]
        assert wsgi.base_environ(cfg)["wsgi.errors"] is errors, "built once, not per request"
        assert errors.streams == gunicorn_worker._GunicornErrors(cfg).streams
        errors.write("before\n")
        # A log reopen (SIGUSR1) swaps the handler's stream: the shared object follows it.
        first.stream.close()
        first.stream = open(tmp_path / "reopened.log", "a")  # noqa: SIM115 - the handler owns it
        errors.write("after\n")
    finally:
        logger.removeHandler(first)
        first.close()
    assert (tmp_path / "error.log").read_text() == "before\n"
    assert (tmp_path / "reopened.log").read_text() == "after\n"


def test_the_date_header_is_gunicorns_formatted_once_a_second():
    from gunicorn import util

    formatted = []

    def format_date(timestamp):
        formatted.append(timestamp)
        return gunicorn_worker._gunicorn_http_date(timestamp)

    now = [1_796_000_000.2]
    date = gunicorn_worker.HttpDatePerSecond(format_date, clock=lambda: now[0])
    assert date() == gunicorn_worker._gunicorn_http_date(1_796_000_000.2)
    now[0] = 1_796_000_000.9
    assert date() == gunicorn_worker._gunicorn_http_date(1_796_000_000.9)
    now[0] = 1_796_000_001.0
    assert date() == "Mon, 30 Nov 2026 00:53:21 GMT" == gunicorn_worker._gunicorn_http_date(now[0])
    assert formatted == [1_796_000_000, 1_796_000_001]
    assert date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert isinstance(util.http_date, gunicorn_worker.HttpDatePerSecond)


class PartialSocket:
    """A socket whose send takes at most ``take`` bytes at a time."""

    def __init__(self, take: int):
        self.take = take
        self.sent = bytearray()
        self.calls = []

    def send(self, data):
        self.calls.append("send")
        part = bytes(data[: self.take])
        self.sent += part
        return len(part)

    def sendall(self, data):
        self.calls.append("sendall")
        self.sent += bytes(data)

    def getsockopt(self, *args):
        self.calls.append("getsockopt")
        return 65536


def test_a_small_write_is_one_send_and_the_rest_of_a_partial_one_more_sends():
    from gunicorn import util

    whole = PartialSocket(take=1 << 20)
    util.write(whole, b"HTTP/1.1 200 OK\r\n\r\n")
    assert whole.calls == ["send"] and bytes(whole.sent) == b"HTTP/1.1 200 OK\r\n\r\n"

    partial = PartialSocket(take=5)
    util.write(partial, b"0123456789abcdef")
    assert partial.calls == ["send"] * 4 and bytes(partial.sent) == b"0123456789abcdef"

    large = PartialSocket(take=1 << 20)
    util.write(large, b"x" * (gunicorn_worker.SMALL_WRITE + 1))
    assert large.calls == ["send"] and len(large.sent) == gunicorn_worker.SMALL_WRITE + 1

    empty = PartialSocket(take=1 << 20)
    util.write(empty, b"")
    assert empty.calls == [], "an empty body costs no system call"

    chunked = PartialSocket(take=1 << 20)
    util.write(chunked, b"abc", chunked=True)
    util.write_chunk(chunked, "")  # the end of a chunked answer, as gunicorn's resp.close() writes it
    assert bytes(chunked.sent) == b"3\r\nabc\r\n0\r\n\r\n"


def test_the_worker_reads_its_keepalive_and_h2c_settings_once():
    from gunicorn.config import Config

    cfg = Config()
    cfg.set("keepalive", 75)
    worker = gunicorn_worker.RegistryWorker(0, 0, [], None, 30, cfg, log=None)
    assert worker.keepalive_s == 75 and worker.h2c_upgrades is False
    assert worker._try_h2c_upgrade(None, None, None, None, ("127.0.0.1", 1)) is False


def keepalive_worker(seconds: float):
    from gunicorn.config import Config

    worker = gunicorn_worker.RegistryWorker(0, 0, [], None, 30, Config(), log=None)
    worker.keepalive_s = seconds  # gunicorn's setting takes whole seconds; the wait reads this
    worker.alive = True
    return worker


def test_a_connection_keeps_one_keepalive_wait_started_again_before_each_request():
    worker = keepalive_worker(0.1)

    def connection():
        waits = []
        for _ in range(3):  # requests 70 ms apart: 210 ms in all, each within the 100 ms keep-alive
            wait = worker.timeout_ctx()
            waits.append(wait)
            with wait:
                gevent.sleep(0.07)
        started = time.monotonic()
        with worker.timeout_ctx():
            gevent.sleep(5)  # no next request: the keep-alive timeout ends the wait, quietly
        return waits, time.monotonic() - started

    greenlet = gevent.spawn(connection)
    greenlet.join(3)
    assert greenlet.successful(), greenlet.exception
    waits, idle = greenlet.value
    assert waits[0] is waits[1] is waits[2]
    assert 0.09 < idle < 1.0
    assert worker.waiting == {}


def test_a_stop_ends_a_reused_keepalive_wait_at_once():
    worker = keepalive_worker(30)
    served = []

    def connection():
        with worker.timeout_ctx():
            gevent.sleep(0.01)
        served.append("first request")
        with worker.timeout_ctx():
            gevent.sleep(5)
        served.append("wait ended")

    greenlet = gevent.spawn(connection)
    gevent.sleep(0.1)
    started = time.monotonic()
    worker._end_waits()
    greenlet.join(3)
    assert greenlet.successful(), greenlet.exception
    assert served == ["first request", "wait ended"] and time.monotonic() - started < 1.0


def test_a_request_that_comes_as_its_wait_is_ended_is_served():
    """The sweeper's end of a wait reaches the greenlet later, from the event loop: if the next request
    came in between, the connection is serving it, and nothing must be thrown into it."""
    worker = keepalive_worker(30)
    request_came = gevent.event.Event()
    served = []

    def connection():
        with worker.timeout_ctx():
            request_came.wait()
        gevent.sleep(0.05)  # serving the request
        served.append("request")

    greenlet = gevent.spawn(connection)
    gevent.sleep(0.01)
    (wait,) = worker.waiting.values()
    request_came.set()
    worker._end_wait(greenlet, wait)  # ended at the same moment, as seen from the sweeper
    greenlet.join(3)
    worker.alive = False
    assert greenlet.successful(), greenlet.exception
    assert served == ["request"]


def fair_worker():
    worker = keepalive_worker(30)
    worker.event_loop = gevent.get_hub().loop  # as ``run`` sets it
    return worker


def busy(seconds: float) -> None:
    """Serving a request: CPU, no switch to the event loop."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def test_a_connection_whose_next_request_is_always_there_lets_the_others_be_served_between_two():
    """A client that sends its next request as soon as it has the answer (or pipelines them) would be
    served again and again without the loop polling; the request of another connection, come in
    the meantime, waits one request of it, not all of them."""
    worker = fair_worker()
    other_request = gevent.event.Event()
    served = []

    def other():
        with worker.timeout_ctx():
            other_request.wait()
        served.append("other")

    def eager():
        other_request.set()  # the other connection's request comes as this one is being served
        for number in range(50):
            with worker.timeout_ctx():
                pass  # the next request is already read
            busy(0.001)
            served.append(number)

    waiting = gevent.spawn(other)
    gevent.sleep(0.01)
    gevent.spawn(eager).join(5)
    waiting.join(5)
    worker.alive = False
    assert len(served) == 51
    assert served.index("other") <= 2, served[:10]


def test_a_connection_that_waits_for_each_request_does_not_yield_again(monkeypatch):
    """The turn is given only when the loop has not polled since the connection's last request: a
    connection whose requests come apart costs no extra switch."""
    worker = fair_worker()
    sleep = gevent.sleep
    turns_given = []

    def counting_sleep(seconds=0, *args, **kwargs):
        if seconds == gunicorn_worker.FAIR_TURN_S:
            turns_given.append(seconds)
        return sleep(seconds, *args, **kwargs)

    monkeypatch.setattr(gevent, "sleep", counting_sleep)

    def paced():
        for _ in range(5):
            with worker.timeout_ctx():
                sleep(0.002)  # the request comes later: the loop polls meanwhile

    def eager():
        for _ in range(5):
            with worker.timeout_ctx():
                pass

    gevent.spawn(paced).join(5)
    assert turns_given == []
    gevent.spawn(eager).join(5)
    assert len(turns_given) == 4  # every request but the first
    worker.alive = False


def test_a_closed_connection_leaves_no_turn_behind(monkeypatch):
    worker = fair_worker()

    def serve(self, listener, client, addr):
        with self.timeout_ctx():
            pass

    monkeypatch.setattr(gunicorn_worker.GeventWorker, "handle", serve)
    greenlet = gevent.spawn(worker.handle, None, None, None)
    greenlet.join(5)
    assert greenlet.successful(), greenlet.exception
    worker.alive = False
    assert worker.turns == {}


def test_a_stop_that_begins_while_a_connection_gives_its_turn_closes_that_connection(monkeypatch):
    """The turn is a switch to the event loop: a stop can begin during it, and end the waits before
    this connection's wait is noted. The connection then must not wait for its next request (the stop
    would wait for it up to gunicorn's graceful timeout)."""
    worker = fair_worker()
    sleep = gevent.sleep

    def stop_during_the_turn(seconds=0, *args, **kwargs):
        if seconds == gunicorn_worker.FAIR_TURN_S:
            worker.alive = False  # gunicorn's handle_exit
            worker._end_waits()  # what the node's handle_exit starts, run before this greenlet resumes
        return sleep(seconds, *args, **kwargs)

    monkeypatch.setattr(gevent, "sleep", stop_during_the_turn)

    def eager():
        with worker.timeout_ctx():
            pass  # the first request was there: read without the loop polling
        try:
            with worker.timeout_ctx():
                sleep(5)  # the client sends nothing more
        except StopIteration:
            return "closed"
        return "ended"

    greenlet = gevent.spawn(eager)
    greenlet.join(3)
    assert greenlet.ready(), "the connection still waits for a request after the stop began"
    assert greenlet.value == "closed" and worker.waiting == {}


class RecordingSocket:
    def __init__(self):
        self.calls: list[tuple[str, int]] = []
        self.received = bytearray()

    def send(self, data) -> int:
        self.calls.append(("send", len(data)))
        self.received += data
        return len(data)


def test_a_large_body_is_sent_in_slices_with_a_turn_of_the_loop_between_them(monkeypatch):
    from registry.cache.pacing import PACER

    turns = []
    monkeypatch.setattr(PACER, "pause", lambda: None)  # set where the event loop serves
    monkeypatch.setattr(PACER, "slice_s", 0.0)  # every slice's time is used up: a turn each time
    monkeypatch.setattr(gunicorn_worker.gevent, "sleep", lambda seconds: turns.append(seconds))
    body = bytes(range(256)) * (gunicorn_worker.SEND_SLICE * 3 // 256 + 10)
    sock = RecordingSocket()
    gunicorn_worker.write_small_at_once(sock, body)
    assert bytes(sock.received) == body
    slice_ = gunicorn_worker.SEND_SLICE
    assert sock.calls == [("send", slice_)] * 3 + [("send", len(body) - 3 * slice_)]
    assert turns == [gunicorn_worker.FAIR_TURN_S] * 3, "a turn between two slices once the time is used up"

    # Within the pacer's slice of time, slices follow one another without a turn.
    monkeypatch.setattr(PACER, "slice_s", 60.0)
    turns.clear()
    sock = RecordingSocket()
    gunicorn_worker.write_small_at_once(sock, body)
    assert bytes(sock.received) == body and len(sock.calls) == 4 and turns == []

    # Without an event loop serving (another worker class), the slices follow one another.
    monkeypatch.setattr(PACER, "pause", None)
    turns.clear()
    sock = RecordingSocket()
    gunicorn_worker.write_small_at_once(sock, body)
    assert bytes(sock.received) == body and len(sock.calls) == 4 and turns == []

    # A small body is one send, and so is a middle-sized one: no turn.
    turns.clear()
    for size, calls in ((100, [("send", 100)]), (slice_, [("send", slice_)])):
        sock = RecordingSocket()
        gunicorn_worker.write_small_at_once(sock, b"x" * size)
        assert sock.calls == calls and bytes(sock.received) == b"x" * size
    assert turns == []


# ---- readers that do not read (registry/serving/connections.py SlowReaders) ----


@pytest.fixture
def watching(monkeypatch):
    """A worker whose writes are watched, with a write timeout of 2 s and its sweeper running."""
    worker = fair_worker()
    worker.header_timeout_s = 20
    worker.log = types.SimpleNamespace(warning=lambda *args, **kwargs: None)
    worker.refusal_lines = RefusalLines()
    worker.slow_readers = SlowReaders(timeout_s=2.0)
    monkeypatch.setattr(gunicorn_worker, "SLOW_READERS", worker.slow_readers)
    worker.sweeper = gevent.spawn(worker.sweep_waits)
    yield worker
    worker.alive = False
    worker.sweeper.kill()


def loopback_pair(receive_buffer: int = 1024):
    """A connected pair of gevent TCP sockets on loopback; the client's receive window is tiny."""
    from gevent import socket as gsocket

    listener = gsocket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = gsocket.socket()
    client.setsockopt(gsocket.SOL_SOCKET, gsocket.SO_RCVBUF, receive_buffer)
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return server, client


def serve(server, *answers: bytes) -> str:
    """What a connection's greenlet does: write the answers, then close (gunicorn's handle)."""
    try:
        for answer in answers:
            gunicorn_worker.write_small_at_once(server, answer)
    except gunicorn_worker.ReaderTooSlow:
        return "closed: reader too slow"
    finally:
        server.close()
    return "written"


def read_until_reset(client, seconds: float) -> str:
    client.settimeout(seconds)
    try:
        while client.recv(65536):
            pass
    except ConnectionResetError:
        return "reset"
    return "closed"


def test_a_reader_that_takes_nothing_is_closed_at_the_write_timeout_with_a_reset(watching):
    server, client = loopback_pair()
    started = time.monotonic()

    writer = gevent.spawn(serve, server, b"x" * (4 << 20))
    writer.join(10)

    assert writer.value == "closed: reader too slow"
    assert 2.0 <= time.monotonic() - started < 3.5
    assert watching.slow_readers.closed[WRITE_TIMEOUT] == 1 and watching.slow_readers.writes == {}
    # Reset, not closed gracefully: the kernel drops what the reader never took.
    assert read_until_reset(client, 5) == "reset"


def test_a_reader_that_reads_slowly_is_not_closed_though_the_writer_waits_longer_than_the_timeout(watching):
    """At 8 KB/s the socket has room for more only every few seconds (it wakes the writer once half of
    what it may hold beyond the window is gone: connections.UNSENT_BYTES), longer than the 2 s write
    timeout; the reader is still taking bytes, so it is not closed."""
    server, client = loopback_pair()
    body = bytes(range(256)) * 512  # 128 KB
    writer = gevent.spawn(serve, server, body)
    received = bytearray()
    until = time.monotonic() + 5
    while time.monotonic() < until:
        received += client.recv(1024)
        gevent.sleep(0.125)
    assert not writer.ready(), "the slow reader was closed"
    client.settimeout(5)
    while len(received) < len(body):
        received += client.recv(65536)

    assert writer.get(timeout=5) == "written" and bytes(received) == body
    assert watching.slow_readers.closed[WRITE_TIMEOUT] == 0


def test_a_client_that_leaves_its_answers_unread_is_closed_however_small_they_are(watching):
    """Pipelined requests whose answers are never read fill the socket: the answer that finds no room
    waits as a watched write, not for ever."""
    server, client = loopback_pair()

    writer = gevent.spawn(serve, server, *[b"y" * 8192] * 2000)
    writer.join(10)

    assert writer.value == "closed: reader too slow"
    assert watching.slow_readers.closed[WRITE_TIMEOUT] == 1


def test_at_the_cap_a_new_connection_takes_the_place_of_the_reader_blocked_longest(watching):
    watching.admission = ConnectionAdmission(0, 2, make_room=watching.shed_slowest_reader)
    pairs = [loopback_pair() for _ in range(2)]
    writers = []
    for number, (server, _) in enumerate(pairs):
        assert watching.admission.admit(f"10.0.0.{number}")[0]
        writers.append(gevent.spawn(serve, server, b"x" * (4 << 20)))
        gevent.sleep(0.2)

    assert watching.admission.admit("10.0.0.9") == (True, "")
    gevent.sleep(0.1)

    assert writers[0].value == "closed: reader too slow" and not writers[1].ready()
    assert watching.slow_readers.closed[SHED] == 1
    assert read_until_reset(pairs[0][1], 5) == "reset"
    gevent.killall(writers)


def test_closing_slow_readers_is_logged_once_a_minute_per_reason_with_the_counts():
    worker = keepalive_worker(30)
    now = [1000.0]
    worker.refusal_lines = RefusalLines(60.0, clock=lambda: now[0])
    lines = []
    worker.log = types.SimpleNamespace(warning=lambda message, *args, **kwargs: lines.append(message % args))

    for reason in [WRITE_TIMEOUT] * 3 + [SHED] * 500:
        worker._log_slow_reader(reason)

    assert len(lines) == 2 and all("closed 1 connection(s)" in line for line in lines)
    now[0] += 60.0
    worker._log_slow_reader(SHED)
    worker._log_slow_reader(WRITE_TIMEOUT)
    assert len(lines) == 4
    assert "closed 500 connection(s)" in lines[2] and SHED.replace("_", " ") in lines[2]
    assert "closed 3 connection(s)" in lines[3] and WRITE_TIMEOUT.replace("_", " ") in lines[3]


def test_a_stop_closes_the_readers_that_are_not_reading_and_lets_the_others_finish(watching):
    stuck_server, _ = loopback_pair()
    reading_server, reading_client = loopback_pair(receive_buffer=1 << 20)
    body = b"y" * (16 << 20)
    received = bytearray()

    def read_steadily() -> None:  # 64 KB every 10 ms: a few seconds for the whole
        reading_client.settimeout(5)
        while len(received) < len(body):
            received.extend(reading_client.recv(65536))
            gevent.sleep(0.01)

    stuck = gevent.spawn(serve, stuck_server, b"x" * (4 << 20))
    reading = gevent.spawn(serve, reading_server, body)
    reader = gevent.spawn(read_steadily)
    gevent.sleep(connections.STALLED_S + 0.2)

    watching.alive = False  # gunicorn's handle_exit, then ours
    watching._end_waits()
    stuck.join(2)

    assert stuck.value == "closed: reader too slow"
    assert not reading.ready(), "the answer being read is still being sent"
    reader.get(timeout=20)
    assert reading.get(timeout=5) == "written" and bytes(received) == body


# ---- TLS connections (registry/serving/tls.py) ----


def tls_pair(node_tls):
    """``loopback_pair`` with TLS over it: (server side, client side), the handshake done."""
    from gevent import ssl as gssl

    from registry.serving.tls import TlsFiles, server_context

    server, client = loopback_pair()
    files = TlsFiles(str(node_tls.cert_file), str(node_tls.key_file))
    server_tls = server_context(files, context_class=gssl.SSLContext).wrap_socket(
        server, server_side=True, do_handshake_on_connect=False
    )
    client_context = gssl.SSLContext(gssl.PROTOCOL_TLS_CLIENT)
    client_context.load_verify_locations(cafile=str(node_tls.ca_file))
    client_tls = client_context.wrap_socket(
        client, server_hostname="localhost", do_handshake_on_connect=False
    )
    handshakes = [gevent.spawn(server_tls.do_handshake), gevent.spawn(client_tls.do_handshake)]
    gevent.joinall(handshakes, timeout=10, raise_error=True)
    return server_tls, client_tls


def test_a_tls_reader_that_leaves_small_answers_unread_is_closed_at_the_write_timeout(watching, tmp_path):
    """gevent's TLS socket waits in a send whatever timeout the call gives: an answer small enough to
    go in one send must still be a watched write when the reader takes nothing."""
    from tests.serving.tls_files import NodeTls

    server, client = tls_pair(NodeTls.make(tmp_path))
    started = time.monotonic()

    writer = gevent.spawn(serve, server, *[b"x" * 100_000] * 100)
    writer.join(10)

    assert writer.value == "closed: reader too slow"
    assert time.monotonic() - started < 4.0
    assert watching.slow_readers.closed[WRITE_TIMEOUT] == 1
    client.close()


def test_a_tls_connection_is_marked_https_and_carries_its_verified_client_certificate():
    worker = gunicorn_worker.RegistryWorker.__new__(gunicorn_worker.RegistryWorker)
    worker.tls_connections = {}
    seen = []
    application = worker._with_tls_environ(lambda environ, start_response: seen.append(dict(environ)))

    def request(cert=None, tls=True):
        if tls:
            worker.tls_connections[gevent.getcurrent()] = cert
        try:
            application({"wsgi.url_scheme": "http"}, None)
        finally:
            worker.tls_connections.pop(gevent.getcurrent(), None)
        return seen[-1]

    assert gevent.spawn(request, b"DER").get() == {"wsgi.url_scheme": "https", "eureka.client_cert": b"DER"}
    assert gevent.spawn(request, None).get() == {"wsgi.url_scheme": "https"}, "no certificate sent"
    assert gevent.spawn(request, tls=False).get() == {"wsgi.url_scheme": "http"}, "the plain port"
