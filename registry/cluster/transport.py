"""HTTP to peers: replication batches, the start-up fetch, and this node's own registration.

One ``httpx.Client`` (kept-alive connections, gzip) per transport; credentials in a peer's URL are
sent as Basic auth and never appear in an error message. Every failure becomes ``PeerUnreachable``
(try again later) or ``PeerRefused`` (a 4xx: do not send the same again), with a short reason.

https:// peers and regions are reached with the node's outbound TLS (registry/domain/outbound_tls.py,
registry/wire/outbound.py): their certificate verified, the node's own presented. A handshake that
fails sends nothing: the request and its body go only on a verified connection, and the failure is a
``PeerUnreachable`` like any other, tried again later over TLS, never over anything else. Its reason
(``TLS: certificate verify failed: ...``) is what the console and /readyz show, and a line in the log
at most once a minute per peer, with a count (``tls_refused``).

Every answer, a peer's or a remote region's (region_transport.py), is read through ``read_answer``:
inflated in bounded steps, refused past a size cap and past a deadline for the whole exchange
(``AnswerLimits``), and read one at a time once large: peers and regions answering gzip bombs or a
byte at a time cost this node about one cap of memory in all, and a few milliseconds of its event
loop at a time. What the answer holds is then read record by record within limits of its own
(registry/wire/answers.py): no more instances than ``max_answer_instances``, none larger than
``max_record_bytes``, never the whole document as Python objects.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from registry.cache.pacing import PACER
from registry.domain.constants import SERVER_IDENTITY
from registry.domain.endpoints import Peer
from registry.domain.outbound_tls import OutboundTls, shared, tls_failure
from registry.domain.redact import scrub_text
from registry.domain.refusals import RefusalLines, refusal_fields, since_last_line
from registry.wire.answers import (
    RECORD_BYTES_SETTING,
    AnswerOverLimit,
    AnswerUnreadable,
    RecordLimits,
    batch_answer,
    registry_answer,
)
from registry.wire.outbound import outbound_client

if TYPE_CHECKING:
    from registry.config.eureka import EurekaConfig

logger = logging.getLogger(__name__)

REPLICATION_HEADER = "x-netflix-discovery-replication"
# The most bytes one inflating step makes. One 64 KB read of a gzip bomb holds 64 MB once inflated
# (httpx inflates a read at once); in steps this size, the memory a step takes and its time on the
# event loop (a fraction of a millisecond) stay small whatever a read holds.
INFLATE_STEP = 256 * 1024
_INFLATED_ENCODINGS = frozenset({"gzip", "x-gzip", "deflate"})
# Answers past this size are read one at a time in a process (the others wait their turn, within
# their deadlines): a start-up sync, a replication sender and remote regions answering at once then
# hold one cap's worth of memory, not one each. Batch answers and deltas stay well below it.
LARGE_ANSWER_BYTES = 1024 * 1024
_large_answer_turn = threading.Lock()


class PeerUnreachable(Exception):
    """Transport error, timeout or 5xx: the same request may succeed later. ``congested`` is a 503 or
    a timeout, after which Eureka waits longer before the next try. ``over_limit``: the answer broke
    one of this node's limits (``AnswerLimits``), which says something is wrong at the peer.
    ``status``: the peer's HTTP status when it answered (a node of ours not yet open answers 503)."""

    def __init__(
        self, reason: str, congested: bool = False, over_limit: bool = False, status: int | None = None
    ):
        super().__init__(reason)
        self.congested = congested
        self.over_limit = over_limit
        self.status = status


class PeerRefused(Exception):
    """A 4xx for a whole request: sending it again would not help."""


def http_error_text(exc: Exception) -> str:
    """A failed request's reason for logs and the console: the exception's class and gist. httpx
    messages name the URL, which may hold credentials, so the URL is cut off and the rest scrubbed.
    A failed TLS handshake says what failed (``TLS: certificate verify failed: ...``)."""
    tls = tls_failure(exc)
    if tls is not None:
        return f"{TLS_PREFIX}{scrub_text(tls)}"[:200]
    text = scrub_text(str(exc).split(" for url ", 1)[0].strip())
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


# What a failed TLS handshake's reason starts with.
TLS_PREFIX = "TLS: "
# TLS handshakes that failed: one line per peer or region a minute at most, with a count.
_tls_lines = RefusalLines()


def log_tls_refusal(what: str, where: str, reason: str) -> None:
    """A peer's or region's certificate did not verify (or it refused this node's): nothing was sent."""
    kind = f"{what} TLS"
    count = _tls_lines.note(f"{kind} {where}")
    if count:
        logger.warning(
            "%s %s: TLS handshake failed, nothing sent: %s%s",
            what,
            where,
            reason.removeprefix(TLS_PREFIX),
            since_last_line(count),
            extra={**refusal_fields(kind, count), "peer": where, "error": reason},
        )


@dataclass(frozen=True)
class AnswerLimits:
    """How much of an answer this node reads: ``max_bytes`` once inflated, all of it within
    ``total_s`` of sending the request; ``size_setting`` and ``time_setting`` name the settings that
    change them, for the error message."""

    max_bytes: int
    total_s: float
    size_setting: str
    time_setting: str


def read_answer(
    client: httpx.Client,
    method: str,
    url: str,
    limits: AnswerLimits,
    clock: Callable[[], float] = time.monotonic,
    **kwargs: Any,
) -> tuple[int, bytearray]:
    """Send one request; its answer's status and body, inflated. Raises AnswerOverLimit, or an
    ``httpx.HTTPError`` (a ``DecodingError`` for a body that does not inflate).

    1. The body is read as it comes (``iter_raw``) and inflated here, ``INFLATE_STEP`` bytes at most
       per step, each step counted against ``max_bytes``: nothing past the cap is ever made.
    2. The deadline (a monotonic clock) is checked once the headers came and after every step: the
       client's own timeouts bound each read, not the whole answer, so a peer sending a byte a second
       would otherwise hold the fetch for as long as it likes. An exchange thus ends at most one read
       timeout after the deadline.
    3. After every step the event loop may get a turn (``PACER``): inflating a large answer must not
       hold the heartbeats arriving meanwhile.
    4. Past ``LARGE_ANSWER_BYTES`` an answer waits for its turn (one large answer at a time in the
       process), until its deadline at most.
    """
    deadline = clock() + limits.total_s
    with client.stream(method, url, **kwargs) as response:
        encoding = response.headers.get("content-encoding", "").strip().lower()
        if encoding in _INFLATED_ENCODINGS:
            # 32 + window bits: zlib reads a gzip header or a zlib one (what "deflate" means in HTTP).
            inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)
        elif encoding in ("", "identity"):
            inflater = None
        else:
            raise httpx.DecodingError(f"unsupported Content-Encoding {encoding[:40]!r}")
        _check_deadline(limits, deadline, clock)
        body = bytearray()
        large = False
        try:
            for raw in response.iter_raw():
                for piece in _inflated(inflater, raw):
                    size = len(body) + len(piece)
                    if size > limits.max_bytes:
                        inflated = " once inflated" if inflater is not None else ""
                        raise AnswerOverLimit(
                            f"answer larger than {limits.max_bytes:,} bytes{inflated}, not read further "
                            f"(the limit is {limits.size_setting})"
                        )
                    if size > LARGE_ANSWER_BYTES and not large:
                        large = _large_answer_turn.acquire(timeout=max(deadline - clock(), 0))
                        if not large:
                            raise AnswerOverLimit(
                                f"answer not complete within {limits.total_s:g} s, waiting for another "
                                f"large answer to be read first (the limit is {limits.time_setting})"
                            )
                    body += piece
                    _check_deadline(limits, deadline, clock)
                    PACER.tick()
        finally:
            if large:
                _large_answer_turn.release()
        return response.status_code, body


def _inflated(inflater: Any, data: bytes):
    """``data`` (one read of the body) inflated, ``INFLATE_STEP`` bytes at most at a time."""
    if inflater is None:
        yield data
        return
    while True:
        try:
            piece = inflater.decompress(data, INFLATE_STEP)
        except zlib.error as exc:
            raise httpx.DecodingError(f"the body does not inflate: {exc}") from None
        yield piece
        data = inflater.unconsumed_tail
        # A full step may leave output inside the inflater even once every input byte was taken.
        if not data and len(piece) < INFLATE_STEP:
            return


def _check_deadline(limits: AnswerLimits, deadline: float, clock: Callable[[], float]) -> None:
    if clock() > deadline:
        raise AnswerOverLimit(
            f"answer not complete within {limits.total_s:g} s, not read further "
            f"(the limit is {limits.time_setting})"
        )


def server_client(
    timeout: float | httpx.Timeout, identity: str, tls: OutboundTls | None = None
) -> httpx.Client:
    """A kept-alive JSON client that says it is a Eureka server (``DiscoveryIdentity-Name``): what
    peers and remote regions are asked with, over ``tls`` (the system's trust store when None), the
    node's certificate presented."""
    return outbound_client(
        tls or shared(),
        client_cert=True,
        timeout=timeout,
        headers={
            "Accept": "application/json",
            "Accept-Encoding": "gzip",
            "DiscoveryIdentity-Name": SERVER_IDENTITY,
            "DiscoveryIdentity-Version": "1.0",
            "User-Agent": identity,
        },
    )


class PeerTransport:
    """``timeout_s`` bounds connecting and each read; ``max_answer_bytes`` and ``total_timeout_s``
    bound a whole answer (``read_answer``); ``max_answer_instances`` and ``max_record_bytes`` what a
    registry answer may hold (registry/wire/answers.py)."""

    def __init__(
        self,
        timeout_s: float = 5.0,
        identity: str = "eureka-django",
        *,
        max_answer_bytes: int,
        total_timeout_s: float,
        max_answer_instances: int,
        max_record_bytes: int,
        tls: OutboundTls | None = None,
    ):
        self._client = server_client(timeout_s, identity, tls)
        self._limits = AnswerLimits(
            max_answer_bytes, total_timeout_s, "EUREKA_PEER_MAX_ANSWER_BYTES", "EUREKA_PEER_TOTAL_TIMEOUT_MS"
        )
        self._records = RecordLimits(
            max_answer_instances,
            max_record_bytes,
            "EUREKA_PEER_MAX_ANSWER_INSTANCES",
            RECORD_BYTES_SETTING,
        )

    def close(self) -> None:
        self._client.close()

    def _send(self, peer: Peer, method: str, path: str, **kwargs) -> tuple[int, bytearray]:
        auth = peer.auth
        try:
            status, body = read_answer(
                self._client,
                method,
                peer.base_url + path,
                self._limits,
                auth=httpx.BasicAuth(*auth) if auth else None,
                # A peer found through DNS is reached at an address; its certificate names the DNS name.
                extensions={"sni_hostname": peer.tls_name} if peer.tls_name else None,
                **kwargs,
            )
        except httpx.TimeoutException as exc:
            raise PeerUnreachable(http_error_text(exc), congested=True) from None
        except httpx.HTTPError as exc:
            reason = http_error_text(exc)
            if reason.startswith(TLS_PREFIX):
                log_tls_refusal("peer", peer.display_url, reason)
            raise PeerUnreachable(reason) from None
        except AnswerOverLimit as exc:
            # Congested: the peer is asked again later than after a plain failure, as after a timeout.
            raise PeerUnreachable(f"{method} {path}: {exc}", congested=True, over_limit=True) from None
        if status >= 500:
            raise PeerUnreachable(f"HTTP {status}", congested=status == 503, status=status)
        return status, body

    def post_batch(self, peer: Peer, items: list[dict[str, Any]]) -> list[Any]:
        """``POST peerreplication/batch/``: the peer's answer per item (``statusCode``, maybe an entity;
        an answer larger than ``max_record_bytes`` is ``TOO_LARGE``). More answers than items is an
        answer over the limits."""
        path = "peerreplication/batch/"
        status, body = self._send(
            peer,
            "POST",
            path,
            content=orjson.dumps({"replicationList": items}),
            headers={"Content-Type": "application/json"},
        )
        if status >= 400:
            raise PeerRefused(f"HTTP {status} for a batch of {len(items)}")
        document = batch_answer(body, len(items), self._records.max_record_bytes)
        try:
            answers = list(document)
        except AnswerOverLimit as exc:
            raise PeerUnreachable(f"POST {path}: {exc}", congested=True, over_limit=True) from None
        except AnswerUnreadable:
            answers = None
        if answers is None or not document.found:
            raise PeerRefused(f"unreadable batch answer (HTTP {status})")
        return answers

    def fetch_apps(self, peer: Peer) -> Iterator[Any]:
        """The peer's full registry (``GET apps``, JSON), as the start-up sync reads it: its instances,
        one at a time (``TOO_LARGE`` for one over ``max_record_bytes``). Reading them may raise
        PeerUnreachable too: an answer over the limits, or one that is not a registry."""
        status, body = self._send(peer, "GET", "apps/")
        if status != 200:
            raise PeerUnreachable(f"HTTP {status} for GET apps")
        return self._instances("GET apps/", registry_answer(body, self._records))

    def fetch_delta(self, peer: Peer) -> Iterator[Any] | None:
        """The peer's ``GET apps/delta`` (JSON): its recent changes, cancels (``DELETED``) among them, as
        the start-up sync reads them, one at a time as ``fetch_apps``; None when the peer serves no
        delta (403: disabled)."""
        status, body = self._send(peer, "GET", "apps/delta")
        if status != 200:
            return None
        return self._instances("GET apps/delta", registry_answer(body, self._records, what="delta"))

    @staticmethod
    def _instances(what: str, document: Any) -> Iterator[Any]:
        try:
            yield from document
        except AnswerOverLimit as exc:
            raise PeerUnreachable(f"{what}: {exc}", congested=True, over_limit=True) from None
        except AnswerUnreadable as exc:
            raise PeerUnreachable(str(exc)) from None

    def register(self, peer: Peer, app: str, instance: dict[str, Any]) -> int:
        status, _ = self._send(
            peer,
            "POST",
            f"apps/{app}",
            content=orjson.dumps({"instance": instance}),
            headers={"Content-Type": "application/json"},
        )
        return status

    def heartbeat(self, peer: Peer, app: str, instance_id: str) -> int:
        return self._send(peer, "PUT", f"apps/{app}/{instance_id}")[0]


def peer_transport(config: EurekaConfig) -> PeerTransport:
    """The transport to peers with the node's settings (the node's and a Celery worker's)."""
    cluster = config.cluster
    return PeerTransport(
        timeout_s=cluster.peer_timeout_ms / 1000,
        max_answer_bytes=cluster.peer_max_answer_bytes,
        total_timeout_s=cluster.peer_total_timeout_ms / 1000,
        max_answer_instances=cluster.peer_max_answer_instances,
        max_record_bytes=config.registry.max_answer_record_bytes,
        tls=config.outbound_tls.contexts(),
    )


def probe(transport: PeerTransport, peer: Peer) -> PeerUnreachable | PeerRefused | None:
    """Send the peer an empty batch: a cheap check of an idle link, or of a peer that is down (nothing
    but a refused connection while it is gone). None when it answered, else the failure."""
    try:
        transport.post_batch(peer, [])
    except (PeerUnreachable, PeerRefused) as exc:
        return exc
    return None


def failure_text(failure: PeerUnreachable | PeerRefused) -> str:
    """A failed send or probe as the console shows it."""
    return f"batch refused: {failure}" if isinstance(failure, PeerRefused) else str(failure)
