"""HTTP to remote regions (registry/cluster/regions.py): ``GET apps/`` and ``apps/delta`` as the Java
server's remote-region client asks for them. Loaded only when a remote region is configured."""

from __future__ import annotations

import httpx

from registry.cluster.regions import FetchFailed
from registry.cluster.transport import (
    TLS_PREFIX,
    AnswerLimits,
    AnswerOverLimit,
    http_error_text,
    log_tls_refusal,
    read_answer,
    server_client,
)
from registry.domain.endpoints import Peer
from registry.domain.outbound_tls import OutboundTls


class RegionHttpTransport:
    """JSON, gzip, this server's identity (a node of ours then answers with its own region only, so
    two regions that fetch each other do not echo each other's instances back), and short timeouts
    (Spring's defaults: 1 s to connect, 1 s to read), so that a region that is down costs little.
    A whole answer is bounded too: ``max_answer_bytes`` once inflated, ``total_timeout_s`` from the
    request to its last byte (transport.py ``read_answer``). Credentials in a region's URL are sent as
    Basic auth and never appear in an error. An https:// region is reached over ``tls`` (the node's
    certificate presented); one whose certificate does not verify fails with the reason
    (``TLS: certificate verify failed: ...``), shown where the regions' state is."""

    def __init__(
        self,
        connect_timeout_s: float = 1.0,
        read_timeout_s: float = 1.0,
        identity: str = "eureka-django",
        *,
        max_answer_bytes: int,
        total_timeout_s: float,
        tls: OutboundTls | None = None,
    ):
        self._client = server_client(httpx.Timeout(read_timeout_s, connect=connect_timeout_s), identity, tls)
        self._limits = AnswerLimits(
            max_answer_bytes,
            total_timeout_s,
            "EUREKA_REMOTE_REGION_MAX_ANSWER_BYTES",
            "EUREKA_REMOTE_REGION_TOTAL_TIMEOUT_MS",
        )

    def close(self) -> None:
        self._client.close()

    def fetch(self, peer: Peer, delta: bool) -> bytearray:
        what = "GET apps/delta" if delta else "GET apps"
        auth = peer.auth
        try:
            status, body = read_answer(
                self._client,
                "GET",
                peer.base_url + ("apps/delta" if delta else "apps/"),
                self._limits,
                auth=httpx.BasicAuth(*auth) if auth else None,
            )
        except httpx.HTTPError as exc:
            reason = http_error_text(exc)
            if reason.startswith(TLS_PREFIX):
                log_tls_refusal("remote region", peer.display_url, reason)
            raise FetchFailed(f"{what}: {reason}") from None
        except AnswerOverLimit as exc:
            raise FetchFailed(f"{what}: {exc}", over_limit=True) from None
        if status != 200:
            raise FetchFailed(f"{what}: HTTP {status}")
        return body
