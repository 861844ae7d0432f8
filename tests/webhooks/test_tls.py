"""Webhook deliveries to https:// receivers: the receiver's certificate verified with the node's
outbound TLS (EUREKA_OUTBOUND_CA_FILE, else the system's trust store), the node's own certificate
never presented, and a receiver that does not verify sent nothing, with the reason in the log. Real
database, real HTTPS receiver on loopback."""

from __future__ import annotations

import pytest
import trustme

from registry.domain.outbound_tls import OutboundTls
from registry.webhooks.models import WebhookDelivery
from registry.webhooks.sender import deliver_due, new_client
from tests.factories import instance_body
from tests.tls_servers import FakeTlsServer, outbound_tls

from .conftest import subscribe

pytestmark = pytest.mark.django_db
Status = WebhookDelivery.Status
UNKNOWN_CA = "TLS: certificate verify failed: unable to get local issuer certificate"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls(tmp_path, ca) -> OutboundTls:
    return outbound_tls(tmp_path, ca)


@pytest.fixture
def https_receiver(ca):
    # It would take a client certificate of the node's CA: the sender must not present one.
    server = FakeTlsServer(ca, client_ca=ca)
    yield server
    server.close()


def queue_one(api, relay, url: str) -> None:
    subscribe(url)
    relay.reload()
    body = instance_body(app="ORDERS", host="10.0.0.1")
    assert api.post("/eureka/apps/ORDERS", body, format="json").status_code == 204
    assert relay.flush() == 1


def test_an_https_receiver_is_verified_with_the_ca_file_and_sees_no_client_certificate(
    api, relay, config, tls, https_receiver
):
    queue_one(api, relay, https_receiver.url(path="/hook"))
    with new_client(config, tls) as http:
        assert deliver_due(http, config) == 1
    (seen,) = https_receiver.requests
    assert (seen.method, seen.path, seen.client_cn) == ("POST", "/hook", None)
    assert b'"app":"ORDERS"' in seen.body
    assert WebhookDelivery.objects.get().status == Status.DELIVERED


def test_a_receiver_whose_certificate_does_not_verify_is_sent_nothing_and_the_reason_is_kept(
    api, relay, config, tls
):
    stranger = FakeTlsServer(trustme.CA())
    try:
        queue_one(api, relay, stranger.url(path="/hook"))
        with new_client(config, tls) as http:
            deliver_due(http, config)
    finally:
        stranger.close()
    assert stranger.requests == []
    row = WebhookDelivery.objects.get()
    assert (row.status, row.attempts, row.last_error) == (Status.PENDING, 1, UNKNOWN_CA)


def test_without_a_ca_file_receivers_are_verified_against_the_systems_trust_store(
    api, relay, config, https_receiver
):
    queue_one(api, relay, https_receiver.url(path="/hook"))
    with new_client(config) as http:  # the settings' outbound TLS: no CA file named
        deliver_due(http, config)
    assert https_receiver.requests == []
    assert WebhookDelivery.objects.get().last_error.startswith("TLS: certificate verify failed")
