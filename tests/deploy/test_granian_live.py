"""A node served by granian (registry/runtime/granian_server.py), live on loopback: what that server
does differently from gunicorn's worker. The client suites run against it too (``make test`` runs
tests/interop with ``EUREKA_TEST_SERVER=granian``)."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import httpx
import pytest

from tests.factories import instance_body
from tests.interop.conftest import running_server

JSON = {"Accept": "application/json", "Content-Type": "application/json"}
# tests/conftest.py turns warm restart off for every other test's nodes.
WARM_RESTART = {"EUREKA_WARM_RESTART": "true"}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("granian"), server="granian") as server:
        yield server


def register(base_url: str, app: str, host: str, client: httpx.Client | None = None) -> int:
    body = json.dumps(instance_body(app=app, host=host)).encode()
    http = client or httpx
    return http.post(f"{base_url}/eureka/apps/{app}", content=body, headers=JSON, timeout=10).status_code


def slow_body(port: int) -> socket.socket:
    """A registration whose headers are sent and whose body never is."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        b"POST /eureka/apps/SLOW HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n"
        b"Content-Length: 4000\r\n\r\n{"
    )
    return sock


def status_of(sock: socket.socket) -> int:
    sock.settimeout(10)
    head = sock.recv(4096)
    return int(head.split(b" ", 2)[1])


def test_the_node_is_served_by_granian_in_one_worker(node):
    import psutil

    master = psutil.Process(node.process.pid)
    assert "registry.runtime.granian_server" in " ".join(master.cmdline())
    assert len(master.children()) == 1


def test_heartbeats_and_reads_go_on_while_slow_bodies_hold_connections(node):
    base = node.base_url
    with httpx.Client(base_url=base, headers=JSON, timeout=10) as client:
        assert register(base, "FAST", "10.9.0.1", client) == 204
        held = [slow_body(node.port) for _ in range(12)]
        try:
            time.sleep(0.5)  # every held body is a slow one now
            slowest = 0.0
            for _ in range(50):
                started = time.monotonic()
                assert client.put("/eureka/apps/FAST/10.9.0.1:fast:8080").status_code == 200
                assert client.get("/eureka/apps/").status_code == 200
                slowest = max(slowest, time.monotonic() - started)
            assert slowest < 0.5, f"a heartbeat and a fetch took {slowest:.2f} s"
            # A registration now finds the body slots held: refused at once, unread, to be retried.
            started = time.monotonic()
            refused = client.post(
                "/eureka/apps/LATE", content=json.dumps(instance_body(app="LATE", host="10.9.0.2"))
            )
            assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
            assert time.monotonic() - started < 0.5
            # The slow bodies past the cap were refused the same way.
            statuses = []
            for sock in held:
                sock.settimeout(0.2)
                try:
                    statuses.append(int(sock.recv(4096).split(b" ", 2)[1]))
                except TimeoutError:
                    statuses.append(None)
            assert statuses.count(503) >= 12 - 3, statuses
        finally:
            for sock in held:
                sock.close()
        # The held ones gone (their reads end with the connection), registrations are read again.
        deadline = time.monotonic() + 10
        while register(base, "LATE", "10.9.0.2", client) != 204:
            assert time.monotonic() < deadline, "registrations stayed refused after the slow bodies left"
            time.sleep(0.1)
        assert client.get("/eureka/apps/LATE").status_code == 200


def test_a_change_stream_is_written_while_heartbeats_are_answered(node):
    base = node.base_url
    assert register(base, "STREAMED", "10.9.1.1") == 204
    events: list[dict] = []
    opened = threading.Event()

    def follow():
        with httpx.stream("GET", f"{base}/api/v1/changes/stream", timeout=30) as response:
            assert response.status_code == 200
            opened.set()
            for line in response.iter_lines():
                if line.startswith("data:"):
                    events.append(json.loads(line[5:]))
                    if events[-1].get("newStatus") == "OUT_OF_SERVICE":
                        return

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert opened.wait(10)
    with httpx.Client(base_url=base, timeout=5) as client:
        # Heartbeats are answered at once although the stream holds a request open.
        for _ in range(20):
            assert client.put("/eureka/apps/STREAMED/10.9.1.1:streamed:8080").status_code == 200
        assert (
            client.put("/eureka/apps/STREAMED/10.9.1.1:streamed:8080/status?value=OUT_OF_SERVICE").status_code
            == 200
        )
    reader.join(10)
    assert not reader.is_alive()
    assert any(e.get("instanceId") == "10.9.1.1:streamed:8080" for e in events)


def test_bad_input_gets_a_clear_4xx(node):
    base = node.base_url
    bad = httpx.post(f"{base}/eureka/apps/BAD", content=b"{not json", headers=JSON, timeout=5)
    assert bad.status_code == 400
    chunked = httpx.post(
        f"{base}/eureka/apps/CHUNKED",
        content=iter([json.dumps(instance_body(app="CHUNKED", host="10.9.2.1")).encode()]),
        headers=JSON,
        timeout=5,
    )
    assert chunked.status_code == 204
    assert httpx.get(f"{base}/eureka/apps/CHUNKED", headers=JSON, timeout=5).status_code == 200


def test_sigterm_ends_streams_and_idle_connections_and_the_last_snapshot_is_written(tmp_path):
    with running_server(tmp_path, WARM_RESTART, server="granian") as server:
        assert register(server.base_url, "KEPT", "10.9.3.1") == 204
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        idle.sendall(b"GET /eureka/apps HTTP/1.1\r\nHost: node\r\n\r\n")
        assert status_of(idle) == 200
        stream = httpx.stream("GET", f"{server.base_url}/api/v1/changes/stream", timeout=30)
        response = stream.__enter__()
        assert response.status_code == 200
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=30)
        took = time.monotonic() - started
        stream.__exit__(None, None, None)
        idle.close()
        assert took < 5, f"the stop took {took:.1f} s"
        assert server.process.returncode == 0, server.server_log_tail()
    # Started again on the same files, the node serves what it saved at the stop (its warm-restart
    # snapshot: nothing renewed it meanwhile, and nothing else holds it).
    with running_server(tmp_path, WARM_RESTART, server="granian") as server:
        kept = httpx.get(f"{server.base_url}/eureka/apps/KEPT", headers=JSON, timeout=5)
        assert kept.status_code == 200


def test_connections_are_refused_not_queued_until_the_node_can_answer(tmp_path):
    """granian's worker opens its listening socket once the node has started: before that a client is
    refused at once (and goes on to its next service URL), never left waiting in a backlog."""
    import subprocess
    import sys

    from tests.interop.conftest import PROJECT_ROOT, free_port, server_env

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "registry.runtime.granian_server", "--bind", f"127.0.0.1:{port}"],
        cwd=PROJECT_ROOT,
        env=server_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    refused, slowest_answer = 0, 0.0
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            except ConnectionRefusedError:
                refused += 1
                time.sleep(0.01)
                continue
            with sock:
                started = time.monotonic()
                sock.sendall(b"GET /eureka/apps HTTP/1.1\r\nHost: node\r\n\r\n")
                status = status_of(sock)
                slowest_answer = max(slowest_answer, time.monotonic() - started)
            if status == 200:
                break
        else:
            pytest.fail("the node never answered")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    assert refused > 0, "no connection was tried before the node listened"
    assert slowest_answer < 0.5, f"a connection waited {slowest_answer:.2f} s for its answer"
