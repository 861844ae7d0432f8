"""Peer replication's rules on a fake clock, with no network: what is sent, what is applied, and what
a peer's answers make this node do (registry/cluster/)."""

from __future__ import annotations

import copy
import logging

import orjson
import pytest

from registry.cluster.incoming import BadBatch, BatchTooLarge, apply_batch
from registry.cluster.peers import PeerSet, is_own_url
from registry.cluster.replication import ReplicationBuffer, encode
from registry.cluster.replicator import (
    PROBE_INTERVAL_MS,
    FollowUps,
    MemoryOutbox,
    PeerSender,
    Replicator,
    read_answers,
)
from registry.cluster.retry import (
    CONGESTION_RETRY_MS,
    NETWORK_RETRIES,
    NETWORK_RETRY_MS,
    PROBE_WHILE_DOWN_MS,
    RetryPolicy,
)
from registry.cluster.startup import SelfRegistration, sync_from_peers
from registry.cluster.transport import PeerRefused, PeerUnreachable
from registry.domain import constants as c
from registry.domain.core import Registry, RegistryRules, ReplicationEvent
from registry.domain.endpoints import Peer, parse_peer_urls
from registry.domain.refusals import RefusalLines
from registry.wire.answers import RecordLimits, registry_answer
from registry.wire.codecs import build_instance
from tests.conftest import FakeClock
from tests.factories import instance_body

ID = "10.0.0.1:orders:8080"


def instance(clock, last_dirty=None, **changes):
    raw = copy.deepcopy(instance_body(last_dirty=last_dirty or clock())["instance"])
    raw.update(changes)
    return build_instance(raw, clock(), path_app="ORDERS")


@pytest.fixture
def clock():
    return FakeClock()


def new_registry(clock, **config) -> tuple[Registry, list[ReplicationEvent]]:
    events: list[ReplicationEvent] = []
    registry = Registry(RegistryRules(**config), clock(), on_replicate=events.append)
    return registry, events


# ------------------------------------------------------------------ what the registry hands over


def test_client_writes_are_handed_over_and_replicated_ones_are_not(clock):
    registry, events = new_registry(clock)
    registry.register(instance(clock), clock())
    registry.renew("ORDERS", ID, clock.advance(1000))
    registry.set_status_override("ORDERS", ID, c.OUT_OF_SERVICE, clock())
    registry.remove_status_override("ORDERS", ID, clock(), c.UP)
    registry.update_metadata("ORDERS", ID, {"zone": "a"}, clock())
    registry.cancel("ORDERS", ID, clock())
    assert [e.action for e in events] == [
        c.REPLICATE_REGISTER,
        c.REPLICATE_HEARTBEAT,
        c.REPLICATE_STATUS_UPDATE,
        c.REPLICATE_DELETE_STATUS_OVERRIDE,
        c.REPLICATE_REGISTER,
        c.REPLICATE_CANCEL,
    ]
    events.clear()
    registry.register(instance(clock), clock(), is_replication=True)
    registry.renew("ORDERS", ID, clock(), is_replication=True)
    registry.set_status_override("ORDERS", ID, c.DOWN, clock(), is_replication=True)
    registry.remove_status_override("ORDERS", ID, clock(), is_replication=True)
    registry.update_metadata("ORDERS", ID, {"zone": "b"}, clock(), is_replication=True)
    registry.cancel("ORDERS", ID, clock(), is_replication=True)
    assert events == []


def test_evictions_and_unknown_instances_are_not_replicated(clock):
    registry, events = new_registry(clock, enable_self_preservation=False)
    registry.register(instance(clock, leaseInfo={"durationInSecs": 1}), clock())
    events.clear()
    assert registry.renew("ORDERS", "nope", clock()).outcome.value == 404
    assert not registry.cancel("ORDERS", "nope", clock())
    clock.advance(120_000)
    registry.recount_expected_clients(clock())
    assert registry.run_eviction(clock()).evicted == [("ORDERS", ID)]
    assert events == []


def test_a_standalone_registry_records_nothing(clock):
    registry = Registry(RegistryRules(), clock())
    registry.register(instance(clock), clock())  # no listener: nothing to call, nothing kept
    registry.set_replication_listener(None)
    assert registry.renew("ORDERS", ID, clock()).outcome.value == 200


# ---------------------------------------------------------------------- coalescing and the shape


def test_heartbeats_of_one_instance_coalesce_and_order_is_kept(clock):
    registry, events = new_registry(clock)
    buffer = ReplicationBuffer()
    registry.set_replication_listener(buffer.add)
    registry.register(instance(clock), clock())
    registry.register(instance(clock, host="10.0.0.2", hostName="10.0.0.2", instanceId="b"), clock())
    for _ in range(5):
        registry.renew("ORDERS", ID, clock.advance(10))
    taken = buffer.take()
    assert [(e.action, e.instance_id) for e in taken] == [
        (c.REPLICATE_REGISTER, ID),
        (c.REPLICATE_REGISTER, "b"),
        (c.REPLICATE_HEARTBEAT, ID),
    ]
    assert buffer.coalesced == 4 and buffer.take() == []


def test_the_buffer_is_bounded_and_counts_what_it_drops(clock):
    buffer = ReplicationBuffer(capacity=3)
    for n in range(5):
        buffer.add(ReplicationEvent(c.REPLICATE_CANCEL, "ORDERS", f"i{n}"))
    assert [e.instance_id for e in buffer.take()] == ["i2", "i3", "i4"]
    assert buffer.dropped == 2


def test_items_have_the_java_servers_shape(clock):
    registry, events = new_registry(clock)
    registry.register(instance(clock, last_dirty=1234), clock())
    registry.set_status_override("ORDERS", ID, c.OUT_OF_SERVICE, clock())
    registry.renew("ORDERS", ID, clock())
    registry.remove_status_override("ORDERS", ID, clock(), c.UP)
    registry.cancel("ORDERS", ID, clock())
    register, status, heartbeat, delete, cancel = (encode(e) for e in events)

    assert list(register) == ["appName", "id", "lastDirtyTimestamp", "status", "instanceInfo", "action"]
    assert register["instanceInfo"]["instanceId"] == ID and "instance" not in register["instanceInfo"]
    assert (register["lastDirtyTimestamp"], register["action"]) == (1234, "Register")
    assert (status["status"], status["action"]) == ("OUT_OF_SERVICE", "StatusUpdate")
    assert "instanceInfo" not in status
    assert heartbeat == {
        "appName": "ORDERS",
        "id": ID,
        "lastDirtyTimestamp": 1234,
        "status": "OUT_OF_SERVICE",
        "overriddenStatus": "OUT_OF_SERVICE",
        "action": "Heartbeat",
    }
    assert (delete["status"], delete["action"]) == ("UP", "DeleteStatusOverride")
    assert cancel == {"appName": "ORDERS", "id": ID, "action": "Cancel"}
    # What goes on the wire is JSON with numbers for timestamps, as Jackson writes them.
    assert b'"lastDirtyTimestamp":1234' in orjson.dumps(register)


# ----------------------------------------------------------------------------- incoming batches


def batch(*items) -> dict:
    return {"replicationList": list(items)}


def register_item(clock, **changes) -> dict:
    registry, events = new_registry(clock)
    registry.register(instance(clock, **changes), clock())
    return encode(events[-1])


def test_a_batch_is_applied_in_order_with_one_answer_per_item(clock):
    registry, events = new_registry(clock)
    item = register_item(clock)
    answers = apply_batch(
        registry,
        batch(
            item,
            {"appName": "ORDERS", "id": ID, "action": "Heartbeat", "status": "UP"},
            {
                "appName": "ORDERS",
                "id": ID,
                "action": "StatusUpdate",
                "status": "DOWN",
                "lastDirtyTimestamp": item["lastDirtyTimestamp"],
            },
            {"appName": "ORDERS", "id": "ghost", "action": "Heartbeat", "status": "UP"},
            {
                "appName": "ORDERS",
                "id": ID,
                "action": "DeleteStatusOverride",
                "status": "UP",
                "lastDirtyTimestamp": item["lastDirtyTimestamp"],
            },
            {"appName": "ORDERS", "id": ID, "action": "Cancel"},
            {"appName": "ORDERS", "id": ID, "action": "Cancel"},
        ),
        clock,
    )
    assert [a["statusCode"] for a in answers["responseList"]] == [200, 200, 200, 404, 200, 200, 404]
    assert events == [], "replicated writes are never sent on"
    assert registry.reads.size() == 0


def test_a_heartbeat_with_an_older_copy_gets_409_and_ours(clock):
    registry, _ = new_registry(clock)
    item = register_item(clock, last_dirty=5000)
    apply_batch(registry, batch(item), clock)
    answer = apply_batch(
        registry,
        batch({"appName": "ORDERS", "id": ID, "action": "Heartbeat", "lastDirtyTimestamp": 4000}),
        clock,
    )["responseList"][0]
    assert answer["statusCode"] == 409
    assert answer["responseEntity"]["instanceId"] == ID
    assert answer["responseEntity"]["lastDirtyTimestamp"] == "5000"
    newer = {"appName": "ORDERS", "id": ID, "action": "Heartbeat", "status": "UP", "lastDirtyTimestamp": 6000}
    assert apply_batch(registry, batch(newer), clock)["responseList"] == [{"statusCode": 404}]


@pytest.mark.parametrize(
    "bad",
    [
        "not an object",
        {"appName": "ORDERS", "id": ID, "action": "Explode"},
        {"appName": "", "id": ID, "action": "Cancel"},
        {"appName": "ORDERS", "action": "Cancel"},
        {"appName": "ORDERS", "id": ID, "action": "Register"},
        {"appName": "ORDERS", "id": ID, "action": "Register", "instanceInfo": {"app": "ORDERS"}},
        {"appName": "ORDERS", "id": ID, "action": "StatusUpdate", "status": "SIDEWAYS"},
        {"appName": "ORDERS", "id": ID, "action": "Heartbeat", "lastDirtyTimestamp": "soon"},
    ],
)
def test_a_bad_item_gets_its_own_400_and_the_rest_still_applies(clock, bad):
    registry, _ = new_registry(clock)
    answers = apply_batch(registry, batch(bad, register_item(clock)), clock)["responseList"]
    assert answers == [{"statusCode": 400}, {"statusCode": 200}]
    assert registry.reads.size() == 1


def test_a_register_item_whose_instance_names_another_id_is_refused(clock):
    registry, _ = new_registry(clock)
    item = register_item(clock)
    item["id"] = "someone-else"
    assert apply_batch(registry, batch(item), clock)["responseList"] == [{"statusCode": 400}]
    assert registry.reads.size() == 0


@pytest.mark.parametrize("document", [[], {}, {"replicationList": "x"}, "batch"])
def test_a_document_that_is_not_a_batch_is_refused_whole(clock, document):
    registry, _ = new_registry(clock)
    with pytest.raises(BadBatch):
        apply_batch(registry, document, clock)


def test_a_batch_over_the_item_cap_is_refused_whole_before_any_item_applies(clock):
    registry, _ = new_registry(clock)
    items = [register_item(clock), *[{"action": "Cancel"}] * 3]
    with pytest.raises(BatchTooLarge, match="at most 3 items, this one holds 4: nothing was applied"):
        apply_batch(registry, batch(*items), clock, max_items=3)
    assert registry.reads.size() == 0
    answers = apply_batch(registry, batch(*items[:3]), clock, max_items=3)["responseList"]
    assert answers == [{"statusCode": 200}, {"statusCode": 400}, {"statusCode": 400}]


def test_bad_items_are_counted_in_one_log_line_per_batch_not_one_each(clock, caplog):
    registry, _ = new_registry(clock)
    items = [{"action": "Cancel"}] * 500 + [{"action": "Explode", "appName": "X", "id": "y"}] * 2
    with caplog.at_level(logging.WARNING, logger="registry.cluster.incoming"):
        answers = apply_batch(registry, batch(*items, register_item(clock)), clock, sender="10.9.9.9")
    assert [a["statusCode"] for a in answers["responseList"]] == [400] * 502 + [200]
    assert [r.getMessage() for r in caplog.records] == [
        "replication batch from 10.9.9.9: 502 of 503 items refused (Cancel 500, unknown 2); "
        "the first: Missing appName"
    ]
    assert caplog.records[0].refused == {"Cancel": 500, "unknown": 2}


def test_batches_of_bad_items_sent_one_after_another_are_logged_once_an_interval_with_a_count(clock, caplog):
    """Anyone who may send batches may send them back to back: a line for each is a log flood (issue 44,
    item 6). Every batch is still answered item by item."""
    registry, _ = new_registry(clock)
    seconds = FakeClock(0)
    lines = RefusalLines(interval_s=60, clock=seconds)
    with caplog.at_level(logging.WARNING, logger="registry.cluster.incoming"):
        for _ in range(1_000):
            answers = apply_batch(registry, batch({"action": "Cancel"}), clock, refusal_lines=lines)
            assert answers["responseList"] == [{"statusCode": 400}]
        seconds.advance(60)
        apply_batch(registry, batch({"action": "Cancel"}), clock, sender="10.9.9.9", refusal_lines=lines)
    assert [r.getMessage() for r in caplog.records] == [
        "replication batch from a peer: 1 of 1 items refused (Cancel 1); the first: Missing appName",
        "replication batch from 10.9.9.9: 1 of 1 items refused (Cancel 1); the first: Missing appName "
        "(999 more such batches since the last such line)",
    ]
    assert caplog.records[1].batches == 1_000


def test_items_that_fail_are_answered_500_each_and_logged_once_with_the_first_traceback(clock, caplog):
    registry, _ = new_registry(clock)

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    registry.cancel = broken
    cancel = {"appName": "ORDERS", "id": ID, "action": "Cancel"}
    with caplog.at_level(logging.WARNING, logger="registry.cluster.incoming"):
        answers = apply_batch(registry, batch(cancel, cancel, register_item(clock)), clock)
    assert answers["responseList"] == [{"statusCode": 500}, {"statusCode": 500}, {"statusCode": 200}]
    [record] = caplog.records
    assert record.getMessage() == "replication batch from a peer: 2 of 3 items failed (Cancel 2); the first:"
    assert "disk on fire" in caplog.text


def test_the_loop_gets_a_turn_between_two_items_each_read_at_its_own_time(clock):
    """A batch does not hold the event loop from its first item to its last: the registry's pause
    (the pacer's tick on a node) comes after every item, and each item reads the clock anew."""
    registry, _ = new_registry(clock)
    seen = []

    def others_run():
        seen.append(registry.reads.size())
        clock.advance(1_000)

    registry.pacing.pause = others_run
    items = [register_item(clock, instanceId=f"i{n}") for n in range(3)]
    apply_batch(registry, batch(*items), clock)
    assert seen == [1, 2, 3]
    registered = [registry.reads.lease("ORDERS", f"i{n}")[0].registration_ts for n in range(3)]
    assert registered[1] - registered[0] == registered[2] - registered[1] == 1_000


# ----------------------------------------------------------------- answers and their follow-ups


def test_answers_ask_for_registers_sync_backs_or_nothing():
    items = [
        {"appName": "A", "id": "1", "action": "Heartbeat"},
        {"appName": "A", "id": "2", "action": "Heartbeat"},
        {"appName": "A", "id": "3", "action": "Cancel"},
        {"appName": "A", "id": "4", "action": "Register"},
        {"appName": "A", "id": "5", "action": "StatusUpdate"},
    ]
    answers = [
        {"statusCode": 404},
        {"statusCode": 409, "responseEntity": {"instanceId": "2"}},
        {"statusCode": 404},
        {"statusCode": 200},
        {"statusCode": 400},
    ]
    follow_ups = read_answers(items, answers)
    assert follow_ups.reregister == [("A", "1")]
    assert follow_ups.sync_back == [{"instanceId": "2"}]
    assert (follow_ups.sent, follow_ups.refused) == (5, 1)
    assert FollowUps.from_dict(follow_ups.as_dict()) == follow_ups
    # Answers that do not match the batch are ignored, as the Java sender ignores them.
    assert read_answers(items, answers[:2]) == FollowUps(sent=5, ignored=2)


class FakeTransport:
    """Answers batches with a function of the items, or fails as told; records what it got (``batches``)
    and the size of every batch it was sent, answered or not (``attempts``)."""

    def __init__(self, answer=lambda items: [{"statusCode": 200}] * len(items)):
        self.answer = answer
        self.batches: list[list[dict]] = []
        self.attempts: list[int] = []
        self.fail: Exception | None = None

    def post_batch(self, peer, items):
        self.attempts.append(len(items))
        if self.fail is not None:
            raise self.fail
        self.batches.append(items)
        return self.answer(items)


def replicator(clock, transport, capacity=10_000):
    registry, _ = new_registry(clock)
    peers = [Peer("http://user:pw@node-b:8761/eureka/")]
    peer_set = PeerSet([p.url for p in peers])
    rep = Replicator(registry, peers, peer_set, lambda p: MemoryOutbox(capacity), transport, capacity)
    registry.set_replication_listener(rep.record)
    return rep, registry, peers[0].key, peer_set


def test_flush_then_send_in_batches_of_at_most_250(clock):
    transport = FakeTransport()
    rep, registry, key, peer_set = replicator(clock, transport)
    for n in range(600):
        registry.register(instance(clock, instanceId=f"i{n}"), clock())
    assert rep.flush(clock()) == 600 and rep.flush(clock()) == 0
    assert peer_set.states()[0].queued_events == 600
    while rep.send_next_batch(key, clock()):
        pass
    assert [len(b) for b in transport.batches] == [250, 250, 100]
    state = peer_set.states()[0]
    assert state.queued_events == 0 and state.available(clock())
    assert state.url == "http://node-b:8761/eureka/", "credentials never shown"


def test_a_peer_that_cannot_be_reached_keeps_the_batch_and_shows_the_error(clock):
    transport = FakeTransport()
    rep, registry, key, peer_set = replicator(clock, transport)
    registry.register(instance(clock), clock())
    rep.flush(clock())
    transport.fail = PeerUnreachable("ConnectError: connection refused")
    with pytest.raises(PeerUnreachable):
        rep.send_next_batch(key, clock())
    state = peer_set.states()[0]
    assert state.queued_events == 1 and len(rep.outboxes[key]) == 1
    assert not state.available(clock()) and "connection refused" in state.unavailable_reason(clock())
    transport.fail = None
    clock.advance(1000)
    assert rep.send_next_batch(key, clock()) == 1
    assert peer_set.states()[0].available(clock())


def test_an_idle_peer_is_probed_with_an_empty_batch_so_its_health_is_known(clock):
    transport = FakeTransport()
    rep, registry, key, peer_set = replicator(clock, transport)
    assert not peer_set.states()[0].available(clock()), "nothing known yet"
    assert rep.probe_if_idle(key, clock())
    assert transport.batches == [[]] and peer_set.states()[0].available(clock())
    clock.advance(PROBE_INTERVAL_MS - 1)
    assert not rep.probe_if_idle(key, clock()), "probed at most once per interval"
    clock.advance(1)
    transport.fail = PeerUnreachable("ConnectError: connection refused")
    assert rep.probe_if_idle(key, clock())
    state = peer_set.states()[0]
    assert not state.available(clock()) and "connection refused" in state.unavailable_reason(clock())
    transport.fail = None
    clock.advance(PROBE_INTERVAL_MS)
    assert rep.probe_if_idle(key, clock()), "(a peer that is down is probed sooner by its PeerSender)"
    assert peer_set.states()[0].available(clock())
    # With items waiting the sender tries those instead: no probe.
    registry.register(instance(clock), clock())
    rep.flush(clock())
    clock.advance(PROBE_INTERVAL_MS)
    assert not rep.probe_if_idle(key, clock())


# ------------------------------------------------------------------ retries while a peer is down


def test_the_retry_policy_retries_a_network_error_at_once_then_probes_and_waits_longer_when_busy():
    retry = RetryPolicy()
    assert not retry.down
    delays = [retry.failed(congested=False) for _ in range(NETWORK_RETRIES)]
    assert delays == [NETWORK_RETRY_MS] * NETWORK_RETRIES and not retry.probe_first, "the batch again, soon"
    # Then, however long the peer stays down, a probe every PROBE_WHILE_DOWN_MS: the delay never grows.
    assert {retry.failed(congested=False) for _ in range(1000)} == {PROBE_WHILE_DOWN_MS}
    assert retry.probe_first and PROBE_WHILE_DOWN_MS <= 500
    # A busy peer (503, timeout) answers: the batch again after a second, as Eureka does.
    assert retry.failed(congested=True) == CONGESTION_RETRY_MS and not retry.probe_first
    retry.recovered()
    assert not retry.down and retry.failed(congested=False) == NETWORK_RETRY_MS
    retry.recovered()
    retry.reported_down()
    assert retry.down and retry.probe_first, "a worker found it down: a probe first"


def down_peer_sender(clock, transport):
    """A sender whose first probe found the peer up, then an item the peer cannot take: it is down."""
    rep, registry, key, peer_set = replicator(clock, transport)
    kicks: list[str] = []
    sender = PeerSender(rep, key, clock, on_recovered=kicks.append)
    assert sender.step() is None and transport.batches == [[]], "the first step probes"
    registry.register(instance(clock, instanceId="during-0"), clock())
    rep.flush(clock())
    transport.fail = PeerUnreachable("ConnectError: connection refused")
    return rep, registry, key, peer_set, sender, kicks


def test_a_peer_down_for_minutes_gets_cheap_probes_and_its_backlog_as_soon_as_one_is_answered(clock):
    transport = FakeTransport()
    rep, registry, key, peer_set, sender, kicks = down_peer_sender(clock, transport)
    written = 1
    waited = 0
    while waited < 5 * 60_000:  # five minutes down, new writes all the while
        registry.register(instance(clock, instanceId=f"during-{written}"), clock())
        written += 1
        rep.flush(clock())
        wait_ms = sender.step()
        assert wait_ms is not None and wait_ms <= PROBE_WHILE_DOWN_MS, "never a longer wait"
        waited += wait_ms
        clock.advance(wait_ms)
    # After the first probe, the batch went NETWORK_RETRIES + 1 times (the first try and the quick
    # retries); every try after those was an empty batch, one per PROBE_WHILE_DOWN_MS.
    tries = transport.attempts[1:]
    assert all(size > 0 for size in tries[: NETWORK_RETRIES + 1]), tries[:5]
    assert set(tries[NETWORK_RETRIES + 1 :]) == {0}
    assert len(tries) <= 5 * 60_000 // PROBE_WHILE_DOWN_MS + NETWORK_RETRIES + 1
    assert not peer_set.states()[0].available(clock()) and len(rep.outboxes[key]) == written
    # The peer answers again: the next step (due at most PROBE_WHILE_DOWN_MS later) probes, then sends
    # the whole backlog at once.
    transport.fail = None
    assert sender.step() is None
    assert transport.batches[1] == [], "the probe"
    assert sum(len(batch) for batch in transport.batches) == written
    assert len(rep.outboxes[key]) == 0 and peer_set.states()[0].available(clock())
    assert not sender.retry.down and kicks == [key, key], "on_recovered after the first probe and now"


def test_a_failure_a_worker_reports_makes_the_node_probe_and_start_a_drain_when_the_peer_answers(clock):
    # Production mode: the node holds nothing to send (the items are in Redis); a worker's failed drain
    # is recorded on the peer set, and the node's sender probes until the peer answers.
    transport = FakeTransport()
    rep, registry, key, peer_set = replicator(clock, transport)
    kicks: list[str] = []
    sender = PeerSender(rep, key, clock, on_recovered=kicks.append)
    assert sender.step() is None and kicks == [key]
    clock.advance(1000)
    assert sender.step() is None and transport.batches == [[]], "idle and healthy: nothing sent"
    peer_set.record_failure(rep.peers[key].url, clock.advance(10), "ConnectError: connection refused")
    transport.fail = PeerUnreachable("ConnectError: connection refused")
    assert sender.step() == PROBE_WHILE_DOWN_MS and kicks == [key]
    clock.advance(PROBE_WHILE_DOWN_MS)
    transport.fail = None
    assert sender.step() is None
    assert kicks == [key, key] and peer_set.states()[0].available(clock())
    # A refused probe (the peer answers, but not to us) is not a reason to probe every half second.
    transport.fail = PeerRefused("HTTP 401 for a batch of 0")
    peer_set.record_failure(rep.peers[key].url, clock.advance(10), "batch refused: HTTP 401")
    assert sender.step() is None
    tries = len(transport.attempts)
    for _ in range(10):
        clock.advance(PROBE_WHILE_DOWN_MS)
        assert sender.step() is None
    assert len(transport.attempts) == tries


def test_a_refused_batch_is_dropped_and_counted(clock):
    transport = FakeTransport()
    rep, registry, key, peer_set = replicator(clock, transport)
    registry.register(instance(clock), clock())
    rep.flush(clock())
    transport.fail = PeerRefused("HTTP 403 for a batch of 1")
    assert rep.send_next_batch(key, clock()) == 1
    assert len(rep.outboxes[key]) == 0 and rep.counters[key].refused == 1
    assert "403" in peer_set.states()[0].last_error


def test_a_404_to_a_heartbeat_sends_the_peer_a_register(clock):
    transport = FakeTransport(lambda items: [{"statusCode": 404}] * len(items))
    rep, registry, key, _ = replicator(clock, transport)
    registry.register(instance(clock), clock())
    rep.buffer.take()  # the peer missed the registration
    registry.renew("ORDERS", ID, clock.advance(1000))
    rep.flush(clock())
    rep.send_next_batch(key, clock())
    transport.answer = lambda items: [{"statusCode": 200}] * len(items)
    rep.send_next_batch(key, clock())
    assert [i["action"] for i in transport.batches[1]] == ["Register"]
    assert transport.batches[1][0]["instanceInfo"]["instanceId"] == ID


def test_a_409_makes_this_node_take_the_peers_newer_copy(clock):
    rep, registry, key, _ = replicator(clock, FakeTransport())
    registry.register(instance(clock, last_dirty=1000, metadata={"v": "old"}), clock())
    peer_registry, peer_events = new_registry(clock)
    peer_registry.register(instance(clock, last_dirty=2000, metadata={"v": "new"}), clock())
    newer = encode(peer_events[-1])["instanceInfo"]
    rep.buffer.take()

    rep.apply_follow_ups(key, FollowUps(sent=1, sync_back=[newer]), clock())

    view, _ = registry.reads.lease("ORDERS", ID)
    assert dict(view.instance.metadata) == {"v": "new"}
    assert rep.buffer.take() == [], "a copy taken from a peer is not sent back"


def test_a_peers_newer_copy_over_the_record_size_limit_is_refused_and_ours_kept(clock, caplog):
    rep, registry, key, _ = replicator(clock, FakeTransport())
    registry.register(instance(clock, last_dirty=1000, metadata={"v": "old"}), clock())
    newer = instance_body(last_dirty=2000, metadata={"v": "new"}, homePageUrl="h" * 70_000)["instance"]
    rep.buffer.take()

    rep.apply_follow_ups(key, FollowUps(sent=1, sync_back=[newer]), clock())

    view, _ = registry.reads.lease("ORDERS", ID)
    assert dict(view.instance.metadata) == {"v": "old"}
    assert registry.reads.event_counts().from_peers.too_large == 1
    assert "newer copy refused: Instance record too large" in caplog.text


def test_a_peer_answering_every_batch_badly_is_logged_once_a_minute_with_counts(clock, caplog):
    rep, registry, key, _ = replicator(clock, FakeTransport())
    rep.refusal_lines = RefusalLines(60, clock=lambda: clock() / 1000)
    peer = rep.peers[key]
    unreadable = {"instanceId": "x"}  # a 409's entity that is no registration
    for _ in range(61):  # bad answers every second
        rep.apply_follow_ups(key, FollowUps(sent=2, ignored=3), clock())
        rep.apply_follow_ups(key, FollowUps(sent=2, sync_back=[unreadable, unreadable]), clock())
        clock.advance(1_000)
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    ignored = f"peer {peer.display_url}: answers ignored: 3 answers to a batch of 2"
    unreadable_copy = f"peer {peer.display_url}: newer copy unreadable: Missing hostname"
    assert warnings == [
        ignored,
        unreadable_copy,
        f"{ignored} (59 more since the last such line)",
        f"{unreadable_copy} (119 more since the last such line)",
    ]
    assert FollowUps.from_dict(FollowUps(sent=2, ignored=3).as_dict()).ignored == 3


def test_a_full_outbox_drops_the_oldest_and_counts(clock):
    transport = FakeTransport()
    rep, registry, key, _ = replicator(clock, transport, capacity=300)
    for n in range(400):
        registry.register(instance(clock, instanceId=f"i{n}"), clock())
        if n in (199, 399):
            rep.flush(clock())  # two windows of 200: the peer's queue holds 300
    assert len(rep.outboxes[key]) == 300 and rep.counters[key].dropped == 100
    rep.send_next_batch(key, clock())
    assert transport.batches[0][0]["id"] == "i100"


def test_two_nodes_converge_and_nothing_loops(clock):
    """A's batches go straight into B's apply_batch and the reverse: a write at either ends up at both."""
    nodes = {}

    class Loopback:
        def __init__(self, target):
            self.target = target

        def post_batch(self, peer, items):
            return apply_batch(nodes[self.target][1], {"replicationList": items}, clock)["responseList"]

    for name, other in (("a", "b"), ("b", "a")):
        registry, _ = new_registry(clock)
        peers = [Peer(f"http://node-{other}:8761/eureka/")]
        rep = Replicator(registry, peers, PeerSet([peers[0].url]), lambda p: MemoryOutbox(), Loopback(other))
        registry.set_replication_listener(rep.record)
        nodes[name] = (rep, registry, peers[0].key)

    def pump():
        for rep, _, key in nodes.values():
            rep.flush(clock())
            while rep.send_next_batch(key, clock()):
                pass

    nodes["a"][1].register(instance(clock), clock())
    pump()
    assert nodes["b"][1].reads.lease("ORDERS", ID) is not None
    nodes["b"][1].set_status_override("ORDERS", ID, c.OUT_OF_SERVICE, clock())
    pump()
    assert nodes["a"][1].reads.lease("ORDERS", ID)[0].instance.status == c.OUT_OF_SERVICE
    pump()
    assert all(len(rep.buffer) == 0 and len(rep.outboxes[key]) == 0 for rep, _, key in nodes.values())
    nodes["a"][1].cancel("ORDERS", ID, clock())
    pump()
    assert nodes["b"][1].reads.size() == 0


# --------------------------------------------------------------------------- peers and start-up


def test_peer_urls_are_normalized_and_credentials_kept_only_for_auth():
    peers = parse_peer_urls(["http://u:p%40ss@node-b:8761/eureka", " http://node-c:8762/eureka/ ", ""])
    assert [p.display_url for p in peers] == ["http://node-b:8761/eureka/", "http://node-c:8762/eureka/"]
    assert peers[0].auth == ("u", "p@ss") and peers[1].auth is None
    assert peers[0].key == Peer("http://node-b:8761/eureka/").key, "the key ignores credentials"


@pytest.mark.parametrize("url", ["ftp://node-b/eureka/", "http:///eureka/", "http://node-b:99999/eureka/"])
def test_bad_peer_urls_are_refused(url):
    from registry.domain.endpoints import BadPeerUrl

    with pytest.raises(BadPeerUrl):
        parse_peer_urls([url])


def test_own_url_is_the_same_host_and_port_not_the_host_alone():
    listening = [("127.0.0.1", 8761)]
    assert is_own_url(Peer("http://127.0.0.1:8761/eureka/"), None, listening)
    assert is_own_url(Peer("http://localhost:8761/eureka/"), None, listening)
    assert not is_own_url(Peer("http://127.0.0.1:8762/eureka/"), None, listening)
    assert not is_own_url(Peer("http://127.0.0.2:8761/eureka/"), None, listening)
    assert is_own_url(Peer("http://127.0.0.1:8761/eureka/"), None, [("0.0.0.0", 8761)])
    assert is_own_url(Peer("http://node-a:8761/eureka/"), "http://node-a:8761/eureka", [])


# What a test peer's answers may hold: the node's defaults.
ANSWER_LIMITS = RecordLimits(
    100_000, 262_144, "EUREKA_PEER_MAX_ANSWER_INSTANCES", "EUREKA_MAX_ANSWER_RECORD_BYTES"
)


def records_of(document):
    """A JSON document's instances as PeerTransport hands them over: read by the node's own reader."""
    return iter(registry_answer(orjson.dumps(document), ANSWER_LIMITS))


class FetchingTransport:
    """PeerTransport's start-up reads, answered from documents (dicts, rendered and read as a real
    answer would be) or exceptions."""

    def __init__(self, documents, deltas=None):
        self.documents = documents  # peer display url -> list of answers, one per attempt
        self.deltas = deltas or {}  # peer display url -> its GET apps/delta (None: no delta)
        self.calls = 0

    def fetch_delta(self, peer):
        answer = self.deltas.get(peer.display_url)
        if isinstance(answer, Exception):
            raise answer
        return None if answer is None else records_of(answer)

    def fetch_apps(self, peer):
        self.calls += 1
        answers = self.documents[peer.display_url]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return records_of(answer)


def apps_document(*bodies) -> dict:
    application = {"name": "ORDERS", "instance": [body["instance"] for body in bodies]}
    return {"applications": {"application": [application]}}


def test_start_up_sync_retries_while_empty_then_registers_as_replication(clock):
    registry, events = new_registry(clock)
    peers = [Peer("http://node-b:8761/eureka/"), Peer("http://node-c:8761/eureka/")]
    transport = FetchingTransport(
        {
            "http://node-b:8761/eureka/": [PeerUnreachable("refused"), apps_document(instance_body())],
            "http://node-c:8761/eureka/": [
                {"applications": {"application": []}},
                apps_document(instance_body(host="10.0.0.9")),
            ],
        }
    )
    count = sync_from_peers(registry, peers, transport, clock, retries=3, wait_ms=0)
    assert count == 2 and registry.reads.size() == 2 and transport.calls == 4
    assert events == [], "what a node syncs is not replicated back"


def test_start_up_sync_skips_a_record_over_the_size_limit_and_registers_the_rest(clock, caplog):
    registry, _ = new_registry(clock, max_instance_bytes=4_096)
    peer = Peer("http://node-b:8761/eureka/")
    huge = instance_body(host="10.0.0.8", vipAddress="v" * 5_000)
    transport = FetchingTransport({peer.display_url: [apps_document(huge, instance_body(host="10.0.0.9"))]})

    assert sync_from_peers(registry, [peer], transport, clock, retries=0, wait_ms=0) == 1

    assert [view.instance_id for _, views in registry.reads.instances() for view in views] == [
        "10.0.0.9:orders:8080"
    ]
    assert registry.reads.event_counts().from_peers.too_large == 1
    said = "start-up sync: from http://node-b:8761/eureka/: 1 refused (the first: Instance record too large"
    assert said in caplog.text


def test_start_up_sync_gives_up_after_its_retries(clock):
    registry, _ = new_registry(clock)
    peer = Peer("http://node-b:8761/eureka/")
    transport = FetchingTransport({peer.display_url: [PeerUnreachable("refused")]})
    assert sync_from_peers(registry, [peer], transport, clock, retries=2, wait_ms=0) == 0
    assert transport.calls == 3


def test_self_registration_registers_once_heartbeats_then_re_registers_when_forgotten():
    class Recording:
        def __init__(self):
            self.calls = []
            self.heartbeat_status = 200

        def register(self, peer, app, body):
            self.calls.append(("register", app))
            return 204

        def heartbeat(self, peer, app, instance_id):
            self.calls.append(("heartbeat", instance_id))
            return self.heartbeat_status

    transport = Recording()
    body = {"app": "EUREKA-SERVER", "instanceId": "127.0.0.3:eureka-server:8761"}
    registration = SelfRegistration([Peer("http://127.0.0.2:8761/eureka/")], transport, body, 30_000)
    registration.beat()
    registration.beat()
    transport.heartbeat_status = 404
    registration.beat()
    assert transport.calls == [
        ("register", "EUREKA-SERVER"),
        ("heartbeat", "127.0.0.3:eureka-server:8761"),
        ("heartbeat", "127.0.0.3:eureka-server:8761"),
        ("register", "EUREKA-SERVER"),
    ]


def test_a_malformed_peer_url_fails_at_start_with_the_variable_named():
    from tests.deploy.test_process_model import _django_setup

    result = _django_setup({"EUREKA_PEER_URLS": "http://node-a:8761/eureka/,node-b:8761"})
    assert result.returncode != 0
    assert "EUREKA_PEER_URLS" in result.stderr and "node-b:8761" in result.stderr
    assert _django_setup({"EUREKA_PEER_URLS": "http://u:secret@node-a:8761/eureka/"}).returncode == 0
    leaked = _django_setup({"EUREKA_PEER_URLS": "ftp://u:secret@node-a/eureka/"})
    assert leaked.returncode != 0 and "secret" not in leaked.stderr
