"""Discovery for clients that are not Eureka clients: an xDS control plane (Envoy, proxyless gRPC) and
a DNS interface, served by ``manage.py mesh`` beside the node from a copy of its registry (docs/mesh.md).

``catalog`` is that copy (plain Python); ``follower`` keeps it in step with the node over HTTP; ``xds``
and ``dns`` serve it (``dns_answers`` decides the DNS interface's answers, without sockets).
"""
