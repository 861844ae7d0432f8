"""HTTP framing on a real gunicorn node, byte by byte: chunked bodies, limits, long lines, 100-continue.

Real clients frame requests in ways Django's test client never does: the Netflix eureka-client 1.x
(Jersey 1) sends every registration chunked, Java clients write the request head and the body in two
writes before they read, and some clients ask for ``100 Continue``. These tests speak raw HTTP/1.1 to
a live node (``deploy/gunicorn.conf.py``) so that what is checked is what goes over the wire.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.factories import instance_body
from tests.interop.conftest import LiveServer, running_server

pytestmark = pytest.mark.live

BODY_LIMIT = 2048
INSTANCE_ID = "10.0.0.1:orders:8080"


@pytest.fixture(scope="module")
def node_server(tmp_path_factory) -> Iterator[LiveServer]:
    # FRAMING_TEST_GUNICORN_ARGS lets one check these tests against another worker class.
    extra = {"EUREKA_MAX_BODY_BYTES": str(BODY_LIMIT)}
    if os.environ.get("FRAMING_TEST_GUNICORN_ARGS"):
        extra["GUNICORN_CMD_ARGS"] = os.environ["FRAMING_TEST_GUNICORN_ARGS"]
    with running_server(tmp_path_factory.mktemp("framing"), extra) as server:
        yield server


@pytest.fixture
def registry(node_server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=node_server.base_url, timeout=10) as client:
        yield client
        for app, instance_id in (("ORDERS", INSTANCE_ID), ("CHK", INSTANCE_ID)):
            client.delete(f"/eureka/apps/{app}/{instance_id}")


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status, self.headers, self.body = status, headers, body


class Connection:
    """One raw HTTP/1.1 connection to the node."""

    def __init__(self, server: LiveServer, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def read_response(self) -> Response:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"connection closed before a response head: {self.buffer[:200]!r}"
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            assert self._fill(), "connection closed inside a response body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Response(status, headers, body)

    def closed_by_server(self, within: float) -> bool:
        """True when the server closes the connection (EOF) within ``within`` seconds."""
        self.sock.settimeout(within)
        try:
            while self._fill():
                pass
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def connect(node_server) -> Iterator:
    opened: list[Connection] = []

    def open_connection(timeout: float = 10.0) -> Connection:
        connection = Connection(node_server, timeout)
        opened.append(connection)
        return connection

    yield open_connection
    for connection in opened:
        connection.close()


def head(method: str, path: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunked(*parts: bytes) -> bytes:
    """``parts`` as HTTP/1.1 chunks, ended by the last (empty) chunk."""
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def registration(app: str = "ORDERS") -> bytes:
    return json.dumps(instance_body(app=app)).encode()


def registered(registry: httpx.Client, app: str = "ORDERS") -> bool:
    response = registry.get(f"/eureka/apps/{app}/{INSTANCE_ID}", headers={"Accept": "application/json"})
    return response.status_code == 200


JSON_CHUNKED = ("Content-Type: application/json", "Transfer-Encoding: chunked")


# ------------------------------------------------------------------------------- chunked bodies


@pytest.mark.parametrize("prefix", ["/eureka/", "/eureka/v2/"])
def test_a_chunked_registration_is_answered_204_and_listed(node_server, registry, connect, prefix):
    body = registration()
    connection = connect()
    connection.send(head("POST", f"{prefix}apps/ORDERS", *JSON_CHUNKED))
    connection.send(chunked(body[:100], body[100:101], body[101:]))

    response = connection.read_response()

    assert (response.status, response.body) == (204, b"")
    assert registered(registry)
    # The connection stays usable: the next request on it is framed right.
    connection.send(head("PUT", f"{prefix}apps/ORDERS/{INSTANCE_ID}", *JSON_CHUNKED) + chunked(b"{}"))
    assert connection.read_response().status == 200


def test_chunked_bodies_on_the_other_writes(node_server, registry, connect):
    assert (
        registry.post(
            "/eureka/apps/ORDERS", content=registration(), headers={"Content-Type": "application/json"}
        ).status_code
        == 204
    )
    connection = connect()
    path = f"/eureka/apps/ORDERS/{INSTANCE_ID}"
    for request, status in [
        (head("PUT", f"{path}/status?value=OUT_OF_SERVICE", "Transfer-Encoding: chunked"), 200),
        (head("PUT", f"{path}/metadata?zone=a", "Transfer-Encoding: chunked"), 200),
        (head("DELETE", f"{path}/status?value=UP", "Transfer-Encoding: chunked"), 200),
    ]:
        connection.send(request + chunked())
        assert connection.read_response().status == status, request
    served = registry.get(path, headers={"Accept": "application/json"}).json()["instance"]
    assert served["metadata"]["zone"] == "a" and served["status"] == "UP"


def test_a_chunked_body_over_the_limit_is_413_before_the_body_ends(node_server, registry, connect):
    body = registration()
    body = body[:-1] + b" " * (3 * BODY_LIMIT) + b"}"
    connection = connect()
    connection.send(head("POST", "/eureka/apps/ORDERS", *JSON_CHUNKED))
    # Every chunk but the last: the node must answer without waiting for the end of the body.
    chunks = [body[i : i + 256] for i in range(0, 2 * BODY_LIMIT, 256)]
    connection.send(b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks))

    response = connection.read_response()

    assert response.status == 413
    assert response.body == f"Request body is larger than {BODY_LIMIT} bytes\n".encode()
    assert connection.closed_by_server(within=5.0), "the rest of the body is neither waited for nor read"
    assert not registered(registry)


@pytest.mark.parametrize(
    "framing",
    [
        pytest.param(lambda body: b"%x\r\n%s\r\nzz\r\n" % (len(body), body), id="bad-chunk-size"),
        pytest.param(lambda body: b"%x\r\n%sXX0\r\n\r\n" % (len(body) - 2, body), id="data-without-crlf"),
        pytest.param(lambda body: b"%x\r\n%s\r\n-5\r\n" % (len(body), body), id="negative-size"),
    ],
)
def test_malformed_chunking_is_400_and_registers_nothing(node_server, registry, connect, framing):
    connection = connect()
    connection.send(head("POST", "/eureka/apps/ORDERS", *JSON_CHUNKED) + framing(registration()))

    response = connection.read_response()

    assert response.status == 400, response.body
    assert b"chunk" in response.body.lower()
    assert not registered(registry)


def test_a_client_that_stops_inside_a_chunked_body_registers_nothing(node_server, registry, connect):
    body = registration()
    connection = connect()
    connection.send(head("POST", "/eureka/apps/ORDERS", *JSON_CHUNKED) + b"%x\r\n%s" % (len(body), body[:50]))
    connection.sock.shutdown(socket.SHUT_WR)

    assert connection.closed_by_server(within=5.0)
    assert not registered(registry)


def test_chunked_and_content_length_together_are_refused(node_server, registry, connect):
    body = registration()
    connection = connect()
    connection.send(
        head("POST", "/eureka/apps/ORDERS", *JSON_CHUNKED, f"Content-Length: {len(body)}") + chunked(body)
    )

    assert connection.read_response().status == 400
    assert not registered(registry)


# ---------------------------------------------------------------------------- refusals arrive


def test_an_over_long_request_line_is_answered_to_a_client_still_sending(node_server, registry, connect):
    # A Java client's order: the request head, then the body, and only then does it read.
    body = registration()
    connection = connect()
    connection.send(
        head(
            "POST",
            "/eureka/apps/" + "X" * 8192,
            "Content-Type: application/json",
            f"Content-Length: {len(body) * 30}",
        )
    )
    time.sleep(0.2)
    connection.send(body * 30)

    response = connection.read_response()

    assert response.status == 414
    # gunicorn's Python parser says "Request Line is too large", gunicorn-h1c "Request line length
    # (...) exceeds limit": either way the reason reaches the client.
    assert b"request line" in response.body.lower()


def test_over_long_headers_are_answered_to_a_client_still_sending(node_server, connect):
    body = registration()
    connection = connect()
    connection.send(
        head("POST", "/eureka/apps/ORDERS", "X-Padding: " + "p" * 9000, f"Content-Length: {len(body) * 30}")
    )
    time.sleep(0.2)
    connection.send(body * 30)

    assert connection.read_response().status in (400, 431)


def test_a_refused_long_body_is_not_read_to_its_end(node_server, registry, connect):
    connection = connect()
    connection.send(
        head("POST", "/eureka/apps/ORDERS", "Content-Type: application/json", "Content-Length: 50000000")
    )
    connection.send(b" " * 100_000)

    response = connection.read_response()

    assert response.status == 413
    # 50 MB were announced and 100 kB sent: the node closes instead of waiting for the rest.
    assert connection.closed_by_server(within=5.0)


# ---------------------------------------------------------------------------------- 100-continue


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_expect_100_continue_is_answered_before_the_body_is_sent(node_server, registry, connect, framing):
    body = registration()
    framing_header = "Transfer-Encoding: chunked" if framing == "chunked" else f"Content-Length: {len(body)}"
    connection = connect()
    connection.send(
        head(
            "POST",
            "/eureka/apps/ORDERS",
            "Content-Type: application/json",
            framing_header,
            "Expect: 100-continue",
        )
    )

    interim = connection.read_response()
    assert interim.status == 100

    connection.send(chunked(body) if framing == "chunked" else body)
    assert connection.read_response().status == 204
    assert registered(registry)
