"""The Celery task that sends webhook deliveries in production mode (``REDIS_URL`` set).

The node kicks it after queueing deliveries and beat runs it every few seconds as the safety net
(retries that fell due, a lost kick). Runs of it may overlap: each delivery is claimed by one.
"""

from __future__ import annotations

from functools import cache

from celery import shared_task
from django.conf import settings

from . import sender, store


@cache
def _client_and_config():
    """One HTTP client per worker process (its connections are reused across runs)."""
    config = sender.DeliveryConfig.from_config(settings.EUREKA.webhooks)
    return sender.new_client(config), config


# The name is what the node's kicks and beat's schedule carry: it outlives moves of this module.
@shared_task(name="registry.tasks.deliver_webhooks", ignore_result=True)
def deliver_webhooks() -> int:
    """Send the due deliveries (for at most 30 s; the next run carries on)."""
    client, config = _client_and_config()
    try:
        return sender.deliver_due(client, config, max_seconds=30.0)
    finally:
        store.close_connection()
