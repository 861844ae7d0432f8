"""Where a node is put together: ``build_node(config)`` makes every part the settings ask for and
wires them to one another.

The lease map tells the response cache and the payload builder what changed; the remote regions,
when there are any, feed the payloads and drop the cached ones a fetch changed; the cluster member
replicates the map's writes; the warm restart, the console's history, the health checks and the
change feed's publisher are made when their settings turn them on. Parts that need a client the
node may do without (the HTTP client for peers and regions, Redis, Celery) are imported where they
are made, so that a node without them does not load those libraries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from registry.cache.pacing import PACER
from registry.cache.response_cache import ReadOnlyTier, ResponseCache
from registry.cluster.peers import PeerSet
from registry.cluster.regions import RemoteRegions, region_limits
from registry.config.eureka import EurekaConfig
from registry.domain.core import Registry
from registry.domain.history import WINDOW_MS as HISTORY_WINDOW_MS
from registry.domain.history import History, StatusTrail
from registry.domain.refusals import RefusalLines
from registry.health.addresses import AddressPolicy, own_address_policy
from registry.health.checker import HealthChecker
from registry.health.config import CheckDefaults
from registry.runtime.node import Node, ReceivedReplication
from registry.runtime.snapshots import build_warm_restart
from registry.wire.payloads import PayloadBuilder

if TYPE_CHECKING:
    # Types only: loaded where the part is made (see the module docstring).
    from registry.cluster.member import ClusterMember
    from registry.feed.redis_feed import RedisChangePublisher

logger = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def build_node(config: EurekaConfig, clock: Callable[[], int] = wall_clock_ms) -> Node:
    """The node ``config`` describes (``settings.EUREKA``, parsed by registry/domain/config.py)."""
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
    # The HTTP client's module: loaded only by a node with remote regions.
    from registry.cluster.region_transport import RegionHttpTransport

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
        tls=config.outbound_tls.contexts(),
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


def _change_publisher(registry: Registry, config: EurekaConfig) -> RedisChangePublisher | None:
    """Production mode with the change feed on: every change also goes to a Redis Stream."""
    if not config.redis.url or not config.change_feed.enabled:
        return None
    # The Redis client's module: loaded only in production mode.
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


def _cluster_member(
    registry: Registry, peers: PeerSet, config: EurekaConfig, clock: Callable[[], int]
) -> ClusterMember:
    """Embedded mode replicates from this process; production mode through Redis and Celery."""
    # The peers' HTTP client comes with the member's module: loaded only by a node with peers.
    from registry.cluster.member import ClusterMember

    if not config.redis.url or config.redis.jobs_driver != "celery":
        return ClusterMember(registry, peers, config, clock)
    # Redis and Celery: production mode only.
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
    # The Redis client's module: loaded only in production mode.
    from registry.cache.redis_tier import RedisReadOnlyTier, connect

    # Short timeouts: a slow Redis must not hold up reads the node can answer from its own copy.
    tier = RedisReadOnlyTier(connect(config.redis.url), config.redis.namespace, clock)
    # A new process starts with an empty map: payloads an earlier process (a restart, a crash) left
    # in Redis describe a map that no longer exists, and the cache sync would never refresh them.
    tier.clear()
    return tier
