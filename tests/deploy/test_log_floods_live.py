"""Issue 44, item 6 on live nodes (gunicorn and granian): a client cannot fill the disk with log lines.

With ALLOWED_HOSTS set, Django logged a traceback for every request with a bad Host outside /eureka/
(18.5 MB in 15 s), gunicorn a line for every malformed request (7.9 MB in 15 s), Django a warning
for every failed CSRF check, and the node a line for every replication batch with a refused item.
Here a node gets hundreds or thousands of each; its log grows by a handful of lines,
at most one per kind each EUREKA_REFUSAL_LOG_INTERVAL_SECONDS (short here: 2 s), and those lines
together count every refused request. /metrics counts them too. The bench's attack is
bench/attacks.py "log-flood".
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.interop.conftest import LiveServer, running_server

pytestmark = pytest.mark.live

INTERVAL_S = 2
ENV = {"ALLOWED_HOSTS": "127.0.0.1,localhost", "EUREKA_REFUSAL_LOG_INTERVAL_SECONDS": str(INTERVAL_S)}
PATHS = [
    "/",
    "/admin/",
    "/admin/login/",
    "/healthz",
    "/readyz",
    "/metrics",
    "/static/x.css",
    "/nope",
    "/eureka/apps",
]
BAD_HOSTS = 3_000
CSRF_FAILURES = 300
MALFORMED = 600
CLIENTS = 4
# Requests gunicorn's parser refuses (its "Invalid request from ip=..." line), each on a connection
# of its own: gunicorn closes the connection after one.
MALFORMED_REQUESTS = [
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad\x01Name: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n",
    b"GET /" + b"a" * 9_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,
]
MORE = re.compile(r"\((\d+) more (?:such batches )?since the last such line\)")
BAD_BATCHES = 500


@pytest.fixture(scope="module", params=["gunicorn", "granian"])
def node(request, tmp_path_factory) -> Iterator[LiveServer]:
    with running_server(
        tmp_path_factory.mktemp(f"log_floods_{request.param}"), ENV, server=request.param
    ) as server:
        server.kind = request.param
        yield server


def request_bytes(
    method: str,
    path: str,
    host: str,
    body: bytes = b"",
    content_type: str = "application/x-www-form-urlencoded",
) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n"
    if body or method == "POST":
        head += f"Content-Length: {len(body)}\r\nContent-Type: {content_type}\r\n"
    return head.encode() + b"\r\n" + body


def read_answer(sock: socket.socket, buffered: bytes = b"") -> tuple[int, bytes]:
    """The status of one answer off a kept-alive connection, and what was read past it."""
    data = buffered
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the node closed the connection after {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    if length is None:  # chunked (Django's own error pages, without the fix)
        while b"0\r\n\r\n" not in rest:
            rest += sock.recv(65536)
        return int(head.split(b" ", 2)[1]), rest.partition(b"0\r\n\r\n")[2]
    while len(rest) < int(length.group(1)):
        rest += sock.recv(65536)
    return int(head.split(b" ", 2)[1]), rest[int(length.group(1)) :]


def send_on_kept_alive_connections(port: int, requests: list[bytes]) -> list[int]:
    """Each request's status, the requests shared among CLIENTS connections kept alive."""
    statuses: list[int] = []

    def client(share: list[bytes]) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            left = b""
            for raw in share:
                sock.sendall(raw)
                status, left = read_answer(sock, left)
                statuses.append(status)

    threads = [threading.Thread(target=client, args=(requests[i::CLIENTS],)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return statuses


def send_malformed(port: int, count: int) -> list[int]:
    """``count`` malformed requests, each on a new connection: the status of each answer (0: none)."""
    statuses = []
    for n in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(MALFORMED_REQUESTS[n % len(MALFORMED_REQUESTS)])
            try:
                answer = sock.recv(4096)
            except ConnectionResetError:
                answer = b""
            statuses.append(int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0)
    return statuses


def bad_host(port: int, n: int) -> bytes:
    return request_bytes("GET", PATHS[n % len(PATHS)], f"evil-{n % 7}.example:{port}")


def csrf_failure(port: int) -> bytes:
    return request_bytes("POST", "/admin/login/", f"127.0.0.1:{port}", b"username=a&password=b")


def bad_batch(port: int) -> bytes:
    """A replication batch whose one item is refused (with API accounts off, anyone may send one)."""
    body = b'{"replicationList": [{"action": "Cancel"}]}'
    return request_bytes(
        "POST", "/eureka/peerreplication/batch", f"127.0.0.1:{port}", body, "application/json"
    )


def refusals_counted(lines: list[str], marker: str) -> tuple[int, int]:
    """How many lines name ``marker``, and how many refusals they stand for together."""
    matching = [line for line in lines if marker in line]
    return len(matching), sum(1 + int(m.group(1)) if (m := MORE.search(line)) else 1 for line in matching)


def metric(base_url: str, reason: str) -> float:
    """eureka_bad_requests_total{reason=...}; 0 when /metrics has no such series."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    found = re.search(rf'^eureka_bad_requests_total{{reason="{reason}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_flood_of_refused_requests_grows_the_log_by_a_few_lines_that_count_them(node):
    port = node.port
    log = node.server_log_path
    started_at_bytes = log.stat().st_size
    host_before, malformed_before = metric(node.base_url, "host"), metric(node.base_url, "malformed")
    started = time.monotonic()

    statuses = send_on_kept_alive_connections(port, [bad_host(port, n) for n in range(BAD_HOSTS)])
    assert statuses == [400] * BAD_HOSTS
    statuses = send_on_kept_alive_connections(port, [csrf_failure(port)] * CSRF_FAILURES)
    assert statuses == [403] * CSRF_FAILURES
    statuses = send_malformed(port, MALFORMED)
    assert all(400 <= status < 500 for status in statuses), sorted(set(statuses))
    statuses = send_on_kept_alive_connections(port, [bad_batch(port)] * BAD_BATCHES)
    assert statuses == [200] * BAD_BATCHES
    flood_s = time.monotonic() - started

    # One more of each once the interval has passed: its line counts everything held back before it.
    time.sleep(INTERVAL_S + 0.5)
    last = send_on_kept_alive_connections(port, [bad_host(port, 0), csrf_failure(port), bad_batch(port)])
    assert sorted(last) == [200, 400, 403]
    assert 400 <= send_malformed(port, 1)[0] < 500
    time.sleep(0.5)  # the node's last lines written

    grown = log.read_bytes()[started_at_bytes:].decode(errors="replace")
    lines = grown.splitlines()
    # At most one line per kind and interval (and the closing one), whatever the number of requests.
    per_kind = int(flood_s / INTERVAL_S) + 3
    kinds = 4 if node.kind == "gunicorn" else 3
    assert len(lines) <= per_kind * kinds, f"{len(lines)} lines, {len(grown)} bytes:\n{grown[:2000]}"
    assert len(grown) < 400 * per_kind * kinds and "Traceback" not in grown
    # The lines count every refused request.
    host_lines, hosts = refusals_counted(lines, "django.security.DisallowedHost")
    assert 2 <= host_lines <= per_kind and hosts == BAD_HOSTS + 1
    assert "refused with 400: Invalid HTTP_HOST header: 'evil-" in grown
    csrf_lines, csrfs = refusals_counted(lines, "django.security.csrf")
    assert 2 <= csrf_lines <= per_kind and csrfs == CSRF_FAILURES + 1
    batch_lines, batches = refusals_counted(lines, "items refused (Cancel 1)")
    assert 2 <= batch_lines <= per_kind and batches == BAD_BATCHES + 1
    malformed_lines, malformed = refusals_counted(lines, "Invalid request from ip=")
    if node.kind == "gunicorn":
        assert 2 <= malformed_lines <= per_kind and malformed == MALFORMED + 1
    else:  # granian's parser answers them, and writes no line
        assert malformed_lines == 0

    assert metric(node.base_url, "host") == host_before + BAD_HOSTS + 1
    expected_malformed = MALFORMED + 1 if node.kind == "gunicorn" else 0
    assert metric(node.base_url, "malformed") == malformed_before + expected_malformed
