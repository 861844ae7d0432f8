"""The node: this process's one registry, its response cache and its scheduler, built from settings.

Views, the dashboard and the jobs reach the lease map only through ``get_node()``. gunicorn runs
exactly one worker process (see ``deploy/gunicorn.conf.py``), so there is one map per node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from registry.cache.pacing import PACER
from registry.cache.response_cache import ReadOnlyTier, ResponseCache
from registry.cluster.peers import PeerSet
from registry.domain.core import Registry
from registry.domain.findings import RegistrationSources
from registry.domain.history import WINDOW_MS as HISTORY_WINDOW_MS
from registry.domain.history import History, StatusTrail
from registry.domain.refusals import RefusalLines
from registry.health.addresses import AddressPolicy, own_address_policy
from registry.health.checker import HealthChecker
from registry.health.config import CheckDefaults
from registry.health.loop import HealthCheckLoop
from registry.runtime import memory
from registry.runtime.gc_policy import GcPolicy
from registry.runtime.jobs import JOBS, LOCAL_JOBS, Job
from registry.runtime.loop_watch import LoopWatch, Stall, start_gevent_watch
from registry.runtime.schedule import node_job_intervals_ms
from registry.runtime.scheduler import EmbeddedScheduler, ScheduledJob
from registry.runtime.snapshots import WarmRestart, build_warm_restart
from registry.runtime.state_log import StateLog
from registry.wire.payloads import PayloadBuilder

if TYPE_CHECKING:
    from registry.cluster.member import ClusterMember
    from registry.cluster.regions import RemoteRegions
    from registry.config.eureka import EurekaConfig

logger = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# A job that has not run for this many intervals is overdue: the node runs it itself.
OVERDUE_INTERVALS = 3


@dataclass
class JobRecord:
    """What the node knows about one periodic job, whoever drove it (scheduler, Celery, watchdog)."""

    last_run: int | None = None
    last_source: str | None = None
    runs: int = 0
    failures: int = 0
    last_error: str | None = None


@dataclass
class ReceivedReplication:
    """What peers sent this node (``POST peerreplication/batch/``), whether or not it has peers of its
    own: a Spring Cloud Eureka Server may list a standalone node as its peer."""

    batches: int = 0
    items: int = 0
    last_at: int | None = None
    # Held while a batch is decoded and applied: one at a time. Applying pauses for the event loop
    # between items, and without it every connection's batch could be waiting decoded at once (a 1 MB
    # batch of 1,000 Registers is ~3 MB decoded; the node may hold thousands of connections). Made
    # with the node, so under gevent after the monkey-patching: a waiter yields to the loop.
    applying: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # Which batches with refused items get a log line (registry/cluster/incoming.py).
    refusal_lines: RefusalLines = field(default_factory=RefusalLines, repr=False, compare=False)

    def record(self, items: int, now: int) -> None:
        self.batches += 1
        self.items += items
        self.last_at = now


@dataclass
class Node:
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
    # Peers and replication; None for a standalone node (no EUREKA_PEER_URLS).
    cluster: ClusterMember | None = None
    gc_policy: GcPolicy | None = None
    received: ReceivedReplication = field(default_factory=ReceivedReplication)
    # Where clients registered from, for the console's suspicious registrations (registry/domain/findings.py).
    registration_sources: RegistrationSources = field(default_factory=RegistrationSources)
    # What the operator's log last said about self-preservation (registry/runtime/state_log.py).
    state_log: StateLog = field(default_factory=StateLog)
    # Jobs the node runs itself because Celery beat left them overdue (logged once each way).
    watchdog_running: set[str] = field(default_factory=set)
    # Active health checks (registry/health/): None when EUREKA_HEALTH_CHECKS is off. The loop probes
    # in this process (embedded mode); in production mode a Celery worker does, via /control/health.
    health: HealthChecker | None = None
    health_loop: HealthCheckLoop | None = None
    # Where probes may connect (registry/health/addresses.py): the node's own addresses are refused.
    health_policy: AddressPolicy | None = None
    # Warm restart (registry/runtime/snapshots.py): None when EUREKA_WARM_RESTART is off.
    warm_restart: WarmRestart | None = None
    # The change feed (registry/feed/): the open SSE streams' hub, made with the first stream, and the
    # Redis Stream publisher of production mode. Typed loosely: the feed imports this module.
    change_streams: Any = None
    change_publisher: Any = None
    # Webhooks (registry/webhooks/relay.py): change log -> delivery rows (-> sent, in embedded mode);
    # started with the serving process's scheduler. Typed loosely: it needs Django's models.
    webhooks: Any = None
    # The event loop's watch (registry/runtime/loop_watch.py), under gevent only; None elsewhere.
    loop_watch: LoopWatch | None = None
    # Remote regions fetched and merged into payloads (registry/cluster/regions.py); None: none.
    remote_regions: RemoteRegions | None = None
    # The console's last hour (registry/domain/history.py), sampled by the sample_history job; None
    # when EUREKA_DASHBOARD_HISTORY_INTERVAL_MS is 0.
    history: History | None = None
    # Each instance's status changes of the last hour, for its page (with the history, or None).
    status_trail: StatusTrail | None = None
    # The console's shared pages (dashboard/shared_pages.py), made by its first view. Typed loosely:
    # the dashboard imports this module.
    console_pages: Any = None
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
        if source == "celery" and name in self.watchdog_running:
            self.watchdog_running.discard(name)
            logger.warning(
                "periodic job %s runs from Celery beat again", name, extra={"event": "job_back", "job": name}
            )
        return result

    def overdue_jobs(self, now: int) -> list[str]:
        """Jobs with no run for ``OVERDUE_INTERVALS`` intervals (counted from start-up before a first run)."""
        intervals = self.job_intervals()
        overdue = []
        for name, record in self.job_records.items():
            since = record.last_run if record.last_run is not None else self.started_at
            if now - since > OVERDUE_INTERVALS * intervals[name]:
                overdue.append(name)
        return overdue

    def _run_scheduled(self, name: str, now: int) -> None:
        self.run_job(name, now, "scheduler")

    def _watchdog_run(self, name: str, now: int) -> None:
        if name in self.overdue_jobs(now):
            if name not in self.watchdog_running:
                self.watchdog_running.add(name)
                logger.warning(
                    "periodic job %s is overdue (is Celery beat running?): running it here until beat does",
                    name,
                    extra={"event": "job_overdue", "job": name},
                )
            self.run_job(name, now, "watchdog")

    def job_intervals(self) -> dict[str, int]:
        # registry/runtime/schedule.py's table (Celery beat's too), with the registry's intervals from its
        # live config (the admin may change them at run time).
        config = self.registry.config
        return {
            **node_job_intervals_ms(self.config),
            "evict": config.eviction_interval_ms,
            "prune_delta_queue": config.delta_retention_timer_interval_ms,
            "recount_expected_clients": config.renewal_threshold_update_interval_ms,
        }

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
                run = self._watchdog_run if watchdog and name not in LOCAL_JOBS else self._run_scheduled
                jobs.append(ScheduledJob(name, intervals[name], partial(run, name)))
            self.scheduler = EmbeddedScheduler(jobs, self.clock)
            self.scheduler.start()
            if not watchdog:
                self._start_health_loop()
        return self.scheduler

    def _start_health_loop(self) -> None:
        if self.health is not None and self.health_loop is None:
            health = self.config.health_checks
            self.health_loop = HealthCheckLoop(
                self.health, self.clock, self.health_policy, health.concurrency, health.dispatch_ms
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
        from registry.webhooks.relay import WebhookRelay, set_running

        celery = bool(self.config.redis.url) and self.config.redis.jobs_driver == "celery"
        self.webhooks = WebhookRelay(
            self.registry, webhooks, kick=_kick_webhook_task if celery else None, deliver_here=not celery
        )
        self.webhooks.start()
        set_running(self.webhooks)

    def start_warm_restart(self) -> None:
        """Restore the last snapshot and keep writing them (gunicorn's post_worker_init, before the
        node serves and before its start-up sync from peers). Never in tests' or commands' nodes."""
        if self.warm_restart is not None:
            self.warm_restart.start()

    def start_cluster(self, listening: list[tuple[str, int]]) -> None:
        """Join the cluster once the server knows its own addresses (gunicorn's post_worker_init)."""
        if self.health_policy is not None:
            # Probes never reach the node itself (an address 0.0.0.0 binds to is an interface's anyway).
            self.health_policy.add_own(host for host, _ in listening)
        if self.cluster is not None:
            # No read is served before the start-up sync is done or has given up (Registry.
            # await_start_up_sync; the member opens the node when its sync ends). Set before the
            # worker serves: this runs in post_worker_init.
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


def build_node(config: EurekaConfig, clock: Callable[[], int] = wall_clock_ms) -> Node:
    """The node ``config`` describes (``settings.EUREKA``, parsed by registry/config/eureka.py)."""
    expire_ms = config.response_cache.auto_expiration_ms
    holder: list[tuple[ResponseCache, PayloadBuilder]] = []

    def on_change(app: str, vips) -> None:
        cache, builder = holder[0]
        builder.invalidate(app)
        cache.invalidate(app, vips)

    registry = Registry(config.registry, clock(), on_change=on_change)
    registry.pacing.pause = PACER.tick
    builder = PayloadBuilder(registry, clock, expire_ms)
    cache = ResponseCache(
        builder.assemble,
        expire_ms=expire_ms,
        use_read_only=config.response_cache.use_read_only,
        read_only=_read_only_tier(config, clock),
        on_clear=builder.clear,
        keep_formats=builder.keep_formats,
    )
    holder.append((cache, builder))
    remote_regions = _remote_regions(config, clock, cache)
    if remote_regions is not None:
        builder.remote = remote_regions
        builder.remote_fallback = remote_regions.fallback
    peers = PeerSet(list(config.cluster.peer_urls))
    cluster = _cluster_member(registry, peers, config, clock) if config.cluster.clustered else None
    history = _history(config)
    status_trail = None
    if history is not None:
        status_trail = StatusTrail(window_ms=HISTORY_WINDOW_MS)
        registry.reads.subscribe_changes(status_trail.note)
    warm_restart = build_warm_restart(registry, config, clock) if config.warm_restart.enabled else None
    if warm_restart is not None:
        warm_restart.history = history
    return Node(
        registry=registry,
        cache=cache,
        clock=clock,
        config=config,
        peers=peers,
        started_at=clock(),
        cluster=cluster,
        health=_health_checker(registry, config, clock),
        health_policy=_node_health_policy(config),
        warm_restart=warm_restart,
        change_publisher=_change_publisher(registry, config),
        remote_regions=remote_regions,
        history=history,
        status_trail=status_trail,
        received=ReceivedReplication(refusal_lines=RefusalLines(config.process.refusal_log_interval_seconds)),
    )


def _history(config: EurekaConfig) -> History | None:
    """An hour of samples at the configured interval (at least two, for a rate)."""
    interval_ms = config.dashboard.history_interval_ms
    if not interval_ms:
        return None
    return History(capacity=max(2, HISTORY_WINDOW_MS // interval_ms), interval_ms=interval_ms)


def _remote_regions(
    config: EurekaConfig, clock: Callable[[], int], cache: ResponseCache
) -> RemoteRegions | None:
    """``config.remote_regions`` (EUREKA_REMOTE_REGION_*), or None when no region is configured."""
    regions = config.remote_regions
    if not regions.urls:
        return None
    # Here, not at the top: a node without remote regions does not load the HTTP client.
    from registry.cluster.region_transport import RegionHttpTransport
    from registry.cluster.regions import RemoteRegions, region_limits

    def on_change(region: str, apps: set[str], vips: set[str]) -> None:
        # What a fetch changed leaves the payloads that merge it: GET apps and the delta (every
        # regions variant), the apps answered by fallback and the vips the changed instances carry.
        # A change of the delta alone drops those of no app.
        if not apps:
            cache.invalidate("", ())
        for app in apps:
            cache.invalidate(app, vips)

    transport = RegionHttpTransport(
        regions.connect_timeout_ms / 1000,
        regions.read_timeout_ms / 1000,
        max_answer_bytes=regions.max_answer_bytes,
        total_timeout_s=regions.total_timeout_ms / 1000,
    )
    return RemoteRegions(
        regions.urls,
        regions.whitelist,
        transport,
        clock,
        on_change=on_change,
        fallback=regions.transparent_fallback,
        limits=region_limits(regions.max_answer_instances, config.registry.max_answer_record_bytes),
    )


def _change_publisher(registry: Registry, config: EurekaConfig):
    """Production mode with the change feed on: every change also goes to a Redis Stream."""
    if not config.redis.url or not config.change_feed.enabled:
        return None
    from registry.feed.redis_feed import start_publisher

    return start_publisher(registry, config)


def _health_checker(
    registry: Registry, config: EurekaConfig, clock: Callable[[], int]
) -> HealthChecker | None:
    """Active health checks when EUREKA_HEALTH_CHECKS is on (``config.health_checks``)."""
    health = config.health_checks
    if not health.enabled:
        return None
    defaults = CheckDefaults(
        interval_ms=health.interval_ms,
        timeout_ms=health.timeout_ms,
        threshold=health.threshold,
        recover=health.recover,
        max_timeout_ms=health.max_timeout_ms,
    )
    return HealthChecker(registry, defaults, clock())


def _node_health_policy(config: EurekaConfig) -> AddressPolicy | None:
    if not config.health_checks.enabled:
        return None
    return own_address_policy(config.health_checks.allowed_networks, config.identity.instance_ip_address)


def _kick_webhook_task() -> None:
    """Production mode: have a Celery worker send the deliveries just queued."""
    from registry.webhooks.tasks import deliver_webhooks

    try:
        deliver_webhooks.apply_async(expires=5, retry=False)
    except Exception as exc:  # the broker is down: beat's run (every few seconds) catches up
        logger.warning("could not start a webhook delivery: %s", exc)


def _cluster_member(
    registry: Registry, peers: PeerSet, config: EurekaConfig, clock: Callable[[], int]
) -> ClusterMember:
    """Embedded mode replicates from this process; production mode through Redis and Celery."""
    # Here, not at the top: a node without peers does not load the peer transport's HTTP client.
    from registry.cluster.member import ClusterMember

    if not config.redis.url or config.redis.jobs_driver != "celery":
        return ClusterMember(registry, peers, config, clock)
    from registry.cache.redis_tier import connect
    from registry.runtime.tasks import drain_replication_outbox

    client = connect(config.redis.url)

    def kick(peer_key: str) -> None:
        try:
            drain_replication_outbox.apply_async((peer_key,), expires=5, retry=False)
        except Exception as exc:  # the broker is down: beat's drain (or the fallback) catches up
            logger.warning("could not start a replication drain: %s", exc)

    return ClusterMember(registry, peers, config, clock, redis_client=client, kick=kick)


def _read_only_tier(config: EurekaConfig, clock: Callable[[], int]) -> ReadOnlyTier:
    """In Redis when ``config.redis.url`` is set (production mode), else in the process."""
    if not config.redis.url:
        return ReadOnlyTier()
    from registry.cache.redis_tier import RedisReadOnlyTier, connect

    # Short timeouts: a slow Redis must not hold up reads the node can answer from its own copy.
    tier = RedisReadOnlyTier(connect(config.redis.url), config.redis.namespace, clock)
    # A new process starts with an empty map: payloads an earlier process (a restart, a crash) left
    # in Redis describe a map that no longer exists, and the cache sync would never refresh them.
    tier.clear()
    return tier


_node: Node | None = None
_node_lock = threading.Lock()
# Set in processes that must never hold a lease map (a reader: registry/reader/): why not.
_forbidden: str | None = None


def get_node() -> Node:
    global _node
    if _node is None:
        with _node_lock:
            if _forbidden is not None:
                raise RuntimeError(f"this process holds no registry node: {_forbidden}")
            if _node is None:
                from django.conf import settings

                _node = build_node(settings.EUREKA)
    return _node


def forbid_node(reason: str | None) -> None:
    """From now on ``get_node()`` raises instead of building a node (None lifts it, for tests)."""
    global _forbidden
    with _node_lock:
        _forbidden = reason


def holds_node() -> bool:
    """Whether this process has built (or been given) a node."""
    return _node is not None


def reset_node(node: Node | None = None) -> Node | None:
    """Replace the process's node (tests use this for a fresh map or a fake clock)."""
    global _node
    with _node_lock:
        if _node is not None:
            _node.stop()
        _node = node
    return node


def start_serving(
    listening: list[tuple[str, int]],
    snapshot_runner: Callable[[Callable[[], None]], None] | None = None,
) -> Node:
    """What a server process does once it has loaded the application, before it answers.

    The same steps under each HTTP server (``deploy/gunicorn.conf.py``'s ``post_worker_init`` and
    ``registry/runtime/granian_server.py``): ``snapshot_runner`` runs a warm-restart snapshot's write
    where the server wants it (gevent's thread pool), None on the calling thread.
    """
    node = get_node()
    # Warm restart: the last snapshot is restored before the node serves and before its start-up
    # sync (which then merges the peers' copies in).
    if node.warm_restart is not None:
        if snapshot_runner is not None:
            node.warm_restart.runner = snapshot_runner
        node.start_warm_restart()
    # The node leaves its own URL out of EUREKA_PEER_URLS by host and port, so it needs to know where
    # it listens before it starts replicating (and syncing from its peers).
    node.start_cluster(listening)
    # What loading the application made (modules, settings, URL patterns) lives as long as the process:
    # out of the collector's full walks from the start, not from the GC policy's first freeze
    # (registry/runtime/gc_policy.py; what each full collection spent walking them before:
    # bench/README.md, "Numbers behind the code").
    if "freeze_gc" in node.jobs:
        node.gc_policy.run_at_start()
    # Freed payloads and snapshots go back to the system instead of staying in glibc's heap and arenas.
    from registry.runtime import memory

    memory.tune()
    return node


def stop_serving() -> None:
    """Once the server has stopped accepting and finished its requests (a graceful stop): the node
    stops its jobs and writes its last warm-restart snapshot."""
    if holds_node():
        get_node().stop()
