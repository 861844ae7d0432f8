"""The Celery app: broker is REDIS_URL, configuration is the CELERY_* settings, tasks autodiscovered."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")

app = Celery("eureka_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
