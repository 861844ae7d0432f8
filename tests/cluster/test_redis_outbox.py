"""Production mode's outboxes against a real redis-server: the node's pushes, a worker's drain, the lock,
and the fall-back to in-process sending while Redis is down (registry/cluster/redis_outbox.py)."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator

import pytest
from redis import Redis

from registry.cluster.redis_outbox import NodeOutbox, RedisQueue, drain, queue_key
from registry.cluster.replicator import PROBE_INTERVAL_MS
from registry.cluster.transport import PeerRefused, PeerUnreachable
from registry.domain.endpoints import Peer
from tests.integration.conftest import Processes
from tests.interop.conftest import require_toolchain
from tests.ports import free_port

pytestmark = pytest.mark.integration

PEER = Peer("http://node-b:8761/eureka/")


@pytest.fixture(scope="module")
def redis_processes(tmp_path_factory) -> Iterator[Processes]:
    found = shutil.which("redis-server") is not None
    require_toolchain("redis-server", found, "install it with `sudo apt-get install redis-server`")
    processes = Processes(tmp_path_factory.mktemp("redis"), free_port(), 0, {})
    processes.start_redis()
    yield processes
    processes.stop_redis()


@pytest.fixture
def client(redis_processes) -> Iterator[Redis]:
    if redis_processes.redis is None:
        redis_processes.start_redis()
    client = Redis.from_url(redis_processes.redis_url, socket_timeout=1, socket_connect_timeout=1)
    client.flushdb()
    yield client
    client.close()


def items(count: int, start: int = 0) -> list[dict]:
    return [{"appName": "ORDERS", "id": f"i{n}", "action": "Heartbeat"} for n in range(start, start + count)]


def test_a_push_kicks_a_drain_only_when_the_list_was_empty(client):
    kicks = []
    outbox = NodeOutbox(RedisQueue(client, queue_key("test", PEER), 1000), lambda: kicks.append(1), 1000)
    outbox.push(items(3), 100)
    outbox.push(items(2, 3), 200)
    assert len(kicks) == 1 and len(outbox) == 5
    queue = RedisQueue(client, queue_key("test", PEER))
    assert [item["id"] for item in queue.peek(10)] == ["i0", "i1", "i2", "i3", "i4"]
    assert queue.oldest_at() == 100
    queue.ack(5)
    outbox.push(items(1, 5), 300)
    assert len(kicks) == 2


def test_the_queue_is_bounded_and_counts_what_it_drops(client):
    queue = RedisQueue(client, queue_key("test", PEER), capacity=250)
    assert queue.push(items(200), 1) == (200, 0)
    assert queue.push(items(100, 200), 2) == (250, 50)
    assert queue.peek(1)[0]["id"] == "i50"


class Transport:
    def __init__(self):
        self.batches = []
        self.fail = None
        self.gate: threading.Event | None = None
        self.in_flight = threading.Event()

    def post_batch(self, peer, batch):
        self.in_flight.set()
        if self.gate is not None:
            self.gate.wait(5)
        if self.fail is not None:
            raise self.fail
        self.batches.append(batch)
        return [{"statusCode": 404 if item["id"] == "i1" else 200} for item in batch]


def test_a_drain_sends_in_batches_trims_and_reports_follow_ups(client):
    queue = RedisQueue(client, queue_key("test", PEER))
    queue.push(items(600), 1)
    transport, reports = Transport(), []
    sent = drain(client, queue, PEER, transport, lambda f, e, q, lag: reports.append((f, e, q)))
    assert sent == 600 and len(queue) == 0
    assert [len(b) for b in transport.batches] == [250, 250, 100]
    assert reports[0][0].reregister == [("ORDERS", "i1")]
    assert [q for _, _, q in reports] == [350, 100, 0] and all(e is None for _, e, _ in reports)


def test_two_drains_never_send_the_same_batch(client):
    queue = RedisQueue(client, queue_key("test", PEER))
    queue.push(items(10), 1)
    transport = Transport()
    transport.gate = threading.Event()
    results = []
    first = threading.Thread(
        target=lambda: results.append(drain(client, queue, PEER, transport, lambda *a: None))
    )
    first.start()
    assert transport.in_flight.wait(5), "the first drain never sent its batch"
    # The first drain holds the peer's lock while its batch is in flight: a second one does nothing.
    assert drain(client, RedisQueue(client, queue.key), PEER, transport, lambda *a: None) == 0
    transport.gate.set()
    first.join(10)
    assert results == [10] and len(transport.batches) == 1
    assert not client.exists(f"{queue.key}:lock"), "the lock is released"


def test_items_pushed_while_a_drain_finishes_are_sent_by_it_not_left_for_beat(client):
    queue = RedisQueue(client, queue_key("test", PEER))
    queue.push(items(3), 1)
    transport, kicked = Transport(), []

    class LatePush:
        """The node pushes (and kicks a drain) after the drain's last look at the list, before its
        release of the lock: the kicked drain finds the lock taken and does nothing."""

        def __init__(self):
            self.pushed = False

        def __getattr__(self, name):
            return getattr(client, name)

        def eval(self, *args):
            if not self.pushed:
                self.pushed = True
                queue.push(items(1, 3), 2)
                kicked.append(drain(client, queue, PEER, transport, lambda *a: None))
            return client.eval(*args)

    assert drain(LatePush(), queue, PEER, transport, lambda *a: None) == 4
    assert kicked == [0] and len(queue) == 0
    assert [item["id"] for batch in transport.batches for item in batch] == ["i0", "i1", "i2", "i3"]


def test_a_peer_that_cannot_be_reached_leaves_the_batch_and_the_error_is_reported(client):
    queue = RedisQueue(client, queue_key("test", PEER))
    queue.push(items(3), 1)
    transport, reports = Transport(), []
    transport.fail = PeerUnreachable("ConnectError: refused")
    assert drain(client, queue, PEER, transport, lambda f, e, q, lag: reports.append((f, e, q))) == 0
    assert len(queue) == 3 and reports == [(None, "ConnectError: refused", 3)]
    transport.fail = PeerRefused("HTTP 401 for a batch of 3")
    drain(client, queue, PEER, transport, lambda f, e, q, lag: reports.append((f, e, q)))
    assert len(queue) == 0 and reports[-1][0].refused == 3 and "401" in reports[-1][1]


def test_an_idle_peer_gets_one_empty_batch_per_probe_interval_whichever_worker_drains(client):
    queue = RedisQueue(client, queue_key("test", PEER))
    transport, reports = Transport(), []
    assert drain(client, queue, PEER, transport, lambda f, e, q, lag: reports.append((f, e, q))) == 0
    assert transport.batches == [[]], "the empty batch that measures the peer's health"
    assert reports[0][0].sent == 0 and reports[0][1] is None
    # Another drain (beat runs one a second, maybe on another worker) within the interval: no probe.
    drain(client, RedisQueue(client, queue.key), PEER, transport, lambda *a: reports.append(a))
    assert transport.batches == [[]] and len(reports) == 1
    assert 0 < client.pttl(f"{queue.key}:probe") <= PROBE_INTERVAL_MS
    client.delete(f"{queue.key}:probe")  # the interval has passed
    transport.fail = PeerUnreachable("ConnectError: refused")
    drain(client, queue, PEER, transport, lambda f, e, q, lag: reports.append((f, e, q)))
    assert reports[-1] == (None, "ConnectError: refused", 0)
    # Not retried sooner by the drains: the node's sender probes a peer its workers found down.
    drain(client, queue, PEER, transport, lambda f, e, q, lag: reports.append((f, e, q)))
    assert len(reports) == 2 and client.pttl(f"{queue.key}:probe") > PROBE_INTERVAL_MS // 2


def test_while_a_peer_is_down_drains_probe_it_and_send_the_backlog_once_it_answers(client):
    queue = RedisQueue(client, queue_key("test", PEER))
    queue.push(items(300), 1)
    transport, reports = Transport(), []
    sizes = []
    original = transport.post_batch

    def recording(peer, batch):
        sizes.append(len(batch))
        return original(peer, batch)

    transport.post_batch = recording
    transport.fail = PeerUnreachable("ConnectError: refused")
    for _ in range(5):  # beat's drains, a second apart, while the peer is down
        assert drain(client, queue, PEER, transport, lambda f, e, q, lag: reports.append((e, q))) == 0
    assert sizes == [250, 0, 0, 0, 0], "the batch once, then only empty ones"
    assert reports == [("ConnectError: refused", 300)] * 5 and len(queue) == 300
    transport.fail = None
    assert drain(client, queue, PEER, transport, lambda f, e, q, lag: reports.append((e, q))) == 300
    assert sizes[5:] == [0, 250, 50] and len(queue) == 0
    assert not client.exists(f"{queue.key}:down"), "up again: the next drain sends at once"


def test_while_redis_is_down_the_node_keeps_items_itself(redis_processes, client):
    kicks = []
    outbox = NodeOutbox(RedisQueue(client, queue_key("test", PEER), 100), lambda: kicks.append(1), 100)
    redis_processes.stop_redis()
    outbox.push(items(2), 10)
    assert outbox.redis_down_since == 10 and [i["id"] for i in outbox.peek(5)] == ["i0", "i1"]
    outbox.ack(2)
    redis_processes.start_redis()
    outbox.push(items(1, 2), 20)
    assert outbox.redis_down_since is None and kicks == [1] and len(outbox.local) == 0


def test_a_new_node_process_drops_what_an_earlier_one_left_in_redis(redis_processes, client, eureka_options):
    """A restarted node's map starts empty: the previous process's cached registry must not be served."""
    from registry.cache.response_cache import APPS, CacheKey
    from registry.runtime.composition import build_node
    from tests.conftest import FakeClock

    eureka_options = eureka_options.with_changes(
        redis__url=redis_processes.redis_url, redis__namespace="restart-test"
    )
    first = build_node(eureka_options, clock=FakeClock())
    key = CacheKey(APPS, "", "json")
    stale = b'{"applications":{"versions__delta":"1","apps__hashcode":"UP_1_","application":[]}}'
    from registry.cache.response_cache import Payload

    first.cache.read_only.put(key, Payload(stale, 1))
    assert client.exists("restart-test:ro:apps:json:0:")
    second = build_node(eureka_options, clock=FakeClock())
    assert not client.exists("restart-test:ro:apps:json:0:")
    assert second.cache.read_only.get(key) is None


def test_a_peer_gone_from_dns_takes_its_redis_list_with_it(client):

    peer = Peer("http://10.0.0.4:8761/eureka/")
    outbox = NodeOutbox(RedisQueue(client, queue_key("test", peer), 100), lambda: None, 100)
    outbox.push(items(3), 1_000)
    assert client.llen(queue_key("test", peer)) == 3
    assert outbox.discard() == 3
    assert not client.exists(queue_key("test", peer)) and len(outbox) == 0


def test_workers_learn_the_nodes_dns_peers_from_redis_with_credentials_from_their_own_settings(
    client, settings
):
    from registry.cluster.redis_outbox import publish_peers, published_peers
    from registry.config.eureka import parse_config
    from registry.runtime import tasks

    settings.EUREKA = parse_config(
        {
            "EUREKA_PEER_DNS": "http://peer:secret@eureka-headless:8761/eureka/",
            "EUREKA_REDIS_NAMESPACE": "test",
        }
    )
    dns_peer = settings.EUREKA.cluster.peer_dns[0].peer_at("10.0.0.4")
    publish_peers(client, "test", [dns_peer])
    assert published_peers(client, "test") == {dns_peer.key: "http://10.0.0.4:8761/eureka/"}
    tasks._replication_context.cache_clear()
    port = client.connection_pool.connection_kwargs["port"]
    settings.EUREKA = settings.EUREKA.with_changes(redis__url=f"redis://127.0.0.1:{port}/0")
    try:
        # The Redis hash holds no credentials; the worker's peer has them (from EUREKA_PEER_DNS).
        assert b"secret" not in b"".join(client.hvals("test:replication-peers"))
        assert tasks._peer(dns_peer.key) == dns_peer
        assert tasks._peer("unknown") is None
        publish_peers(client, "test", [])
        assert tasks._peer(dns_peer.key) is None
    finally:
        tasks._replication_context.cache_clear()
