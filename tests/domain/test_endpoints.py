"""The HTTP ends of replication on one node: ``POST peerreplication/batch/`` (what peers send), the
control endpoint Celery workers report to, and /readyz (registry/protocol/views.py, protocol/control.py)."""

from __future__ import annotations

import gzip
import json

import orjson
import pytest

from registry.domain.endpoints import Peer, parse_peer_urls
from registry.runtime.composition import build_node
from registry.runtime.process import reset_node
from registry.wire.codecs import build_instance
from tests.factories import instance_body
from tests.protocol.api_support import api_both_framings

api = api_both_framings
ID = "10.0.0.1:orders:8080"
SECRET = "control-secret-for-tests"


def registration_item(**changes) -> dict:
    body = instance_body(last_dirty=1000, **changes)["instance"]
    return {
        "appName": "ORDERS",
        "id": body["instanceId"],
        "lastDirtyTimestamp": 1000,
        "status": "UP",
        "instanceInfo": body,
        "action": "Register",
    }


def post_batch(api, items, prefix="/eureka/", **extra):
    return api.post(
        f"{prefix}peerreplication/batch/",
        data=orjson.dumps({"replicationList": items}),
        content_type="application/json",
        **extra,
    )


@pytest.mark.parametrize("prefix", ["/eureka/", "/eureka/v2/"])
def test_a_batch_is_answered_item_by_item_in_order(api, node, prefix):
    heartbeat = {"appName": "ORDERS", "id": ID, "action": "Heartbeat", "lastDirtyTimestamp": 1000}
    cancel_unknown = {"appName": "X", "id": "y", "action": "Cancel"}
    response = post_batch(api, [registration_item(), heartbeat, cancel_unknown], prefix)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    codes = [answer["statusCode"] for answer in response.json()["responseList"]]
    assert codes == [200, 200, 404]
    listed = api.get(f"/eureka/apps/ORDERS/{ID}", HTTP_ACCEPT="application/json").json()["instance"]
    assert listed["lastDirtyTimestamp"] == "1000"


def test_a_gzipped_batch_is_read(api, node):
    body = gzip.compress(orjson.dumps({"replicationList": [registration_item()]}))
    response = api.post(
        "/eureka/peerreplication/batch",
        data=body,
        content_type="application/json",
        HTTP_CONTENT_ENCODING="gzip",
    )
    assert response.json() == {"responseList": [{"statusCode": 200}]}


@pytest.mark.parametrize(
    "data,content_type,status",
    [
        (b"{not json", "application/json", 400),
        (b'{"replicationList": 5}', "application/json", 400),
        (b"[]", "application/json", 400),
        (b"<replicationList/>", "application/xml", 415),
        (b"", "application/json", 400),
    ],
)
def test_what_is_not_a_batch_is_refused_whole_and_changes_nothing(api, node, data, content_type, status):
    response = api.post("/eureka/peerreplication/batch/", data=data, content_type=content_type)
    assert response.status_code == status and response["Content-Type"].startswith("text/plain")
    assert node.registry.reads.size() == 0


def test_a_batch_over_the_item_cap_is_answered_413_and_changes_nothing(api, node):
    cap = node.config.cluster.replication_batch_max_items
    assert cap == 1_000
    response = post_batch(api, [registration_item(), *[{"action": "Cancel"}] * cap])
    assert response.status_code == 413 and response["Content-Type"].startswith("text/plain")
    assert f"at most {cap} items, this one holds {cap + 1}: nothing was applied" in response.content.decode()
    assert node.registry.reads.size() == 0 and node.received.batches == 0
    assert post_batch(api, [registration_item(), *[{"action": "Cancel"}] * (cap - 1)]).status_code == 200
    assert node.registry.reads.size() == 1


def test_batches_are_decoded_and_applied_one_at_a_time_with_turns_for_the_loop(api, node):
    """The node's batch lock is held at every turn a batch gives the event loop (before decoding, after
    each item): batches waiting for their turn are bodies, not decoded documents."""
    held = []
    node.registry.pacing.pause = lambda: held.append(node.received.applying.locked())
    cancel = {"appName": "ORDERS", "id": ID, "action": "Cancel"}
    assert post_batch(api, [registration_item(), cancel]).status_code == 200
    assert held == [True] * 3
    assert not node.received.applying.locked()
    assert post_batch(api, [{"action": "Cancel"}] * 1_001).status_code == 413
    assert not node.received.applying.locked()


def test_a_replicated_single_request_is_applied_but_never_sent_on(api, node):
    events = []
    node.registry.set_replication_listener(events.append)
    replicated = {"HTTP_X_NETFLIX_DISCOVERY_REPLICATION": "true"}
    body = json.dumps(instance_body())
    registered = api.post("/eureka/apps/ORDERS", body, content_type="application/json", **replicated)
    assert registered.status_code == 204
    assert api.put(f"/eureka/apps/ORDERS/{ID}", **replicated).status_code == 200
    assert api.put(f"/eureka/apps/ORDERS/{ID}/status?value=DOWN", **replicated).status_code == 200
    assert api.delete(f"/eureka/apps/ORDERS/{ID}/status?value=UP", **replicated).status_code == 200
    assert api.put(f"/eureka/apps/ORDERS/{ID}/metadata?k=v", **replicated).status_code == 200
    assert api.delete(f"/eureka/apps/ORDERS/{ID}", **replicated).status_code == 200
    assert events == []
    assert api.post("/eureka/apps/ORDERS", body, content_type="application/json").status_code == 204
    assert [e.action for e in events] == ["Register"]


@pytest.fixture
def cluster_node(eureka_options, clock, settings):
    settings.EUREKA = settings.EUREKA.with_changes(control_secret=SECRET)
    peers = tuple(parse_peer_urls(["http://user:pw@node-b:8761/eureka/"]))
    fresh = build_node(eureka_options.with_changes(cluster__peers=peers), clock=clock)
    reset_node(fresh)
    yield fresh
    reset_node(None)


def report(client, peer_key, body, secret=SECRET):
    return client.post(
        f"/control/replication/{peer_key}",
        data=orjson.dumps(body),
        content_type="application/json",
        HTTP_X_EUREKA_CONTROL_SECRET=secret,
    )


def test_a_workers_report_is_carried_out_by_the_node(client, cluster_node):
    key = Peer("http://node-b:8761/eureka/").key
    now = cluster_node.now()
    cluster_node.registry.register(build_instance(instance_body()["instance"], now), now)
    cluster_node.cluster.replicator.flush(cluster_node.now())
    outbox = cluster_node.cluster.replicator.outboxes[key]
    outbox.ack(len(outbox))
    body = {
        "follow_ups": {"sent": 3, "refused": 1, "reregister": [["ORDERS", ID]], "sync_back": []},
        "error": None,
        "queued": 0,
    }
    assert report(client, key, body, secret="wrong").status_code == 403
    assert report(client, "nobody", body).status_code == 404
    assert report(client, key, {"follow_ups": {"reregister": 5}}).status_code == 400
    assert report(client, key, body).status_code == 200
    # The peer did not know the instance: a Register for it now waits in that peer's outbox.
    assert [item["action"] for item in outbox.peek(5)] == ["Register"]
    ready = client.get("/readyz").json()["replication"]
    assert ready["sender"] == "in-process"
    assert ready["peers"][0]["url"] == "http://node-b:8761/eureka/" and ready["peers"][0]["refused"] == 1
    assert "pw" not in json.dumps(ready)
    failed = {"follow_ups": None, "error": "ConnectError: refused", "queued": 1}
    assert report(client, key, failed).status_code == 200
    state = cluster_node.peers.states()[0]
    assert state.last_error == "ConnectError: refused" and not state.available(cluster_node.now())


def test_a_standalone_node_reports_no_replication(client, node):
    assert client.get("/readyz").json()["replication"] is None


def test_readyz_counts_the_batches_and_items_peers_sent_even_to_a_standalone_node(api, client, node):
    assert client.get("/readyz").json()["received_replication"] == {
        "batches": 0,
        "items": 0,
        "last_ms_ago": None,
    }
    post_batch(api, [])  # an idle peer's probe
    heartbeat = {"appName": "ORDERS", "id": ID, "action": "Heartbeat", "lastDirtyTimestamp": 1000}
    post_batch(api, [registration_item(), heartbeat])
    post_batch(api, [{"appName": "ORDERS"}])  # a bad item is still an item answered
    api.post("/eureka/peerreplication/batch/", data=b"{", content_type="application/json")  # refused
    received = client.get("/readyz").json()["received_replication"]
    assert (received["batches"], received["items"]) == (3, 3)
    assert received["last_ms_ago"] >= 0


def test_readyz_is_degraded_while_replication_falls_back_from_redis(client, eureka_options, clock):
    from redis import Redis

    from registry.cluster.member import ClusterMember
    from registry.cluster.peers import PeerSet
    from tests.ports import free_port

    eureka_options = eureka_options.with_changes(
        cluster__peers=tuple(parse_peer_urls(["http://node-b:8761/eureka/"]))
    )
    node = build_node(eureka_options, clock=clock)
    # Production mode with a Redis that does not answer: the flush keeps the items in the process.
    dead_redis = Redis(port=free_port(), socket_connect_timeout=0.2, socket_timeout=0.2)
    peers = PeerSet(list(eureka_options.cluster.peer_urls))
    node.cluster = ClusterMember(
        node.registry, peers, eureka_options, clock, redis_client=dead_redis, kick=lambda key: None
    )
    node.peers = node.cluster.replicator.peer_set
    reset_node(node)
    try:
        now = node.now()
        node.registry.register(build_instance(instance_body()["instance"], now), now)
        node.cluster.replicator.flush(now)
        body = client.get("/readyz").json()
        assert body["status"] == "degraded"
        assert body["replication"]["sender"] == "in-process (Redis unreachable, falling back)"
        assert body["replication"]["peers"][0]["queued"] == 1
    finally:
        reset_node(None)
