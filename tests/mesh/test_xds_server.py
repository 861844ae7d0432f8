"""The xDS control plane on a real port (registry/mesh/xds/server.py), driven by a real gRPC client:
state-of-the-world and delta subscriptions, versions, nonces, ACK and NACK, wildcards, names that do
not exist, catalog changes reaching streams, and every limit and refusal."""

from __future__ import annotations

import dataclasses
import logging
import time

import grpc
import pytest
import trustme
from cryptography import x509
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.service.discovery.v3 import discovery_pb2

from registry.config.services import MeshConfig
from registry.mesh.catalog import Catalog
from registry.mesh.xds import server as server_module
from registry.mesh.xds.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE, ResourceCache
from registry.mesh.xds.server import MAX_NAMES, SERVICE, Forbidden
from tests.mesh.xds_harness import AdsClient, XdsThread, endpoint

pytestmark = pytest.mark.live

MESSAGES = {
    LISTENER: listener_pb2.Listener,
    ROUTE: route_pb2.RouteConfiguration,
    CLUSTER: cluster_pb2.Cluster,
    ENDPOINT: endpoint_pb2.ClusterLoadAssignment,
}
UNKNOWN_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"


def unpacked(response) -> dict:
    """A SotW response's resources by name."""
    found = {}
    for packed in response.resources:
        message = MESSAGES[response.type_url]()
        assert packed.Unpack(message)
        found[getattr(message, "name", "") or message.cluster_name] = message
    return found


def delta_names(response) -> list[str]:
    return sorted(resource.name for resource in response.resources)


def addresses(assignment) -> list[str]:
    return sorted(
        lb.endpoint.address.socket_address.address
        for group in assignment.endpoints
        for lb in group.lb_endpoints
    )


@pytest.fixture
def catalog():
    return Catalog()


@pytest.fixture
def make_server(catalog):
    started = []

    def make(**options):
        config = dataclasses.replace(
            MeshConfig(),
            xds_bind="127.0.0.1",
            xds_port=0,
            **{key: options.pop(key) for key in list(options) if key.startswith("xds_")},
        )
        server = XdsThread(catalog, config, **options)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def server(make_server):
    return make_server()


@pytest.fixture
def clients(server):
    opened = []

    def open_client(delta=False, **options):
        client = AdsClient(f"127.0.0.1:{server.port}", delta=delta, **options)
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        client.close()


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def fleet(catalog, *apps):
    catalog.replace_all(
        [
            endpoint(app, f"{app.lower()}-{n}", ip=f"10.0.{index}.{n + 1}")
            for index, app in enumerate(apps)
            for n in range(2)
        ]
    )


# ---------------------------------------------------------------------------- state of the world


def test_nothing_is_answered_before_the_first_snapshot_then_every_listener(catalog, clients):
    client = clients()
    client.send(LISTENER)
    assert client.quiet(0.5) == []
    fleet(catalog, "ORDERS", "PAYMENTS")
    response = client.recv()
    assert response.type_url == LISTENER
    assert sorted(unpacked(response)) == ["orders", "payments"]
    assert response.nonce and response.version_info


def test_an_acked_response_is_not_sent_again_and_a_wildcard_sees_names_come_and_go(catalog, clients):
    fleet(catalog, "ORDERS")
    client = clients()
    client.send(CLUSTER, ["*"])
    first = client.recv()
    assert sorted(unpacked(first)) == ["orders"]
    client.ack(first, ["*"])
    assert client.quiet() == []
    catalog.apply(puts=[endpoint("PAYMENTS", "p1", ip="10.1.0.1")])
    second = client.recv()
    assert sorted(unpacked(second)) == ["orders", "payments"]
    assert second.nonce != first.nonce and second.version_info != first.version_info
    client.ack(second, ["*"])
    catalog.apply(removes=[("ORDERS", "orders-0"), ("ORDERS", "orders-1")])
    third = client.recv()
    assert sorted(unpacked(third)) == ["payments"]
    cluster = unpacked(third)["payments"]
    assert cluster.type == cluster_pb2.Cluster.EDS


def test_listeners_named_are_sent_those_that_do_not_exist_left_out(catalog, clients):
    fleet(catalog, "ORDERS", "PAYMENTS")
    client = clients()
    client.send(LISTENER, ["orders", "nope"])
    response = client.recv()
    assert sorted(unpacked(response)) == ["orders"]
    client.ack(response, ["orders", "nope"])
    assert client.quiet() == []
    client.send(LISTENER, ["nope"], response_nonce=response.nonce, version_info=response.version_info)
    assert unpacked(client.recv()) == {}


def test_endpoints_are_sent_when_they_change_and_only_to_those_who_asked(catalog, clients):
    fleet(catalog, "ORDERS", "PAYMENTS")
    client = clients()
    client.send(ENDPOINT, ["orders", "nope"])
    first = client.recv()
    assert addresses(unpacked(first)["orders"]) == ["10.0.0.1", "10.0.0.2"]
    assert list(unpacked(first)) == ["orders"]
    client.ack(first, ["orders", "nope"])
    catalog.apply(puts=[endpoint("PAYMENTS", "p9", ip="10.9.0.9")])
    assert client.quiet() == []
    catalog.apply(puts=[endpoint("ORDERS", "orders-9", ip="10.0.0.9")])
    second = client.recv()
    assert addresses(unpacked(second)["orders"]) == ["10.0.0.1", "10.0.0.2", "10.0.0.9"]
    assert second.version_info != first.version_info


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
def test_assignments_come_a_part_at_a_time_so_a_slow_client_holds_one_part(
    catalog, clients, monkeypatch, delta
):
    """Every resource arrives, in responses of about MAX_RESPONSE_BYTES each, each with its nonce."""
    catalog.replace_all(
        [endpoint(f"APP{a}", f"i{n}", ip=f"10.{a}.0.{n + 1}") for a in range(12) for n in range(20)]
    )
    names = [f"app{a}" for a in range(12)]
    one = len(ResourceCache(catalog, 4096).get(ENDPOINT, "app0").sotw_piece)
    monkeypatch.setattr(server_module, "MAX_RESPONSE_BYTES", one * 3)
    client = clients(delta=delta)
    client.send(ENDPOINT, names)
    got: dict[str, object] = {}
    nonces = set()
    while len(got) < len(names):
        response = client.recv()
        nonces.add(response.nonce)
        found = {r.name: r for r in response.resources} if delta else unpacked(response)
        assert 1 <= len(found) <= 3
        got.update(found)
        client.ack(response, () if delta else names)
    # At most three a part: four parts or more, each its own response.
    assert sorted(got) == sorted(names) and 4 <= len(nonces) < len(names)
    assert client.quiet() == []


def test_a_request_with_a_stale_nonce_is_ignored(catalog, clients):
    fleet(catalog, "ORDERS", "PAYMENTS")
    client = clients()
    client.send(ENDPOINT, ["orders"])
    first = client.recv()
    client.ack(first, ["orders"])
    catalog.apply(puts=[endpoint("ORDERS", "orders-9", ip="10.0.0.9")])
    second = client.recv()
    client.send(ENDPOINT, ["orders", "payments"], response_nonce=first.nonce)
    assert client.quiet() == []
    client.ack(second, ["orders", "payments"])
    assert list(unpacked(client.recv())) == ["payments"]


def test_a_first_request_carrying_a_former_streams_nonce_is_answered(catalog, clients):
    fleet(catalog, "ORDERS")
    client = clients()
    client.send(ENDPOINT, ["orders"], version_info="0123", response_nonce="77")
    assert list(unpacked(client.recv())) == ["orders"]


def test_every_type_for_a_proxyless_client_in_the_order_it_asks(catalog, clients):
    fleet(catalog, "ORDERS")
    client = clients()
    for type_url in (LISTENER, ROUTE, CLUSTER, ENDPOINT):
        client.send(type_url, ["orders"])
        response = client.recv()
        assert response.type_url == type_url
        assert list(unpacked(response)) == ["orders"]
        client.ack(response, ["orders"])
    assert client.quiet() == []


def test_a_nack_is_logged_counted_and_not_answered_even_in_a_storm(catalog, server, clients, caplog):
    fleet(catalog, "ORDERS")
    client = clients()
    client.send(ENDPOINT, ["orders"])
    first = client.recv()
    wait_for(lambda: server.server.pushes == 1)
    with caplog.at_level(logging.WARNING, logger="registry.mesh.xds"):
        for _ in range(500):
            client.nack(first, ["orders"], reason="endpoint weight rejected")
        assert client.quiet(0.5) == []
        wait_for(lambda: server.server.nacks == 500)
    assert server.server.nacks == 500
    assert server.server.pushes == 1
    lines = [record.getMessage() for record in caplog.records if "rejected" in record.getMessage()]
    assert len(lines) == 1, lines
    assert "endpoint weight rejected" in lines[0] and "EDS" in lines[0] and "test-client" in lines[0]
    # The rejected version is not sent again; a new one is.
    catalog.apply(puts=[endpoint("ORDERS", "orders-9", ip="10.0.0.9")])
    second = client.recv()
    assert addresses(unpacked(second)["orders"]) == ["10.0.0.1", "10.0.0.2", "10.0.0.9"]


def test_a_nacked_listener_is_not_sent_again_while_the_others_change(catalog, clients):
    fleet(catalog, "ORDERS")
    client = clients()
    client.send(LISTENER)
    first = client.recv()
    client.nack(first)
    catalog.apply(puts=[endpoint("PAYMENTS", "p1", ip="10.1.0.1")])
    second = client.recv()
    # The listener the client rejected is left out (it accepted none before); the new one is sent.
    assert sorted(unpacked(second)) == ["payments"]


def test_a_catalog_change_reaches_every_subscribed_stream_within_a_second(catalog, server, clients):
    fleet(catalog, *[f"APP{n}" for n in range(20)])
    streams = [clients() for _ in range(20)]
    names = [f"app{n}" for n in range(20)]
    for client in streams:
        client.send(ENDPOINT, names)
        client.ack(client.recv(), names)
    builds = server.server.cache.builds
    started = time.monotonic()
    catalog.apply(puts=[endpoint(f"APP{n}", "new", ip=f"10.5.{n}.1") for n in range(20)])
    for client in streams:
        response = client.recv()
        assert sorted(unpacked(response)) == sorted(names)
    elapsed = time.monotonic() - started
    print(f"a change reached 20 streams of 20 names in {elapsed * 1000:.0f} ms")  # noqa: T201 (shown with -s)
    assert elapsed < 1.0
    # Built once for all the streams: one assignment per name.
    assert server.server.cache.builds - builds == 20


# ---------------------------------------------------------------------------- delta


def test_delta_sends_what_is_subscribed_and_removes_what_does_not_exist(catalog, clients):
    fleet(catalog, "ORDERS", "PAYMENTS")
    client = clients(delta=True)
    client.send(ENDPOINT, ["orders", "nope"])
    first = client.recv()
    assert delta_names(first) == ["orders"]
    assert list(first.removed_resources) == ["nope"]
    assert first.resources[0].version
    client.ack(first)
    assert client.quiet() == []
    catalog.apply(removes=[("ORDERS", "orders-0"), ("ORDERS", "orders-1")])
    gone = client.recv()
    assert (delta_names(gone), list(gone.removed_resources)) == ([], ["orders"])
    client.ack(gone)
    catalog.apply(puts=[endpoint("ORDERS", "orders-0", ip="10.0.0.1")])
    back = client.recv()
    assert delta_names(back) == ["orders"] and back.nonce not in (first.nonce, gone.nonce)


def test_delta_wildcard_sends_only_what_changed(catalog, clients):
    fleet(catalog, "ORDERS", "PAYMENTS")
    client = clients(delta=True)
    client.send(CLUSTER, ["*"])
    first = client.recv()
    assert delta_names(first) == ["orders", "payments"]
    client.ack(first)
    catalog.apply(puts=[endpoint("STOCK", "s1", ip="10.3.0.1")])
    added = client.recv()
    assert (delta_names(added), list(added.removed_resources)) == (["stock"], [])
    client.ack(added)
    # New endpoints leave the cluster as it was: nothing to send.
    catalog.apply(puts=[endpoint("ORDERS", "orders-9", ip="10.0.0.9")])
    assert client.quiet() == []
    catalog.apply(removes=[("PAYMENTS", "payments-0"), ("PAYMENTS", "payments-1")])
    removed = client.recv()
    assert (delta_names(removed), list(removed.removed_resources)) == ([], ["payments"])


def test_delta_honours_the_versions_a_reconnecting_client_has(catalog, server, clients):
    fleet(catalog, "ORDERS", "PAYMENTS")
    first = clients(delta=True)
    first.send(ENDPOINT, ["orders", "payments"])
    versions = {resource.name: resource.version for resource in first.recv().resources}
    first.close()
    pushed = server.server.changes
    catalog.apply(puts=[endpoint("PAYMENTS", "payments-9", ip="10.1.0.9")])
    wait_for(lambda: server.server.changes > pushed)
    again = clients(delta=True)
    again.send(
        ENDPOINT,
        ["orders", "payments", "gone"],
        initial_resource_versions={**versions, "gone": "0123"},
    )
    response = again.recv()
    assert delta_names(response) == ["payments"]
    assert list(response.removed_resources) == ["gone"]
    assert response.resources[0].version != versions["payments"]


def test_delta_unsubscribed_names_are_no_longer_sent(catalog, clients):
    fleet(catalog, "ORDERS", "PAYMENTS")
    client = clients(delta=True)
    client.send(ENDPOINT, ["orders", "payments"])
    client.ack(client.recv())
    client.send(ENDPOINT, resource_names_unsubscribe=["orders"])
    catalog.apply(puts=[endpoint("ORDERS", "orders-9", ip="10.0.0.9")])
    assert client.quiet() == []
    catalog.apply(puts=[endpoint("PAYMENTS", "payments-9", ip="10.1.0.9")])
    assert delta_names(client.recv()) == ["payments"]


def test_delta_a_nacked_version_is_not_sent_again_a_changed_one_is(catalog, server, clients):
    fleet(catalog, "ORDERS")
    client = clients(delta=True)
    client.send(ENDPOINT, ["orders"])
    first = client.recv()
    for _ in range(100):
        client.nack(first, reason="no")
    assert client.quiet(0.5) == []
    catalog.apply(puts=[endpoint("ORDERS", "orders-9", ip="10.0.0.9")])
    second = client.recv()
    assert second.resources[0].version != first.resources[0].version
    assert server.server.nacks == 100


# ---------------------------------------------------------------------------- hostile input and limits


def test_an_unknown_type_gets_no_answer_and_the_stream_goes_on(catalog, server, clients, caplog):
    fleet(catalog, "ORDERS")
    client = clients()
    with caplog.at_level(logging.WARNING, logger="registry.mesh.xds"):
        for _ in range(50):
            client.send(UNKNOWN_TYPE, ["x"])
        client.send("", ["x"])
        assert client.quiet() == []
    client.send(LISTENER, ["orders"])
    assert list(unpacked(client.recv())) == ["orders"]
    assert server.server.unknown_types == 51
    assert len([r for r in caplog.records if "is not served" in r.getMessage()]) == 1


def raw_stream(port: int, messages: list[bytes]):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    call = channel.stream_stream(f"/{SERVICE}/StreamAggregatedResources")(iter(messages))
    try:
        with pytest.raises(grpc.RpcError) as raised:
            list(call)
        return raised.value
    finally:
        channel.close()


def test_a_malformed_request_ends_the_stream_with_invalid_argument(catalog, server):
    fleet(catalog, "ORDERS")
    error = raw_stream(server.port, [b"\xff\xff\xff\xff"])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a DiscoveryRequest" in error.details()
    assert server.server.refused == {"xds_malformed": 1}


def test_a_request_over_the_size_limit_is_refused_by_grpc(catalog, server, clients):
    fleet(catalog, "ORDERS")
    huge = discovery_pb2.DiscoveryRequest(type_url=LISTENER, resource_names=["x" * (5 * 1024 * 1024)])
    error = raw_stream(server.port, [huge.SerializeToString()])
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    client = clients()
    client.send(LISTENER)
    assert list(unpacked(client.recv())) == ["orders"]


@pytest.mark.parametrize("delta", [False, True])
def test_too_many_names_in_a_request_end_the_stream(catalog, server, clients, delta):
    fleet(catalog, "ORDERS")
    client = clients(delta=delta)
    client.send(ENDPOINT, [f"n{i}" for i in range(MAX_NAMES + 1)])
    error = client.ended()
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {MAX_NAMES}" in error.details()


def test_delta_subscriptions_over_the_cap_end_the_stream(catalog, server, clients):
    fleet(catalog, "ORDERS")
    client = clients(delta=True)
    client.send(ENDPOINT, [f"a{i}" for i in range(MAX_NAMES // 2 + 1)])
    client.send(ENDPOINT, [f"b{i}" for i in range(MAX_NAMES // 2 + 1)])
    error = client.ended()
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "subscribed on one stream" in error.details()


def test_streams_over_the_per_address_cap_are_refused(catalog, make_server):
    fleet(catalog, "ORDERS")
    server = make_server(xds_streams_per_address_max=3)
    opened = [AdsClient(f"127.0.0.1:{server.port}") for _ in range(3)]
    try:
        for client in opened:
            client.send(LISTENER)
            client.recv()
        extra = AdsClient(f"127.0.0.1:{server.port}")
        error = extra.ended()
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "EUREKA_XDS_STREAMS_PER_ADDRESS_MAX" in error.details()
        assert server.server.refused == {"xds_streams_per_address": 1}
        assert server.server.streams_open == 3
        opened[0].close()
        wait_for(lambda: server.server.streams_open == 2)
        again = AdsClient(f"127.0.0.1:{server.port}")
        opened.append(again)
        again.send(LISTENER)
        assert list(unpacked(again.recv())) == ["orders"]
    finally:
        for client in opened:
            client.close()


def test_streams_over_the_total_cap_are_refused(catalog, make_server):
    fleet(catalog, "ORDERS")
    server = make_server(xds_streams_max=2)
    opened = [AdsClient(f"127.0.0.1:{server.port}", delta=True) for _ in range(2)]
    try:
        for client in opened:
            client.send(LISTENER)
            client.recv()
        error = AdsClient(f"127.0.0.1:{server.port}").ended()
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "EUREKA_XDS_STREAMS_MAX" in error.details()
    finally:
        for client in opened:
            client.close()


# ---------------------------------------------------------------------------- access


class FakeAuthorize:
    def __init__(self):
        self.calls: list[tuple[str | None, bytes | None]] = []

    async def __call__(self, authorization, certificate, address):
        assert address == "127.0.0.1"
        self.calls.append((authorization, certificate))
        if certificate is not None or authorization == "Basic cmVhZGVyOnNlY3JldA==":
            return None
        if authorization is None:
            return "credentials needed to read the registry"
        if authorization == "Basic bm9ib2R5Om5v":
            return Forbidden("this account may not read the registry")
        return "wrong user name or password"


def test_a_stream_without_credentials_is_refused_unauthenticated(catalog, make_server):
    fleet(catalog, "ORDERS")
    authorize = FakeAuthorize()
    server = make_server(authorize=authorize)
    error = AdsClient(f"127.0.0.1:{server.port}").ended()
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == "credentials needed to read the registry"
    assert authorize.calls == [(None, None)]


def test_a_stream_of_an_account_that_may_not_read_is_refused_permission_denied(catalog, make_server):
    fleet(catalog, "ORDERS")
    server = make_server(authorize=FakeAuthorize())
    client = AdsClient(f"127.0.0.1:{server.port}", metadata=(("authorization", "Basic bm9ib2R5Om5v"),))
    error = client.ended()
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == "this account may not read the registry"
    assert server.server.refused == {"xds_permission_denied": 1}


def test_a_stream_with_wrong_credentials_is_refused_unauthenticated(catalog, make_server):
    fleet(catalog, "ORDERS")
    server = make_server(authorize=FakeAuthorize())
    client = AdsClient(f"127.0.0.1:{server.port}", metadata=(("authorization", "Basic d3Jvbmc6bm8="),))
    error = client.ended()
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == "wrong user name or password"
    assert server.server.refused == {"xds_unauthenticated": 1}


def test_a_stream_with_accepted_credentials_is_served_and_asked_once(catalog, make_server):
    fleet(catalog, "ORDERS")
    authorize = FakeAuthorize()
    server = make_server(authorize=authorize)
    client = AdsClient(
        f"127.0.0.1:{server.port}", metadata=(("authorization", "Basic cmVhZGVyOnNlY3JldA=="),)
    )
    try:
        for type_url in (LISTENER, CLUSTER):
            client.send(type_url)
            client.ack(client.recv())
        assert authorize.calls == [("Basic cmVhZGVyOnNlY3JldA==", None)]
    finally:
        client.close()


def test_a_failing_access_check_refuses_the_stream_unavailable(catalog, make_server):
    fleet(catalog, "ORDERS")

    async def broken(authorization, certificate, address):
        raise ConnectionError("the accounts database is down")

    server = make_server(authorize=broken)
    error = AdsClient(f"127.0.0.1:{server.port}").ended()
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "accounts database" not in error.details()
    client = AdsClient(f"127.0.0.1:{server.port}")
    assert client.ended().code() == grpc.StatusCode.UNAVAILABLE
    assert server.server.refused == {"xds_access_check_failed": 2}
    assert server.server.streams_open == 0


@pytest.fixture(scope="module")
def certificates():
    ca = trustme.CA()
    server_cert = ca.issue_cert("localhost", "127.0.0.1")
    client_cert = ca.issue_cert("reader@mesh.example")
    return ca, server_cert, client_cert


def test_tls_with_a_client_certificate_hands_it_to_authorize(catalog, make_server, certificates):
    ca, server_cert, client_cert = certificates
    fleet(catalog, "ORDERS")
    authorize = FakeAuthorize()
    chain = b"".join(blob.bytes() for blob in server_cert.cert_chain_pems)
    server = make_server(
        authorize=authorize, tls=(chain, server_cert.private_key_pem.bytes(), ca.cert_pem.bytes(), True)
    )
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.cert_pem.bytes(),
        private_key=client_cert.private_key_pem.bytes(),
        certificate_chain=b"".join(blob.bytes() for blob in client_cert.cert_chain_pems),
    )
    channel = grpc.secure_channel(f"localhost:{server.port}", credentials)
    client = AdsClient("", channel=channel)
    try:
        client.send(LISTENER)
        assert list(unpacked(client.recv())) == ["orders"]
    finally:
        client.close()
    [(authorization, der)] = authorize.calls
    assert authorization is None
    certificate = x509.load_der_x509_certificate(der)
    assert certificate == x509.load_pem_x509_certificate(client_cert.cert_chain_pems[0].bytes())


def test_tls_requiring_a_client_certificate_refuses_a_client_without_one(catalog, make_server, certificates):
    ca, server_cert, _ = certificates
    fleet(catalog, "ORDERS")
    authorize = FakeAuthorize()
    chain = b"".join(blob.bytes() for blob in server_cert.cert_chain_pems)
    server = make_server(
        authorize=authorize, tls=(chain, server_cert.private_key_pem.bytes(), ca.cert_pem.bytes(), True)
    )
    channel = grpc.secure_channel(
        f"localhost:{server.port}", grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
    )
    client = AdsClient("", channel=channel)
    try:
        client.send(LISTENER)
        error = client.ended(10)
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert authorize.calls == []
    finally:
        client.close()
