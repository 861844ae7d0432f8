"""The xDS control plane of the mesh process: Envoy's v3 discovery resources (listeners, routes,
clusters, endpoint assignments) for every service name of the catalog, over gRPC's Aggregated
Discovery Service in both its variants, for Envoy and for proxyless gRPC clients. No Django.
resources.py builds the resources, server.py serves them (``start_xds``)."""

from registry.mesh.xds.server import Forbidden, XdsServer, start_xds

__all__ = ["Forbidden", "XdsServer", "start_xds"]
