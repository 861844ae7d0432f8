"""gunicorn configuration of a registry node.

One worker process, always: the lease map lives in that process, and a second worker would hold a
second, divergent map. Concurrency comes from gevent: its requests do not hand the GIL between pool
threads, so it serves more heartbeats than gthread, and with a shorter tail. The worker is gunicorn's
gevent worker with a graceful close (``registry/serving/gunicorn_worker.py``: error answers reach
clients still sending) and a prompt stop (idle kept-alive connections are closed when a SIGTERM comes,
requests under way finish within ``graceful_timeout``). Override on the command line or with
GUNICORN_CMD_ARGS, e.g. ``--worker-class gthread --threads 16``.
"""

from gunicorn.glogging import Logger

bind = "0.0.0.0:8761"
wsgi_app = "eureka_site.wsgi:application"
workers = 1
worker_class = "registry.serving.gunicorn_worker.RegistryWorker"
# Every Eureka client keeps one connection open; leave room for a large fleet (mind `ulimit -n`).
worker_connections = 10000
# Eureka clients keep connections open between heartbeats (30 s): keep them, so a heartbeat costs
# one request and not a TCP handshake too.
keepalive = 75
timeout = 60
graceful_timeout = 20
# gunicorn 27 opens a control socket at one fixed path per user; several nodes on a host would share it.
control_socket_disable = True
accesslog = None
errorlog = "-"
loglevel = "info"
# Load the app in the worker, not the master, so the scheduler thread runs beside the map.
preload_app = False


class RegistryLogger(Logger):
    """gunicorn's own lines (start, stop, worker errors) in the registry's format (LOG_FORMAT), secrets
    masked; a bad setting stops the start at once, with its message, rather than in the worker."""

    def setup(self, cfg):
        super().setup(cfg)
        from registry.runtime.logs import use_for_gunicorn

        use_for_gunicorn(self)


logger_class = RegistryLogger


def on_starting(server):
    if server.cfg.workers != 1:
        raise SystemExit(
            f"eureka registry: refusing to start with workers={server.cfg.workers}. "
            "One node is one process (the lease map is in memory); scale with threads or more nodes."
        )
    # With EUREKA_TLS_CERT_FILE the worker speaks HTTPS on --bind (registry/serving/gunicorn_worker.py
    # use_tls); EUREKA_TLS_PLAIN_PORT adds a plain-HTTP listener on the first bound host. The settings
    # were read (and their files checked) when the logger was set up.
    from django.conf import settings

    from registry.serving.tls import plain_bind

    extra = plain_bind(server.cfg.bind, settings.EUREKA.tls)
    if extra:
        server.cfg.set("bind", [*server.cfg.bind, extra])


def pre_fork(server, worker):
    # Connections are refused, not queued in the kernel's backlog, until the worker can answer them:
    # a client then goes on to its next service URL at once (registry/serving/listening.py). Before
    # every fork: the first worker's, and a new one's after a worker died (its queued connections are
    # reset). The worker listens again at the end of post_worker_init.
    from registry.serving.listening import stop_listening

    stop_listening(server.LISTENERS)


def post_worker_init(worker):
    # The node's start (warm restart, cluster, GC policy, memory tuning) is the same under every
    # server: registry/serving/lifecycle.py, start_serving. Under gevent, a warm-restart snapshot's gzip
    # and file write run in a native thread (they release the GIL), its encoding in paced slices.
    from gunicorn.workers.ggevent import GeventWorker

    from registry.serving.lifecycle import start_serving

    listening = [tuple(sock.getsockname()[:2]) for sock in worker.sockets]
    snapshot_runner = None
    if isinstance(worker, GeventWorker):
        import gevent

        def snapshot_runner(write):
            return gevent.get_hub().threadpool.apply(write)

    node = start_serving(listening, snapshot_runner)

    # Under gevent, gzip large payloads in a native thread so that the event loop keeps answering, and
    # let long payload builds pause every few milliseconds for the loop (registry/cache/pacing.py).
    if isinstance(worker, GeventWorker):
        import gevent

        from registry.cache.pacing import gevent_pause, set_pause
        from registry.cache.response_cache import set_offload

        set_offload(lambda function, data: gevent.get_hub().threadpool.apply(function, (data,)))
        set_pause(gevent_pause())
        # Stalls of the loop, logged with the code that held it (registry/runtime/loop_watch.py).
        node.start_loop_watch()

    # Ready to answer: accept connections again (pre_fork took the sockets out of LISTEN).
    from registry.serving.listening import listen_again

    listen_again(worker.sockets, worker.cfg.backlog)


def worker_exit(server, worker):
    # Runs in the worker once it has stopped accepting and finished its requests (a SIGTERM's
    # graceful stop): the node stops its jobs and writes its last warm-restart snapshot.
    from registry.serving.lifecycle import stop_serving

    stop_serving()
