"""The node: this process's one registry, its response cache and its scheduler, built from settings.

Views, the dashboard and the jobs reach the lease map only through ``get_node()``. gunicorn runs
exactly one worker process (see ``deploy/gunicorn.conf.py``), so there is one map per node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .core import Registry, RegistryConfig
from .jobs import JOBS
from .payloads import build_payload
from .response_cache import ResponseCache
from .scheduler import EmbeddedScheduler, ScheduledJob


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Node:
    registry: Registry
    cache: ResponseCache
    clock: Callable[[], int]
    options: dict[str, Any]
    scheduler: EmbeddedScheduler | None = field(default=None)

    def now(self) -> int:
        return self.clock()

    def job_intervals(self) -> dict[str, int]:
        config = self.registry.config
        return {
            "evict": config.eviction_interval_ms,
            "sync_response_cache": int(self.options["response_cache_update_interval_ms"]),
            "prune_delta_queue": config.delta_retention_timer_interval_ms,
            "recount_expected_clients": config.renewal_threshold_update_interval_ms,
        }

    def start_scheduler(self) -> EmbeddedScheduler:
        if self.scheduler is None:
            intervals = self.job_intervals()
            jobs = [
                ScheduledJob(name, intervals[name], lambda now, fn=fn: fn(self, now))
                for name, fn in JOBS.items()
            ]
            self.scheduler = EmbeddedScheduler(jobs, self.clock)
            self.scheduler.start()
        return self.scheduler

    def stop_scheduler(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None


def build_node(options: dict[str, Any], clock: Callable[[], int] = wall_clock_ms) -> Node:
    """``options`` is ``settings.EUREKA``: ``REGISTRY`` (RegistryConfig fields) plus cache knobs."""
    config = RegistryConfig(**options["REGISTRY"])
    cache_holder: list[ResponseCache] = []
    registry = Registry(config, clock(), on_change=lambda app, vips: cache_holder[0].invalidate(app, vips))
    cache = ResponseCache(
        lambda key: build_payload(registry, key),
        expire_ms=int(options["response_cache_auto_expiration_ms"]),
        use_read_only=bool(options["use_read_only_response_cache"]),
    )
    cache_holder.append(cache)
    return Node(registry=registry, cache=cache, clock=clock, options=options)


_node: Node | None = None
_node_lock = threading.Lock()


def get_node() -> Node:
    global _node
    if _node is None:
        with _node_lock:
            if _node is None:
                from django.conf import settings

                _node = build_node(settings.EUREKA)
    return _node


def reset_node(node: Node | None = None) -> Node | None:
    """Replace the process's node (tests use this for a fresh map or a fake clock)."""
    global _node
    with _node_lock:
        if _node is not None:
            _node.stop_scheduler()
        _node = node
    return node
