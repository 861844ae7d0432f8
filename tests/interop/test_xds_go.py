"""The xDS control plane (registry/mesh/xds/) as Go sees it: Envoy's validation rules and grpc-go's
proxyless client (tests/interop/xds-go, built by tests/interop/xds_go.py).

* Every resource the control plane serves for a fleet of odd but legal instances (IPv6, secure port
  only, hundreds of metadata keys with long and non-ASCII values, Amazon availability zones, weights
  from 1 to the maximum, every status, VIP addresses shared by two apps), over a state-of-the-world
  and a delta ADS stream, passes go-control-plane's ``ValidateAll()``: the protoc-gen-validate rules
  Envoy applies to a resource before it uses it, inside every Any too.
* grpc-go's own xDS client ACKs every one of those resources (``xds-go accepts``: its CSDS account).
* The Envoy bootstrap of the docs (docs/examples/envoy-bootstrap.yaml) passes the same rules, and the
  cluster it routes to is one the control plane serves for the app ORDERS.
* grpc-go's ``xds:///orders`` resolver spreads its calls over three backends, stops calling the one
  taken OUT_OF_SERVICE, and calls it again once it is UP.

The control plane runs in the test process (its own thread and event loop, as in the mesh process),
fed by the test from Eureka-shaped instances (``endpoint_from_instance``). No node: the tests run once,
not once per HTTP server.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from registry.mesh.catalog import DOWN, OUT_OF_SERVICE, STARTING, UNKNOWN, Catalog, endpoint_from_instance
from tests.factories import instance_body
from tests.interop.conftest import wait_until
from tests.interop.xds_go import (  # noqa: F401 (xds_go_binary: the fixture)
    Validation,
    accepts,
    grpc_bootstrap,
    start_client,
    validate,
    xds_go_binary,
    xds_thread,
)
from tests.mesh.backend import serve as start_backend
from tests.mesh.xds_harness import XdsThread
from tests.ports import free_port
from tests.serving.tls_files import NodeTls

pytestmark = pytest.mark.interop

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
ENVOY_BOOTSTRAP = ROOT / "docs" / "examples" / "envoy-bootstrap.yaml"
KINDS = ("Cluster", "ClusterLoadAssignment", "Listener", "RouteConfiguration")
STREAMS = ("sotw", "delta")

# The fleet's big metadata: hundreds of keys, long values, keys and values beyond ASCII.
BIG_METADATA_KEYS = 300
LONG_VALUE = "v" * 700
UNICODE_KEY, UNICODE_VALUE = "régión-ключ-🙂", "значение ✓ 東京 😀" * 40
# Enough instances at the largest weight that their weights sum above 2^32-1, the bound Envoy and gRPC
# put on a locality's total.
HEAVY_INSTANCES = 4_400
MAX_WEIGHT = "1000000"

READER_AUTHORIZATION = "Basic cmVhZGVyOnNlY3JldA=="  # reader:secret

# The proxyless client's run: calls a second, and how long it calls.
CALLS_PER_S = 20
CLIENT_SECONDS = 10
# The stated time for traffic to leave an OUT_OF_SERVICE instance, and to come back once it is UP
# (the control plane pushes within a second; the margin is for a loaded machine).
MOVE_LIMIT_MS = 5_000
# How long the instance stays out after the traffic left it (no call may reach it meanwhile).
HOLD_OUT_S = 1.5
# Calls in a row, started after the change, that show the traffic has moved.
SETTLED_CALLS = 5


@pytest.fixture(scope="module", autouse=True)
def http_server() -> str:
    """These tests start no node: once, rather than once per HTTP server (tests/interop/conftest.py)."""
    return "none"


# ---------------------------------------------------------------------------------------- fleet


def eureka_instance(app: str, instance_id: str, host: str, port: int = 8080, **fields) -> dict:
    """An instance as ``GET /eureka/apps`` lists it (the Java codec's shape), ``fields`` replacing any."""
    raw = instance_body(app=app, host=host, port=port, instance_id=instance_id)["instance"]
    raw.update(copy.deepcopy(fields))
    return raw


def amazon(zone: str) -> dict:
    return {
        "@class": "com.netflix.appinfo.AmazonInfo",
        "name": "Amazon",
        "metadata": {"availability-zone": zone, "instance-id": "i-0abc", "local-ipv4": "10.1.0.5"},
    }


def odd_fleet() -> list[dict]:
    big_metadata = {f"key.{n:03d}": f"{n}-{LONG_VALUE}" for n in range(BIG_METADATA_KEYS)}
    big_metadata[UNICODE_KEY] = UNICODE_VALUE
    fleet = [
        # IPv4, plain port, Spring Cloud's zone metadata, a canary's weight.
        eureka_instance("ORDERS", "orders-1", "10.0.0.1", metadata={"zone": "zone-a", "weight": "1"}),
        # IPv6, the secure port only.
        eureka_instance(
            "ORDERS",
            "orders-2",
            "2001:db8::10",
            port={"$": 8080, "@enabled": "false"},
            securePort={"$": 8443, "@enabled": "true"},
        ),
        # An IPv6 link-local address with its zone index, both ports enabled (the secure one is served).
        eureka_instance(
            "ORDERS", "orders-3", "fe80::1%eth0", securePort={"$": 8443, "@enabled": "true"}, status=DOWN
        ),
        # Amazon data-centre info: zone us-east-1c, region us-east-1.
        eureka_instance(
            "ORDERS", "orders-4", "10.0.1.4", dataCenterInfo=amazon("us-east-1c"), status=STARTING
        ),
        eureka_instance(
            "ORDERS", "orders-5", "10.0.1.5", dataCenterInfo=amazon("eu-west-1a"), status=OUT_OF_SERVICE
        ),
        # Huge metadata, the largest weight, an unknown status.
        eureka_instance("ORDERS", "orders-6", "10.0.1.6", metadata={**big_metadata, "weight": MAX_WEIGHT}),
        eureka_instance(
            "ORDERS", "orders-7", "10.0.1.7", status=UNKNOWN, metadata={"weight": "not a number"}
        ),
        # Two apps sharing a VIP address (and each its own), one of them under two VIP addresses.
        eureka_instance(
            "PAYMENTS", "payments-1", "10.0.2.1", vipAddress="shared.vip", secureVipAddress="Shared.VIP"
        ),
        eureka_instance(
            "SHIPPING",
            "shipping-1",
            "10.0.3.1",
            vipAddress="shared.vip,shipping-api",
            secureVipAddress="shipping",
        ),
        # Weight 0 (raised to 1) and an over-large weight (lowered to the maximum).
        eureka_instance("SHIPPING", "shipping-2", "::ffff:10.0.3.2", metadata={"weight": "0"}),
        eureka_instance("SHIPPING", "shipping-3", "10.0.3.3", metadata={"weight": "99999999999"}),
        # A port at the top of its range, on an app whose name has a dash and digits.
        eureka_instance("LEGACY-APP-2", "legacy-1", "192.168.10.20", port=65535),
    ]
    # One big locality whose largest weights sum above 2^32-1.
    fleet += [
        eureka_instance(
            "HEAVY",
            f"heavy-{n}",
            f"10.{100 + n // 65536}.{n // 256 % 256}.{n % 256}",
            metadata={"weight": MAX_WEIGHT},
            dataCenterInfo=amazon("us-west-2b"),
        )
        for n in range(HEAVY_INSTANCES)
    ]
    return fleet


@pytest.fixture(scope="module")
def fleet_catalog() -> Catalog:
    catalog = Catalog()
    endpoints = [endpoint_from_instance(raw) for raw in odd_fleet()]
    assert None not in endpoints, "every instance of the fleet is one the catalog serves"
    catalog.replace_all(endpoints)
    return catalog


@pytest.fixture(scope="module")
def fleet_xds(fleet_catalog) -> Iterator[XdsThread]:
    # A metadata limit above the fleet's biggest, so that the huge metadata is served whole.
    with xds_thread(fleet_catalog, xds_metadata_max_bytes=1_000_000) as xds:
        yield xds


@pytest.fixture(scope="module")
def fleet_validation(xds_go_binary, fleet_xds) -> Validation:  # noqa: F811
    return validate(xds_go_binary, "-server", f"127.0.0.1:{fleet_xds.port}", "-dump", "-timeout", "30s")


def socket_addresses(assignment: dict) -> set[tuple[str, int]]:
    return {
        (
            lb["endpoint"]["address"]["socketAddress"]["address"],
            lb["endpoint"]["address"]["socketAddress"]["portValue"],
        )
        for locality in assignment.get("endpoints", [])
        for lb in locality.get("lbEndpoints", [])
    }


def lb_endpoints(assignment: dict) -> list[tuple[dict, dict]]:
    """(locality, lbEndpoint) pairs of an assignment in Envoy's JSON form."""
    return [
        (locality.get("locality", {}), lb)
        for locality in assignment.get("endpoints", [])
        for lb in locality.get("lbEndpoints", [])
    ]


# ---------------------------------------------------------------------------------------- tests


def test_every_resource_served_for_an_odd_fleet_passes_envoys_validation(fleet_validation, fleet_catalog):
    run = fleet_validation
    bad = [line for line in run.lines if not line.get("ok")]
    assert run.returncode == 0 and not bad, run.describe()
    names = set(fleet_catalog.names())
    assert {"orders", "payments", "shipping", "shipping-api", "shared.vip", "legacy-app-2", "heavy"} <= names
    for stream in STREAMS:
        for kind in KINDS:
            assert set(run.resources(stream, kind)) == names, f"{stream} {kind}\n{run.describe()}"
    responses = [line for line in run.lines if line["type"].endswith("DiscoveryResponse")]
    assert {line["stream"] for line in responses} == set(STREAMS)


def test_the_odd_instances_are_in_what_was_validated(fleet_validation):
    """The validation above covered the odd cases: they are in the resources it checked."""
    for stream in STREAMS:
        assignments = {
            name: line["resource"]
            for name, line in fleet_validation.resources(stream, "ClusterLoadAssignment").items()
        }
        orders = assignments["orders"]
        assert socket_addresses(orders) == {
            ("10.0.0.1", 8080),
            ("2001:db8::10", 8443),
            ("fe80::1", 8443),
            ("10.0.1.4", 8080),
            ("10.0.1.5", 8080),
            ("10.0.1.6", 8080),
            ("10.0.1.7", 8080),
        }
        pairs = lb_endpoints(orders)
        assert {locality.get("zone") for locality, _ in pairs} >= {"zone-a", "us-east-1c", "eu-west-1a"}
        assert {locality.get("region") for locality, _ in pairs} >= {"us-east-1", "eu-west-1"}
        # HEALTHY, UNHEALTHY (DOWN, STARTING, UNKNOWN) and DRAINING (OUT_OF_SERVICE).
        assert {lb.get("healthStatus") for _, lb in pairs} == {"HEALTHY", "UNHEALTHY", "DRAINING"}
        weights = {
            lb["endpoint"]["address"]["socketAddress"]["address"]: lb["loadBalancingWeight"]
            for _, lb in pairs
        }
        assert weights["10.0.0.1"] == 1 and weights["10.0.1.6"] == int(MAX_WEIGHT)
        big = next(
            lb for _, lb in pairs if lb["endpoint"]["address"]["socketAddress"]["address"] == "10.0.1.6"
        )
        metadata = big["metadata"]["filterMetadata"]["eureka"]
        assert len([key for key in metadata if key.startswith("key.")]) == BIG_METADATA_KEYS
        assert metadata[UNICODE_KEY] == UNICODE_VALUE
        # Two apps under one VIP address.
        assert socket_addresses(assignments["shared.vip"]) == {("10.0.2.1", 8080), ("10.0.3.1", 8080)}
        heavy = lb_endpoints(assignments["heavy"])
        assert len(heavy) == HEAVY_INSTANCES


def test_grpc_go_acks_every_resource_served_for_the_odd_fleet(
    xds_go_binary,  # noqa: F811
    fleet_xds,
    fleet_catalog,
    tmp_path,
):
    """Envoy's rules are not gRPC's (gRPC refuses a locality without its ID, or an address listed twice
    in one assignment): grpc-go's own xDS client subscribes to every service name and ACKs all it gets."""
    names = fleet_catalog.names()
    run = accepts(xds_go_binary, grpc_bootstrap(tmp_path, fleet_xds.port), names)
    bad = [line for line in run.lines if not line.get("ok")]
    assert run.returncode == 0 and not bad, run.describe()
    for kind in KINDS:
        assert {line["name"] for line in run.lines if line["type"] == kind} == set(names), run.describe()


def test_the_validator_reports_what_envoy_would_refuse(xds_go_binary, tmp_path):  # noqa: F811
    """The check can fail: a bootstrap broken inside an Any (the HttpConnectionManager of a filter),
    one with a port out of range, and one with a field Envoy does not know are each refused."""
    text = ENVOY_BOOTSTRAP.read_text()
    broken = {
        "StatPrefix": text.replace("stat_prefix: ingress", 'stat_prefix: ""'),
        "PortValue": text.replace("port_value: 9901", "port_value: 99010"),
        'unknown field "colour"': text.replace(
            "codec_type: AUTO", "codec_type: AUTO\n                colour: blue"
        ),
    }
    for expected, body in broken.items():
        assert body != text
        path = tmp_path / "broken.yaml"
        path.write_text(body)
        run = validate(xds_go_binary, "-bootstrap", str(path))
        assert run.returncode == 1, run.describe()
        assert [line["ok"] for line in run.lines] == [False], run.describe()
        assert expected in run.lines[0]["error"], run.describe()


def test_the_docs_envoy_bootstrap_passes_envoys_validation(xds_go_binary, fleet_validation):  # noqa: F811
    run = validate(xds_go_binary, "-bootstrap", str(ENVOY_BOOTSTRAP))
    assert run.returncode == 0, run.describe()
    assert run.lines == [{"type": "Bootstrap", "name": ENVOY_BOOTSTRAP.name, "ok": True, "error": None}]

    bootstrap = yaml.safe_load(ENVOY_BOOTSTRAP.read_text())
    dynamic = bootstrap["dynamic_resources"]
    assert dynamic["cds_config"] == {"ads": {}, "resource_api_version": "V3"}
    xds_cluster = dynamic["ads_config"]["grpc_services"][0]["envoy_grpc"]["cluster_name"]
    (static_xds,) = [c for c in bootstrap["static_resources"]["clusters"] if c["name"] == xds_cluster]
    address = static_xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert address["socket_address"] == {"address": "127.0.0.1", "port_value": 18000}
    (listener,) = bootstrap["static_resources"]["listeners"]
    assert listener["address"]["socket_address"]["port_value"] == 10000
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    (host,) = manager["route_config"]["virtual_hosts"]
    assert host["name"] == "orders"
    routed_to = host["routes"][0]["route"]["cluster"]
    assert bootstrap["admin"]["address"]["socket_address"]["port_value"] == 9901
    # The cluster the bootstrap routes to is the one the control plane serves for the app ORDERS, an
    # EDS cluster whose endpoints come over ADS, as the bootstrap's cds_config expects.
    cluster = fleet_validation.resources("sotw", "Cluster")[routed_to]["resource"]
    assert cluster["type"] == "EDS"
    assert cluster["edsClusterConfig"]["edsConfig"]["ads"] == {}


def test_the_validator_reads_a_control_plane_over_mtls_with_credentials(xds_go_binary, tmp_path):  # noqa: F811
    """``-tls-ca``/``-tls-cert``/``-tls-key`` and ``-header``: what a test against a control plane with
    client certificates or API accounts on passes; without them the stream is refused (exit 2)."""
    files = NodeTls.make(tmp_path)
    client_cert, client_key = files.client_cert_files("reader.example")
    tls = (files.cert_file.read_bytes(), files.key_file.read_bytes(), files.ca_file.read_bytes(), True)
    seen: list[tuple[str | None, bool]] = []

    async def authorize(authorization: str | None, certificate: bytes | None, address: str) -> str | None:
        seen.append((authorization, certificate is not None))
        return None if authorization == READER_AUTHORIZATION else "not a reader"

    catalog = Catalog()
    catalog.replace_all([endpoint_from_instance(eureka_instance("ORDERS", "orders-1", "10.0.0.1"))])
    tls_flags = ["-tls-ca", str(files.ca_file), "-tls-cert", str(client_cert), "-tls-key", str(client_key)]
    with xds_thread(catalog, {"authorize": authorize, "tls": tls}) as xds:
        server = ["-server", f"127.0.0.1:{xds.port}", "-timeout", "10s"]
        run = validate(xds_go_binary, *server, *tls_flags, "-header", f"authorization={READER_AUTHORIZATION}")
        assert run.returncode == 0, run.describe()
        assert set(run.resources("delta", "Cluster")) == {"orders"}
        assert seen and set(seen) == {(READER_AUTHORIZATION, True)}

        refused = validate(xds_go_binary, *server, *tls_flags, "-header", "authorization=Basic bm9ib2R5Og==")
        assert refused.returncode == 2 and "not a reader" in refused.stderr, refused.describe()
        no_certificate = validate(xds_go_binary, *server, "-tls-ca", str(files.ca_file))
        assert no_certificate.returncode == 2 and "Unavailable" in no_certificate.stderr, (
            no_certificate.describe()
        )


def test_grpc_go_moves_off_an_out_of_service_instance_and_back(xds_go_binary, tmp_path):  # noqa: F811
    ports = {f"who-{n}": free_port() for n in (1, 2, 3)}
    raw = {name: eureka_instance("ORDERS", name, "127.0.0.1", port=port) for name, port in ports.items()}
    backends = [start_backend(name, port) for name, port in ports.items()]
    catalog = Catalog()
    catalog.replace_all(endpoint_from_instance(instance) for instance in raw.values())
    leaving = "who-2"
    try:
        with xds_thread(catalog) as xds:
            client = start_client(
                xds_go_binary, "orders", grpc_bootstrap(tmp_path, xds.port), CLIENT_SECONDS, rate=CALLS_PER_S
            )
            try:
                for name in ports:
                    client.wait_for("call", backend=name, timeout=5)
                out_at = now_ms()
                catalog.apply(puts=[endpoint_from_instance({**raw[leaving], "status": OUT_OF_SERVICE})])
                wait_until(
                    lambda: settled(
                        calls(client.events_since()), out_at, lambda c: c.get("backend") != leaving
                    ),
                    timeout=MOVE_LIMIT_MS / 1000,
                    message=lambda: f"calls still reach {leaving} (out at {out_at}):\n{client.tail()}",
                    interval=0.05,
                )
                time.sleep(HOLD_OUT_S)
                back_at = now_ms()
                catalog.apply(puts=[endpoint_from_instance(raw[leaving])])
                wait_until(
                    lambda: any(
                        c["t"] >= back_at and c.get("backend") == leaving
                        for c in calls(client.events_since())
                    ),
                    timeout=MOVE_LIMIT_MS / 1000,
                    message=lambda: f"no call reached {leaving} again (UP at {back_at}):\n{client.tail()}",
                    interval=0.05,
                )
                assert client.process.wait(timeout=CLIENT_SECONDS + 30) == 0, client.tail()
                client.wait_for("eof", timeout=10)
            finally:
                client.close()
    finally:
        for backend in backends:
            backend.stop(0)

    made = sorted(calls(client.events_since()), key=lambda c: c["t"])
    first_answer = next(c["t"] for c in made if "backend" in c)
    failed = [c for c in made if c["t"] >= first_answer and "error" in c]
    assert not failed, f"calls failed once the client was answering: {failed[:5]}"

    # Out: after the last call that reached it, every call of the window went to the two others.
    window = [c for c in made if out_at <= c["t"] < back_at]
    to_leaving = [c["t"] for c in window if c["backend"] == leaving]
    moved_at = min((c["t"] for c in window if c["t"] > max(to_leaving, default=out_at - 1)), default=None)
    assert moved_at is not None, f"no call after {leaving} was taken out"
    moved_ms = moved_at - out_at
    after_move = [c for c in window if c["t"] >= moved_at]
    assert {c["backend"] for c in after_move} == set(ports) - {leaving}
    # ... for the whole time it stayed out after that.
    assert back_at - moved_at >= HOLD_OUT_S * 1000
    assert moved_ms <= MOVE_LIMIT_MS

    # Back: it is called again, and all three share the calls after that.
    back_ms = min(c["t"] for c in made if c["t"] >= back_at and c["backend"] == leaving) - back_at
    assert back_ms <= MOVE_LIMIT_MS
    assert {c["backend"] for c in made if c["t"] >= back_at + back_ms} == set(ports)
    log.info(
        "grpc-go: traffic left the OUT_OF_SERVICE instance %d ms after the change and came back %d ms "
        "after it was UP (%d calls)",
        moved_ms,
        back_ms,
        len(made),
    )


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def calls(events: list[dict]) -> list[dict]:
    return [event for event in events if event.get("event") == "call"]


def settled(made: list[dict], since_ms: int, condition) -> bool:
    """The last ``SETTLED_CALLS`` calls started after ``since_ms`` (and as many at least) all meet
    ``condition``."""
    recent = sorted((c for c in made if c["t"] >= since_ms), key=lambda c: c["t"])[-SETTLED_CALLS:]
    return len(recent) == SETTLED_CALLS and all(condition(c) for c in recent)
