"""registry/runtime/granian_server.py without granian: the callback's dispatch (answers in one piece,
streams from their own thread, bodies under BodyReads), its access log, and the body cap's clock."""

from __future__ import annotations

import io
import json
import threading

import pytest
from django.conf import settings

from registry.runtime.granian_server import (
    DRAIN_BYTES,
    AccessLog,
    BodyReads,
    make_runner,
    parse_bind,
    refuse_a_taken_port,
)
from registry.wire.handlers import RoutingApplication
from registry.wire.request_bodies import BODY_RECEIVED
from tests.deploy.test_wsgi_routing import call
from tests.factories import instance_body


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeProto:
    """granian's WSGI protocol object: the answer handed over, a stream's chunks pulled as granian does."""

    def __init__(self):
        self.answered = threading.Event()
        self.status = None
        self.headers = None
        self.body = None
        self.thread = None
        self.closed = False

    def response_bytes(self, status, headers, body):
        self.status, self.headers, self.body = status, dict(headers), bytes(body)
        self.thread = threading.current_thread()
        self.answered.set()

    def response_iter(self, status, headers, chunks):
        self.status, self.headers = status, dict(headers)
        self.thread = threading.current_thread()
        parts = []
        while True:
            try:
                parts.append(chunks.__next__())
            except StopIteration:
                break
        chunks.close()
        self.closed = True
        self.body = b"".join(parts)
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


# ------------------------------------------------------------------------------------------ BodyReads


def test_bodies_received_at_once_never_count_against_the_cap():
    clock = Clock()
    bodies = BodyReads(max_total=1, max_per_address=1, slow_s=0.2, clock=clock)
    keys = []
    for _ in range(50):
        keys.append(bodies.admit("10.0.0.1"))
        bodies.done(keys[-1])
    assert None not in keys and len(set(keys)) == 50
    assert bodies.receiving == {} and bodies.refused == 0


def test_bodies_past_the_cap_wait_for_a_slot_freed_meanwhile():
    bodies = BodyReads(max_total=1, max_per_address=0, slow_s=10, wait_s=5)
    first = bodies.admit("10.0.0.1")
    threading.Timer(0.05, bodies.done, (first,)).start()
    assert bodies.admit("10.0.0.2") is not None


def test_bodies_past_the_cap_are_refused_when_no_slot_frees_in_time():
    bodies = BodyReads(max_total=2, max_per_address=0, slow_s=10, wait_s=0.01)
    assert bodies.admit("10.0.0.1") and bodies.admit("10.0.0.2")
    assert bodies.admit("10.0.0.3") is None
    assert bodies.refused == 1


def test_slow_bodies_hold_at_most_their_cap_per_address_and_in_all():
    clock = Clock()
    # wait_s: a refusal that waited would wait for real; a slow body held refuses at once.
    bodies = BodyReads(max_total=3, max_per_address=1, slow_s=0.2, wait_s=60, clock=clock)
    first = bodies.admit("10.0.0.1")
    clock.now += 0.3
    # The first is slow now: the same address gets no second one, others do.
    assert bodies.admit("10.0.0.1") is None
    second, third = bodies.admit("10.0.0.2"), bodies.admit("10.0.0.3")
    assert second and third
    # Three bodies held, one of them slow: a fourth is refused at once.
    assert bodies.admit("10.0.0.4") is None
    assert bodies.refused == 2
    bodies.done(first)
    assert bodies.admit("10.0.0.4") is not None


def test_a_body_not_yet_slow_does_not_refuse_the_next_from_its_address():
    clock = Clock()
    bodies = BodyReads(max_total=3, max_per_address=1, slow_s=0.2, clock=clock)
    assert bodies.admit("10.0.0.1") is not None
    clock.now += 0.1
    assert bodies.admit("10.0.0.1") is not None


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


def test_a_body_past_the_slow_cap_is_answered_503_unread_and_the_application_not_called():
    called = []

    def application(environ, start_response):
        called.append(environ["PATH_INFO"])
        start_response("204 No Content", [])
        return []

    run = make_runner(application, threads=2)
    clock = Clock()
    run.bodies.clock = clock
    # One body awaited for a second already (the one slot of two threads).
    run.bodies.admit("10.0.0.9")
    clock.now += 1.0
    proto = FakeProto()
    run(proto, scope("POST", "/eureka/apps/A", b"{}", address="10.0.0.1"))
    assert proto.status == 503 and proto.headers["Retry-After"] == "1"
    assert proto.headers["Connection"] == "close" and b"slow request bodies" in proto.body
    assert called == []
    # Without a body a request is served all the same.
    proto = FakeProto()
    run(proto, scope("PUT", "/eureka/apps/A/a1"))
    assert proto.status == 204 and called == ["/eureka/apps/A/a1"]


def test_the_application_releases_the_body_slot_once_the_body_is_in():
    seen = []

    def application(environ, start_response):
        run.bodies.clock = lambda: 10**9  # whatever is still held would be slow now
        seen.append(len(run.bodies.receiving))
        environ.pop(BODY_RECEIVED)()
        seen.append(len(run.bodies.receiving))
        start_response("204 No Content", [])
        return []

    run = make_runner(application, threads=4)
    proto = FakeProto()
    run(proto, scope("POST", "/eureka/apps/A", b"{}"))
    assert proto.status == 204 and seen == [1, 0]
    assert run.bodies.receiving == {}


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
        b"x" * (settings.EUREKA_MAX_BODY_BYTES + 1),
        chunked=True,
        CONTENT_TYPE="application/json",
        **{BODY_RECEIVED: lambda: released.append(True)},
    )
    assert status == 413 and released == [True]


def test_the_access_log_writes_gunicorn_atoms(tmp_path):
    path = tmp_path / "access.log"
    log = AccessLog(str(path), "%(m)s\t%(U)s\t%(q)s\t%(s)s\t%(B)s\t%(x)s")

    def application(environ, start_response):
        start_response("200 OK", [])
        return [b"12345"]

    run = make_runner(application, threads=4, access_log=log)
    run(FakeProto(), scope("GET", "/eureka/apps/A", QUERY_STRING="regions=x"))
    assert path.read_text() == "GET\t/eureka/apps/A\tregions=x\t200\t5\t-\n"


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
    import socket

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


def test_a_body_the_application_left_unread_is_read_after_the_answer_up_to_a_bound():
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
    # The answer went first, then the rest of the body was read (so the client gets the 401, not a
    # reset), never more than DRAIN_BYTES.
    assert reads == [(DRAIN_BYTES, 401)]
