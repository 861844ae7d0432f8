"""A node served by granian (registry/serving/granian_server.py), live on loopback: what that server
does differently from gunicorn's worker. The client suites run against it too (each test of
tests/interop runs on gunicorn and on granian)."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import httpx
import pytest

from tests.factories import instance_body, register_item
from tests.interop.conftest import running_server

pytestmark = pytest.mark.live

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
    assert "registry.serving.granian_server" in " ".join(master.cmdline())
    assert len(master.children()) == 1


def test_registrations_heartbeats_and_reads_go_on_while_slow_bodies_hold_connections(node):
    base = node.base_url
    with httpx.Client(base_url=base, headers=JSON, timeout=10) as client:
        assert register(base, "FAST", "10.9.0.1", client) == 204
        held = [slow_body(node.port) for _ in range(12)]
        try:
            time.sleep(0.5)  # every held body is a slow one now
            slowest = 0.0
            for index in range(50):
                started = time.monotonic()
                assert client.put("/eureka/apps/FAST/10.9.0.1:fast:8080").status_code == 200
                assert client.get("/eureka/apps/").status_code == 200
                # Each slow body holds a thread of its own, not the application's turn (issue 44, item
                # 4: one slow body refused every registration).
                assert register(base, "LATE", f"10.9.0.{index + 2}", client) == 204
                slowest = max(slowest, time.monotonic() - started)
            assert slowest < 0.5, f"a heartbeat, a fetch and a registration took {slowest:.2f} s"
            # No slow body was answered: their deadlines are 20 s away.
            for sock in held:
                sock.settimeout(0.05)
                with pytest.raises(TimeoutError):
                    sock.recv(4096)
        finally:
            for sock in held:
                sock.close()
        assert len(client.get("/eureka/apps/LATE").json()["application"]["instance"]) == 50


def replication_item(n: int) -> dict:
    host = f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"
    body = instance_body(app=f"BULK-{n % 20:02d}", host=host)["instance"]
    body["metadata"] = {"zone": f"z{n % 3}", "team": f"team-{n % 7}", "padding": "p" * 400}
    return register_item(body)


def test_clients_that_never_read_their_answer_are_disconnected_and_hold_no_copy_of_it(tmp_path):
    """Issue 44, item 3 on granian: clients that ask for the whole registry (several MB, no gzip) with a
    1 KB receive buffer and never read. granian copied each answer whole into Rust and kept it, and
    the connection, for as long as the client stayed. Now each is written in pieces of the one payload
    (a few held per client, at most a share of writers per address, the others refused), the kernel
    ends a connection whose client took no byte for EUREKA_WRITE_TIMEOUT_SECONDS (2 s here), and
    heartbeats and registrations from other addresses go on meanwhile. The kernel drops such a
    connection without a word to the client (TCP_USER_TIMEOUT): the client learns it at its next read,
    as a reset."""
    import psutil

    readers_from = [f"127.0.0.{n}" for n in range(2, 6)]
    env = {"EUREKA_WRITE_TIMEOUT_SECONDS": "2", "EUREKA_TRUSTED_PROXIES": "::1"}
    with running_server(tmp_path, env, server="granian") as server:
        base = server.base_url
        with httpx.Client(base_url=base, timeout=60) as client:
            for first in range(0, 4000, 500):
                batch = {"replicationList": [replication_item(n) for n in range(first, first + 500)]}
                answer = client.post("/eureka/peerreplication/batch", json=batch, headers=JSON)
                assert answer.status_code == 200, answer.text
            size = len(client.get("/eureka/apps", headers={"Accept": "application/json"}).content)
        assert size > 2_000_000
        beating = httpx.Client(
            base_url=base, timeout=10, transport=httpx.HTTPTransport(local_address="127.0.0.9")
        )
        registering = httpx.Client(
            base_url=base, timeout=10, transport=httpx.HTTPTransport(local_address="127.0.0.10")
        )
        assert register(base, "BEAT", "10.9.4.1", beating) == 204
        worker = psutil.Process(server.process.pid).children()[0]
        idle_rss = worker.memory_info().rss

        def held() -> int:
            """The node's connections from the readers' addresses."""
            return sum(
                1
                for connection in worker.net_connections("tcp")
                if connection.raddr and connection.raddr.ip in readers_from
            )

        readers = []
        for index in range(400):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            sock.bind((readers_from[index % 4], 0))
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(b"GET /eureka/apps HTTP/1.1\r\nHost: node\r\nAccept: application/json\r\n\r\n")
            readers.append(sock)
        opened = time.monotonic()
        latencies, registered, peak_rss = [], [], idle_rss
        while time.monotonic() - opened < 4:
            started = time.monotonic()
            renewed = beating.put("/eureka/apps/BEAT/10.9.4.1:beat:8080", headers={"Connection": "close"})
            latencies.append(time.monotonic() - started)
            assert renewed.status_code == 200
            # The registry's answer keeps changing: each reader holds the version it started on.
            registered.append(register(base, "MORE", f"10.9.5.{len(registered)}", registering))
            peak_rss = max(peak_rss, worker.memory_info().rss)
            time.sleep(0.02)
        beating.close()
        registering.close()
        # The node lets go of every reader within the write timeout (and the kernel's last probe).
        while held() and time.monotonic() - opened < 2 + 6:
            time.sleep(0.2)
        still_held = held()

        # What each reader gets at its next read: its 503 (past the writers' share) or its answer's
        # first pieces, then the connection's end.
        statuses, still_open = {}, 0
        for sock in readers:
            sock.settimeout(2)
            received = b""
            try:
                while data := sock.recv(65536):
                    received += data
            except ConnectionResetError:
                pass
            except TimeoutError:
                still_open += 1
            statuses[received[9:12]] = statuses.get(received[9:12], 0) + 1
            sock.close()
        assert still_held == 0, f"the node still holds {still_held} of 400 readers; answers {statuses}"
        assert still_open == 0, f"{still_open} of 400 connections still open; answers {statuses}"
        assert set(statuses) <= {b"200", b"503"} and statuses.get(b"200"), statuses
        assert max(latencies) < 1.0, f"a heartbeat took {max(latencies):.2f} s"
        assert set(registered) == {204}, registered
        # Not a copy of the answer per reader (400 x 2 MB): a few pieces each.
        assert peak_rss - idle_rss < 150 * 1024 * 1024, (idle_rss, peak_rss)


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

    from tests.interop.conftest import PROJECT_ROOT, server_env
    from tests.ports import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "registry.serving.granian_server", "--bind", f"127.0.0.1:{port}"],
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
