"""This node as a member of its cluster: who the peers are, and the machinery that keeps them level.

Built from the node's options (``EUREKA_PEER_URLS`` and friends, see the settings) and started once
the server knows which addresses it listens on, so that its own URL can be left out of the peers by
host **and** port. In embedded mode the outboxes are in-process queues sent by this process's
threads; in production mode they are Redis lists that Celery workers send (``redis_outbox.py``), and
this process's threads only send what Redis could not take.

Starting runs the start-up sync from the peers (then opens the registry for traffic with what it
found), the replication drivers, and, with ``EUREKA_SELF_APP_NAME``, this node's own registration
with its peers. A node with no peers records nothing and starts nothing.

Plain Python: no Django.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from registry.cluster.peers import PeerSet, is_own_url
from registry.cluster.replicator import EmbeddedReplication, FollowUps, MemoryOutbox, Replicator
from registry.cluster.startup import SelfRegistration, self_instance, sync_from_peers
from registry.cluster.transport import PeerTransport
from registry.core import Registry
from registry.endpoints import Peer, peer_hostname

if TYPE_CHECKING:
    from registry.config import EurekaConfig

logger = logging.getLogger(__name__)

SELF_HEARTBEAT_MS = 30_000


class ClusterMember:
    def __init__(
        self,
        registry: Registry,
        peer_set: PeerSet,
        config: EurekaConfig,
        clock: Callable[[], int],
        transport: PeerTransport | None = None,
        redis_client: Any = None,
        kick: Callable[[str], None] | None = None,
    ):
        """``redis_client`` and ``kick`` (start a drain task for a peer key) select production mode:
        the outboxes live in Redis and Celery workers send them."""
        self.registry = registry
        self.config = config
        self.clock = clock
        self.self_url = config.cluster.self_url
        peers = []
        for peer in config.cluster.peers:
            if is_own_url(peer, self.self_url, []):
                peer_set.remove(peer.url)
            else:
                peers.append(peer)
        self.transport = transport or PeerTransport(
            timeout_s=config.cluster.peer_timeout_ms / 1000,
            max_answer_bytes=config.cluster.peer_max_answer_bytes,
            total_timeout_s=config.cluster.peer_total_timeout_ms / 1000,
        )
        capacity = config.cluster.replication_queue_size
        self.production = redis_client is not None and kick is not None
        # Production mode: a drain as soon as a peer the workers found down answers again.
        self._kick = kick if self.production else None
        if self.production:
            # Only here: an embedded node does not load the Redis client at all.
            from registry.cluster.redis_outbox import NodeOutbox, RedisQueue, queue_key

            namespace = config.redis.namespace

            def outbox_factory(peer: Peer) -> NodeOutbox:
                queue = RedisQueue(redis_client, queue_key(namespace, peer), capacity)
                return NodeOutbox(queue, lambda: kick(peer.key), capacity)

        else:

            def outbox_factory(peer: Peer) -> MemoryOutbox:
                return MemoryOutbox(capacity)

        self.replicator = Replicator(
            registry, peers, peer_set, outbox_factory, transport=self.transport, buffer_capacity=capacity
        )
        self.drivers: EmbeddedReplication | None = None
        self.self_registration: SelfRegistration | None = None
        self.synced: int | None = None
        self._stop = threading.Event()
        if peers:
            registry.set_replication_listener(self.replicator.record)

    @property
    def peers(self) -> list[Peer]:
        return list(self.replicator.peers.values())

    def start(self, listening: list[tuple[str, int]]) -> None:
        for peer in self.peers:
            if is_own_url(peer, self.self_url, listening):
                logger.info("peer %s is this node: left out", peer.display_url)
                self.replicator.remove_peer(peer.key)
        if not self.peers:
            self.registry.set_replication_listener(None)
            return
        logger.info("cluster: replicating to %s", ", ".join(p.display_url for p in self.peers))
        self.drivers = EmbeddedReplication(
            self.replicator,
            self.clock,
            self.config.cluster.replication_flush_ms,
            on_recovered=self._kick,
        )
        self.drivers.start()
        threading.Thread(target=self._sync, name="startup-sync", daemon=True).start()
        app = self.config.cluster.self_app_name
        if app:
            host, port = self._own_address(listening)
            ip = self.config.identity.instance_ip_address or host
            self.self_registration = SelfRegistration(
                self.peers, self.transport, self_instance(app, host, ip, port), SELF_HEARTBEAT_MS
            )
            self.self_registration.start()

    def _own_address(self, listening: list[tuple[str, int]]) -> tuple[str, int]:
        """The host and port peers know this node by: EUREKA_SELF_URL, else where it listens."""
        port = listening[0][1] if listening else 8761
        if self.self_url:
            return peer_hostname(self.self_url), Peer(self.self_url).address[1]
        host = listening[0][0] if listening else ""
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        return host, port

    def _sync(self) -> None:
        retries = self.config.cluster.sync_retries
        wait_ms = self.config.cluster.sync_retry_wait_ms
        try:
            count = sync_from_peers(
                self.registry,
                self.peers,
                self.transport,
                self.clock,
                retries,
                wait_ms,
                self._stop,
                on_failure=lambda peer, error: self.replicator.peer_set.record_failure(
                    peer.url, self.clock(), error
                ),
            )
        except Exception:
            logger.exception("start-up sync failed")
            count = 0
        self.synced = count
        self.registry.open_for_traffic(count, self.clock())

    def report(
        self,
        key: str,
        follow_ups: FollowUps | None,
        error: str | None,
        queued: int,
        now: int,
        lag_ms: int = 0,
    ) -> None:
        """A Celery worker's account of one batch it sent to peer ``key`` (production mode)."""
        outbox = self.replicator.outboxes.get(key)
        if outbox is None:
            return
        if self.production:  # its outboxes are in Redis (NodeOutbox)
            outbox.queued_in_redis = queued
            outbox.lag_in_redis_ms = lag_ms
        if follow_ups is not None:
            self.replicator.apply_follow_ups(key, follow_ups, now)
        if error:
            self.replicator.counters[key].failures += 1
            self.replicator.peer_set.record_failure(self.replicator.peers[key].url, now, error)
            if self.drivers is not None:
                # This node's sender probes the peer from now on, and starts a drain when it answers.
                self.drivers.nudge(key)
        self.replicator.peer_set.set_queued(
            self.replicator.peers[key].url, len(outbox), self.replicator.lag_ms(key, now)
        )

    def status(self, now: int) -> dict[str, Any]:
        """For /readyz: how replication runs and each peer's numbers (URLs without credentials)."""
        states = {state.url: state for state in self.replicator.peer_set.states()}
        redis_down = [
            outbox.redis_down_since
            for outbox in self.replicator.outboxes.values()
            if self.production and outbox.redis_down_since is not None
        ]
        peers = []
        for key, peer in self.replicator.peers.items():
            counters = self.replicator.counters[key]
            state = states.get(peer.display_url)
            peers.append(
                {
                    "url": peer.display_url,
                    "available": bool(state and state.available(now)),
                    "queued": len(self.replicator.outboxes[key]),
                    "lag_ms": self.replicator.lag_ms(key, now),
                    "sent": counters.sent,
                    "refused": counters.refused,
                    "dropped": counters.dropped,
                    "failures": counters.failures,
                    "last_error": state.last_error if state else None,
                }
            )
        falling_back = self.production and bool(redis_down)
        if not self.production:
            sender = "in-process"
        elif falling_back:
            sender = "in-process (Redis unreachable, falling back)"
        else:
            sender = "celery"
        return {
            "sender": sender,
            "falling_back": falling_back,
            "buffered": len(self.replicator.buffer),
            "coalesced": self.replicator.buffer.coalesced,
            "dropped_before_queue": self.replicator.buffer.dropped,
            "synced_at_start": self.synced,
            "peers": peers,
        }

    def stop(self) -> None:
        self._stop.set()
        if self.drivers is not None:
            self.drivers.stop()
        if self.self_registration is not None:
            self.self_registration.stop()
