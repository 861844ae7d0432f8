"""The worker's rule for what is left of a request body after the response.

Subject: registry/runtime/gunicorn_worker.py.

These use gunicorn's own body readers over in-memory input; the live behaviour (a refused body that is
not read to its end, answers that reach clients still sending) is in test_http_framing.py.
"""

from __future__ import annotations

import time
import types

import gevent
import pytest
from gunicorn.http.body import Body, ChunkedReader, LengthReader
from gunicorn.http.unreader import IterUnreader

from registry.runtime import gunicorn_worker
from registry.runtime.gunicorn_worker import DRAIN_BYTES, discard_unread_body


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
