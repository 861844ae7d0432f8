"""Celery tasks. A worker is another process with an empty copy of the map, so a task never touches
the map: it asks the registry process to run the job through the authenticated control endpoint."""

from __future__ import annotations

import httpx
from celery import shared_task
from django.conf import settings

CONTROL_HEADER = "X-Eureka-Control-Secret"


# The name is the one beat schedules and queued tasks carry: it outlives moves of this module.
@shared_task(
    name="registry.tasks.run_node_job",
    autoretry_for=(httpx.TransportError,),
    retry_backoff=0.5,
    retry_backoff_max=5,
    max_retries=3,
    ignore_result=True,
)
def run_node_job(job: str) -> dict:
    """Run one periodic job (``registry.runtime.jobs.JOBS``) on this node's registry process."""
    response = httpx.post(
        f"{settings.EUREKA_CONTROL_URL}/control/jobs/{job}",
        headers={CONTROL_HEADER: settings.EUREKA_CONTROL_SECRET},
        timeout=10.0,
    )
    response.raise_for_status()
    return response.json()
