"""The four xDS resources of a service name, built from the catalog once per change and shared by
every stream. Plain Python, no Django.

For each service name N (registry/mesh/catalog.py) the control plane serves:

* EDS ``ClusterLoadAssignment`` ``N``: its instances as endpoints, in one ``LocalityLbEndpoints`` per
  (region, zone), each locality weighted by the sum of its endpoints' weights (proxyless gRPC skips a
  locality without a weight); an endpoint's health from the instance's status (``HEALTH``), its weight
  from the weight metadata key, its metadata under ``filter_metadata["eureka"]`` (``metadata_struct``);
* CDS ``Cluster`` ``N``: EDS-typed, its endpoints from EDS over ADS, round robin;
* LDS ``Listener`` ``N``: an API listener (what gRPC resolves for ``xds:///N``) whose
  HttpConnectionManager reads RouteConfiguration ``N`` over ADS, the router its only filter;
* RDS ``RouteConfiguration`` ``N``: one virtual host for every domain, every path to cluster ``N``.

``ResourceCache`` keeps each resource serialized, with its version (a hash of those bytes) and the
pieces of a response that carry it, keyed by (type, name); the catalog's changed names drop their
entries, and the next stream to ask builds them again, once for all streams.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2, health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import api_listener_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2, duration_pb2, struct_pb2

from registry.domain.refusals import RefusalLines, refusal_fields, since_last_line
from registry.mesh.catalog import DOWN, OUT_OF_SERVICE, UP, Catalog, Endpoint

log = logging.getLogger("registry.mesh.xds")

LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
TYPE_URLS = (LISTENER, ROUTE, CLUSTER, ENDPOINT)
# Short names for logs and counters.
KIND = {LISTENER: "LDS", ROUTE: "RDS", CLUSTER: "CDS", ENDPOINT: "EDS"}

# The key of the endpoint metadata this registry writes (``filter_metadata["eureka"]``), and the fields
# every endpoint has there whatever the instance's metadata says (an instance metadata key of the same
# name is left out).
METADATA_NAMESPACE = "eureka"
FIXED_METADATA = ("app", "instanceId", "hostName", "status")

# UP serves; DOWN is unhealthy; OUT_OF_SERVICE drains (Envoy lets its open requests finish, gRPC sends
# it no new ones); STARTING and UNKNOWN are listed but not used: unhealthy.
HEALTH = {
    UP: health_check_pb2.HEALTHY,
    DOWN: health_check_pb2.UNHEALTHY,
    OUT_OF_SERVICE: health_check_pb2.DRAINING,
}
# Envoy and gRPC refuse an assignment whose locality weights sum above a uint32; the weights are scaled
# down to stay well within it.
WEIGHT_SUM_MAX = 2**31
CONNECT_TIMEOUT_S = 5


def _ads() -> config_source_pb2.ConfigSource:
    """Resources of the other types come over the same ADS stream (what gRPC requires)."""
    return config_source_pb2.ConfigSource(
        ads=config_source_pb2.AggregatedConfigSource(), resource_api_version=config_source_pb2.V3
    )


def _packed(message) -> any_pb2.Any:
    # Deterministic: a resource's version is a hash of these bytes, and map fields (the metadata's
    # Struct) could otherwise come out in another order for the same resource.
    packed = any_pb2.Any()
    packed.Pack(message, deterministic=True)
    return packed


def metadata_struct(endpoint: Endpoint, max_bytes: int) -> tuple[struct_pb2.Struct, int]:
    """The endpoint's ``eureka`` metadata, and how many instance metadata keys were left out.

    The fixed fields first; then the instance's metadata in key order, each pair taken while the
    UTF-8 bytes of the keys and values taken so far stay within ``max_bytes`` (a pair that does not
    fit is left out, a later smaller one may still be taken): the same instance always gives the
    same metadata."""
    fields = {
        "app": endpoint.app,
        "instanceId": endpoint.instance_id,
        "hostName": endpoint.host_name,
        "status": endpoint.status,
    }
    left_out = 0
    used = 0
    for key in sorted(endpoint.metadata):
        if key in fields:
            left_out += 1
            continue
        value = endpoint.metadata[key]
        size = len(key.encode()) + len(value.encode())
        if used + size > max_bytes:
            left_out += 1
            continue
        used += size
        fields[key] = value
    struct = struct_pb2.Struct()
    struct.update(fields)
    return struct, left_out


def _deduplicated(endpoints: Iterable[Endpoint]) -> list[Endpoint]:
    """One endpoint per address and port: gRPC refuses an assignment that lists one twice (two instances
    registered with the same address and port). The UP one is kept, else the first in catalog order."""
    kept: dict[tuple[str, int], Endpoint] = {}
    for endpoint in endpoints:
        key = (endpoint.address, endpoint.port)
        if key not in kept or (endpoint.up and not kept[key].up):
            kept[key] = endpoint
    return list(kept.values())


def _scaled_weights(endpoints: list[Endpoint]) -> list[int]:
    weights = [endpoint.weight for endpoint in endpoints]
    total = sum(weights)
    if total <= WEIGHT_SUM_MAX:
        return weights
    return [max(1, weight * WEIGHT_SUM_MAX // total) for weight in weights]


def cluster_load_assignment(
    name: str, endpoints: Iterable[Endpoint], metadata_max_bytes: int
) -> tuple[endpoint_pb2.ClusterLoadAssignment, int]:
    """EDS: the service's endpoints by locality; and how many metadata keys were left out in all."""
    served = _deduplicated(endpoints)
    by_locality: dict[tuple[str, str], endpoint_components_pb2.LocalityLbEndpoints] = {}
    left_out = 0
    for endpoint, weight in zip(served, _scaled_weights(served), strict=True):
        locality = by_locality.get((endpoint.region, endpoint.zone))
        if locality is None:
            locality = endpoint_components_pb2.LocalityLbEndpoints(
                locality=base_pb2.Locality(region=endpoint.region, zone=endpoint.zone)
            )
            by_locality[(endpoint.region, endpoint.zone)] = locality
        struct, trimmed = metadata_struct(endpoint, metadata_max_bytes)
        left_out += trimmed
        lb_endpoint = locality.lb_endpoints.add(
            endpoint=endpoint_components_pb2.Endpoint(
                address=address_pb2.Address(
                    socket_address=address_pb2.SocketAddress(
                        address=endpoint.address, port_value=endpoint.port
                    )
                ),
                hostname=endpoint.host_name,
            ),
            health_status=HEALTH.get(endpoint.status, health_check_pb2.UNHEALTHY),
        )
        lb_endpoint.load_balancing_weight.value = weight
        lb_endpoint.metadata.filter_metadata[METADATA_NAMESPACE].CopyFrom(struct)
        locality.load_balancing_weight.value += weight
    assignment = endpoint_pb2.ClusterLoadAssignment(cluster_name=name)
    for key in sorted(by_locality):
        assignment.endpoints.append(by_locality[key])
    return assignment, left_out


def cluster(name: str) -> cluster_pb2.Cluster:
    """CDS: an EDS cluster whose assignment comes over ADS under the same name."""
    return cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.EDS,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=_ads()),
        lb_policy=cluster_pb2.Cluster.ROUND_ROBIN,
        connect_timeout=duration_pb2.Duration(seconds=CONNECT_TIMEOUT_S),
    )


def listener(name: str) -> listener_pb2.Listener:
    """LDS: the API listener proxyless gRPC asks for when it resolves ``xds:///name``: an
    HttpConnectionManager taking its routes from RDS over ADS, with the router as its (last) filter."""
    manager = hcm.HttpConnectionManager(
        stat_prefix=name,
        rds=hcm.Rds(config_source=_ads(), route_config_name=name),
        http_filters=[
            hcm.HttpFilter(name="envoy.filters.http.router", typed_config=_packed(router_pb2.Router()))
        ],
    )
    return listener_pb2.Listener(
        name=name, api_listener=api_listener_pb2.ApiListener(api_listener=_packed(manager))
    )


def route_configuration(name: str) -> route_pb2.RouteConfiguration:
    """RDS: any authority, any path, to cluster ``name``."""
    route = route_components_pb2.Route(
        match=route_components_pb2.RouteMatch(prefix=""),
        route=route_components_pb2.RouteAction(cluster=name),
    )
    host = route_components_pb2.VirtualHost(name=name, domains=["*"], routes=[route])
    return route_pb2.RouteConfiguration(name=name, virtual_hosts=[host])


@dataclass(frozen=True, slots=True)
class Entry:
    """One resource as every stream sends it: its version (a hash of its bytes) and its pieces of a
    state-of-the-world and of a delta response. A serialized protobuf message followed by another is
    the two merged, and a repeated field merges by appending: a response is its header's bytes
    followed by the pieces of its resources, with no message built per stream."""

    name: str
    version: str
    sotw_piece: bytes  # DiscoveryResponse{resources: [Any]}, serialized
    delta_piece: bytes  # DeltaDiscoveryResponse{resources: [Resource{name, version, Any}]}, serialized


def entry(name: str, message) -> Entry:
    packed = _packed(message)
    version = hashlib.blake2b(packed.value, digest_size=8).hexdigest()
    return Entry(
        name=name,
        version=version,
        sotw_piece=discovery_pb2.DiscoveryResponse(resources=[packed]).SerializeToString(),
        delta_piece=discovery_pb2.DeltaDiscoveryResponse(
            resources=[discovery_pb2.Resource(name=name, version=version, resource=packed)]
        ).SerializeToString(),
    )


class ResourceCache:
    """Entries by (type URL, name), built on first use after each change of that name; used on the
    event loop only. ``builds`` counts resources built (tests check that streams share them)."""

    def __init__(
        self,
        catalog: Catalog,
        metadata_max_bytes: int,
        notes: RefusalLines | None = None,
    ):
        self.catalog = catalog
        self.metadata_max_bytes = metadata_max_bytes
        self._entries: dict[tuple[str, str], Entry | None] = {}
        self._names: list[str] | None = None
        self._name_set: frozenset[str] | None = None
        self._notes = notes or RefusalLines()
        self.builds = 0
        self.metadata_keys_left_out = 0

    def invalidate(self, names: Iterable[str]) -> None:
        self._names = None
        self._name_set = None
        for name in names:
            for type_url in TYPE_URLS:
                self._entries.pop((type_url, name), None)

    def names(self) -> list[str]:
        """Every service name (what a wildcard subscription gets), sorted."""
        if self._names is None:
            self._names = self.catalog.names()
        return self._names

    def name_set(self) -> frozenset[str]:
        if self._name_set is None:
            self._name_set = frozenset(self.names())
        return self._name_set

    def get(self, type_url: str, name: str) -> Entry | None:
        """The resource, or None when the service name does not exist (or the type is not served)."""
        key = (type_url, name)
        if key in self._entries:
            return self._entries[key]
        built = self._build(type_url, name)
        self._entries[key] = built
        return built

    def _build(self, type_url: str, name: str) -> Entry | None:
        endpoints = self.catalog.endpoints(name) if name == name.lower() else ()
        if not endpoints:
            return None
        self.builds += 1
        if type_url == ENDPOINT:
            assignment, left_out = cluster_load_assignment(name, endpoints, self.metadata_max_bytes)
            if left_out:
                self.metadata_keys_left_out += left_out
                count = self._notes.note("xds_metadata_left_out")
                if count:
                    log.warning(
                        "xDS: instance metadata over EUREKA_XDS_METADATA_MAX_BYTES left out of the "
                        "endpoints of %s (%d keys)%s",
                        name,
                        left_out,
                        since_last_line(count),
                        extra=refusal_fields("xds_metadata_left_out", count),
                    )
            return entry(name, assignment)
        builder = {LISTENER: listener, ROUTE: route_configuration, CLUSTER: cluster}.get(type_url)
        return entry(name, builder(name)) if builder else None
