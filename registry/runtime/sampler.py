"""One sample of the node for the console's last hour (registry/domain/history.py).

The ``sample_history`` job calls ``take_sample`` every ``EUREKA_HISTORY_INTERVAL_MS``. It reads what
the node keeps anyway — the registry's stats and cumulative counts (one short hold of the map's
lock each, as the status page takes), the replication queues, the remote regions' fetch times — so
the heartbeat path does no extra work for the charts.
"""

from __future__ import annotations

from typing import Any, Protocol

from registry.domain.core import Registry
from registry.domain.history import PeerPoint, RegionPoint, Sample, status_tuple


class SampledNode(Protocol):
    """What a sample reads of a node (registry/runtime/node.py's Node, which imports this module's
    caller): the map, and the cluster and remote regions when there are any."""

    registry: Registry
    cluster: Any
    remote_regions: Any


def take_sample(node: SampledNode, now: int) -> Sample:
    stats = node.registry.reads.stats(now)
    counts = node.registry.reads.event_counts()
    peers: tuple[PeerPoint, ...] = ()
    if node.cluster is not None:
        peers = tuple(
            PeerPoint(peer["url"], int(peer["queued"]), int(peer["lag_ms"]))
            for peer in node.cluster.status(now)["peers"]
        )
    regions: tuple[RegionPoint, ...] = ()
    if node.remote_regions is not None:
        regions = tuple(
            RegionPoint(
                region.name,
                None if region.last_success_at is None else max(now - region.last_success_at, 0),
            )
            for region in node.remote_regions.health()
        )
    holding = stats["self_preservation_enabled"] and not stats["lease_expiration_enabled"]
    return Sample(
        at_ms=now,
        renews_last_minute=int(stats["renews_last_minute"]),
        renews_threshold=int(stats["renews_threshold"]),
        preservation_holding=bool(holding),
        statuses=status_tuple(stats["status_counts"]),
        registrations=counts.from_clients.registers + counts.from_peers.registers,
        cancels=counts.from_clients.cancels + counts.from_peers.cancels,
        evictions=counts.evictions,
        peers=peers,
        regions=regions,
    )
