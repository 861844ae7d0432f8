"""Readers: stateless processes that serve the registry's reads from the Redis read-only tier.

Production mode only. A node is one process (its lease map lives there), so its full fetches share
one core with every heartbeat. A reader — ``gunicorn -c deploy/gunicorn_reader.conf.py``, as many
worker processes and hosts as you like — answers ``GET apps``, ``apps/delta``, ``apps/{app}``,
``vips/{vip}`` and ``svips/{svip}`` with the bytes the node published to Redis, through the node's own
protocol helpers (content negotiation, compact, gzip), so its answers are the node's, byte for byte.

A reader holds no node and never builds one (``eureka_site/reader_wsgi.py`` forbids it). What it
does not serve goes to the node as it came, and the node's answer comes back as it is
(``forwarding.py``): writes and every other protocol request, a key the node has not published (a
cache miss), and a payload the node has not confirmed for ``EUREKA_READER_MAX_STALENESS_MS`` (its
cache sync or the node itself stopped; ``source.py``). Forwarding rather than refusing keeps a
misrouted client working.
"""
