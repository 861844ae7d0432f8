"""The periodic work, as functions of the config: which entries run and how often.

``node_job_intervals_ms(config)`` is every node job's interval (registry/runtime/jobs.py): the
embedded scheduler's table (``Node.job_intervals``).
``periodic_work(config)`` is what Celery beat drives: those jobs (but the process's own, and the
remote regions' fetch when there are none) and the Celery-only safety nets (peer outboxes, webhook
deliveries, health-check rounds), each present only when the config needs it; ``beat_schedule``
writes it in beat's form (eureka_site/settings.py's CELERY_BEAT_SCHEDULE). Like paperless-ngx's
``parse_beat_schedule``: config in, entries out, nothing read from elsewhere. Light to import (settings.py
does): no job's code is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.config.eureka import EurekaConfig
from registry.runtime.gc_policy import CHECK_INTERVAL_MS

# The Celery task that asks the node to run one of its jobs (registry/runtime/tasks.py).
RUN_NODE_JOB = "registry.tasks.run_node_job"
# A run that could not start before this share of its interval has passed is dropped, never queued up.
EXPIRES_SHARE = 0.9
# Jobs about the serving process itself, not the registry: its own scheduler runs them in both modes
# (the GC policy looks every second; through Celery beat that was a task and a control request each;
# the console's history is the process's own memory of itself).
LOCAL_JOBS = frozenset({"freeze_gc", "sample_history"})


@dataclass(frozen=True, slots=True)
class PeriodicEntry:
    task: str
    interval_ms: int
    # The node job RUN_NODE_JOB runs; empty for a task of its own.
    job: str = ""


def node_job_intervals_ms(config: EurekaConfig) -> dict[str, int]:
    """Every node job's interval, by job name (the keys of registry/runtime/jobs.py's JOBS)."""
    # The GC policy freezes every gc_freeze_interval_ms, or sooner after bulk changes: it looks each second.
    return {**config.job_intervals_ms(), "freeze_gc": CHECK_INTERVAL_MS}


def periodic_work(config: EurekaConfig) -> dict[str, PeriodicEntry]:
    """Entry name → what Celery beat starts and how often, for this config."""
    entries = {
        job: PeriodicEntry(RUN_NODE_JOB, interval, job)
        for job, interval in node_job_intervals_ms(config).items()
        # The remote regions' fetches run in the registry process (it holds their registries); beat only
        # says when (registry/runtime/jobs.py, fetch_remote_regions), and only if there are regions.
        if interval
        and job not in LOCAL_JOBS
        and (job != "fetch_remote_regions" or config.remote_regions.urls)
    }
    production = bool(config.redis.url)
    if config.cluster.clustered:
        # Peer replication's safety net: every peer's Redis outbox drained each second, even if the kick
        # the node sends when an outbox fills was lost (registry/cluster/redis_outbox.py).
        entries["replication-drain"] = PeriodicEntry("registry.tasks.drain_replication_outboxes", 1_000)
    if production and config.webhooks.enabled:
        # Webhooks' safety net: due deliveries (retries, lost kicks) sent by the worker (registry/webhooks/).
        entries["webhook-delivery"] = PeriodicEntry(
            "registry.tasks.deliver_webhooks", config.webhooks.poll_ms
        )
    if production and config.health_checks.enabled:
        # Production mode: a Celery worker probes (registry/runtime/tasks.py, run_health_checks).
        entries["health-checks"] = PeriodicEntry(
            "registry.tasks.run_health_checks", config.health_checks.dispatch_ms
        )
    return entries


def beat_schedule(config: EurekaConfig) -> dict[str, dict[str, object]]:
    """``periodic_work`` in Celery beat's form (CELERY_BEAT_SCHEDULE), each entry named ``eureka-…``
    and expiring before its next run is due."""
    schedule: dict[str, dict[str, object]] = {}
    for name, entry in periodic_work(config).items():
        seconds = entry.interval_ms / 1000
        beat: dict[str, object] = {"task": entry.task, "schedule": seconds}
        if entry.job:
            beat["args"] = (entry.job,)
        beat["options"] = {"expires": seconds * EXPIRES_SHARE}
        schedule[f"eureka-{name}"] = beat
    return schedule
