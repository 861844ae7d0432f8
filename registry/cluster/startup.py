"""A node joining its cluster: the start-up sync from peers, and registering itself with them.

``sync_from_peers`` is Eureka's ``syncUp``: read each peer's full registry (``GET apps``) and
register every instance as a replicated write (counted for self-preservation, never sent on),
trying again after ``wait_ms`` while nothing was found, ``retries`` times. The node then opens for
traffic with that count (``openForTraffic``).

``SelfRegistration`` is what the Java server's embedded client does: with ``EUREKA_SELF_APP_NAME``
set, the node registers itself with each peer under that name and heartbeats like any client. Spring
Cloud Eureka Server lists a peer under "available replicas" only when such an instance, on that
peer's host, is registered with it.

Plain Python: no Django.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from registry import constants as c
from registry.cluster.transport import PeerTransport, PeerUnreachable
from registry.core import LimitExceeded, Registry
from registry.endpoints import Peer
from registry.wire.codecs import BadInput, build_instance, instances_in

logger = logging.getLogger(__name__)

RETRY_UNREGISTERED_MS = 5_000


def sync_from_peers(
    registry: Registry,
    peers: list[Peer],
    transport: PeerTransport,
    clock: Callable[[], int],
    retries: int,
    wait_ms: int,
    stop: threading.Event | None = None,
    on_failure: Callable[[Peer, str], None] | None = None,
) -> int:
    """Copy the peers' registries into this node; returns how many instances were registered. A peer
    whose registry is over this node's limits (transport.py ``AnswerLimits``) is told to ``on_failure``
    with the reason: the console then shows the peer failing (a peer not up yet is the replication
    probes' to report). Nothing of such an answer is registered."""
    stop = stop or threading.Event()
    count = 0
    for attempt in range(retries + 1):
        if attempt and stop.wait(wait_ms / 1000):
            break
        for peer in peers:
            try:
                document = transport.fetch_apps(peer)
            except PeerUnreachable as exc:
                if not exc.over_limit:
                    logger.info("start-up sync: %s not reachable (%s)", peer.display_url, exc)
                    continue
                logger.warning("start-up sync: %s: %s", peer.display_url, exc)
                if on_failure is not None:
                    on_failure(peer, f"start-up sync: {exc}")
                continue
            for raw in instances_in(document):
                now = clock()
                try:
                    instance = build_instance(raw, now)
                except BadInput as exc:
                    logger.warning("start-up sync: an instance from %s skipped: %s", peer.display_url, exc)
                    continue
                try:
                    registry.register(instance, now, is_replication=True)
                except LimitExceeded as exc:
                    logger.warning("start-up sync: an instance from %s skipped: %s", peer.display_url, exc)
                    continue
                count += 1
        if count:
            break
    logger.info("start-up sync: %d instances from %d peers", count, len(peers))
    return count


def self_instance(app: str, host: str, ip: str, port: int) -> dict[str, Any]:
    """This node as a client would describe it (Spring's instance id shape ``host:app:port``)."""
    base = f"http://{host}:{port}"
    return {
        "instanceId": f"{host}:{app.lower()}:{port}",
        "hostName": host,
        "app": app.upper(),
        "ipAddr": ip,
        "status": c.UP,
        "port": {"$": port, "@enabled": "true"},
        "securePort": {"$": 443, "@enabled": "false"},
        "dataCenterInfo": {"@class": c.DEFAULT_DATA_CENTER_CLASS, "name": "MyOwn"},
        "leaseInfo": {
            "renewalIntervalInSecs": c.DEFAULT_RENEWAL_INTERVAL_SECS,
            "durationInSecs": c.DEFAULT_DURATION_SECS,
        },
        "homePageUrl": f"{base}/",
        "statusPageUrl": f"{base}/",
        "healthCheckUrl": f"{base}/healthz",
        "vipAddress": app.lower(),
        "secureVipAddress": app.lower(),
        "metadata": {"eureka-django.node": "true"},
    }


class SelfRegistration:
    """Register this node with each peer and heartbeat every ``interval_ms``; re-register on 404."""

    def __init__(
        self, peers: list[Peer], transport: PeerTransport, instance: dict[str, Any], interval_ms: int
    ):
        self.peers = peers
        self.transport = transport
        self.instance = instance
        self.interval_ms = interval_ms
        self._registered: set[str] = set()
        self._stop = threading.Event()

    def beat(self) -> None:
        """One round: register where not yet registered (or forgotten), heartbeat elsewhere."""
        app, instance_id = self.instance["app"], self.instance["instanceId"]
        for peer in self.peers:
            try:
                known = peer.key in self._registered
                if known and self.transport.heartbeat(peer, app, instance_id) == 404:
                    known = False  # the peer forgot this node (restart, eviction): register again
                if not known and self.transport.register(peer, app, self.instance) == 204:
                    known = True
                if known:
                    self._registered.add(peer.key)
                else:
                    self._registered.discard(peer.key)
            except PeerUnreachable as exc:
                logger.debug("self-registration with %s: %s", peer.display_url, exc)

    def run(self) -> None:
        while True:
            self.beat()
            # A peer not reached yet is tried again sooner than the heartbeat interval.
            pending = len(self._registered) < len(self.peers)
            wait_ms = min(self.interval_ms, RETRY_UNREGISTERED_MS) if pending else self.interval_ms
            if self._stop.wait(wait_ms / 1000):
                return

    def start(self) -> None:
        threading.Thread(target=self.run, name="self-registration", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
