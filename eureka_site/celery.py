"""The Celery app: broker is REDIS_URL, configuration is the CELERY_* settings, tasks autodiscovered."""

import os

from celery import Celery
from celery.signals import setup_logging

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")

app = Celery("eureka_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The registry's tasks live in its packages (registry/runtime/tasks.py, registry/webhooks/tasks.py), not
# at the app's top level.
app.autodiscover_tasks(["registry.runtime", "registry.webhooks"])


@setup_logging.connect
def _log_as_the_registry_does(**kwargs):
    """The worker and beat log through settings.LOGGING (LOG_FORMAT, LOG_LEVEL, secrets masked): with a
    receiver here Celery leaves the root logger alone instead of installing its own handler and format
    (``--loglevel`` is then LOG_LEVEL's job)."""
    from registry.runtime.logs import configure_from_settings

    configure_from_settings()
