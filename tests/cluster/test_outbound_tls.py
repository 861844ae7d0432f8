"""Outbound TLS against real HTTPS servers on loopback (tests/tls_servers.py, certificates from
``trustme``): replication and the start-up fetch to https:// peers, remote regions, webhook receivers
and health-check targets; what a peer or region whose certificate does not verify is sent (nothing)
and how it is shown; and a rotated client certificate presented on the next connection."""

from __future__ import annotations

import copy
import datetime
import logging
import time

import pytest
import trustme

from registry.cluster.peers import PeerSet
from registry.cluster.region_transport import RegionHttpTransport
from registry.cluster.regions import FetchFailed, RemoteRegion
from registry.cluster.replicator import MemoryOutbox, Replicator
from registry.cluster.startup import sync_from_peers
from registry.cluster.transport import PeerTransport, PeerUnreachable
from registry.domain.core import Registry, RegistryRules
from registry.domain.endpoints import Peer, PeerDns
from registry.domain.outbound_tls import CHECK_INTERVAL_S, OutboundTls
from registry.domain.refusals import REFUSAL_LOG_INTERVAL_S
from registry.wire.answers import RecordLimits
from registry.wire.codecs import build_instance
from tests.conftest import FakeClock
from tests.factories import instance_body
from tests.tls_servers import FakeTlsServer, node_files, write_pem

UNKNOWN_CA = "TLS: certificate verify failed: unable to get local issuer certificate"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def other_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls(tmp_path, ca) -> OutboundTls:
    ca_file = write_pem(tmp_path, "ca.pem", ca.cert_pem.bytes())
    cert_file, key_file = node_files(tmp_path, ca, "node-a")
    return OutboundTls(ca_file, cert_file, key_file)


@pytest.fixture
def servers():
    started: list[FakeTlsServer] = []

    def start(*args, **kwargs) -> FakeTlsServer:
        server = FakeTlsServer(*args, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def transport(tls: OutboundTls) -> PeerTransport:
    return PeerTransport(
        timeout_s=5.0,
        max_answer_bytes=10_000_000,
        total_timeout_s=10.0,
        max_answer_instances=10_000,
        max_record_bytes=1_000_000,
        tls=tls,
    )


def replicator(peer: Peer, sender: PeerTransport, clock: FakeClock) -> tuple[Replicator, Registry, PeerSet]:
    registry = Registry(RegistryRules(), clock())
    peer_set = PeerSet([peer.url])
    rep = Replicator(registry, [peer], peer_set, lambda _: MemoryOutbox(), sender)
    registry.set_replication_listener(rep.record)
    raw = copy.deepcopy(instance_body(app="ORDERS", host="10.0.0.1")["instance"])
    registry.register(build_instance(raw, clock(), path_app="ORDERS"), clock())
    rep.flush(clock())
    return rep, registry, peer_set


def handshake_seen(server: FakeTlsServer) -> bool:
    """The server saw the client break off a handshake (checked after a short wait: it runs in a thread)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if server.handshake_failures:
            return True
        time.sleep(0.02)
    return False


def test_replication_to_an_https_peer_goes_over_tls_and_the_peer_sees_this_nodes_certificate(
    tls, ca, servers
):
    peer_server = servers(ca, client_ca=ca)
    peer = Peer(peer_server.url())
    clock = FakeClock()
    rep, _, peer_set = replicator(peer, transport(tls), clock)
    assert rep.send_next_batch(peer.key, clock()) == 1
    (batch,) = peer_server.requests
    assert batch.path == "/eureka/peerreplication/batch/"
    assert b'"appName":"ORDERS"' in batch.body
    assert batch.client_cn == "node-a"
    assert peer_set.states()[0].available(clock())


def test_a_peer_whose_certificate_another_ca_signed_is_sent_nothing_and_shown_failing_with_the_reason(
    tls, ca, other_ca, servers, caplog
):
    peer_server = servers(other_ca, client_ca=ca)
    peer = Peer(peer_server.url())
    clock = FakeClock()
    sender = transport(tls)
    rep, _, peer_set = replicator(peer, sender, clock)
    with caplog.at_level(logging.WARNING, "registry.cluster.transport"):
        for _ in range(3):
            with pytest.raises(PeerUnreachable) as failed:
                rep.send_next_batch(peer.key, clock())
            assert str(failed.value) == UNKNOWN_CA
        # The probe of a peer that is down, the start-up fetch and this node's own registration too.
        assert rep.probe(peer.key, clock()) is not None
        with pytest.raises(PeerUnreachable, match="certificate verify failed"):
            list(sender.fetch_apps(peer))
        with pytest.raises(PeerUnreachable, match="certificate verify failed"):
            sender.register(peer, "ORDERS", {"instanceId": "x"})
    assert handshake_seen(peer_server)
    assert peer_server.requests == [], "no request got past the handshake"
    assert len(rep.outboxes[peer.key]) == 1, "the batch stays queued for a peer that verifies"
    state = peer_set.states()[0]
    assert not state.available(clock())
    assert state.unavailable_reason(clock()) == f"last replication failed: {UNKNOWN_CA}"
    # One line for the lot (at most one a minute per peer), which the next one will count.
    lines = [r for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    assert len(lines) == 1
    assert "certificate verify failed: unable to get local issuer certificate" in lines[0].getMessage()
    assert REFUSAL_LOG_INTERVAL_S == 60


def test_a_peer_whose_certificate_names_another_host_is_sent_nothing(tls, ca, servers):
    peer_server = servers(ca, names=("other.example",), client_ca=ca)
    with pytest.raises(PeerUnreachable, match="certificate verify failed: Hostname mismatch"):
        transport(tls).post_batch(Peer(peer_server.url()), [{"action": "Heartbeat"}])
    assert handshake_seen(peer_server)
    assert peer_server.requests == []


def test_an_expired_peer_certificate_is_refused(tls, ca, servers):
    peer_server = servers(ca, client_ca=ca, not_after=datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC))
    with pytest.raises(PeerUnreachable, match="certificate verify failed: certificate has expired"):
        transport(tls).post_batch(Peer(peer_server.url()), [])
    assert peer_server.requests == []


def test_the_start_up_sync_reads_an_https_peer_and_gets_nothing_from_a_failing_one(
    tls, ca, other_ca, servers, caplog
):
    good, bad = servers(ca, client_ca=ca), servers(other_ca)
    failures: dict[str, str] = {}
    clock = FakeClock()
    registry = Registry(RegistryRules(), clock())
    with caplog.at_level(logging.INFO, "registry.cluster.startup"):
        sync_from_peers(
            registry,
            [Peer(bad.url()), Peer(good.url())],
            transport(tls),
            clock,
            retries=0,
            wait_ms=0,
            on_failure=lambda peer, error: failures.setdefault(peer.display_url, error),
        )
    assert [seen.path for seen in good.requests][:1] == ["/eureka/apps/"]
    assert good.requests[0].client_cn == "node-a"
    # Not reachable is the replication probes' to show (they fail the same way), not the sync's.
    assert failures == {}
    assert f"{Peer(bad.url()).display_url} not reachable ({UNKNOWN_CA})" in caplog.text
    assert bad.requests == []


def test_a_peer_found_through_dns_is_checked_against_the_dns_name_not_its_address(tls, ca, servers):
    peer_server = servers(ca, names=("eureka.example",), client_ca=ca)
    entry = PeerDns("eureka.example", peer_server.port, "https")
    peer = entry.peer_at("127.0.0.1")
    assert peer.tls_name == "eureka.example"
    assert transport(tls).post_batch(peer, []) == []
    assert peer_server.requests[0].client_cn == "node-a"
    # The same address under a name its certificate does not carry is refused.
    with pytest.raises(PeerUnreachable, match="Hostname mismatch"):
        transport(tls).post_batch(
            PeerDns("eureka-other.example", peer_server.port, "https").peer_at("127.0.0.1"), []
        )
    assert PeerDns("_eureka._tcp.eureka.example", scheme="https").tls_name == "eureka.example"
    assert PeerDns("eureka.example").tls_name == "", "plain HTTP needs no name"


def region_transport(tls: OutboundTls) -> RegionHttpTransport:
    return RegionHttpTransport(2.0, 5.0, max_answer_bytes=10_000_000, total_timeout_s=10.0, tls=tls)


def test_a_remote_region_is_fetched_over_https_with_this_nodes_certificate(tls, ca, servers):
    region_server = servers(ca, client_ca=ca)
    region = RemoteRegion("us-west", region_server.url(), RecordLimits(10_000, 1_000_000, "A", "B"))
    clock = FakeClock()
    region.fetch(region_transport(tls), clock)
    health = region.health()
    assert health.ready and health.last_error is None
    assert region_server.requests[0].path == "/eureka/apps/"
    assert region_server.requests[0].client_cn == "node-a"


def test_a_remote_region_whose_certificate_does_not_verify_fails_with_the_reason(tls, other_ca, servers):
    region_server = servers(other_ca)
    region = RemoteRegion("us-west", region_server.url(), RecordLimits(10_000, 1_000_000, "A", "B"))
    with pytest.raises(FetchFailed, match="certificate verify failed"):
        region_transport(tls).fetch(region.peer, delta=False)
    region.fetch(region_transport(tls), FakeClock())
    health = region.health()
    assert not health.ready
    assert health.last_error == f"GET apps: {UNKNOWN_CA}"
    assert region_server.requests == []


def test_a_rotated_client_certificate_is_presented_on_the_next_connection(tmp_path, ca, servers):
    ca_file = write_pem(tmp_path, "ca.pem", ca.cert_pem.bytes())
    cert_file, key_file = node_files(tmp_path, ca, "node-a")
    clock = [1000.0]
    tls = OutboundTls(ca_file, cert_file, key_file, clock=lambda: clock[0])
    peer_server = servers(ca, client_ca=ca)
    peer = Peer(peer_server.url())
    sender = transport(tls)
    sender.post_batch(peer, [])
    # Rotated: the same paths, a new certificate (a new name, so the peer can tell them apart).
    node_files(tmp_path, ca, "node-a-rotated")
    sender.post_batch(peer, [])  # before the next check: the kept-alive connection, the old certificate
    clock[0] += CHECK_INTERVAL_S
    sender.post_batch(peer, [])
    sender.post_batch(peer, [])
    assert [seen.client_cn for seen in peer_server.requests] == [
        "node-a",
        "node-a",
        "node-a-rotated",
        "node-a-rotated",
    ]
