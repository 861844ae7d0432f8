"""HTTP to peers: replication batches, the start-up fetch, and this node's own registration.

One ``httpx.Client`` (kept-alive connections, gzip) per transport; credentials in a peer's URL are
sent as Basic auth and never appear in an error message. Every failure becomes ``PeerUnreachable``
(try again later) or ``PeerRefused`` (a 4xx: do not send the same again), with a short reason.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from registry.constants import SERVER_IDENTITY
from registry.endpoints import Peer
from registry.redact import scrub_text

REPLICATION_HEADER = "x-netflix-discovery-replication"


class PeerUnreachable(Exception):
    """Transport error, timeout or 5xx: the same request may succeed later. ``congested`` is a 503 or
    a timeout, after which Eureka waits longer before the next try."""

    def __init__(self, reason: str, congested: bool = False):
        super().__init__(reason)
        self.congested = congested


class PeerRefused(Exception):
    """A 4xx for a whole request: sending it again would not help."""


def http_error_text(exc: Exception) -> str:
    """A failed request's reason for logs and the console: the exception's class and gist. httpx
    messages name the URL, which may hold credentials, so the URL is cut off and the rest scrubbed."""
    text = scrub_text(str(exc).split(" for url ", 1)[0].strip())
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


def server_client(timeout: float | httpx.Timeout, identity: str) -> httpx.Client:
    """A kept-alive JSON client that says it is a Eureka server (``DiscoveryIdentity-Name``): what
    peers and remote regions are asked with."""
    return httpx.Client(
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
    def __init__(self, timeout_s: float = 5.0, identity: str = "eureka-django"):
        self._client = server_client(timeout_s, identity)

    def close(self) -> None:
        self._client.close()

    def _send(self, peer: Peer, method: str, path: str, **kwargs) -> httpx.Response:
        auth = peer.auth
        try:
            response = self._client.request(
                method, peer.base_url + path, auth=httpx.BasicAuth(*auth) if auth else None, **kwargs
            )
        except httpx.TimeoutException as exc:
            raise PeerUnreachable(http_error_text(exc), congested=True) from None
        except httpx.HTTPError as exc:
            raise PeerUnreachable(http_error_text(exc)) from None
        if response.status_code >= 500:
            raise PeerUnreachable(f"HTTP {response.status_code}", congested=response.status_code == 503)
        return response

    def post_batch(self, peer: Peer, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``POST peerreplication/batch/``: the peer's answer per item (``statusCode``, maybe an entity)."""
        response = self._send(
            peer,
            "POST",
            "peerreplication/batch/",
            content=orjson.dumps({"replicationList": items}),
            headers={"Content-Type": "application/json"},
        )
        if response.status_code >= 400:
            raise PeerRefused(f"HTTP {response.status_code} for a batch of {len(items)}")
        try:
            answers = orjson.loads(response.content).get("responseList")
        except (orjson.JSONDecodeError, AttributeError):
            answers = None
        if not isinstance(answers, list):
            raise PeerRefused(f"unreadable batch answer (HTTP {response.status_code})")
        return answers

    def fetch_apps(self, peer: Peer) -> dict[str, Any]:
        """The peer's full registry (``GET apps``, JSON), as the start-up sync reads it."""
        response = self._send(peer, "GET", "apps/")
        if response.status_code != 200:
            raise PeerUnreachable(f"HTTP {response.status_code} for GET apps")
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError as exc:
            raise PeerUnreachable(f"unreadable registry: {exc}") from None

    def register(self, peer: Peer, app: str, instance: dict[str, Any]) -> int:
        response = self._send(
            peer,
            "POST",
            f"apps/{app}",
            content=orjson.dumps({"instance": instance}),
            headers={"Content-Type": "application/json"},
        )
        return response.status_code

    def heartbeat(self, peer: Peer, app: str, instance_id: str) -> int:
        return self._send(peer, "PUT", f"apps/{app}/{instance_id}").status_code


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
