"""Celery tasks. A worker is another process with an empty copy of the map, so a task never touches
the map: it asks the registry process to run the job through the authenticated control endpoint.

Peer replication (production mode): ``drain_replication_outbox`` sends one peer's Redis outbox
(registry/cluster/redis_outbox.py) and reports each batch's answers back to the node, which alone can
act on them; beat runs ``drain_replication_outboxes`` every second as the safety net for lost kicks."""

from __future__ import annotations

import logging
from functools import cache

import httpx
from celery import shared_task
from django.conf import settings

from registry.domain.constants import CONTROL_HEADER
from registry.wire.outbound import outbound_client

logger = logging.getLogger(__name__)


@cache
def _control_client() -> httpx.Client:
    """The worker process's one client for the node's control endpoint. One per process, kept: an
    ``httpx.Client`` builds an SSL context when it is made, costly work that a client per task would
    repeat for every periodic job, several times a second on every node."""
    # An https:// control URL is reached with the outbound TLS settings, the node's certificate presented.
    return outbound_client(
        settings.EUREKA.outbound_tls.contexts(),
        client_cert=True,
        base_url=settings.EUREKA.control_url,
        headers={CONTROL_HEADER: settings.EUREKA.control_secret},
        timeout=10.0,
    )


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
    response = _control_client().post(f"/control/jobs/{job}")
    response.raise_for_status()
    return response.json()


@cache
def _replication_context():
    """What a worker needs to drain outboxes, built once per worker process."""
    from redis import Redis

    from registry.cluster.transport import peer_transport

    cluster = settings.EUREKA.cluster
    # The static peers; those found through DNS are looked up by ``_peer`` as the node publishes them.
    peers = {peer.key: peer for peer in cluster.peers}
    client = Redis.from_url(settings.EUREKA.redis.url, socket_timeout=2.0, socket_connect_timeout=2.0)
    transport = peer_transport(settings.EUREKA)
    return peers, client, transport, _control_client()


def _peer(peer_key: str):
    """The peer behind a key: a static one, or one the node found through DNS and published in Redis
    (its URL without credentials; the credentials come from this process's EUREKA_PEER_DNS)."""
    from registry.cluster.discovery import peer_for
    from registry.cluster.redis_outbox import published_peers

    peers, client, _, _ = _replication_context()
    peer = peers.get(peer_key)
    if peer is not None:
        return peer
    cluster = settings.EUREKA.cluster
    if not cluster.peer_dns:
        return None
    url = published_peers(client, settings.EUREKA.redis.namespace).get(peer_key)
    peer = peer_for(url, cluster.peer_dns) if url else None
    return peer if peer is not None and peer.key == peer_key else None


@shared_task(name="registry.tasks.drain_replication_outbox", ignore_result=True)
def drain_replication_outbox(peer_key: str) -> int:
    """Send one peer's outbox (under its lock, so never twice) and report to the node."""
    from registry.cluster.redis_outbox import RedisQueue, drain, queue_key

    _, client, transport, control = _replication_context()
    peer = _peer(peer_key)
    if peer is None:
        # A DNS peer the node dropped since the kick, or settings that differ from the node's.
        logger.info(
            "no peer has the key %s now (EUREKA_PEER_URLS / EUREKA_PEER_DNS as the node's?)", peer_key
        )
        return 0
    config = settings.EUREKA
    queue = RedisQueue(client, queue_key(config.redis.namespace, peer), config.cluster.replication_queue_size)

    def report(follow_ups, error, queued, lag_ms):
        body = {
            "follow_ups": follow_ups.as_dict() if follow_ups else None,
            "error": error,
            "queued": queued,
            "lag_ms": lag_ms,
        }
        try:
            control.post(f"/control/replication/{peer_key}", json=body).raise_for_status()
        except httpx.HTTPError as exc:
            # The items were delivered; only the console's numbers and follow-ups are late.
            logger.warning("could not report replication results to the node: %s", exc)

    return drain(client, queue, peer, transport, report)


@shared_task(name="registry.tasks.drain_replication_outboxes", ignore_result=True)
def drain_replication_outboxes() -> None:
    """Beat's safety net: a drain per peer each second, whether or not a kick was lost."""
    from registry.cluster.redis_outbox import published_peers

    peers, client, _, _ = _replication_context()
    keys = set(peers)
    if settings.EUREKA.cluster.peer_dns:
        keys |= set(published_peers(client, settings.EUREKA.redis.namespace))
    for key in sorted(keys):
        drain_replication_outbox.apply_async((key,), expires=5)


# --- Active health checks, production mode (registry/health/) -----------------------------------
# Beat starts a round every EUREKA_HEALTH_CHECK_DISPATCH_MS. The node decides what is due and holds
# the state machine; the worker only probes. A lock in Redis keeps rounds from piling up, and the
# node hands each target out once until its result comes back.
HEALTH_ROUND_LOCK_S = 120


@cache
def _health_context():
    from urllib.parse import urlsplit

    from registry.cache.redis_tier import connect
    from registry.health.addresses import own_address_policy
    from registry.health.probes import ProbePool

    # This host's interfaces and the node's IP setting; the node's address as this worker reaches it;
    # and each round, the addresses the node reports as its own.
    config = settings.EUREKA
    policy = own_address_policy(config.health_checks.allowed_networks, config.identity.instance_ip_address)
    policy.add_own([urlsplit(config.control_url).hostname or ""])
    return (
        connect(config.redis.url),
        _control_client(),
        ProbePool(settings.EUREKA.health_checks.concurrency, policy, config.outbound_tls.contexts()),
    )


@shared_task(name="registry.tasks.run_health_checks", ignore_result=True)
def run_health_checks() -> int:
    """One round: claim due probes from the node, run them (bounded), post the results; repeat while
    full batches come and the round's time lasts. Returns how many results were posted."""
    import time

    from redis.exceptions import LockError, RedisError

    from registry.health.checker import ProbeTarget
    from registry.health.probes import run_round

    health = settings.EUREKA.health_checks
    redis, control, pool = _health_context()
    namespace = settings.EUREKA.redis.namespace
    lock = redis.lock(f"{namespace}:health-round", timeout=HEALTH_ROUND_LOCK_S, blocking=False)
    try:
        if not lock.acquire(blocking=False):
            return 0  # the previous round still runs
    except RedisError as exc:
        logger.warning("health check round skipped: Redis unreachable (%s)", exc)
        return 0
    posted = 0
    batch = health.concurrency * 2
    deadline = time.monotonic() + health.dispatch_ms / 1000
    try:
        while True:
            answer = control.post("/control/health/targets", params={"limit": batch})
            answer.raise_for_status()
            claimed = answer.json()
            pool.policy.add_own(str(address) for address in claimed.get("node_addresses", ()))
            targets = [ProbeTarget.from_dict(item) for item in claimed["targets"]]
            if not targets:
                break
            wait_s = max(target.timeout_ms for target in targets) / 1000 + 1
            results = run_round(targets, pool, wait_s)
            control.post(
                "/control/health/results", json={"results": [result.as_dict() for result in results]}
            ).raise_for_status()
            posted += len(results)
            if len(targets) < batch or time.monotonic() > deadline:
                break
    except httpx.HTTPError as exc:
        # Claimed probes without a result are handed out again once their claim expires.
        logger.warning("health check round stopped: the node did not answer (%s)", exc)
    finally:
        try:
            lock.release()
        except (LockError, RedisError):
            pass  # expired (a very long round) or Redis gone: the lock times out by itself
    return posted
