"""Issue 44, item 5 on live nodes (gunicorn and granian): a client re-registering the same instances in
a loop does not grow the node's memory for good.

Each write of such a loop stayed in the delta queue and the change log for their whole retention,
each instance's status trail kept its last 60 changes for an hour, and every request in flight when
the GC policy froze the survivors of a collection (registry/runtime/gc_policy.py) stayed, body and
all, until the next full collection: RSS grew by gigabytes in a minute and stayed there. Here a node
with a delta retention of 5 s (the default is 180 s) gets 1,000-item Register batches of the same
1,000 instances back to back from two connections for 10 s, while one instance heartbeats. The
worker's RSS may peak at most ``PEAK_ABOVE_IDLE_MAX`` above its idle size, and once the retention has
passed it is back within ``AFTER_ABOVE_IDLE_MAX`` of it. The bench's attacks (a minute, the default
retention) are bench/attacks.py "churn-batch" and "churn-register".
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import orjson
import psutil
import pytest

from tests.factories import instance_body
from tests.interop.conftest import LiveServer, running_server

pytestmark = pytest.mark.live

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
RETENTION_S = 5
ENV = {
    "EUREKA_RETENTION_TIME_IN_DELTA_QUEUE_MS": str(RETENTION_S * 1000),
    "EUREKA_DELTA_RETENTION_TIMER_INTERVAL_MS": "1000",
}
INSTANCES = 1_000
FLOOD_S = 10
CONNECTIONS = 2
# After the flood: the retention, the prune job's interval, and a few seconds for the node to settle.
SETTLE_S = RETENTION_S + 5
# The done-when of issue 44 (at most 200 MB above idle during the attack, back within 50 MB after
# retention), with room for a loaded machine: a node keeping every write passed both within seconds.
PEAK_ABOVE_IDLE_MAX = 100 * MIB
AFTER_ABOVE_IDLE_MAX = 30 * MIB


@pytest.fixture(scope="module", params=["gunicorn", "granian"])
def node(request, tmp_path_factory) -> Iterator[LiveServer]:
    with running_server(
        tmp_path_factory.mktemp(f"churn_{request.param}"), ENV, server=request.param
    ) as server:
        yield server


def worker_of(server: LiveServer) -> psutil.Process:
    children = psutil.Process(server.process.pid).children()
    assert len(children) == 1, children
    return children[0]


def batch() -> bytes:
    """The same 1,000 instances, each a Register item, as a peer sends them."""
    items = []
    for n in range(INSTANCES):
        instance = instance_body(app=f"APP-{n % 10}", host=f"10.2.{n // 250}.{n % 250 + 1}", last_dirty=1000)
        items.append(
            {
                "action": "Register",
                "appName": instance["instance"]["app"],
                "id": instance["instance"]["instanceId"],
                "instanceInfo": instance["instance"],
            }
        )
    return orjson.dumps({"replicationList": items})


def rss(worker: psutil.Process, seconds: float = 1.0) -> int:
    """The worker's resident size: the median of samples over ``seconds``."""
    samples = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        samples.append(worker.memory_info().rss)
        time.sleep(0.05)
    return int(statistics.median(samples))


def flood(server: LiveServer, body: bytes, until: float, answers: Counter) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        while time.monotonic() < until:
            answer = client.post(
                "peerreplication/batch", content=body, headers={"Content-Type": "application/json"}
            )
            answers[answer.status_code] += 1


def test_re_registering_the_same_instances_in_a_loop_leaves_memory_where_it_was(node):
    body = batch()
    answers: Counter = Counter()
    with httpx.Client(base_url=node.url, timeout=30) as client:
        first = client.post(
            "peerreplication/batch", content=body, headers={"Content-Type": "application/json"}
        )
        assert first.status_code == 200
        beating = instance_body(app="BEAT", host="10.3.0.1")
        assert client.post("apps/BEAT", json=beating).status_code == 204
    worker = worker_of(node)
    time.sleep(1)
    idle = rss(worker)

    peak = idle
    until = time.monotonic() + FLOOD_S
    threads = [threading.Thread(target=flood, args=(node, body, until, answers)) for _ in range(CONNECTIONS)]
    for thread in threads:
        thread.start()
    heartbeats: Counter = Counter()
    with httpx.Client(base_url=node.url, timeout=30) as client:
        while any(thread.is_alive() for thread in threads):
            heartbeats[client.put(f"apps/BEAT/{beating['instance']['instanceId']}").status_code] += 1
            peak = max(peak, worker.memory_info().rss)
            time.sleep(0.1)
    for thread in threads:
        thread.join()
    time.sleep(SETTLE_S)
    after = rss(worker)

    measured = (
        f"{answers[200]} batches of {INSTANCES} registrations in {FLOOD_S} s; worker RSS idle "
        f"{idle / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB, {SETTLE_S} s after {after / MIB:.0f} MiB"
    )
    logger.info("%s", measured)
    assert set(answers) == {200} and answers[200] >= 5, measured
    assert set(heartbeats) == {200}, heartbeats
    assert peak - idle <= PEAK_ABOVE_IDLE_MAX, measured
    assert after - idle <= AFTER_ABOVE_IDLE_MAX, measured
