"""Issue 34, items 1 and 4 on a live gunicorn node: no client holds the node by holding connections.

A slow body is answered 408 and its connection closed within the body deadlines; a new connection that
sends no complete request is closed at the header timeout; one address cannot hold more than its cap
of connections (the next gets a 503 at once, other addresses are served); with API accounts on, a
request without credentials is refused before its body is read (a chunked body too); and the protocol
checks the Host header against ALLOWED_HOSTS. The deadlines are short here (1-3 s) so that the tests
are; the defaults are in registry/config/site.py. The load itself (10,500 connections) is
bench/slow_clients.py.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.factories import instance_body
from tests.interop.conftest import (  # noqa: F401 (api_accounts_database is a fixture)
    API_ACCOUNTS,
    AUTH_ENV,
    LiveServer,
    api_accounts_database,
    running_server,
)

pytestmark = pytest.mark.live

LIMITS = {
    "EUREKA_HEADER_TIMEOUT_SECONDS": "1",
    "EUREKA_BODY_IDLE_TIMEOUT_SECONDS": "1",
    "EUREKA_BODY_TIMEOUT_SECONDS": "3",
    "EUREKA_MAX_CONNECTIONS_PER_ADDRESS": "5",
    # Loopback's 127.0.0.1 is a trusted proxy by default, whose connections are not capped per address.
    "EUREKA_TRUSTED_PROXIES": "::1",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
}


SERVERS = ["gunicorn", "granian"]


@pytest.fixture(scope="module", params=SERVERS)
def node(request, tmp_path_factory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("slow_clients"), LIMITS, server=request.param) as server:
        server.server = request.param
        yield server


@pytest.fixture(scope="module")
def gunicorn_node(tmp_path_factory) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp("slow_clients"), LIMITS, server="gunicorn") as server:
        yield server


@pytest.fixture(scope="module", params=SERVERS)
def auth_node(request, tmp_path_factory, api_accounts_database) -> Iterator[LiveServer]:  # noqa: F811
    workdir = tmp_path_factory.mktemp("slow_clients_auth")
    shutil.copyfile(api_accounts_database, workdir / "db.sqlite3")
    with running_server(workdir, AUTH_ENV | LIMITS, accounts=API_ACCOUNTS, server=request.param) as server:
        server.server = request.param
        yield server


def connect(server: LiveServer, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10, source_address=(source, 0))
    return sock


def read_until_closed(sock: socket.socket, within: float) -> tuple[bytes, float]:
    """What the node sends until it closes the connection, and when it closed (seconds from now)."""
    started = time.monotonic()
    sock.settimeout(within)
    received = b""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            received += data
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the node kept the connection open for {within} s; it sent {received!r}")
    return received, time.monotonic() - started


def read_response(sock: socket.socket) -> bytes:
    """One whole response (headers and a Content-Length body) off a kept-alive connection."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the node closed the connection after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(
            line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def post_head(server: LiveServer, length: str = "Content-Length: 100") -> bytes:
    return (
        f"POST /eureka/apps/SLOW HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Content-Type: application/json\r\n{length}\r\n\r\n"
    ).encode()


def test_a_body_that_stops_coming_is_answered_408_and_closed_at_the_idle_deadline(node):
    sock = connect(node)
    sock.sendall(post_head(node) + b"{")

    answer, closed_after = read_until_closed(sock, within=10)

    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"no data for 1 s" in answer
    assert 0.8 <= closed_after <= 3.0
    assert httpx.get(f"{node.url}apps/SLOW", headers={"Accept": "application/json"}).status_code == 404


def test_a_body_sent_a_byte_at_a_time_is_cut_at_the_total_deadline(node):
    sock = connect(node)
    sock.sendall(post_head(node))
    started = time.monotonic()
    sock.settimeout(0.5)
    answer = b""
    # A byte every half second: never idle for 1 s, never done (100 bytes would take 50 s).
    while time.monotonic() - started < 10:
        try:
            sock.sendall(b" ")
        except OSError:
            break
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
        if not data:
            break
        answer += data

    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"not all of it within 3 s" in answer
    assert time.monotonic() - started <= 5.0


def register_from(node: LiveServer, source: str, index: int) -> bytes:
    """One registration on a new connection from ``source``: the status line's code."""
    body = json.dumps(instance_body(app="OTHERS", host=f"10.44.0.{index}")).encode()
    sock = connect(node, source)
    sock.sendall(
        f"POST /eureka/apps/OTHERS HTTP/1.1\r\nHost: 127.0.0.1:{node.port}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    answer, _ = read_until_closed(sock, within=10)
    return answer.split(b" ", 2)[1] if answer else b""


def test_slow_bodies_from_one_address_hold_no_registration_of_another_and_end_at_the_deadline(node):
    """Issue 44, item 4: on granian one body sent a byte at a time refused every registration (503)
    and was never answered. Four from one address, each a byte every 0.4 s (never idle for the 1 s
    idle deadline), are answered 408 at the 3 s total deadline and closed; meanwhile another
    address registers 60 instances, every one answered 204 at once."""
    slow = [connect(node, "127.0.0.2") for _ in range(4)]
    for sock in slow:
        sock.sendall(post_head(node) + b"{")
        sock.setblocking(False)
    started = time.monotonic()
    answers = {sock: b"" for sock in slow}
    closed: dict[socket.socket, float] = {}

    def trickle() -> None:
        for sock in slow:
            if sock in closed:
                continue
            try:
                sock.send(b" ")
            except BlockingIOError:
                pass
            except OSError:
                closed[sock] = time.monotonic() - started
                continue
            try:
                while data := sock.recv(65536):
                    answers[sock] += data
                closed[sock] = time.monotonic() - started
            except BlockingIOError:
                pass
            except OSError:
                closed[sock] = time.monotonic() - started

    codes, slowest, last_trickle = [], 0.0, 0.0
    for index in range(60):
        if time.monotonic() - last_trickle >= 0.4:
            trickle()
            last_trickle = time.monotonic()
        began = time.monotonic()
        codes.append(register_from(node, "127.0.0.3", index))
        slowest = max(slowest, time.monotonic() - began)
    while len(closed) < len(slow) and time.monotonic() - started < 10:
        time.sleep(max(0.0, 0.4 - (time.monotonic() - last_trickle)))
        trickle()
        last_trickle = time.monotonic()

    assert codes == [b"204"] * 60, codes
    assert slowest < 1.0, f"a registration took {slowest:.2f} s"
    for sock in slow:
        assert answers[sock].startswith(b"HTTP/1.1 408"), answers[sock]
        assert b"not all of it within 3 s" in answers[sock]
        assert sock in closed and closed[sock] <= 5.0, closed
        sock.close()
    assert httpx.get(f"{node.url}apps/OTHERS", headers={"Accept": "application/json"}).status_code == 200


def test_a_new_connection_that_sends_no_whole_request_is_closed_at_the_header_timeout(node):
    silent, partial = connect(node), connect(node)
    partial.sendall(b"GET /eureka/apps HTTP/1.1\r\nHost: 127.0.0.1\r\n")

    for sock in (silent, partial):
        answer, closed_after = read_until_closed(sock, within=10)
        assert closed_after <= 3.0
        assert answer == b""


def test_a_kept_alive_connection_waits_longer_than_a_new_one(gunicorn_node):
    # gunicorn only: granian (hyper) gives a kept-alive connection the header timeout too.
    node = gunicorn_node
    sock = connect(node)
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    sock.sendall(request)
    assert read_response(sock).startswith(b"HTTP/1.1 200")

    time.sleep(2.5)  # past the 1 s header timeout, well within the keep-alive time (75 s)
    sock.sendall(request)

    assert read_response(sock).startswith(b"HTTP/1.1 200")


def test_one_address_holds_no_more_connections_than_its_cap_and_others_are_served(gunicorn_node):
    node = gunicorn_node
    held = [connect(node, "127.0.0.2") for _ in range(5)]
    try:
        # Each is admitted and waiting for its request (one request makes sure the node saw them all).
        held[-1].sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(held[-1]).startswith(b"HTTP/1.1 200")

        refused = connect(node, "127.0.0.2")
        answer, closed_after = read_until_closed(refused, within=5)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"Retry-After: 5" in answer and b"Too many open connections from this address" in answer
        assert closed_after < 1.0

        other = connect(node, "127.0.0.3")
        other.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        served, _ = read_until_closed(other, within=5)
        assert served.startswith(b"HTTP/1.1 200"), served
    finally:
        for sock in held:
            sock.close()

    # Closed connections give their places back.
    deadline = time.monotonic() + 5
    while True:
        again = connect(node, "127.0.0.2")
        again.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer, _ = read_until_closed(again, within=5)
        if answer.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert answer.startswith(b"HTTP/1.1 200"), answer


def test_the_protocol_refuses_a_host_not_in_allowed_hosts(node):
    apps = f"{node.base_url}/eureka/apps"

    refused = httpx.get(apps, headers={"Host": "evil.example", "Accept": "application/json"})
    assert refused.status_code == 400
    assert "ALLOWED_HOSTS" in refused.text and "applications" not in refused.text
    assert httpx.get(apps, headers={"Host": f"localhost:{node.port}"}).status_code == 200
    assert httpx.get(apps).status_code == 200


def test_with_api_accounts_a_chunked_body_without_credentials_is_refused_unread(auth_node):
    sock = connect(auth_node)
    # A chunked body that starts and then stops: the node answers without waiting for the rest.
    sock.sendall(post_head(auth_node, "Transfer-Encoding: chunked") + b"64\r\n{")
    sock.settimeout(5)
    started = time.monotonic()

    answer = sock.recv(65536)

    assert answer.startswith(b"HTTP/1.1 401"), answer
    assert b'www-authenticate: basic realm="eureka"' in answer.lower()
    if auth_node.server == "gunicorn":
        assert time.monotonic() - started < 0.9  # before the 1 s body deadline could have answered
    else:
        # granian reads what the client is still sending first (at most 2 s), then answers and closes:
        # it cannot close a connection after an answer otherwise (registry/serving/granian_limits.py).
        assert time.monotonic() - started < 3.0
    # The unread body is not read to find the next request: the connection is closed.
    _, closed_after = read_until_closed(sock, within=10)
    assert closed_after <= 3.0


def test_with_api_accounts_a_client_with_credentials_still_registers_with_a_chunked_body(auth_node):
    client = API_ACCOUNTS["client"]
    body = json.dumps(instance_body(app="SLOW", instance_id="slow-1")).encode()

    def chunks():
        yield body[:50]
        yield body[50:]

    response = httpx.post(
        f"{auth_node.url}apps/SLOW",
        content=chunks(),
        headers={"Content-Type": "application/json"},
        auth=client.auth,
        timeout=30,
    )

    assert response.status_code == 204, response.text
