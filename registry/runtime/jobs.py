"""The periodic jobs. Each is one registry or cache function; drivers (the embedded scheduler now,
Celery beat in production) only decide when to call them. All are idempotent and safe to run late,
twice, or not at all for a while."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from registry.cache.response_cache import ResponseCache
from registry.domain.core import Registry
from registry.runtime.gc_policy import GcPolicy
from registry.runtime.sampler import take_sample
from registry.runtime.schedule import LOCAL_JOBS
from registry.runtime.state_log import StateLog


class JobTarget(Protocol):
    """What a job works on: a node's lease map and response cache. The node owns the job table
    (``Node.jobs``) and passes itself; this module does not know the node."""

    registry: Registry
    cache: ResponseCache
    gc_policy: GcPolicy
    state_log: StateLog


def evict(node: JobTarget, now: int) -> object:
    run = node.registry.run_eviction(now)
    node.state_log.eviction(run, node.registry.reads.size())
    return run.evicted


def sync_response_cache(node: JobTarget, now: int) -> object:
    if node.registry.awaiting_sync:
        # Nothing is published (nor confirmed) before the start-up sync: readers would serve it (a
        # warm restart's snapshot) as fresh. Their copies age past their staleness limit meanwhile,
        # and they forward to the node, which answers 503 until it serves.
        return 0
    return node.cache.sync(now)


def prune_delta_queue(node: JobTarget, now: int) -> object:
    return node.registry.prune(now)


def recount_expected_clients(node: JobTarget, now: int) -> object:
    return node.registry.recount_expected_clients(now)


def freeze_gc(node: JobTarget, now: int) -> object:
    return node.gc_policy.run(now)


def prune_webhook_deliveries(node: JobTarget, now: int) -> object:
    """Keep the webhook delivery log bounded (registry/webhooks/). A node that runs no webhook relay
    (turned off, or not serving) has nothing to prune and touches no database."""
    relay = getattr(node, "webhooks", None)
    return relay.prune() if relay is not None else None


def fetch_remote_regions(node: JobTarget, now: int) -> object:
    """Start a fetch of each remote region (registry/cluster/regions.py) not being fetched already;
    returns at once, the fetches run beside (a slow remote holds neither this job nor a request)."""
    regions = getattr(node, "remote_regions", None)
    return regions.start_fetches() if regions is not None else None


def sample_history(node: JobTarget, now: int) -> object:
    """One sample of the node for the console's last-hour charts (registry/domain/history.py)."""
    history = getattr(node, "history", None)
    if history is None:
        return None
    trail = getattr(node, "status_trail", None)
    if trail is not None:
        trail.prune(now)
    return history.record(take_sample(node, now))


@dataclass
class JobRecord:
    """What the node knows about one periodic job's runs, whoever drove them (the embedded scheduler,
    Celery through the control endpoint, or the watchdog)."""

    last_run: int | None = None
    last_source: str | None = None
    runs: int = 0
    failures: int = 0
    last_error: str | None = None


__all__ = ["JOBS", "LOCAL_JOBS", "Job", "JobRecord", "JobTarget"]

# job name -> function; the interval of each comes from Node.job_intervals() (registry/runtime/schedule.py).
Job = Callable[[JobTarget, int], object]

JOBS: dict[str, Job] = {
    "evict": evict,
    "sync_response_cache": sync_response_cache,
    "prune_delta_queue": prune_delta_queue,
    "recount_expected_clients": recount_expected_clients,
    "freeze_gc": freeze_gc,
    "prune_webhook_deliveries": prune_webhook_deliveries,
    "fetch_remote_regions": fetch_remote_regions,
    "sample_history": sample_history,
}
