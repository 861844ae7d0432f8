"""Health checks of https:// targets with the node's outbound TLS: verified against
EUREKA_OUTBOUND_CA_FILE when one is named (the reason shown when a certificate does not verify), as
before when none is, and never with the node's own certificate. Real HTTPS servers on loopback."""

from __future__ import annotations

import pytest
import trustme

from registry.domain.endpoints import parse_networks
from registry.domain.outbound_tls import OutboundTls
from registry.health.addresses import AddressPolicy
from registry.health.checker import ProbeTarget
from registry.health.config import HTTP
from registry.health.probes import ProbePool, probe_http, run_round
from tests.tls_servers import FakeTlsServer, outbound_tls

LOOPBACK = AddressPolicy(parse_networks("127.0.0.0/8"))


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls(tmp_path, ca) -> OutboundTls:
    return outbound_tls(tmp_path, ca)


@pytest.fixture
def target(ca):
    # It asks for a client certificate of the node's CA: the probe must not present one.
    server = FakeTlsServer(ca, client_ca=ca)
    yield server
    server.close()


@pytest.fixture
def stranger():
    server = FakeTlsServer(trustme.CA())
    yield server
    server.close()


def test_an_https_target_is_verified_with_the_ca_file_and_sees_no_client_certificate(tls, target):
    assert probe_http(target.url(path="/health"), 5.0, LOOPBACK, tls) == (True, "HTTP 200")
    (seen,) = target.requests
    assert (seen.path, seen.client_cn) == ("/health", None)


def test_the_host_name_the_url_gives_is_what_the_certificate_must_name(tls, target):
    assert probe_http(target.url("127.0.0.1", "/health"), 5.0, LOOPBACK, tls) == (True, "HTTP 200")
    # An IP address the certificate does not carry.
    other = FakeTlsServer(trustme.CA(), names=("localhost",))
    try:
        ok, reason = probe_http(other.url("127.0.0.1", "/health"), 5.0, LOOPBACK, tls)
    finally:
        other.close()
    assert not ok and reason.startswith("TLS: certificate verify failed")


def test_a_target_whose_certificate_does_not_verify_fails_with_the_reason(tls, stranger):
    ok, reason = probe_http(stranger.url(path="/health"), 5.0, LOOPBACK, tls)
    assert (ok, reason) == (False, "TLS: certificate verify failed: unable to get local issuer certificate")
    assert stranger.requests == []


def test_without_a_ca_file_a_target_answers_whatever_its_certificate(stranger):
    assert probe_http(stranger.url(path="/health"), 5.0, LOOPBACK, OutboundTls()) == (True, "HTTP 200")
    assert probe_http(stranger.url(path="/health"), 5.0, LOOPBACK) == (True, "HTTP 200")


def test_the_pool_probes_with_the_nodes_outbound_tls(tls, target, stranger):
    pool = ProbePool(2, LOOPBACK, tls)
    targets = [
        ProbeTarget("ORDERS", name, 1, HTTP, server.url(path="/health"), "", 0, 5_000)
        for name, server in (("trusted", target), ("stranger", stranger))
    ]
    try:
        results = {result.instance_id: result for result in run_round(targets, pool, 10.0)}
    finally:
        pool.shutdown()
    assert (results["trusted"].ok, results["trusted"].reason) == (True, "HTTP 200")
    assert (results["stranger"].ok, results["stranger"].reason) == (
        False,
        "TLS: certificate verify failed: unable to get local issuer certificate",
    )
