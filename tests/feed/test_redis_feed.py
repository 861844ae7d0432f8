"""The change feed in Redis (registry/feed/redis_feed.py): the publisher's buffer, and real followers.

The last tests start a real redis-server (skipped when it is missing, unless EUREKA_REQUIRE_ALL_SUITES=1)
and a real node in production mode, followed by another process with its own Redis connection.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from registry.feed.redis_feed import (
    RETRY_AFTER_MS,
    RedisChangePublisher,
    latest_entry_id,
    read_changes,
    stream_key,
)
from tests.conftest import FakeClock
from tests.domain.test_core import T0, inst, make_registry
from tests.factories import instance_body
from tests.integration.conftest import _redis_answers, stop
from tests.interop.conftest import PROJECT_ROOT, require_toolchain, running_server, wait_until
from tests.ports import free_port

pytestmark = pytest.mark.live


class FakePipeline:
    def __init__(self, client):
        self.client = client
        self.commands: list = []

    def xadd(self, key, fields, maxlen, approximate):
        self.commands.append((key, fields, maxlen, approximate))

    def execute(self):
        self.client.calls += 1
        if self.client.down:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        self.client.sent.extend(self.commands)
        return [b"1-0"] * len(self.commands)


class FakeRedis:
    def __init__(self):
        self.down = False
        self.calls = 0
        self.sent: list = []

    def pipeline(self, transaction):
        return FakePipeline(self)


def sent_ids(client) -> list[int]:
    return [json.loads(fields["change"])["id"] for _, fields, _, _ in client.sent]


def test_changes_go_out_in_one_pipelined_call_per_flush_with_an_approximate_cap():
    registry, _ = make_registry()
    client = FakeRedis()
    publisher = RedisChangePublisher(client, "ns:changes", "node-a", maxlen=5_000, clock=FakeClock(T0))
    publisher._unsubscribe = registry.reads.subscribe_changes(publisher.on_change)
    for n in range(3):
        registry.register(inst(n=n), T0 + n)
    assert client.calls == 0, "nothing is sent on the write path"
    assert publisher.flush() == 3
    assert client.calls == 1
    key, fields, maxlen, approximate = client.sent[0]
    assert (key, fields["node"], maxlen, approximate) == ("ns:changes", "node-a", 5_000, True)
    assert json.loads(fields["change"])["action"] == "REGISTERED"
    assert publisher.flush() == 0 and client.calls == 1, "an empty buffer costs no round trip"
    assert publisher.published == 3


def test_while_redis_is_down_changes_wait_in_the_buffer_errors_are_counted_and_retried_later(caplog):
    registry, _ = make_registry()
    client, clock = FakeRedis(), FakeClock(T0)
    publisher = RedisChangePublisher(client, "k", "n", clock=clock)
    registry.reads.subscribe_changes(publisher.on_change)
    registry.register(inst(n=1), T0)
    client.down = True
    assert publisher.flush() == 0
    assert publisher.flush() == 0
    assert (publisher.errors, client.calls) == (1, 1), "no new attempt before the retry delay"
    assert not publisher.status()["healthy"]
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1
    registry.register(inst(n=2), T0 + 1)
    clock.advance(RETRY_AFTER_MS)
    client.down = False
    assert publisher.flush() == 2
    assert sent_ids(client) == [
        c.id for c in registry.reads.changes_since(registry.changes.oldest_id() - 1, 10)
    ]
    assert publisher.status()["healthy"] and publisher.status()["buffered"] == 0


def test_a_full_buffer_drops_the_oldest_changes_counts_and_logs_them(caplog):
    registry, _ = make_registry()
    client, clock = FakeRedis(), FakeClock(T0)
    publisher = RedisChangePublisher(client, "k", "n", buffer_size=100, clock=clock)
    registry.reads.subscribe_changes(publisher.on_change)
    for n in range(130):
        registry.register(inst(n=n), T0 + n)
    assert publisher.dropped == 30
    assert publisher.flush() == 100
    newest = [c.id for c in registry.reads.changes_since(registry.changes.oldest_id() - 1, 200)][-100:]
    assert sent_ids(client) == newest
    assert any("30 changes dropped" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------- real Redis


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory) -> Iterator[str]:
    server = shutil.which("redis-server")
    require_toolchain(
        "redis-server", server is not None, "install it with `sudo apt-get install redis-server`"
    )
    port = free_port()
    process = start_redis(port, tmp_path_factory.mktemp("redis"))
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop(process)


def start_redis(port: int, workdir) -> subprocess.Popen:
    process = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1"]
        + ["--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: _redis_answers(f"redis://127.0.0.1:{port}/0"), 10, "redis-server did not start")
    return process


def test_a_follower_with_its_own_connection_reads_what_the_publisher_thread_sent(redis_url):
    registry, _ = make_registry()
    key = "unit-ns:changes"
    publisher = RedisChangePublisher(Redis.from_url(redis_url), key, "node-a", maxlen=1_000, flush_ms=20)
    publisher.start(registry)
    follower = Redis.from_url(redis_url)
    try:
        assert latest_entry_id(follower, key) == "0-0"
        for n in range(5):
            registry.register(inst(n=n), T0 + n)
        entries = wait_until(
            lambda: len(read_changes(follower, key)) == 5 and read_changes(follower, key), 5, "5"
        )
        assert [change["instanceId"] for _, change in entries] == [inst(n=n).instance_id for n in range(5)]
        assert {change["node"] for _, change in entries} == {"node-a"}
        after = entries[2][0]
        assert [e for e, _ in read_changes(follower, key, after=after)] == [e for e, _ in entries[3:]]
        # XREAD BLOCK: a follower waiting at the end is answered as soon as the next flush lands.
        registry.cancel("ORDERS", inst(n=0).instance_id, T0 + 10)
        waited = read_changes(follower, key, after=entries[-1][0], block_ms=3_000)
        assert [change["action"] for _, change in waited] == ["CANCELLED"]
    finally:
        publisher.stop()


_FOLLOWER = """
import json, sys
from redis import Redis
from registry.feed.redis_feed import read_changes
entries = read_changes(Redis.from_url(sys.argv[1]), sys.argv[2], after=sys.argv[3])
print(json.dumps([[entry_id, change] for entry_id, change in entries]))
"""


def follow_in_another_process(url: str, key: str, after: str = "0-0") -> list:
    done = subprocess.run(
        [sys.executable, "-c", _FOLLOWER, url, key, after],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def register(base_url: str, app: str, instance_id: str) -> None:
    response = httpx.post(
        f"{base_url}/eureka/apps/{app}", json=instance_body(app=app, instance_id=instance_id), timeout=5
    )
    assert response.status_code == 204


def test_a_production_node_publishes_its_changes_and_keeps_its_own_feed_while_redis_is_down(
    redis_url, tmp_path
):
    namespace = f"live{free_port()}"
    key = stream_key(namespace)
    env = {
        "REDIS_URL": redis_url,
        "EUREKA_REDIS_NAMESPACE": namespace,
        "EUREKA_CONTROL_SECRET": "feed-test-control-secret",
        "EUREKA_EMBEDDED": "false",
        "SECRET_KEY": "feed-test-secret-key",
    }
    with running_server(tmp_path, extra_env=env) as server:
        register(server.base_url, "ORDERS", "o-1")
        register(server.base_url, "BILLING", "b-1")
        assert (
            httpx.put(f"{server.base_url}/eureka/apps/ORDERS/o-1/status?value=OUT_OF_SERVICE").status_code
            == 200
        )
        entries = wait_until(
            lambda: (found := follow_in_another_process(redis_url, key)) and len(found) >= 3 and found,
            10,
            "the node's changes did not reach the Redis stream",
        )
        feed = httpx.get(f"{server.base_url}/api/v1/changes", timeout=5).json()["changes"]
        assert [change for _, change in entries] == [{**c, "node": entries[0][1]["node"]} for c in feed]
        assert [c["action"] for c in feed] == ["REGISTERED", "REGISTERED", "STATUS_CHANGED"]

        # Redis goes away: the node goes on serving, and its own feed has every change.
        redis_port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
        Redis.from_url(redis_url).shutdown(nosave=True)
        wait_until(lambda: not _redis_answers(redis_url), 10, "redis-server did not stop")
        started = time.monotonic()
        register(server.base_url, "ORDERS", "o-2")
        assert time.monotonic() - started < 2, "a write does not wait for Redis"
        newest = httpx.get(f"{server.base_url}/api/v1/changes", timeout=5).json()["changes"][-1]
        assert newest["instanceId"] == "o-2"

        # Redis is back (empty: no persistence): what the buffer held is published.
        restarted = start_redis(redis_port, tmp_path)
        try:
            later = wait_until(
                lambda: [c for _, c in follow_in_another_process(redis_url, key) if c["instanceId"] == "o-2"],
                15,
                "the change made while Redis was down was not published once it was back",
            )
            assert later[0]["id"] == newest["id"]
        finally:
            stop(restarted)
