"""The periodic jobs. Each is one registry or cache function; drivers (the embedded scheduler now,
Celery beat in production) only decide when to call them. All are idempotent and safe to run late,
twice, or not at all for a while."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .node import Node


def evict(node: Node, now: int) -> object:
    return node.registry.evict(now)


def sync_response_cache(node: Node, now: int) -> object:
    return node.cache.sync(now)


def prune_delta_queue(node: Node, now: int) -> object:
    return node.registry.prune(now)


def recount_expected_clients(node: Node, now: int) -> object:
    return node.registry.recount_expected_clients(now)


# job name -> function; the interval of each comes from Node.job_intervals().
JOBS: dict[str, Callable[[Node, int], object]] = {
    "evict": evict,
    "sync_response_cache": sync_response_cache,
    "prune_delta_queue": prune_delta_queue,
    "recount_expected_clients": recount_expected_clients,
}
