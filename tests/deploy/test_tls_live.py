"""Issue 46, points 1, 2 and 6 on a live gunicorn node serving HTTPS (EUREKA_TLS_*).

Clients register, renew and fetch over HTTPS, with a client certificate or without one (optional mode);
the plain port beside it serves HTTP; the certificate files are replaced under a client heartbeating
on a kept-alive connection, which sees no error while a new connection gets the new certificate; and
hostile or broken TLS is refused cleanly, each kind logged at most once an interval with a count: plain
HTTP on the HTTPS port (a 400, then the close), a handshake that never ends (closed at the header
timeout; 2,000 of them from one address do not stop another's heartbeats), a certificate of an unknown
CA, an expired one, none where one is required, an oversized chain. Certificates are made at test time
(tests/serving/tls_files.py). The unit tests of the context and its rotation are
tests/serving/test_tls.py.
"""

from __future__ import annotations

import datetime
import http.client
import re
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from tests.interop.conftest import LiveServer, RegistryAdmin, running_server
from tests.ports import free_port
from tests.serving.tls_files import NodeTls

pytestmark = pytest.mark.live

# Short deadlines and log intervals, so that the tests are short; the defaults are in registry/config/site.py.
LIMITS = {
    "EUREKA_HEADER_TIMEOUT_SECONDS": "2",
    "EUREKA_REFUSAL_LOG_INTERVAL_SECONDS": "2",
    # Loopback's 127.0.0.1 is a trusted proxy by default, whose connections are not capped per address.
    "EUREKA_TRUSTED_PROXIES": "::1",
}
JSON = {"Accept": "application/json"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> NodeTls:
    return NodeTls.make(tmp_path_factory.mktemp("tls_certs"))


@pytest.fixture(scope="module")
def node(certs, tmp_path_factory) -> Iterator[LiveServer]:
    """Client certificates optional, a plain port beside the HTTPS one, the console behind HTTPS."""
    plain_port = free_port("127.0.0.1")
    env = certs.env("optional") | LIMITS | {"EUREKA_TLS_PLAIN_PORT": str(plain_port), "EUREKA_HTTPS": "true"}
    with running_server(
        tmp_path_factory.mktemp("tls_node"), env, server="gunicorn", tls=certs.client_context()
    ) as server:
        server.plain_port = plain_port
        yield server


@pytest.fixture(scope="module")
def required_node(certs, tmp_path_factory) -> Iterator[LiveServer]:
    client = certs.client_cert_files("probe.example")
    with running_server(
        tmp_path_factory.mktemp("tls_required"),
        certs.env("required") | LIMITS,
        server="gunicorn",
        tls=certs.client_context(client),
    ) as server:
        yield server


def node_dir(tmp_path: Path) -> Path:
    (tmp_path / "node").mkdir()
    return tmp_path / "node"


def tls_connect(port: int, context: ssl.SSLContext, source: str = "127.0.0.1") -> ssl.SSLSocket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    return context.wrap_socket(sock, server_hostname="localhost")


def get_over(sock: socket.socket, path: str = "/eureka/apps") -> bytes:
    """One GET on a connection (kept alive), its whole answer (Content-Length)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(65536)
    return head


def refused(port: int, context: ssl.SSLContext) -> bool:
    """Whether a TLS request with ``context`` is refused: at its handshake, or (TLS 1.3, where the
    server checks the client's certificate after the client is done) at its first read."""
    try:
        with tls_connect(port, context) as sock:
            sock.sendall(b"GET /eureka/apps HTTP/1.1\r\nHost: localhost\r\n\r\n")
            return sock.recv(1024) == b""
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True


def log_lines(server: LiveServer, words: str, within: float = 5.0, at_least: int = 1) -> list[str]:
    """The server log's refusal lines that mention ``words``, waiting for ``at_least`` of them."""
    deadline = time.monotonic() + within
    while True:
        text = server.server_log_path.read_text(errors="replace")
        lines = [line for line in text.splitlines() if "TLS connection(s)" in line and words in line]
        if len(lines) >= at_least or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def serial_seen_by_a_new_connection(server: LiveServer, context: ssl.SSLContext) -> int:
    with tls_connect(server.port, context) as sock:
        return x509.load_der_x509_certificate(sock.getpeercert(binary_form=True)).serial_number


def serial_of(cert) -> int:
    return x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).serial_number


def still_serves(server: LiveServer) -> None:
    answer = httpx.get(f"{server.url}apps", verify=server.verify, headers=JSON, timeout=5)
    assert answer.status_code == 200


# Serving.


def test_a_client_registers_renews_and_fetches_over_https(node):
    assert node.url.startswith("https://")
    with RegistryAdmin(node, "eureka/") as client:
        client.register("TLS-ORDERS", "orders-1", 8080)
        renewed = client.http.put("apps/TLS-ORDERS/orders-1", params={"status": "UP"})
        assert renewed.status_code == 200, renewed.text
        assert client.instance("TLS-ORDERS", "orders-1")["status"] == "UP"
        assert client.cancel("TLS-ORDERS", "orders-1") == 200


def test_with_optional_client_certificates_a_client_with_one_and_a_client_without_are_served(node, certs):
    with_cert = certs.client_context(certs.client_cert_files("orders.example"))
    for context in (with_cert, certs.client_context()):
        assert httpx.get(f"{node.url}apps", verify=context, headers=JSON).status_code == 200


def test_the_plain_port_serves_http_beside_the_https_one(node):
    plain = f"http://127.0.0.1:{node.plain_port}"
    assert httpx.get(f"{plain}/eureka/apps", headers=JSON).status_code == 200
    # The application sees which one a request came by: the console, behind HTTPS (EUREKA_HTTPS), is
    # redirected from the plain port and served on the HTTPS one.
    assert httpx.get(f"{plain}/admin/login/").status_code == 301
    assert httpx.get(f"{node.base_url}/admin/login/", verify=node.verify).status_code == 200


# Rotation.


def test_a_rotated_certificate_reaches_new_connections_while_a_kept_alive_client_heartbeats(tmp_path):
    certs = NodeTls.make(tmp_path / "certs")
    context = certs.client_context()
    with running_server(node_dir(tmp_path), certs.env(), server="gunicorn", tls=context) as server:
        errors: list[BaseException] = []
        beats = []
        stop = threading.Event()

        def heartbeat() -> None:
            with httpx.Client(verify=context, base_url=server.url, timeout=5) as client:
                while not stop.is_set():
                    try:
                        beats.append(client.put("apps/TLS-ROTATION/one", params={"status": "UP"}).status_code)
                    except httpx.HTTPError as exc:
                        errors.append(exc)
                    time.sleep(0.05)

        with RegistryAdmin(server, "eureka/") as admin:
            admin.register("TLS-ROTATION", "one", 8080)
            kept = tls_connect(server.port, context)
            assert b" 200 " in get_over(kept)
            old_serial = x509.load_der_x509_certificate(kept.getpeercert(binary_form=True)).serial_number
            beating = threading.Thread(target=heartbeat)
            beating.start()
            try:
                time.sleep(0.5)
                new_cert = certs.rotate()
                deadline = time.monotonic() + 5
                while serial_seen_by_a_new_connection(server, context) != serial_of(new_cert):
                    assert time.monotonic() < deadline, "new connections get the old certificate after 5 s"
                    time.sleep(0.2)
                time.sleep(0.5)
            finally:
                stop.set()
                beating.join(10)
            # The connection made before the rotation carries on, with the old certificate.
            assert b" 200 " in get_over(kept)
            kept_cert = x509.load_der_x509_certificate(kept.getpeercert(binary_form=True))
            assert kept_cert.serial_number == old_serial
            kept.close()
        assert errors == []
        assert len(beats) > 10 and set(beats) == {200}


# Refusals (point 6).


def test_plain_http_on_the_https_port_gets_a_400_saying_so_and_the_close(node):
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        sock.sendall(b"GET /eureka/apps HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ") and b"HTTPS" in answer
    assert log_lines(node, "plain HTTP on the HTTPS port")
    still_serves(node)


def test_a_handshake_that_never_ends_is_closed_at_the_header_timeout(node):
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as sock:
        # The start of a ClientHello record, and nothing more.
        sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        started = time.monotonic()
        try:
            closed = sock.recv(1024) == b""
        except ConnectionResetError:
            closed = True
        waited = time.monotonic() - started
    assert closed and 1.5 <= waited <= 5.0, waited
    assert log_lines(node, "handshake not finished within the header timeout")


def test_a_client_certificate_of_an_unknown_ca_is_refused(node, certs, tmp_path):
    stranger = NodeTls.make(tmp_path / "stranger")
    assert refused(node.port, certs.client_context(stranger.client_cert_files("orders.example")))
    assert log_lines(node, "client certificate of an unknown CA")
    still_serves(node)


def test_an_expired_client_certificate_is_refused(node, certs):
    yesterday = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    expired = certs.client_cert_files(
        "orders.example", not_before=yesterday - datetime.timedelta(days=30), not_after=yesterday
    )
    assert refused(node.port, certs.client_context(expired))
    assert log_lines(node, "expired")
    still_serves(node)


def test_an_oversized_certificate_chain_is_refused(node, certs):
    names = [f"host-{number}.orders.example" for number in range(5000)]
    oversized = certs.client_cert_files(*names[:1])  # the file names; its content replaced below
    big = certs.ca.issue_cert(*names)
    Path(oversized[0]).write_bytes(b"".join(blob.bytes() for blob in big.cert_chain_pems))
    Path(oversized[1]).write_bytes(big.private_key_pem.bytes())
    assert refused(node.port, certs.client_context(oversized))
    assert log_lines(node, "oversized certificate chain")
    still_serves(node)


def test_without_a_certificate_where_one_is_required_the_handshake_is_refused_and_logged_once_an_interval(
    required_node, certs
):
    assert not refused(required_node.port, required_node.verify), "a client with a certificate is served"
    for _ in range(3):
        assert refused(required_node.port, certs.client_context())
    first = log_lines(required_node, "no client certificate")
    assert len(first) == 1 and "refused 1 TLS connection(s)" in first[0], first
    time.sleep(2.5)  # EUREKA_REFUSAL_LOG_INTERVAL_SECONDS
    assert refused(required_node.port, certs.client_context())
    lines = log_lines(required_node, "no client certificate", at_least=2)
    assert len(lines) == 2 and "refused 3 TLS connection(s)" in lines[1], lines


def test_stalled_handshakes_from_one_address_do_not_stop_heartbeats_from_another(certs, tmp_path):
    """2,000 connections from 127.0.0.2 that start a handshake and never finish it: each is admitted
    (up to the per-address cap, the others refused at once) before its handshake begins, and closed at
    the header timeout; heartbeats from 127.0.0.3, each on a new connection with its own handshake,
    are answered meanwhile."""
    env = certs.env() | LIMITS | {"EUREKA_HEADER_TIMEOUT_SECONDS": "4"}
    context = certs.client_context()
    with running_server(node_dir(tmp_path), env, server="gunicorn", tls=context) as server:
        with RegistryAdmin(server, "eureka/") as admin:
            admin.register("TLS-STALLED", "one", 8080)
            stalled: list[socket.socket] = []
            beats: list[tuple[int, float]] = []

            def beat() -> None:
                started = time.monotonic()
                connection = http.client.HTTPSConnection(
                    "127.0.0.1", server.port, context=context, timeout=10, source_address=("127.0.0.3", 0)
                )
                try:
                    connection.request("PUT", "/eureka/apps/TLS-STALLED/one?status=UP")
                    beats.append((connection.getresponse().status, time.monotonic() - started))
                finally:
                    connection.close()

            try:
                for number in range(2000):
                    sock = socket.socket()
                    sock.settimeout(10)
                    sock.bind(("127.0.0.2", 0))
                    sock.connect(("127.0.0.1", server.port))
                    try:
                        sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
                    except OSError:
                        pass  # refused at the cap and closed already
                    stalled.append(sock)
                    if number % 200 == 0:
                        beat()
                for _ in range(5):
                    beat()
                    time.sleep(0.2)
                # Held past the header timeout: closed by the node; heartbeats are still answered.
                held = stalled[0]
                held.settimeout(8)
                try:
                    assert held.recv(1024) == b""
                except ConnectionResetError:
                    pass
                beat()
            finally:
                for sock in stalled:
                    sock.close()
        assert [status for status, _ in beats] == [200] * len(beats) and len(beats) == 16
        assert max(seconds for _, seconds in beats) < 2.0, beats
        assert log_lines(server, "handshake not finished within the header timeout")
