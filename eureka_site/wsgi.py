"""WSGI entry point. Serving processes (not manage.py commands) start the embedded scheduler here."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")

application = get_wsgi_application()

if settings.EUREKA["embedded_scheduler"]:
    from registry.node import get_node

    get_node().start_scheduler()
