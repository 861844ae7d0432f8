"""The xDS resources of a service name (registry/mesh/xds/resources.py): every field the control plane
maps from the catalog, and the cache that builds each resource once per change for every stream."""

from __future__ import annotations

import logging

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import config_source_pb2, health_check_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import json_format

from registry.mesh.catalog import MAX_WEIGHT, Catalog, endpoint_from_instance
from registry.mesh.xds import resources
from registry.mesh.xds.resources import CLUSTER, ENDPOINT, LISTENER, ROUTE, TYPE_URLS, ResourceCache
from tests.mesh.xds_harness import endpoint, instance


def assignment(endpoints, max_bytes=4096):
    built, _ = resources.cluster_load_assignment("orders", endpoints, max_bytes)
    return built


def eureka_metadata(lb_endpoint) -> dict:
    return json_format.MessageToDict(lb_endpoint.metadata.filter_metadata["eureka"])


def test_an_assignment_lists_every_endpoint_with_its_address_port_host_name_and_weight():
    built = assignment(
        [
            endpoint("ORDERS", "a", ip="10.0.0.1", port=8080, metadata={"weight": "7"}),
            endpoint("ORDERS", "b", ip="10.0.0.2", port=9090),
        ]
    )
    assert built.cluster_name == "orders"
    [locality] = built.endpoints
    first, second = locality.lb_endpoints
    assert first.endpoint.address.socket_address.address == "10.0.0.1"
    assert first.endpoint.address.socket_address.port_value == 8080
    assert first.endpoint.hostname == "a.example"
    assert first.load_balancing_weight.value == 7
    assert second.endpoint.address.socket_address.port_value == 9090
    assert second.load_balancing_weight.value == 100
    assert locality.load_balancing_weight.value == 107
    assert locality.priority == 0


def test_an_ipv6_instance_is_served_at_its_ipv6_address():
    built = assignment([endpoint("ORDERS", "a", ip="2001:db8:0:0::1", port=8443)])
    socket_address = built.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert (socket_address.address, socket_address.port_value) == ("2001:db8::1", 8443)


def test_an_instance_with_only_its_secure_port_enabled_is_served_on_it():
    raw = instance("ORDERS", "a", port=8080)
    raw["port"] = {"$": 8080, "@enabled": "false"}
    raw["securePort"] = {"$": 8443, "@enabled": "true"}
    built = assignment([endpoint_from_instance(raw)])
    assert built.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value == 8443


@pytest.mark.parametrize(
    ("status", "health"),
    [
        ("UP", health_check_pb2.HEALTHY),
        ("DOWN", health_check_pb2.UNHEALTHY),
        ("OUT_OF_SERVICE", health_check_pb2.DRAINING),
        ("STARTING", health_check_pb2.UNHEALTHY),
        ("UNKNOWN", health_check_pb2.UNHEALTHY),
        ("SOMETHING_ELSE", health_check_pb2.UNHEALTHY),
    ],
)
def test_an_endpoints_health_comes_from_its_status(status, health):
    built = assignment([endpoint("ORDERS", "a", status=status)])
    assert built.endpoints[0].lb_endpoints[0].health_status == health


def test_endpoints_are_grouped_by_region_and_zone_each_locality_weighted_by_its_endpoints():
    def zoned(instance_id, ip, zone, weight):
        return endpoint(
            "ORDERS",
            instance_id,
            ip=ip,
            metadata={"weight": str(weight)},
            dataCenterInfo={"name": "Amazon", "metadata": {"availability-zone": zone}},
        )

    built = assignment(
        [
            zoned("a", "10.0.0.1", "us-east-1a", 10),
            zoned("b", "10.0.0.2", "us-east-1b", 20),
            zoned("c", "10.0.0.3", "us-east-1a", 30),
            endpoint("ORDERS", "d", ip="10.0.0.4"),
        ]
    )
    localities = {
        (group.locality.region, group.locality.zone): (
            group.load_balancing_weight.value,
            [lb.endpoint.address.socket_address.address for lb in group.lb_endpoints],
        )
        for group in built.endpoints
    }
    assert localities == {
        ("", ""): (100, ["10.0.0.4"]),
        ("us-east-1", "us-east-1a"): (40, ["10.0.0.1", "10.0.0.3"]),
        ("us-east-1", "us-east-1b"): (20, ["10.0.0.2"]),
    }


def test_weights_too_big_to_sum_in_a_uint32_are_scaled_down_in_proportion():
    many = [
        endpoint("ORDERS", f"i{n}", ip=f"10.0.{n // 250}.{n % 250 + 1}", metadata={"weight": str(MAX_WEIGHT)})
        for n in range(5000)
    ]
    built = assignment(many + [endpoint("ORDERS", "small", ip="10.1.0.1", metadata={"weight": "1"})])
    [locality] = built.endpoints
    weights = [lb.load_balancing_weight.value for lb in locality.lb_endpoints]
    assert sum(weights) == locality.load_balancing_weight.value <= resources.WEIGHT_SUM_MAX < 2**32
    assert min(weights) == 1
    assert len(set(weights[:-1])) == 1 and weights[0] > 100_000


def test_two_instances_at_one_address_and_port_are_one_endpoint_the_up_one():
    built = assignment(
        [
            endpoint("ORDERS", "a", ip="10.0.0.1", status="DOWN"),
            endpoint("ORDERS", "b", ip="10.0.0.1", status="UP"),
            endpoint("ORDERS", "c", ip="10.0.0.1", port=9090, status="DOWN"),
        ]
    )
    lb_endpoints = built.endpoints[0].lb_endpoints
    assert [eureka_metadata(lb)["instanceId"] for lb in lb_endpoints] == ["b", "c"]


def test_an_endpoints_metadata_has_the_instance_and_its_metadata_as_strings():
    built = assignment([endpoint("ORDERS", "a", metadata={"zone": "z1", "version": "2.1", "weight": "5"})])
    assert eureka_metadata(built.endpoints[0].lb_endpoints[0]) == {
        "app": "ORDERS",
        "instanceId": "a",
        "hostName": "a.example",
        "status": "UP",
        "zone": "z1",
        "version": "2.1",
        "weight": "5",
    }


def test_metadata_over_the_cap_is_left_out_in_key_order_and_the_fixed_fields_stay():
    metadata = {"a": "1" * 10, "b": "2" * 50, "c": "3" * 10, "status": "mine", "d": "4" * 100}
    struct, left_out = resources.metadata_struct(endpoint("ORDERS", "x", metadata=metadata), 30)
    fields = json_format.MessageToDict(struct)
    # a (11 bytes) fits, b (51) does not, c (11) still does; d does not; "status" is the instance's own.
    assert fields == {
        "app": "ORDERS",
        "instanceId": "x",
        "hostName": "x.example",
        "status": "UP",
        "a": "1" * 10,
        "c": "3" * 10,
    }
    assert left_out == 3
    again, _ = resources.metadata_struct(
        endpoint("ORDERS", "x", metadata=dict(reversed(metadata.items()))), 30
    )
    assert again == struct


def test_huge_metadata_is_left_out_counted_and_logged_once_an_interval(caplog):
    catalog = Catalog()
    catalog.replace_all(
        [
            endpoint("ORDERS", f"i{n}", ip=f"10.0.0.{n + 1}", metadata={"blob": "x" * 1_000_000})
            for n in range(3)
        ]
    )
    cache = ResourceCache(catalog, metadata_max_bytes=4096)
    with caplog.at_level(logging.WARNING, logger="registry.mesh.xds"):
        built = cache.get(ENDPOINT, "orders")
        catalog.apply(puts=[endpoint("ORDERS", "i9", ip="10.0.0.9", metadata={"blob": "y" * 10_000})])
        cache.invalidate({"orders"})
        cache.get(ENDPOINT, "orders")
    assert len(built.sotw_piece) < 10_000
    assert cache.metadata_keys_left_out == 3 + 4
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 and "EUREKA_XDS_METADATA_MAX_BYTES" in lines[0], lines


def test_a_cluster_is_eds_over_ads_round_robin():
    cluster = resources.cluster("orders")
    assert cluster.name == "orders"
    assert cluster.type == cluster_pb2.Cluster.EDS
    assert cluster.lb_policy == cluster_pb2.Cluster.ROUND_ROBIN
    assert cluster.eds_cluster_config.eds_config.HasField("ads")
    assert cluster.eds_cluster_config.eds_config.resource_api_version == config_source_pb2.V3
    assert cluster.connect_timeout.seconds > 0


def test_a_listener_is_an_api_listener_whose_connection_manager_reads_its_routes_over_ads():
    listener = resources.listener("orders")
    assert listener.name == "orders"
    manager = hcm.HttpConnectionManager()
    assert listener.api_listener.api_listener.Unpack(manager)
    assert manager.stat_prefix == "orders"
    assert manager.rds.route_config_name == "orders"
    assert manager.rds.config_source.HasField("ads")
    assert manager.rds.config_source.resource_api_version == config_source_pb2.V3
    assert [f.name for f in manager.http_filters] == ["envoy.filters.http.router"]
    assert manager.http_filters[-1].typed_config.type_url.endswith(
        "envoy.extensions.filters.http.router.v3.Router"
    )


def test_a_route_configuration_sends_every_domain_and_path_to_the_cluster():
    routes = resources.route_configuration("orders")
    [host] = routes.virtual_hosts
    assert (routes.name, list(host.domains)) == ("orders", ["*"])
    [route] = host.routes
    assert route.match.prefix == "" and route.match.HasField("prefix")
    assert route.route.cluster == "orders"


@pytest.mark.parametrize(
    ("type_url", "message"),
    [
        (LISTENER, listener_pb2.Listener),
        (ROUTE, route_pb2.RouteConfiguration),
        (CLUSTER, cluster_pb2.Cluster),
        (ENDPOINT, endpoint_pb2.ClusterLoadAssignment),
    ],
)
def test_an_entrys_pieces_are_responses_carrying_the_resource(type_url, message):
    catalog = Catalog()
    catalog.replace_all([endpoint("ORDERS", "a")])
    entry = ResourceCache(catalog, 4096).get(type_url, "orders")
    [packed] = discovery_pb2.DiscoveryResponse.FromString(entry.sotw_piece).resources
    assert packed.type_url == type_url
    [resource] = discovery_pb2.DeltaDiscoveryResponse.FromString(entry.delta_piece).resources
    assert (resource.name, resource.version, resource.resource) == ("orders", entry.version, packed)
    unpacked = message()
    assert packed.Unpack(unpacked)
    assert (getattr(unpacked, "name", "") or unpacked.cluster_name) == "orders"


def test_the_cache_builds_each_resource_once_per_change_and_only_what_changed():
    catalog = Catalog()
    catalog.replace_all([endpoint(f"APP{n}", "a", ip=f"10.0.0.{n + 1}") for n in range(100)])
    cache = ResourceCache(catalog, 4096)
    names = cache.names()
    assert len(names) == 100
    for _stream in range(200):
        for name in names:
            for type_url in TYPE_URLS:
                assert cache.get(type_url, name) is not None
    assert cache.builds == 400
    before = cache.get(ENDPOINT, "app7")
    changed = catalog.apply(puts=[endpoint("APP7", "b", ip="10.9.9.9")])
    cache.invalidate(changed)
    for _stream in range(200):
        for type_url in TYPE_URLS:
            cache.get(type_url, "app7")
    assert cache.builds == 404
    assert cache.get(ENDPOINT, "app7").version != before.version
    # Only the endpoints changed: the other three are the same bytes, the same version.
    assert cache.get(CLUSTER, "app7").version == resources.entry("app7", resources.cluster("app7")).version


def test_a_resource_has_the_same_version_whenever_it_is_built_again():
    metadata = {f"key{n}": f"value{n}" for n in range(50)}
    catalog = Catalog()
    catalog.replace_all([endpoint("ORDERS", "a", metadata=metadata)])
    first = ResourceCache(catalog, 4096).get(ENDPOINT, "orders")
    catalog.replace_all([endpoint("ORDERS", "a", metadata=dict(reversed(metadata.items())))])
    assert ResourceCache(catalog, 4096).get(ENDPOINT, "orders") == first


def test_a_name_that_does_not_exist_has_no_resource():
    catalog = Catalog()
    catalog.replace_all([endpoint("ORDERS", "a")])
    cache = ResourceCache(catalog, 4096)
    assert [cache.get(type_url, "payments") for type_url in TYPE_URLS] == [None] * 4
    assert cache.get(LISTENER, "ORDERS") is None
    assert cache.get("type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig", "orders") is None
