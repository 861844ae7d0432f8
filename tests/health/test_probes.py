"""The probes (registry/health/probes.py) against real servers on loopback, and the bounded pool."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from registry.health.checker import ProbeTarget
from registry.health.probes import ProbePool, probe, probe_http, probe_tcp, run_round
from tests.health.targets import ERROR, SLOW, HttpTarget, TcpTarget, free_port


@pytest.fixture
def target():
    server = HttpTarget(slow_seconds=1.0)
    yield server
    server.close()


def raw_server(answer: bytes) -> int:
    """A TCP server that answers every connection with ``answer`` and closes it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(5)

    def serve():
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        with connection:
            connection.recv(4096)
            connection.sendall(answer)
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_a_2xx_answer_is_healthy_and_the_path_and_query_are_sent(target):
    assert probe_http(f"http://127.0.0.1:{target.port}/actuator/health?deep=1", 1.0) == (True, "HTTP 200")
    assert target.answers[-1][1] == "/actuator/health?deep=1"


def test_a_500_answer_is_a_failure(target):
    target.mode = ERROR
    assert probe_http(target.url, 1.0) == (False, "HTTP 500")


def test_a_redirect_is_healthy_and_not_followed():
    port = raw_server(
        b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/elsewhere\r\nContent-Length: 0\r\n\r\n"
    )
    assert probe_http(f"http://127.0.0.1:{port}/health", 1.0) == (True, "HTTP 302")


def test_an_answer_that_is_not_http_is_a_failure():
    port = raw_server(b"SSH-2.0-OpenSSH_9.6\r\n")
    assert probe_http(f"http://127.0.0.1:{port}/", 1.0) == (False, "bad HTTP answer")


def test_a_slow_answer_fails_at_the_timeout_not_later(target):
    target.mode = SLOW
    started = time.monotonic()
    assert probe_http(target.url, 0.2) == (False, "timed out after 0.2s")
    assert time.monotonic() - started < 0.6


def test_a_closed_port_is_refused():
    port = free_port()
    assert probe_http(f"http://127.0.0.1:{port}/", 1.0) == (False, "connection refused")
    assert probe_tcp("127.0.0.1", port, 1.0) == (False, "connection refused")


def test_tcp_connects_to_a_listening_port():
    server = TcpTarget()
    try:
        assert probe_tcp("127.0.0.1", server.port, 1.0) == (True, "connected")
    finally:
        server.close()


def test_a_probe_never_raises_and_measures_its_latency(target):
    target.mode = SLOW
    broken = ProbeTarget("A", "i-1", 7, "http", "http://127.0.0.1:notaport/", "127.0.0.1", 0, 500)
    result = probe(broken)
    assert result.ok is False and result.claim == 7 and result.reason
    slow = ProbeTarget("A", "i-2", 8, "http", target.url, "127.0.0.1", target.port, 150)
    result = probe(slow)
    assert result.ok is False and 140 <= result.latency_ms < 600


def test_the_pool_never_runs_more_probes_at_once_than_its_bound(target):
    target.mode = SLOW
    target.slow_seconds = 0.2
    pool = ProbePool(4)
    targets = [
        ProbeTarget("A", f"i-{n}", n + 1, "http", target.url, "127.0.0.1", target.port, 1000)
        for n in range(12)
    ]
    started = time.monotonic()
    results = run_round(targets, pool, 5.0)
    took = time.monotonic() - started
    pool.shutdown()
    assert len(results) == 12 and all(result.ok for result in results)
    assert pool.max_active == 4
    assert took >= 0.55, "12 probes of 0.2 s, 4 at a time, take three rounds"
