"""HTTP to remote regions (registry/cluster/regions.py): ``GET apps/`` and ``apps/delta`` as the Java
server's remote-region client asks for them. Loaded only when a remote region is configured."""

from __future__ import annotations

import httpx

from registry.cluster.regions import FetchFailed
from registry.cluster.transport import http_error_text, server_client
from registry.endpoints import Peer


class RegionHttpTransport:
    """JSON, gzip, this server's identity (a node of ours then answers with its own region only, so
    two regions that fetch each other do not echo each other's instances back), and short timeouts
    (Spring's defaults: 1 s to connect, 1 s to read), so that a region that is down costs little.
    Credentials in a region's URL are sent as Basic auth and never appear in an error."""

    def __init__(
        self, connect_timeout_s: float = 1.0, read_timeout_s: float = 1.0, identity: str = "eureka-django"
    ):
        self._client = server_client(httpx.Timeout(read_timeout_s, connect=connect_timeout_s), identity)

    def close(self) -> None:
        self._client.close()

    def fetch(self, peer: Peer, delta: bool) -> bytes:
        what = "GET apps/delta" if delta else "GET apps"
        auth = peer.auth
        try:
            response = self._client.get(
                peer.base_url + ("apps/delta" if delta else "apps/"),
                auth=httpx.BasicAuth(*auth) if auth else None,
            )
        except httpx.HTTPError as exc:
            raise FetchFailed(f"{what}: {http_error_text(exc)}") from None
        if response.status_code != 200:
            raise FetchFailed(f"{what}: HTTP {response.status_code}")
        return response.content
