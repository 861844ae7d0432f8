"""The node: one lease map and everything that serves, replicates and maintains it, and how those
parts start and stop.

A ``Node`` is made by ``build_node`` (``registry/runtime/composition.py``) and held once per process
(``get_node()``, ``registry/runtime/process.py``): views, pages, jobs and the control endpoint reach
the lease map through it. Its jobs run on the embedded scheduler, or, in production mode, from Celery
beat through the control endpoint, with the scheduler as their watchdog
(``registry/runtime/watchdog.py``). What every server does with it at its start and stop is in
``registry/serving/lifecycle.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Protocol

from registry.cache.response_cache import ResponseCache
from registry.cluster.peers import PeerSet
from registry.cluster.regions import RemoteRegions
from registry.config.eureka import EurekaConfig
from registry.domain.core import Registry
from registry.domain.findings import RegistrationSources
from registry.domain.history import History, StatusTrail
from registry.domain.refusals import RefusalLines
from registry.feed.streams import StreamHub
from registry.health.addresses import AddressPolicy
from registry.health.checker import HealthChecker
from registry.health.loop import HealthCheckLoop
from registry.runtime import memory
from registry.runtime.gc_policy import GcPolicy
from registry.runtime.jobs import JOBS, LOCAL_JOBS, Job, JobRecord
from registry.runtime.loop_watch import LoopWatch, Stall, start_gevent_watch
from registry.runtime.schedule import node_job_intervals_ms
from registry.runtime.scheduler import EmbeddedScheduler, ScheduledJob
from registry.runtime.snapshots import WarmRestart
from registry.runtime.state_log import StateLog
from registry.runtime.watchdog import JobWatchdog

if TYPE_CHECKING:
    # Types only: a node loads these modules only when it uses them. The cluster's brings the peers'
    # HTTP client, the publisher's the Redis client, and the webhook relay's Django's models.
    from registry.cluster.member import ClusterMember
    from registry.feed.redis_feed import RedisChangePublisher
    from registry.webhooks.relay import WebhookRelay

logger = logging.getLogger(__name__)


@dataclass
class ReceivedReplication:
    """What peers sent this node (``POST peerreplication/batch/``), whether or not it has peers of its
    own: a Spring Cloud Eureka Server may list a standalone node as its peer."""

    batches: int = 0
    items: int = 0
    last_at: int | None = None
    # Held while a batch is decoded and applied: one batch at a time. Applying gives the event loop
    # turns between items, and without the lock every open connection could hold a decoded batch at
    # once, each several times its size on the wire. Made with the node, so under gevent after the
    # monkey-patching: a waiter yields to the loop.
    applying: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # Which batches with refused items get a log line (registry/cluster/incoming.py).
    refusal_lines: RefusalLines = field(default_factory=RefusalLines, repr=False, compare=False)

    def record(self, items: int, now: int) -> None:
        self.batches += 1
        self.items += items
        self.last_at = now


class ConsolePages(Protocol):
    """What the node holds of the console's shared pages (``dashboard/shared_pages.py``), counted for
    ``/metrics``. The dashboard makes them with its first view and keeps them on the node, so that a
    new node (a test's) starts with none."""

    rendered: int
    shared: int
    stale: int
    refused: int


@dataclass
class Node:
    """One registry node: the lease map, its response cache and peers, the periodic jobs and their
    records, and the optional parts (cluster, health checks, warm restart, change feed, webhooks,
    remote regions, the console's history), each None when its settings leave it off."""

    registry: Registry
    cache: ResponseCache
    clock: Callable[[], int]
    config: EurekaConfig
    peers: PeerSet = field(default_factory=PeerSet)
    scheduler: EmbeddedScheduler | None = field(default=None)
    started_at: int = 0
    # The periodic jobs this node runs (name -> function), whoever drives them.
    jobs: Mapping[str, Job] = field(default_factory=lambda: dict(JOBS))
    job_records: dict[str, JobRecord] = field(default_factory=dict)
    # The jobs this node runs itself because Celery beat left them overdue.
    watchdog: JobWatchdog = field(default_factory=JobWatchdog)
    # Peers and replication; None for a standalone node (no EUREKA_PEER_URLS).
    cluster: ClusterMember | None = None
    gc_policy: GcPolicy | None = None
    received: ReceivedReplication = field(default_factory=ReceivedReplication)
    # Where clients registered from, for the console's suspicious registrations (registry/domain/findings.py).
    registration_sources: RegistrationSources = field(default_factory=RegistrationSources)
    # What the operator's log last said about self-preservation (registry/runtime/state_log.py).
    state_log: StateLog = field(default_factory=StateLog)
    # Active health checks (registry/health/): None when EUREKA_HEALTH_CHECKS is off. The loop probes
    # in this process (embedded mode); in production mode a Celery worker does, via /control/health.
    health: HealthChecker | None = None
    health_loop: HealthCheckLoop | None = None
    # Where probes may connect (registry/health/addresses.py): the node's own addresses are refused.
    health_policy: AddressPolicy | None = None
    # Warm restart (registry/runtime/snapshots.py): None when EUREKA_WARM_RESTART is off.
    warm_restart: WarmRestart | None = None
    # The change feed (registry/feed/): the open streams' hub, made with the first stream, and the
    # Redis Stream publisher of production mode.
    change_streams: StreamHub | None = None
    change_publisher: RedisChangePublisher | None = None
    # Webhooks (registry/webhooks/relay.py): change log -> delivery rows (-> sent, in embedded mode);
    # started with the serving process's scheduler.
    webhooks: WebhookRelay | None = None
    # The event loop's watch (registry/runtime/loop_watch.py), under gevent only; None elsewhere.
    loop_watch: LoopWatch | None = None
    # Remote regions fetched and merged into payloads (registry/cluster/regions.py); None: none.
    remote_regions: RemoteRegions | None = None
    # The console's last hour (registry/domain/history.py), sampled by the sample_history job; None
    # when EUREKA_DASHBOARD_HISTORY_INTERVAL_MS is 0.
    history: History | None = None
    # Each instance's status changes of the last hour, for its page (with the history, or None).
    status_trail: StatusTrail | None = None
    # The console's shared pages, made by its first view.
    console_pages: ConsolePages | None = None
    _stop_loop_watch: Callable[[], None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.gc_policy is None:
            full_every_ms = self.config.process.gc_full_collection_interval_ms
            freeze_every_ms = self.config.process.gc_freeze_interval_ms or 60_000
            self.gc_policy = GcPolicy(full_every_ms, self.started_at, freeze_every_ms, trim=memory.trim)
        if not self.config.process.gc_freeze_interval_ms:
            # Switched off: Python's own collection schedule, as any process.
            self.jobs = {name: job for name, job in self.jobs.items() if name != "freeze_gc"}
        if self.remote_regions is None:
            self.jobs = {name: job for name, job in self.jobs.items() if name != "fetch_remote_regions"}
        if self.history is None:
            self.jobs = {name: job for name, job in self.jobs.items() if name != "sample_history"}
        for name in self.jobs:
            self.job_records.setdefault(name, JobRecord())

    def now(self) -> int:
        return self.clock()

    def run_job(self, name: str, now: int, source: str) -> object:
        """Run one periodic job (one of ``self.jobs``) and record it; an unknown name raises KeyError."""
        job = self.jobs[name]
        record = self.job_records[name]
        try:
            result = job(self, now)
        except Exception as exc:
            record.failures += 1
            record.last_error = f"{type(exc).__name__}: {exc}"
            raise
        record.last_run = now
        record.last_source = source
        record.runs += 1
        if source == "celery":
            self.watchdog.beat_ran(name)
        return result

    def _run_scheduled(self, name: str, now: int) -> None:
        self.run_job(name, now, "scheduler")

    def job_intervals(self) -> dict[str, int]:
        """Every job's interval, from the node's config (registry/runtime/schedule.py's table, which
        Celery beat's schedule is made from too)."""
        return node_job_intervals_ms(self.config)

    def start_scheduler(self, watchdog: bool = False) -> EmbeddedScheduler:
        """Run the jobs in-process; as a ``watchdog`` (when Celery drives them) only the overdue ones.
        The serving process's other background work (webhooks, the first fetch of the remote
        regions, which would otherwise wait for the job's first interval) starts with it."""
        self.start_webhooks()
        if self.remote_regions is not None and self.scheduler is None:
            self.remote_regions.start_fetches()
        if self.scheduler is None:
            intervals = self.job_intervals()
            jobs = []
            for name in self.jobs:
                # As a watchdog only the overdue jobs, but the process's own jobs always.
                if watchdog and name not in LOCAL_JOBS:
                    run = partial(self.watchdog.run_if_overdue, self, name)
                else:
                    run = partial(self._run_scheduled, name)
                jobs.append(ScheduledJob(name, intervals[name], run))
            self.scheduler = EmbeddedScheduler(jobs, self.clock)
            self.scheduler.start()
            if not watchdog:
                self._start_health_loop()
        return self.scheduler

    def _start_health_loop(self) -> None:
        if self.health is not None and self.health_loop is None:
            health = self.config.health_checks
            self.health_loop = HealthCheckLoop(
                self.health,
                self.clock,
                self.health_policy,
                health.concurrency,
                health.dispatch_ms,
                tls=self.config.outbound_tls.contexts(),
            )
            self.health_loop.start()

    def stop_scheduler(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        if self.health_loop is not None:
            self.health_loop.stop()
            self.health_loop = None

    def start_webhooks(self) -> None:
        """Queue (and in embedded mode send) webhook deliveries for the changes of this node's map."""
        webhooks = self.config.webhooks
        if self.webhooks is not None or not webhooks.enabled:
            return
        # Here, not at the top: the relay's module loads Django's models, and only a serving process
        # with webhooks on needs it.
        from registry.webhooks.relay import WebhookRelay, set_running

        celery = bool(self.config.redis.url) and self.config.redis.jobs_driver == "celery"
        self.webhooks = WebhookRelay(
            self.registry, webhooks, kick=_kick_webhook_task if celery else None, deliver_here=not celery
        )
        self.webhooks.start()
        set_running(self.webhooks)

    def start_warm_restart(self) -> None:
        """Restore the last snapshot and keep writing them (at the server's start, before the node
        serves and before its start-up sync from peers). Never in tests' or commands' nodes."""
        if self.warm_restart is not None:
            self.warm_restart.start()

    def start_cluster(self, listening: list[tuple[str, int]]) -> None:
        """Join the cluster once the server knows the addresses it listens on, before it serves."""
        if self.health_policy is not None:
            # Probes never reach the node itself (an address 0.0.0.0 binds to is an interface's anyway).
            self.health_policy.add_own(host for host, _ in listening)
        if self.cluster is not None:
            # No read is served before the start-up sync is done or has given up (Registry.
            # await_start_up_sync; the member opens the node when its sync ends). Set before the
            # server answers its first request.
            self.registry.await_start_up_sync()
            self.cluster.start(listening)
            if not self.cluster.peers and self.cluster.discovery is None:
                # Every peer listed was this node: no sync runs, the node opens at once. (With peers
                # from DNS the sync runs: it first waits for a DNS answer if there was none.)
                self.registry.start_up_sync_done()

    def start_loop_watch(self) -> None:
        """Under gevent, in the serving thread: log and count every stall of the event loop longer
        than ``loop_stall_threshold_ms``, with the code that held it (0: no watch)."""
        threshold_ms = self.config.process.loop_stall_threshold_ms
        if threshold_ms <= 0 or self.loop_watch is not None:
            return
        self.loop_watch = LoopWatch(threshold_ms / 1000)
        self._stop_loop_watch = start_gevent_watch(self.loop_watch, _log_stall)

    def stop(self) -> None:
        if self._stop_loop_watch is not None:
            self._stop_loop_watch()
            self._stop_loop_watch = None
        self.stop_scheduler()
        if self.cluster is not None:
            self.cluster.stop()
        # Once the jobs and replication have stopped moving the map: the snapshot a restart begins from.
        if self.warm_restart is not None:
            self.warm_restart.stop()
        # The change feed's streams end, its publisher sends what it still holds.
        if self.change_streams is not None:
            self.change_streams.close()
        if self.change_publisher is not None:
            self.change_publisher.stop()
        if self.webhooks is not None:
            # Here, not at the top: as in start_webhooks (a relay ran, so the module is loaded).
            from registry.webhooks.relay import set_running

            self.webhooks.stop()
            set_running(None)
            self.webhooks = None


def _log_stall(stall: Stall) -> None:
    logger.warning(
        "%s",
        stall.describe(),
        extra={
            "event": "loop_stall",
            "held_ms": round(stall.held_s * 1000, 1),
            "cpu_ms": round(stall.cpu_s * 1000, 1),
            "major_faults": stall.major_faults,
        },
    )


def _kick_webhook_task() -> None:
    """Production mode: have a Celery worker send the deliveries just queued."""
    # Here, not at the top: the task's module loads Celery, which an embedded node never does.
    from registry.webhooks.tasks import deliver_webhooks

    try:
        deliver_webhooks.apply_async(expires=5, retry=False)
    except Exception as exc:  # the broker is down: beat's run (every few seconds) catches up
        logger.warning("could not start a webhook delivery: %s", exc)
