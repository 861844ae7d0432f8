"""A live node with outbound TLS (EUREKA_OUTBOUND_CA_FILE, _CERT_FILE, _KEY_FILE) and https:// peers and
remote regions, fakes on loopback (tests/tls_servers.py, certificates from ``trustme``): one peer and
one region of the node's CA, one of each whose certificate another CA signed. The trusted ones get the
registry and see the node's certificate; the others get nothing past the handshake, and /readyz and the
console say why. Rotating the node's certificate files changes what the next connection presents."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme
from bs4 import BeautifulSoup

from tests.factories import instance_body
from tests.interop.conftest import LiveServer, running_server, wait_until
from tests.tls_servers import FakeTlsServer, node_files, write_pem

pytestmark = pytest.mark.live

DEADLINE_S = 20.0
UNKNOWN_CA = "TLS: certificate verify failed: unable to get local issuer certificate"


@dataclass
class Fleet:
    node: LiveServer
    folder: Path
    ca: trustme.CA
    peer: FakeTlsServer
    stranger_peer: FakeTlsServer
    region: FakeTlsServer
    stranger_region: FakeTlsServer


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("outbound_tls")
    ca, other_ca = trustme.CA(), trustme.CA()
    ca_file = write_pem(folder, "ca.pem", ca.cert_pem.bytes())
    cert_file, key_file = node_files(folder, ca, "node-a")
    servers = [
        FakeTlsServer(ca, client_ca=ca),
        FakeTlsServer(other_ca, client_ca=ca),
        FakeTlsServer(ca, client_ca=ca),
        FakeTlsServer(other_ca, client_ca=ca),
    ]
    peer, stranger_peer, region, stranger_region = servers
    env = {
        "EUREKA_PEER_URLS": f"{peer.url()},{stranger_peer.url()}",
        "EUREKA_REGISTRY_SYNC_RETRIES": "0",
        "EUREKA_REMOTE_REGION_URLS": f"us-west={region.url()},eu-east={stranger_region.url()}",
        "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": "1",
        "EUREKA_OUTBOUND_CA_FILE": ca_file,
        "EUREKA_OUTBOUND_CERT_FILE": cert_file,
        "EUREKA_OUTBOUND_KEY_FILE": key_file,
    }
    (folder / "node").mkdir()
    try:
        with running_server(folder / "node", env) as node:
            yield Fleet(node, folder, ca, peer, stranger_peer, region, stranger_region)
    finally:
        for server in servers:
            server.close()


def register(node: LiveServer, host: str) -> str:
    body = instance_body(app="ORDERS", host=host)
    assert httpx.post(f"{node.url}apps/ORDERS", json=body, timeout=5).status_code == 204
    return body["instance"]["instanceId"]


def batches_with(server: FakeTlsServer, instance_id: str) -> list:
    return [
        seen
        for seen in server.requests
        if seen.path.endswith("peerreplication/batch/") and instance_id.encode() in seen.body
    ]


def peer_status(node: LiveServer, url: str) -> dict:
    ready = httpx.get(f"{node.base_url}/readyz", timeout=5).json()
    (found,) = [peer for peer in ready["replication"]["peers"] if peer["url"] == url]
    return found


def test_the_trusted_peer_gets_the_registry_with_the_nodes_certificate_and_the_stranger_gets_nothing(fleet):
    instance_id = register(fleet.node, "10.0.0.1")
    batch = wait_until(lambda: batches_with(fleet.peer, instance_id), DEADLINE_S, "the batch at the peer")
    assert batch[0].client_cn == "node-a"
    # The stranger: tried (its handshakes broken off), failing with the reason, sent nothing.
    wait_until(lambda: fleet.stranger_peer.handshake_failures, DEADLINE_S, "a handshake with the stranger")
    status = wait_until(
        lambda: (found := peer_status(fleet.node, fleet.stranger_peer.url()))["last_error"] and found,
        DEADLINE_S,
        "the stranger's error on /readyz",
    )
    assert (status["available"], status["last_error"]) == (False, UNKNOWN_CA)
    assert status["queued"] >= 1, "its batch waits for a peer that verifies"
    assert fleet.stranger_peer.requests == []
    assert peer_status(fleet.node, fleet.peer.url())["available"] is True
    # The console's DS Replicas say the same.
    page = httpx.get(f"{fleet.node.base_url}/", timeout=10).text
    assert "last error" in page and UNKNOWN_CA in page


def test_the_trusted_region_is_fetched_over_tls_and_the_stranger_is_shown_failing(fleet):
    wait_until(
        lambda: [seen for seen in fleet.region.requests if seen.path.startswith("/eureka/apps")],
        DEADLINE_S,
        "a fetch of the trusted region",
    )
    assert {seen.client_cn for seen in fleet.region.requests} == {"node-a"}
    wait_until(lambda: fleet.stranger_region.handshake_failures, DEADLINE_S, "a handshake with eu-east")
    assert fleet.stranger_region.requests == []
    page = BeautifulSoup(httpx.get(f"{fleet.node.base_url}/", timeout=10).text, "html.parser")
    regions = {item["data-region"]: item.get_text(" ", strip=True) for item in page.select("li[data-region]")}
    assert "fetch failing" in regions["eu-east"]
    assert "fetch failing" not in regions["us-west"] and "ready" in regions["us-west"]


def test_a_rotated_node_certificate_is_presented_on_the_next_connection(fleet):
    # The same paths, a new certificate and key (as cert-manager or Vault rewrite them).
    node_files(fleet.folder, fleet.ca, "node-a-rotated")
    hosts = (f"10.0.1.{n}" for n in range(1, 250))

    def rotated() -> bool:
        # Writes keep coming (each a batch to the peer), as they do in a fleet that heartbeats.
        register(fleet.node, next(hosts))
        return any(seen.client_cn == "node-a-rotated" for seen in fleet.peer.requests)

    wait_until(
        rotated,
        DEADLINE_S,
        lambda: (
            "no request from the rotated certificate; the node's log ends:\n"
            + fleet.node.server_log_path.read_text()[-3000:]
        ),
        interval=0.3,
    )
    # From then on every batch comes with the new certificate: a later write arrives under it.
    later = register(fleet.node, "10.0.2.1")
    batch = wait_until(lambda: batches_with(fleet.peer, later), DEADLINE_S, "a batch after the rotation")
    assert batch[-1].client_cn == "node-a-rotated"
