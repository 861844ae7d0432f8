"""The Celery app: broker is REDIS_URL, configuration is the CELERY_* settings, tasks autodiscovered."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")

app = Celery("eureka_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The registry's tasks live in its runtime room (registry/runtime/tasks.py), not at the app's top level.
app.autodiscover_tasks(["registry.runtime"])
