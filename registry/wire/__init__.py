"""The wire: what Eureka's HTTP looks like, below every view. Codecs (JSON and XML in and out),
payload building for the response cache, request bodies and framing, the lean protocol handler and
its flat routes, and the HTTP habits every view shares; and the other way, answers of peers and regions
read within limits and the transport of every request the node sends (``outbound.py``, TLS as the
domain's ``outbound_tls.py`` builds it). Imports the domain and the cache, nothing above."""
