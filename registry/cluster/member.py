"""This node as a member of its cluster: who the peers are, and the machinery that keeps them level.

Built from the node's options (``EUREKA_PEER_URLS``, ``EUREKA_PEER_DNS`` and friends, see the
settings) and started once the server knows which addresses it listens on, so that its own URL can be
left out of the peers by host **and** port. Peers named by DNS (discovery.py) are looked up at start and
every ``EUREKA_PEER_DNS_INTERVAL_SECONDS``: an address that appears becomes a peer (an outbox, a sender,
a line on the console), one that is gone stops being one (its queue discarded); static peers stay.

In embedded mode the outboxes are in-process queues sent by this process's
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

from registry.cluster.discovery import PeerDiscovery, PeerResolver
from registry.cluster.peers import PeerSet, is_own_url
from registry.cluster.replicator import EmbeddedReplication, FollowUps, MemoryOutbox, Replicator
from registry.cluster.startup import SelfRegistration, self_instance, sync_from_peers
from registry.cluster.transport import PeerTransport, peer_transport
from registry.domain.core import Registry
from registry.domain.endpoints import Peer, peer_hostname
from registry.domain.refusals import RefusalLines

if TYPE_CHECKING:
    from registry.config.eureka import EurekaConfig

logger = logging.getLogger(__name__)

SELF_HEARTBEAT_MS = 30_000
# A node whose peer names gave no DNS answer at start asks again this often, this many times, before
# its start-up sync (reads wait meanwhile): a DNS hiccup must not open a node with an empty registry.
DNS_WAIT_AT_START_MS = 1_000
DNS_WAIT_AT_START_TRIES = 15


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
        self.static_keys = frozenset(peer.key for peer in peers)
        self.discovery = (
            PeerDiscovery(config.cluster.peer_dns, PeerResolver(config.cluster.dns_nameservers))
            if config.cluster.peer_dns
            else None
        )
        self._listening: list[tuple[str, int]] = []
        # Whether a URL is this node's own, by URL (asked again at every lookup otherwise).
        self._own: dict[str, bool] = {}
        # Lookups change the peers from their own thread; one change at a time.
        self._peers_lock = threading.Lock()
        self._redis_client = redis_client
        self.transport = transport or peer_transport(config)
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
            registry,
            peers,
            peer_set,
            outbox_factory,
            transport=self.transport,
            buffer_capacity=capacity,
            refusal_lines=RefusalLines(config.process.refusal_log_interval_seconds),
        )
        self.drivers: EmbeddedReplication | None = None
        self.self_registration: SelfRegistration | None = None
        self.synced: int | None = None
        self._stop = threading.Event()
        if peers or self.discovery is not None:
            registry.set_replication_listener(self.replicator.record)

    @property
    def peers(self) -> list[Peer]:
        return list(self.replicator.peers.values())

    def start(self, listening: list[tuple[str, int]]) -> None:
        self._listening = list(listening)
        for peer in self.peers:
            if self._is_own(peer):
                logger.info("peer %s is this node: left out", peer.display_url)
                self.replicator.remove_peer(peer.key)
        self.static_keys = frozenset(self.replicator.peers)
        if self.discovery is not None:
            self.update_peers(self.discovery.lookup())
        if not self.peers and self.discovery is None:
            self.registry.set_replication_listener(None)
            return
        if self.peers:
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
        if self.discovery is not None:
            threading.Thread(target=self._rediscover, name="peer-dns", daemon=True).start()

    def _is_own(self, peer: Peer) -> bool:
        own = self._own.get(peer.display_url)
        if own is None:
            own = self._own[peer.display_url] = is_own_url(peer, self.self_url, self._listening)
        return own

    def update_peers(self, found: list[Peer]) -> tuple[list[Peer], list[Peer]]:
        """Make DNS's answer the node's peers (this node's own addresses and static peers aside):
        replication starts to each new one and stops to each one gone, whose queue is discarded.
        Returns (added, removed)."""
        wanted = {peer.key: peer for peer in found if not self._is_own(peer)}
        added: list[Peer] = []
        removed: list[Peer] = []
        with self._peers_lock:
            for key, peer in wanted.items():
                if self.replicator.add_peer(peer):
                    added.append(peer)
                    if self.drivers is not None:
                        self.drivers.add_sender(key)
            for key in list(self.replicator.peers):
                if key in wanted or key in self.static_keys:
                    continue
                if self.drivers is not None:
                    self.drivers.remove_sender(key)
                gone = self.replicator.remove_peer(key, discard_queue=True)
                if gone is not None:
                    removed.append(gone)
            if self.self_registration is not None:
                self.self_registration.peers = self.peers
            if added or removed:
                self._publish_peers()
        for peer in added:
            logger.info(
                "peer %s found through DNS: replicating to it",
                peer.display_url,
                extra={"event": "peer_added", "peer": peer.display_url},
            )
        for peer in removed:
            logger.warning(
                "peer %s no longer in DNS: replication to it stopped, its queue discarded",
                peer.display_url,
                extra={"event": "peer_removed", "peer": peer.display_url},
            )
        return added, removed

    def _publish_peers(self) -> None:
        """Production mode: tell the Celery workers which peers the node has now, by key and URL
        without credentials (they rebuild the credentials from the same settings)."""
        if not self.production or self._redis_client is None:
            return
        from registry.cluster.redis_outbox import publish_peers

        publish_peers(self._redis_client, self.config.redis.namespace, self.peers)

    def _rediscover(self) -> None:
        assert self.discovery is not None
        interval_s = self.config.cluster.peer_dns_interval_ms / 1000
        while not self._stop.wait(interval_s):
            try:
                self.update_peers(self.discovery.lookup())
            except Exception:
                logger.exception("peer DNS lookup failed")

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
        if self.discovery is not None and not self.discovery.answered:
            # No name answered at start (DNS down, or the pod's record not published yet): syncing from
            # nobody would open the node with an empty registry. Ask again for a while first.
            for _ in range(DNS_WAIT_AT_START_TRIES):
                if self._stop.wait(DNS_WAIT_AT_START_MS / 1000):
                    return
                self.update_peers(self.discovery.lookup())
                if self.discovery.answered:
                    break
            else:
                logger.warning(
                    "start-up sync: no DNS answer for the peers; syncing from the static ones only"
                )
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
        peer = self.replicator.peers.get(key)
        if outbox is None or peer is None:  # not a peer (any more: DNS no longer lists it)
            return
        if self.production:  # its outboxes are in Redis (NodeOutbox)
            outbox.queued_in_redis = queued
            outbox.lag_in_redis_ms = lag_ms
        if follow_ups is not None:
            self.replicator.apply_follow_ups(key, follow_ups, now)
        if error:
            self.replicator.counters[key].failures += 1
            self.replicator.peer_set.record_failure(peer.url, now, error)
            if self.drivers is not None:
                # This node's sender probes the peer from now on, and starts a drain when it answers.
                self.drivers.nudge(key)
        self.replicator.peer_set.set_queued(peer.url, len(outbox), self.replicator.lag_ms(key, now))

    def status(self, now: int) -> dict[str, Any]:
        """For /readyz: how replication runs and each peer's numbers (URLs without credentials)."""
        states = {state.url: state for state in self.replicator.peer_set.states()}
        redis_down = [
            outbox.redis_down_since
            for outbox in self.replicator.outboxes.values()
            if self.production and outbox.redis_down_since is not None
        ]
        peers = []
        for key, peer in list(self.replicator.peers.items()):
            counters = self.replicator.counters.get(key)
            outbox = self.replicator.outboxes.get(key)
            if counters is None or outbox is None:  # removed meanwhile
                continue
            state = states.get(peer.display_url)
            peers.append(
                {
                    "url": peer.display_url,
                    "available": bool(state and state.available(now)),
                    "queued": len(outbox),
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
            # Each EUREKA_PEER_DNS name: its last good answer, and why its latest lookup failed.
            "dns": self.discovery.status() if self.discovery is not None else None,
        }

    def stop(self) -> None:
        self._stop.set()
        if self.drivers is not None:
            self.drivers.stop()
        if self.self_registration is not None:
            self.self_registration.stop()
