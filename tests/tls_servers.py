"""HTTPS servers on loopback for the outbound TLS tests: certificates made at test time with ``trustme``,
and one fake server that answers as a Eureka peer, a remote region, a webhook receiver and a
health-check target, and records what it was sent and which client certificate came with it.

A handshake the client breaks off (it did not trust the certificate) is recorded in
``handshake_failures``; ``requests`` then stays empty: nothing got past the handshake.
"""

from __future__ import annotations

import datetime
import json
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import trustme

from registry.domain.outbound_tls import OutboundTls
from tests.ports import free_port


@dataclass(frozen=True)
class Seen:
    """One request the server read: its method, path and body, and the client certificate's subject
    common name (None when the client presented none)."""

    method: str
    path: str
    body: bytes
    client_cn: str | None


def write_pem(folder: Path, name: str, data: bytes) -> str:
    path = folder / name
    path.write_bytes(data)
    return str(path)


def node_files(folder: Path, ca: trustme.CA, common_name: str, prefix: str = "node") -> tuple[str, str]:
    """A client certificate for this node, issued by ``ca``: the paths of its chain and its key."""
    cert = ca.issue_cert(f"{common_name}.example", common_name=common_name)
    chain = b"".join(blob.bytes() for blob in cert.cert_chain_pems)
    return (
        write_pem(folder, f"{prefix}-cert.pem", chain),
        write_pem(folder, f"{prefix}-key.pem", cert.private_key_pem.bytes()),
    )


def registry_document() -> bytes:
    """A registry with nothing in it, as a peer's or a region's ``GET apps/`` gives it."""
    return json.dumps(
        {"applications": {"versions__delta": "1", "apps__hashcode": "", "application": []}}
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _record(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        subject = self.connection.getpeercert() or {}
        names = [value for rdn in subject.get("subject", ()) for key, value in rdn if key == "commonName"]
        server: FakeTlsServer = self.server.owner  # type: ignore[attr-defined]
        server.record(Seen(self.command, self.path, body, names[0] if names else None))
        return body

    def _send(self, code: int, body: bytes = b"") -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 (http.server's name)
        self._record()
        if "/apps" in self.path:
            self._send(200, registry_document())
        else:
            self._send(200, b'{"status":"UP"}')

    def do_POST(self):  # noqa: N802
        body = self._record()
        if self.path.endswith("peerreplication/batch/"):
            items = json.loads(body or b"{}").get("replicationList", [])
            self._send(200, json.dumps({"responseList": [{"statusCode": 200} for _ in items]}).encode())
        elif "/apps/" in self.path:
            self._send(204)
        else:
            self._send(204)

    def do_PUT(self):  # noqa: N802
        self._record()
        self._send(200)

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def finish_request(self, request, client_address) -> None:
        owner: FakeTlsServer = self.owner  # type: ignore[attr-defined]
        request.settimeout(10)
        try:
            connection = owner.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            owner.handshake_failed(exc)
            return
        try:
            self.RequestHandlerClass(connection, client_address, self)
        finally:
            connection.close()

    def handle_error(self, request, client_address) -> None:
        pass


class FakeTlsServer:
    """An HTTPS server on 127.0.0.1 presenting a certificate ``ca`` issued for ``names`` (valid until
    ``not_after``); with ``client_ca`` it asks for a client certificate of that CA (optional, as a
    peer of ours may)."""

    def __init__(
        self,
        ca: trustme.CA,
        names: tuple[str, ...] = ("localhost", "127.0.0.1"),
        client_ca: trustme.CA | None = None,
        not_after: datetime.datetime | None = None,
    ):
        self.port = free_port()
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(*names, not_after=not_after).configure_cert(self.context)
        if client_ca is not None:
            client_ca.configure_trust(self.context)
            self.context.verify_mode = ssl.CERT_OPTIONAL
        self.seen: list[Seen] = []
        self.handshake_failures: list[str] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", self.port), _Handler)
        self._server.owner = self  # type: ignore[attr-defined]
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def url(self, host: str = "localhost", path: str = "/eureka/") -> str:
        return f"https://{host}:{self.port}{path}"

    def record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def handshake_failed(self, exc: BaseException) -> None:
        with self._lock:
            self.handshake_failures.append(str(exc))

    @property
    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def outbound_tls(folder: Path, ca: trustme.CA) -> OutboundTls:
    """The node's outbound TLS: ``ca`` trusted, and a client certificate of its own from it."""
    cert_file, key_file = node_files(folder, ca, "node-a")
    return OutboundTls(write_pem(folder, "ca.pem", ca.cert_pem.bytes()), cert_file, key_file)
