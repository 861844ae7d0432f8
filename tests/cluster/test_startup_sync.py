"""The start-up sync (registry/cluster/startup.py) against peers' documents rendered by real registries,
on a fake clock: what a restarted node takes from its peers, what it leaves out, and when it serves.

Issue 35, point 4: a peer's cancel not yet replicated to another peer must not come back through the
sync (in a rolling restart the phantom passed from node to node), and a node serves no read before its
sync is done or has given up. The live counterparts are in tests/cluster/test_restart_stale_live.py.
"""

from __future__ import annotations

import copy

from registry.cluster.startup import cancels_in, sync_from_peers
from registry.cluster.transport import PeerUnreachable
from registry.domain.core import Registry, RegistryRules
from registry.domain.endpoints import Peer
from registry.wire.codecs import build_instance, instance_dict
from tests.cluster.test_replication import FetchingTransport, records_of
from tests.conftest import FakeClock
from tests.factories import instance_body

SEC = 1_000
P1 = Peer("http://node-1:8761/eureka/")
P2 = Peer("http://node-2:8761/eureka/")
CONFIG = RegistryRules(enable_self_preservation=False)


def record(clock, host: str, last_dirty: int):
    raw = copy.deepcopy(instance_body(host=host, last_dirty=last_dirty)["instance"])
    return build_instance(raw, clock(), path_app="ORDERS")


def document(apps) -> dict:
    """``GET apps`` or ``apps/delta`` JSON, as a peer renders it."""
    return {
        "applications": {
            "versions__delta": "1",
            "apps__hashcode": "",
            "application": [
                {"name": app, "instance": [instance_dict(view) for view in views]} for app, views in apps
            ],
        }
    }


def ids(registry: Registry) -> list[str]:
    return sorted(view.instance_id for _, views in registry.reads.instances() for view in views)


def two_peers_with_a_cancel_in_flight(clock):
    """P1 and P2 hold a (UP, renewing) and b; b's client cancels at P1, and P2 has not heard yet."""
    p1, p2 = Registry(CONFIG, clock()), Registry(CONFIG, clock())
    for host in ("10.0.0.1", "10.0.0.2"):
        p1.register(record(clock, host, clock()), clock())
        p2.register(record(clock, host, clock()), clock(), is_replication=True)
    clock.advance(5 * SEC)
    p1.cancel("ORDERS", "10.0.0.2:orders:8080", clock())
    return p1, p2


def transport_of(p1: Registry, p2: Registry) -> FetchingTransport:
    return FetchingTransport(
        {
            P1.display_url: [document(p1.reads.snapshot().apps)],
            P2.display_url: [document(p2.reads.snapshot().apps)],
        },
        deltas={
            P1.display_url: document(p1.reads.snapshot_delta().apps),
            P2.display_url: document(p2.reads.snapshot_delta().apps),
        },
    )


def test_a_copy_a_peer_cancelled_is_not_brought_back_from_a_peer_that_still_holds_it():
    clock = FakeClock()
    p1, p2 = two_peers_with_a_cancel_in_flight(clock)
    clock.advance(SEC)
    node = Registry(CONFIG, clock())
    count = sync_from_peers(node, [P1, P2], transport_of(p1, p2), clock, retries=0, wait_ms=0)
    assert ids(node) == ["10.0.0.1:orders:8080"]
    assert count == 2  # a from each peer


def test_what_the_snapshot_brought_back_and_a_peer_cancelled_since_goes():
    clock = FakeClock()
    p1, p2 = two_peers_with_a_cancel_in_flight(clock)
    # The restarted node's snapshot was saved before the cancel: it holds b as it was registered.
    node = Registry(CONFIG, clock())
    node.saved_state.restore(p2.saved_state.export_parts(clock()).as_state(), clock())
    clock.advance(SEC)
    sync_from_peers(node, [P1, P2], transport_of(p1, p2), clock, retries=0, wait_ms=0)
    assert ids(node) == ["10.0.0.1:orders:8080"]
    assert node.reads.event_counts().from_peers.cancels == 1


def test_a_registration_after_the_cancel_wins_whether_or_not_its_dirty_timestamp_moved():
    clock = FakeClock()
    p1, p2 = two_peers_with_a_cancel_in_flight(clock)
    clock.advance(SEC)
    # b's client re-registers at P2 after the cancel at P1 (a 404, the same dirty timestamp), and c's
    # new process registers with a newer one after its own cancel.
    old_dirty = p2.reads.lease("ORDERS", "10.0.0.2:orders:8080")[0].instance.last_dirty_timestamp
    p2.register(record(clock, "10.0.0.2", old_dirty), clock())
    p1.register(record(clock, "10.0.0.3", clock() - 10 * SEC), clock())
    clock.advance(SEC)
    p1.cancel("ORDERS", "10.0.0.3:orders:8080", clock())
    p2.register(record(clock, "10.0.0.3", clock()), clock())
    clock.advance(SEC)
    node = Registry(CONFIG, clock())
    sync_from_peers(node, [P1, P2], transport_of(p1, p2), clock, retries=0, wait_ms=0)
    assert ids(node) == ["10.0.0.1:orders:8080", "10.0.0.2:orders:8080", "10.0.0.3:orders:8080"]


def test_a_cancel_replicated_here_during_the_sync_is_not_undone_by_an_older_copy():
    clock = FakeClock()
    p1, p2 = two_peers_with_a_cancel_in_flight(clock)
    node = Registry(CONFIG, clock())
    # P1's delta was read before its cancel (none in it); the cancel then reached this node by
    # replication before the sync applied P2's copy.
    transport = transport_of(p1, p2)
    transport.deltas = {}
    node.register(record(clock, "10.0.0.2", clock() - 5 * SEC), clock() - 4 * SEC, is_replication=True)
    node.cancel("ORDERS", "10.0.0.2:orders:8080", clock(), is_replication=True)
    clock.advance(SEC)
    sync_from_peers(node, [P1, P2], transport, clock, retries=0, wait_ms=0)
    assert ids(node) == ["10.0.0.1:orders:8080"]


def test_cancels_are_read_from_a_java_servers_delta_with_string_timestamps():
    body = instance_body(host="10.0.0.2", last_dirty=1_000)["instance"]
    delta = {
        "applications": {
            "versions__delta": "3",
            "apps__hashcode": "UP_1_",
            "application": [
                {
                    "name": "ORDERS",
                    "instance": [
                        {**body, "actionType": "DELETED", "lastUpdatedTimestamp": "5000"},
                        {**instance_body()["instance"], "actionType": "ADDED", "lastUpdatedTimestamp": "6"},
                    ],
                }
            ],
        }
    }
    assert cancels_in(records_of(delta), 9_000) == {("ORDERS", "10.0.0.2:orders:8080"): (1_000, 5_000)}


def test_reads_are_served_once_the_first_round_has_asked_every_peer():
    clock = FakeClock()
    node = Registry(CONFIG, clock())
    node.await_start_up_sync()
    assert not node.allows_reads(clock())
    starting = PeerUnreachable("HTTP 503", congested=True, status=503)
    transport = FetchingTransport(
        {
            P1.display_url: [starting, document([])],
            P2.display_url: [PeerUnreachable("refused"), document([])],
        }
    )
    seen = []
    real_fetch = transport.fetch_apps

    def fetch_apps(peer):
        seen.append(node.allows_reads(clock()))
        return real_fetch(peer)

    transport.fetch_apps = fetch_apps
    # Neither peer answered the first round (one starting too, one down), and the rounds go on
    # while nothing is found (Eureka's retries), but the node serves from the end of the first: a
    # first node, or a cluster restarting whole, does not wait for peers that are not there.
    sync_from_peers(node, [P1, P2], transport, clock, retries=2, wait_ms=0)
    assert seen == [False, False, True, True, True, True] and node.allows_reads(clock())
