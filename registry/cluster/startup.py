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
from collections.abc import Callable, Iterable
from typing import Any

from registry.cache.pacing import PACER
from registry.cluster.transport import PeerTransport, PeerUnreachable
from registry.domain import constants as c
from registry.domain.core import Registry
from registry.domain.endpoints import Peer
from registry.domain.instances import InstanceInfo
from registry.domain.write_rules import LimitExceeded, copy_was_cancelled
from registry.wire.answers import RECORD_BYTES_SETTING, TOO_LARGE, Skipped
from registry.wire.codecs import BadInput, build_instance

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
    whose registry is over this node's limits (transport.py ``AnswerLimits``, and what an answer may
    hold: registry/wire/answers.py) is told to ``on_failure`` with the reason: the console then shows
    the peer failing (a peer not up yet is the replication probes' to report). Nothing of such an
    answer is registered, and the log says so once per peer and reason, not at every round.

    Each round:

    1. ``GET apps`` from every peer, its instances read one at a time and kept as records (never the
       document as Python objects); then ``GET apps/delta`` from those that answered: the cancels
       (``DELETED``) the deltas list, the newest per instance;
    2. every instance of the registries is registered as a replicated write, except a copy a peer
       cancelled (``copy_was_cancelled``, against the peers' cancels and this node's own recent ones):
       one peer's cancel not yet replicated to another must not bring the instance back, nor carry
       it from node to node through a rolling restart; the event loop gets its turn as they go
       (``PACER``);
    3. what this node held before (a warm restart's snapshot) and a peer cancelled since goes too;
    4. the node serves reads (``Registry.start_up_sync_done``): it has what every peer that answered
       holds, and a peer that did not (down, partitioned, or starting too: a node of ours answers 503
       until its own sync is done) has nothing to give now. A first node, or a whole cluster
       restarting, does not wait on the retries below.

    Instances a peer sent that could not be read, or were refused, are logged in one line per peer
    with their counts.

    Rounds go on, every ``wait_ms``, while nothing was registered, at most ``retries`` more times
    (Eureka's ``syncUp``: the count the node opens with is for self-preservation)."""
    stop = stop or threading.Event()
    count = dropped = skipped = 0
    said: dict[str, str] = {}
    for attempt in range(retries + 1):
        if attempt and stop.wait(wait_ms / 1000):
            break
        held: list[tuple[Peer, list[tuple[InstanceInfo, int]]]] = []
        for peer in peers:
            try:
                held.append((peer, _copies(peer, transport.fetch_apps(peer), clock, said)))
            except PeerUnreachable as exc:
                if not exc.over_limit:
                    logger.info("start-up sync: %s not reachable (%s)", peer.display_url, exc)
                    continue
                _say_once(said, peer, "over", f"start-up sync: {peer.display_url}: {exc}")
                if on_failure is not None:
                    on_failure(peer, f"start-up sync: {exc}")
        cancels: dict[tuple[str, str], tuple[int, int]] = {}
        for peer, _ in held:
            try:
                delta = transport.fetch_delta(peer)
                found = cancels_in(delta, clock()) if delta is not None else {}
            except PeerUnreachable as exc:
                logger.info("start-up sync: no delta from %s (%s)", peer.display_url, exc)
                continue
            for key, cancel in found.items():
                if key not in cancels or cancels[key][1] < cancel[1]:
                    cancels[key] = cancel
        for peer, copies in held:
            refused = Skipped()
            for instance, updated in copies:
                PACER.tick()
                if _cancelled_copy(registry, instance, updated, cancels):
                    skipped += 1
                    continue
                try:
                    registry.register(instance, clock(), is_replication=True)
                except LimitExceeded as exc:
                    refused.add("refused", str(exc))
                    continue
                count += 1
            if refused:
                _say_once(said, peer, "refused", f"start-up sync: from {peer.display_url}: {refused}")
        for (app, instance_id), (last_dirty, cancelled_at) in cancels.items():
            if registry.cancel_if_not_newer(app, instance_id, last_dirty, cancelled_at, clock()):
                dropped += 1
        registry.start_up_sync_done()
        if count:
            break
    logger.info(
        "start-up sync: %d instances from %d peers; %d copies a peer had cancelled skipped, "
        "%d instances held here that a peer had cancelled dropped",
        count,
        len(peers),
        skipped,
        dropped,
    )
    return count


def _copies(
    peer: Peer, records: Iterable[Any], clock: Callable[[], int], said: dict[str, str]
) -> list[tuple[InstanceInfo, int]]:
    """A peer's registry as records: each instance and its ``lastUpdatedTimestamp`` (0: none). Those
    that cannot be read are counted and logged in one line. Raises PeerUnreachable (from reading)."""
    copies: list[tuple[InstanceInfo, int]] = []
    left_out = Skipped()
    for raw in records:
        if raw is TOO_LARGE:
            left_out.add(f"larger than {RECORD_BYTES_SETTING}")
            continue
        try:
            instance = build_instance(raw, clock())
        except BadInput as exc:
            left_out.add("not valid registrations", str(exc))
            continue
        copies.append((instance, _timestamp(raw.get("lastUpdatedTimestamp")) or 0))
        PACER.tick()
    if left_out:
        _say_once(said, peer, "skipped", f"start-up sync: from {peer.display_url}: skipped {left_out}")
    return copies


def _say_once(said: dict[str, str], peer: Peer, kind: str, text: str) -> None:
    """A warning, unless the same was said of this peer at an earlier round."""
    key = f"{peer.key} {kind}"
    if said.get(key) != text:
        said[key] = text
        logger.warning("%s", text)


def cancels_in(records: Iterable[Any], now: int) -> dict[tuple[str, str], tuple[int, int]]:
    """The cancels (and evictions) the instances of a ``GET apps/delta`` list: (app, instance id) ->
    (the cancelled record's lastDirtyTimestamp, its lastUpdatedTimestamp: when it was cancelled)."""
    cancels: dict[tuple[str, str], tuple[int, int]] = {}
    for raw in records:
        if raw is TOO_LARGE or raw.get("actionType") != c.DELETED:
            continue
        cancelled_at = _timestamp(raw.get("lastUpdatedTimestamp"))
        if cancelled_at is None or _timestamp(raw.get("lastDirtyTimestamp")) is None:
            continue
        try:
            instance = build_instance(raw, now)
        except BadInput:
            continue
        cancels[instance.app, instance.instance_id] = (instance.last_dirty_timestamp, cancelled_at)
    return cancels


def _cancelled_copy(
    registry: Registry,
    instance: InstanceInfo,
    updated: int,
    cancels: dict[tuple[str, str], tuple[int, int]],
) -> bool:
    """Whether a peer's copy is one a peer's delta, or this node since it started, says was cancelled."""
    key = (instance.app, instance.instance_id)
    return any(
        cancel is not None and copy_was_cancelled(instance.last_dirty_timestamp, updated, *cancel)
        for cancel in (cancels.get(key), registry.recent_cancel(*key))
    )


def _timestamp(value: Any) -> int | None:
    """A timestamp as Eureka writes it (a number, or a string of one); None when it is neither."""
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


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
