"""gunicorn configuration of a reader (``registry/reader/``): production mode's read scale-out.

A reader holds no lease map, so unlike the node (``deploy/gunicorn.conf.py``, one worker always) it
runs as many worker processes as there are cores to give it: ``WEB_CONCURRENCY`` (gunicorn's own
variable, default 2 here) or ``--workers N`` on the command line / in ``GUNICORN_CMD_ARGS``. Each
worker serves ``GET /eureka/apps``, ``apps/delta``, ``apps/{app}``, ``vips/{vip}`` and ``svips/{svip}``
from the node's Redis read-only tier (``REDIS_URL``, the node's) and forwards everything else to the
node (``EUREKA_READER_NODE_URL``, default ``EUREKA_CONTROL_URL``). No scheduler, no Celery, no node.
The worker class is the node's (gevent, with its graceful close and prompt stop).
"""

import os

from gunicorn.glogging import Logger

bind = "0.0.0.0:8780"
wsgi_app = "eureka_site.reader_wsgi:application"
workers = int(os.environ.get("WEB_CONCURRENCY") or 2)
worker_class = "registry.serving.gunicorn_worker.RegistryWorker"
# Eureka clients keep their connection between fetches (30 s): keep them, as the node does.
worker_connections = 10000
keepalive = 75
timeout = 60
graceful_timeout = 20
# gunicorn 27 opens a control socket at one fixed path per user; a node on the same host has one too.
control_socket_disable = True
accesslog = None
errorlog = "-"
loglevel = "info"
# Loaded in each worker, after gevent has patched it (the Redis and httpx clients are per worker).
preload_app = False


class ReaderLogger(Logger):
    """gunicorn's own lines in the registry's format (LOG_FORMAT), secrets masked."""

    def setup(self, cfg):
        super().setup(cfg)
        from registry.runtime.logs import use_for_gunicorn

        use_for_gunicorn(self)


logger_class = ReaderLogger


def on_starting(server):
    if server.cfg.workers < 1:
        raise SystemExit(f"eureka reader: workers must be at least 1, got {server.cfg.workers}")
