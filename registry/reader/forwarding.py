"""Requests a reader does not serve itself, sent to the node as they came; its answer sent back as is.

Writes (register, renew, cancel, status, metadata, replication batches), every protocol read the
reader does not serve (``apps/{app}/{id}``, ``instances/{id}``, ``status``...), a cache miss and a
stale payload all take this path. Forwarding rather than refusing: a client pointed at a reader by
mistake (or an nginx rule too broad) keeps working, only a hop slower, and the node applies its own
checks (API accounts, body limits, Eureka's rules) to what it receives.

The request keeps its method (HEAD is asked as GET: the server drops the body), its path and query as
the client sent them (a path with a ``.`` or ``..`` segment is refused with 400 instead: it could reach
the node's other endpoints, ``/metrics`` or ``/admin/``, see ``leaves_the_protocol``), its body, and the
headers the protocol reads; the answer keeps its status, body (never decompressed or re-encoded),
``Content-Type``, ``Content-Encoding`` and the other end-to-end headers, plus ``Via``. A small pooled
httpx client per worker process; when the node does not answer the client gets a 503 saying so, which
Eureka clients take as "try the next service URL".
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Iterable
from urllib.parse import quote, unquote

import httpx
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse

from registry.access.certificates import ENVIRON_KEY
from registry.access.clients import is_trusted_proxy
from registry.domain.redact import scrub_text
from registry.wire.http import text
from registry.wire.outbound import outbound_client

# WSGI name -> header name, for the headers the protocol (and the node's API accounts) read.
FORWARDED_HEADERS = {
    "HTTP_ACCEPT": "Accept",
    "HTTP_ACCEPT_ENCODING": "Accept-Encoding",
    "HTTP_X_EUREKA_ACCEPT": "X-Eureka-Accept",
    "HTTP_AUTHORIZATION": "Authorization",
    "CONTENT_TYPE": "Content-Type",
    "HTTP_CONTENT_ENCODING": "Content-Encoding",
    "HTTP_X_NETFLIX_DISCOVERY_REPLICATION": "x-netflix-discovery-replication",
    "HTTP_USER_AGENT": "User-Agent",
}
IDENTITY_PREFIX = "HTTP_DISCOVERYIDENTITY_"
# Headers httpx adds by itself; sent only when the client sent them (no Accept-Encoding from the
# client must not bring back a gzip body).
CLIENT_DEFAULTS = ("Accept", "Accept-Encoding", "User-Agent")
# Hop-by-hop headers and those the reader's own server sets.
NOT_PASSED_BACK = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "date",
        "server",
    }
)
VIA = "1.1 eureka-reader"

logger = logging.getLogger(__name__)


def request_headers(meta: dict) -> dict[str, str]:
    headers = {name: meta[key] for key, name in FORWARDED_HEADERS.items() if meta.get(key)}
    for key, value in meta.items():
        if key.startswith(IDENTITY_PREFIX):
            suffix = key[len(IDENTITY_PREFIX) :].replace("_", "-").title()
            headers[f"DiscoveryIdentity-{suffix}"] = value
    client = meta.get("REMOTE_ADDR")
    if client:
        earlier = meta.get("HTTP_X_FORWARDED_FOR")
        headers["X-Forwarded-For"] = f"{earlier}, {client}" if earlier else client
    certificate = forwarded_certificate(meta)
    if certificate is not None:
        headers[certificate[0]] = certificate[1]
    return headers


def forwarded_certificate(meta: dict) -> tuple[str, str] | None:
    """The client's certificate for the node, as (EUREKA_CLIENT_CERT_HEADER, value), or None.

    The node sees the reader's connection, not the client's, so a certificate identity would be lost:
    the reader passes it on as a TLS proxy does, and the node believes it because readers are among
    its ``EUREKA_TRUSTED_PROXIES`` (loopback, by default). A header a trusted proxy in front of the
    reader passed goes on as it came; else the certificate the reader's own TLS connection verified,
    as nginx's ``$ssl_client_escaped_cert`` (url-encoded PEM). A header from anyone else is not
    passed (the node must not believe it because the reader sent it)."""
    name = settings.EUREKA.access.client_cert_header
    if not name:
        return None
    passed = meta.get("HTTP_" + name.upper().replace("-", "_"))
    if passed and is_trusted_proxy(meta.get("REMOTE_ADDR", "")):
        return name, passed
    der = meta.get(ENVIRON_KEY)
    if der:
        return name, quote(ssl.DER_cert_to_PEM_cert(bytes(der)), safe="")
    return None


def request_target(request: HttpRequest) -> str:
    """Path and query as the client sent them (gunicorn's RAW_URI), else as Django rebuilds them."""
    raw = request.META.get("RAW_URI", "")
    return raw if raw.startswith("/") else request.get_full_path()


# Rounds of percent-decoding looked through for a dot segment: the node's server decodes once, a
# proxy in front of it may decode again; a path still encoded after these is refused all the same.
DECODING_ROUNDS = 3


def leaves_the_protocol(target: str) -> bool:
    """Whether the path of ``target`` could name something outside ``/eureka/`` on the node.

    The reader forwards only what it routed under ``/eureka/``, but a ``..`` segment climbs out of it
    on the way: httpx removes raw dot segments before sending (``/eureka/../metrics`` goes out as
    ``/metrics``), and a proxy or server in front of the node removes encoded ones (``%2e%2e``, a
    ``..%2f`` pair) after decoding. No Eureka client sends a ``.`` or ``..`` segment, so any path
    holding one, raw or percent-encoded (once or more), with ``/`` or ``\\`` between segments, is
    refused rather than normalised.
    """
    # What httpx sends as the path: up to the query or a fragment.
    path = target.split("?", 1)[0].split("#", 1)[0]
    for _ in range(DECODING_ROUNDS + 1):
        segments = path.replace("\\", "/").split("/")
        if "." in segments or ".." in segments:
            return True
        decoded = unquote(path)
        if decoded == path:
            return not path.startswith("/eureka/")
        path = decoded
    return True


class NodeForwarder:
    def __init__(self, base_url: str, timeout_ms: int, max_connections: int = 64):
        self.base_url = base_url.rstrip("/")
        self.shown_url = scrub_text(self.base_url)
        self.timeout_s = timeout_ms / 1000
        self._max_connections = max_connections
        # Built at first use, in the worker process (after gunicorn's fork and gevent's patching).
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self.forwarded = 0
        self.failures = 0
        self.last_error: str | None = None
        # Logged once when the node stops answering and once when it answers again, not per request.
        self.node_down = False

    def _http(self) -> httpx.Client:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    # An https:// node is reached with the outbound TLS settings; the node's own
                    # certificate is presented (a node that requires client certificates).
                    self._client = outbound_client(
                        settings.EUREKA.outbound_tls.contexts(),
                        client_cert=True,
                        timeout=httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 2.0)),
                        limits=httpx.Limits(
                            max_connections=self._max_connections,
                            max_keepalive_connections=self._max_connections,
                        ),
                        follow_redirects=False,
                    )
        return self._client

    def forward(self, request: HttpRequest) -> HttpResponse:
        try:
            body = request.body
        except RequestDataTooBig:
            # The same answer the node gives (DATA_UPLOAD_MAX_MEMORY_SIZE is EUREKA_MAX_BODY_BYTES).
            return text(
                413, f"Request body is larger than {settings.EUREKA.connections.max_body_bytes} bytes"
            )
        headers = request_headers(request.META)
        target = request_target(request)
        if leaves_the_protocol(target):
            return text(
                400,
                f"Refused: the path {target[:200]!r} leaves /eureka/ "
                "(a reader forwards no '.' or '..' segment, raw or percent-encoded)",
            )
        method = "GET" if request.method == "HEAD" else request.method
        client = self._http()
        outgoing = client.build_request(method, self.base_url + target, headers=headers, content=body or None)
        for name in CLIENT_DEFAULTS:
            if name not in headers:
                outgoing.headers.pop(name, None)
        self.forwarded += 1
        try:
            answer = client.send(outgoing, stream=True)
            try:
                content = b"".join(answer.iter_raw())
            finally:
                answer.close()
        except httpx.HTTPError as exc:
            return self._unreachable(exc, target)
        if self.node_down:
            self.node_down = False
            logger.warning(
                "reader: the registry node at %s answers again",
                self.shown_url,
                extra={"event": "node_back", "node": self.shown_url},
            )
        # As the node wrote them (httpx's other views of the headers are lower-cased).
        returned = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in answer.headers.raw]
        return passed_back(answer.status_code, returned, content)

    def _unreachable(self, exc: httpx.HTTPError, target: str) -> HttpResponse:
        self.failures += 1
        what = "did not answer in time" if isinstance(exc, httpx.TimeoutException) else "is unreachable"
        self.last_error = scrub_text(f"{type(exc).__name__}: {exc}")[:300]
        if not self.node_down:
            self.node_down = True
            logger.error(
                "reader: the registry node at %s %s (%s): what the reader cannot serve is answered 503",
                self.shown_url,
                what,
                self.last_error,
                extra={"event": "node_lost", "node": self.shown_url, "error": self.last_error},
            )
        response = text(
            503,
            f"Eureka reader: the registry node at {self.shown_url} {what} ({type(exc).__name__}). "
            f"This reader serves only fresh payloads of the Redis cache and forwards the rest "
            f"({target[:200]}) to the node.",
        )
        # Logged above, once per outage: not once per request by Django's handler.
        response._has_been_logged = True
        return response

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def passed_back(status: int, headers: Iterable[tuple[str, str]], content: bytes) -> HttpResponse:
    response = HttpResponse(content, status=status)
    # Django gives every response a Content-Type; the node's bodiless answers have none.
    del response["Content-Type"]
    via = [VIA]
    for name, value in headers:
        lowered = name.lower()
        if lowered in NOT_PASSED_BACK:
            continue
        if lowered == "via":
            via.insert(0, value)
            continue
        if lowered in response:
            # Repeated headers (rare here) joined as HTTP allows.
            response[name] = f"{response[name]}, {value}"
        else:
            response[name] = value
    response["Via"] = ", ".join(via)
    return response
