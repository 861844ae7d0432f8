"""WSGI entry point. Serving processes (not manage.py commands) start the embedded scheduler here."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")
django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from registry.access.drf import credentials_open_the_api  # noqa: E402
from registry.wire.handlers import RoutingApplication  # noqa: E402

# With API accounts on, a protocol request's body is read only once its credentials open the API.
application = RoutingApplication(may_read_body=credentials_open_the_api)

# The URL patterns, and the views they import, load here rather than in the first request, where the
# first heartbeats would wait for those imports; and they are made before the node freezes what
# start-up made.
get_resolver().url_patterns  # noqa: B018 (the import is the point)

if settings.EUREKA.redis.jobs_driver == "celery":
    # Production mode: the node sends tasks (webhook deliveries, replication drains) through this
    # app, so it must be the current one before the first is sent (eureka_site/__init__.py).
    import eureka_site.celery  # noqa: E402, F401

if settings.EUREKA.process.embedded_scheduler:
    from registry.runtime.process import get_node

    # Under Celery the thread is a watchdog: it runs only jobs that beat has left overdue.
    get_node().start_scheduler(watchdog=settings.EUREKA.redis.jobs_driver == "celery")
