"""gunicorn configuration of a registry node.

One worker process, always: the lease map lives in that process, and a second worker would hold a
second, divergent map. Concurrency comes from threads (gthread); see README "Choosing the worker".
"""

bind = "0.0.0.0:8761"
wsgi_app = "eureka_site.wsgi:application"
workers = 1
worker_class = "gthread"
threads = 16
# Eureka clients keep connections open between heartbeats (30 s): keep them, so a heartbeat costs
# one request and not a TCP handshake too.
keepalive = 75
timeout = 60
graceful_timeout = 20
accesslog = None
errorlog = "-"
loglevel = "info"
# Load the app in the worker, not the master, so the scheduler thread runs beside the map.
preload_app = False


def on_starting(server):
    if server.cfg.workers != 1:
        raise SystemExit(
            f"eureka registry: refusing to start with workers={server.cfg.workers}. "
            "One node is one process (the lease map is in memory); scale with threads or more nodes."
        )
