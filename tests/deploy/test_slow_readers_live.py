"""Issue 44, item 3 on a live gunicorn node: clients that never read their answer are let go.

A registry of 10,000 instances (about 9 MB of JSON) is asked for uncompressed by connections whose
receive buffer is 1 KB and that never read, from a few loopback addresses, while registrations go on
(the test nodes refresh the cache every second, so the registry's answer keeps changing and each slow
reader holds the version it started on). The node closes each with a reset once it took nothing for
the write timeout (3 s here), its worker's memory stays bounded, and heartbeats from other addresses
on fresh connections are all answered meanwhile. With the connection cap filled by such readers, the
heartbeats still get through: the readers blocked longest give them their places. The bench of the
same attack (2,000 readers, at and below the cap) is ``bench/attacks.py`` slow-readers.
"""

from __future__ import annotations

import json
import select
import socket
import statistics
import threading
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from tests.factories import fleet_member, instance_body, register_item
from tests.interop.conftest import LiveServer, running_server

pytestmark = pytest.mark.live

REGISTERED = 10_000
BATCH = 500
WRITE_TIMEOUT_S = 3.0
READERS = 600
SOURCES = [f"127.0.0.{n}" for n in range(2, 6)]
REGISTRAR = "127.0.0.60"
BEATING = 20  # instances of app BEAT, each heartbeating from an address of its own

# Loopback's 127.0.0.1 is a trusted proxy by default; here every address is a client of its own.
SETTINGS = {"EUREKA_TRUSTED_PROXIES": "::1", "EUREKA_WRITE_TIMEOUT_SECONDS": str(WRITE_TIMEOUT_S)}
CAP = 300


def batch_item(n: int) -> dict:
    """Instance ``n`` of the registry, in 100 apps, as a replication batch registers it."""
    body = fleet_member(n, 100) | {"metadata": {"zone": f"z{n % 3}", "team": f"team-{n % 7}"}}
    body["lastDirtyTimestamp"] = "1000"
    return register_item(body)


def populate(node: LiveServer) -> None:
    """10,000 instances through the replication batch (fast), and the heartbeating ones."""
    with httpx.Client(base_url=node.base_url, timeout=60) as client:
        for first in range(0, REGISTERED, BATCH):
            items = [batch_item(n) for n in range(first, first + BATCH)]
            answer = client.post(
                "/eureka/peerreplication/batch",
                content=json.dumps({"replicationList": items}),
                headers={"Content-Type": "application/json"},
            )
            answer.raise_for_status()
        for index in range(BEATING):
            body = instance_body(app="BEAT", host=f"10.99.0.{index}", instance_id=f"beat-{index}")
            assert client.post("/eureka/apps/BEAT", json=body).status_code == 204
        size = len(client.get("/eureka/apps", headers={"Accept": "application/json"}).content)
    assert size > 5_000_000, f"the registry's answer is only {size} bytes"


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("slow_readers"), SETTINGS, server="gunicorn") as server:
        populate(server)
        yield server


@pytest.fixture(scope="module")
def capped_node(tmp_path_factory) -> Iterator[LiveServer]:
    # The default write timeout (20 s): the readers hold their places for the whole test.
    settings = {"EUREKA_TRUSTED_PROXIES": "::1", "EUREKA_MAX_CONNECTIONS": str(CAP)}
    with running_server(tmp_path_factory.mktemp("slow_readers_cap"), settings, server="gunicorn") as server:
        populate(server)
        yield server


def worker(node: LiveServer) -> psutil.Process:
    (child,) = psutil.Process(node.process.pid).children()
    return child


def rss_mb(process: psutil.Process) -> float:
    return process.memory_info().rss / 2**20


def open_reader(node: LiveServer, source: str) -> socket.socket:
    """A connection that asks for the whole registry, uncompressed, with a 1 KB receive buffer (set
    before connecting, so the node sees a tiny window from the start), and reads nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.bind((source, 0))
    sock.settimeout(5)
    sock.connect(("127.0.0.1", node.port))
    sock.sendall(b"GET /eureka/apps HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n")
    return sock


class Readers:
    """Non-reading connections, and when the node reset each (polled, never read)."""

    def __init__(self):
        self.opened: dict[int, tuple[socket.socket, float]] = {}
        self.reset_after: list[float] = []
        self.other_ends: list[str] = []
        self._poller = select.poll()

    def add(self, sock: socket.socket) -> None:
        self.opened[sock.fileno()] = (sock, time.monotonic())
        self._poller.register(sock, select.POLLERR | select.POLLHUP | select.POLLRDHUP)

    def poll(self, timeout_ms: int = 0) -> None:
        for fd, _ in self._poller.poll(timeout_ms):
            sock, opened = self.opened.pop(fd)
            self._poller.unregister(fd)
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error == 104:  # ECONNRESET
                self.reset_after.append(time.monotonic() - opened)
            else:
                self.other_ends.append(f"error {error}" if error else "closed")
            sock.close()

    def close(self) -> None:
        for sock, _ in self.opened.values():
            sock.close()


class Heartbeats:
    """``per_second`` renewals of the BEAT instances, each on a fresh connection from an address of
    its own (127.1.0.x), in a thread; answers by status, and the latencies of the 200s."""

    def __init__(self, node: LiveServer, per_second: int):
        self.node = node
        self.per_second = per_second
        self.statuses: list[str] = []
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Heartbeats:
        self._threads = [threading.Thread(target=self._beat, args=(n,), daemon=True) for n in range(4)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(20)

    def _beat(self, lane: int) -> None:
        interval = 4 / self.per_second
        number = lane
        next_at = time.monotonic() + lane * interval / 4
        while not self._stop.is_set():
            self._stop.wait(max(0.0, next_at - time.monotonic()))
            next_at += interval
            index = number % BEATING
            number += 4
            sent = time.monotonic()
            try:
                status = self._renew(index)
            except OSError as error:
                status = type(error).__name__
            self.statuses.append(status)
            if status == "200":
                self.latencies.append(time.monotonic() - sent)

    def _renew(self, index: int) -> str:
        with socket.create_connection(
            ("127.0.0.1", self.node.port), timeout=10, source_address=(f"127.1.0.{index + 1}", 0)
        ) as sock:
            sock.sendall(
                f"PUT /eureka/apps/BEAT/beat-{index} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                "Content-Length: 0\r\n\r\n".encode()
            )
            answer = b""
            while b"\r\n" not in answer:
                data = sock.recv(4096)
                if not data:
                    break
                answer += data
        return answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/1.1 ") else "no answer"


def registrations(node: LiveServer, stop: threading.Event, statuses: list) -> None:
    """New instances in the registry's apps, 20 a second: its answer keeps changing."""
    number = 0
    while not stop.is_set():
        app = f"APP-{number % 100}"
        body = instance_body(app=app, host=f"10.98.{number // 250 % 250}.{number % 250}")
        try:
            with socket.create_connection(
                ("127.0.0.1", node.port), timeout=10, source_address=(REGISTRAR, 0)
            ) as sock:
                payload = json.dumps(body).encode()
                sock.sendall(
                    f"POST /eureka/apps/{app} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
                    + payload
                )
                statuses.append(sock.recv(64).split(b" ")[1].decode())
        except OSError as error:
            statuses.append(type(error).__name__)
        number += 1
        stop.wait(0.05)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else max(values, default=0.0)


def test_readers_that_take_nothing_are_reset_at_the_write_timeout_and_hold_no_memory(node):
    process = worker(node)
    idle = rss_mb(process)
    readers = Readers()
    peak = idle
    stop = threading.Event()
    registered: list[str] = []
    registrar = threading.Thread(target=registrations, args=(node, stop, registered), daemon=True)
    registrar.start()
    try:
        with Heartbeats(node, per_second=20) as beats:
            # 600 readers over 24 s, 25 a second from four addresses, across many versions of the answer.
            started = time.monotonic()
            for number in range(READERS):
                while time.monotonic() < started + number / 25:
                    readers.poll(10)
                    peak = max(peak, rss_mb(process))
                readers.add(open_reader(node, SOURCES[number % len(SOURCES)]))
            deadline = time.monotonic() + WRITE_TIMEOUT_S + 4
            while readers.opened and time.monotonic() < deadline:
                readers.poll(50)
                peak = max(peak, rss_mb(process))
    finally:
        stop.set()
        registrar.join(15)
        readers.close()

    assert not readers.opened, (
        f"{len(readers.opened)} of {READERS} readers still open {WRITE_TIMEOUT_S + 4} s after"
    )
    assert readers.other_ends == [] and len(readers.reset_after) == READERS
    # Closed at the write timeout (plus a sweep), not before: they got the time a reader is given.
    assert min(readers.reset_after) >= WRITE_TIMEOUT_S - 0.5
    assert max(readers.reset_after) <= WRITE_TIMEOUT_S + 3
    assert set(beats.statuses) == {"200"}, {s: beats.statuses.count(s) for s in set(beats.statuses)}
    assert p99(beats.latencies) < 1.0, f"heartbeats p99 {p99(beats.latencies):.3f} s"
    assert set(registered) == {"204"}
    # Each version of the 9 MB answer that a reader started on was let go with the reader.
    assert peak - idle < 120, f"RSS {idle:.0f} MB idle, {peak:.0f} MB at its peak"


def test_at_the_connection_cap_the_slowest_readers_make_room_for_heartbeats(capped_node):
    readers = Readers()
    try:
        # The cap filled with readers, 100 from each of three addresses (the per-address cap is 256),
        # and kept full: each one the node closes is opened again (at most 100 a second).
        for number in range(CAP):
            readers.add(open_reader(capped_node, SOURCES[number % 3]))
        time.sleep(1.0)
        with Heartbeats(capped_node, per_second=20) as beats:
            until = time.monotonic() + 6
            while time.monotonic() < until:
                readers.poll(10)
                if len(readers.opened) < CAP:
                    readers.add(open_reader(capped_node, SOURCES[len(readers.opened) % 3]))
    finally:
        readers.close()

    assert len(beats.statuses) >= 100
    assert set(beats.statuses) == {"200"}, {s: beats.statuses.count(s) for s in set(beats.statuses)}
    assert p99(beats.latencies) < 1.0, f"heartbeats p99 {p99(beats.latencies):.3f} s"
    # Readers were reset to make room (the write timeout is 20 s: none reached it).
    assert readers.reset_after and max(readers.reset_after) < 15
