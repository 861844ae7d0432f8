"""A live node whose remote region or peer answers with a gzip bomb (407 KB that inflate to
400 MiB; issue 34, item 3). The node reads each answer inflating it in bounded steps and stops past
its cap (``EUREKA_REMOTE_REGION_MAX_ANSWER_BYTES``, ``EUREKA_PEER_MAX_ANSWER_BYTES``): its memory may
grow by the cap at most, the region or peer is shown failing with an error naming the setting, the
region's last good registry is still served, and heartbeats are answered meanwhile.

And one whose region or peer answers under the byte cap with valid JSON that expands into 22 million
empty instances (64 KB of gzip, 66 MB inflated; issue 44, item 1): a node that parsed it whole held
its event loop 22-26 s a fetch and grew by 2 GB; as a peer's registry it held the start-up sync over
60 s, gunicorn killed the worker, the node never became healthy and logged a line per instance. Now
the answer is refused at ``EUREKA_*_MAX_ANSWER_INSTANCES``: the node becomes healthy, heartbeats from
another address are answered quickly, memory and the log stay small.

Memory is the worker's: its resident size while idle, then its peak (the kernel's high-water mark,
reset once idle was read, and samples every 10 ms) while the remote sends bombs for a few seconds.
"""

from __future__ import annotations

import contextlib
import logging
import re
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.cluster.hostile_remote import REMOTE_INSTANCE_ID, HostileRemote, expanding_answer, gzip_bomb
from tests.factories import instance_body
from tests.interop.conftest import LiveServer, running_server, wait_until

pytestmark = pytest.mark.live

logger = logging.getLogger(__name__)

JSON = {"Accept": "application/json"}
MIB = 1024 * 1024
# The done-when of issue 34: the 400 MiB bomb leaves the peak at most this far above idle.
PEAK_ABOVE_IDLE_MAX = 100 * MIB
# Bombs the remote must have sent before the peak is read (a fetch or a send every second or so).
BOMBS = 4
DEADLINE_S = 30.0
# Heartbeats during the bombs: every one answered, none slower than this (a busy two-core machine; a
# node inflating the whole bomb held its loop 1.5-2 s a fetch).
HEARTBEAT_MAX_S = 0.5


def wait_for(what: str, check: Callable[[], object], timeout_s: float = DEADLINE_S) -> object:
    return wait_until(check, timeout_s, what)


@pytest.fixture(scope="module", autouse=True)
def _bomb_made_once():
    gzip_bomb()  # ~1 s of compressing, before any node's clock runs
    expanding_answer(), expanding_answer(batch=True)


@pytest.fixture
def remote() -> Iterator[HostileRemote]:
    server = HostileRemote()
    yield server
    server.close()


def worker_of(server: LiveServer) -> psutil.Process:
    children = psutil.Process(server.process.pid).children()
    assert len(children) == 1, children
    return children[0]


class MemoryWatch:
    """The worker's resident size: ``idle`` (median over ``idle_s``), then ``peak`` from there on."""

    def __init__(self, worker: psutil.Process):
        self.worker = worker
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _rss(self) -> int:
        return self.worker.memory_info().rss

    def measure_idle(self, idle_s: float = 1.5) -> int:
        samples = []
        until = time.monotonic() + idle_s
        while time.monotonic() < until:
            samples.append(self._rss())
            time.sleep(0.05)
        self.idle = int(statistics.median(samples))
        # From here on VmHWM is the peak of what follows (Linux: "5" resets the high-water mark).
        with contextlib.suppress(OSError):
            Path(f"/proc/{self.worker.pid}/clear_refs").write_text("5")
        self._thread.start()
        return self.idle

    def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.samples.append(self._rss())
            time.sleep(0.01)

    def peak(self) -> int:
        self._stop.set()
        self._thread.join(timeout=5)
        high_water = 0
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.worker.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    high_water = int(line.split()[1]) * 1024
        return max([high_water, *self.samples])


class Heartbeats:
    """One instance registered at the node, renewed every 100 ms in a thread; each renewal's time.
    ``address``: the local address they come from."""

    def __init__(self, server: LiveServer, address: str | None = None):
        transport = httpx.HTTPTransport(local_address=address) if address else None
        self.client = httpx.Client(base_url=server.url, timeout=10, transport=transport)
        body = instance_body(app="ORDERS", host="10.1.0.1")
        assert self.client.post("apps/ORDERS", json=body).status_code == 204
        self.path = f"apps/ORDERS/{body['instance']['instanceId']}"
        self.answers: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                status = self.client.put(self.path).status_code
            except httpx.HTTPError:
                status = 0
            self.answers.append((status, time.perf_counter() - started))
            time.sleep(0.1)

    def stop(self) -> list[tuple[int, float]]:
        self._stop.set()
        self._thread.join(timeout=15)
        self.client.close()
        return self.answers


def check_heartbeats(answers: list[tuple[int, float]], at_least: int = 1) -> None:
    assert len(answers) >= at_least, f"{len(answers)} heartbeats sent"
    assert {status for status, _ in answers} == {200}, answers
    times = sorted(took for _, took in answers)
    median, slowest = statistics.median(times) * 1000, times[-1] * 1000
    measured = f"{len(times)} heartbeats, median {median:.0f} ms, slowest {slowest:.0f} ms"
    logger.info("%s", measured)
    assert times[-1] <= HEARTBEAT_MAX_S, measured


def check_memory(what: str, idle: int, peak: int, most: int = PEAK_ABOVE_IDLE_MAX) -> None:
    """The peak against idle (both logged: ``--log-cli-level=INFO`` shows them on a passing run)."""
    measured = f"{what}: worker RSS idle {idle / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB"
    logger.info("%s (+%.0f MiB)", measured, (peak - idle) / MIB)
    assert peak - idle <= most, measured


def test_a_region_answering_a_gzip_bomb_costs_at_most_the_cap_and_is_shown_failing(tmp_path, remote):
    env = {
        "EUREKA_REMOTE_REGION_URLS": f"us-west={remote.url}",
        "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": "1",
    }
    with running_server(tmp_path, env) as server:

        def served() -> httpx.Response:
            return httpx.get(f"{server.url}apps?regions=us-west", headers=JSON, timeout=5)

        wait_for("the region fetched", lambda: REMOTE_INSTANCE_ID in served().text)
        watch = MemoryWatch(worker_of(server))
        heartbeats = Heartbeats(server)
        idle = watch.measure_idle()
        remote.mode = "bomb"
        wait_for(f"{BOMBS} bombs sent", lambda: remote.answered["bomb"] >= BOMBS)
        peak = watch.peak()
        answers = heartbeats.stop()
        check_memory("remote region", idle, peak)
        check_heartbeats(answers)

        metrics = httpx.get(f"{server.base_url}/metrics", timeout=5).text
        failures = re.search(r"^eureka_remote_region_fetch_failures\S* (\S+)$", metrics, re.M)
        assert failures and float(failures[1]) >= 1, metrics
        log = server.server_log_path.read_text()
        assert "EUREKA_REMOTE_REGION_MAX_ANSWER_BYTES" in log, server.server_log_tail()
        # The region's last good registry is still served.
        response = served()
        assert response.status_code == 200 and REMOTE_INSTANCE_ID in response.text


def test_a_peer_answering_gzip_bombs_costs_at_most_the_cap_and_is_shown_failing(tmp_path, remote):
    remote.empty = True
    env = {
        "EUREKA_PEER_URLS": remote.url,
        # The start-up sync finds nothing at first (the peer holds no instance it could register),
        # so it asks again every second, then meets the bomb too.
        "EUREKA_REGISTRY_SYNC_RETRIES": "30",
        "EUREKA_REGISTRY_SYNC_RETRY_WAIT_MS": "1000",
    }
    with running_server(tmp_path, env) as server:

        def peer_state() -> dict:
            return httpx.get(f"{server.base_url}/readyz", timeout=5).json()["replication"]["peers"][0]

        wait_for("the peer answering", lambda: peer_state()["available"])
        watch = MemoryWatch(worker_of(server))
        heartbeats = Heartbeats(server)
        idle = watch.measure_idle()
        remote.mode = "bomb"
        wait_for(f"{BOMBS} bombs sent", lambda: remote.answered["bomb"] >= BOMBS)
        wait_for(
            "a bomb to the start-up sync",
            lambda: ("bomb", "GET /eureka/apps/") in remote.requests,
        )
        peak = watch.peak()
        answers = heartbeats.stop()
        check_memory("peer", idle, peak)
        check_heartbeats(answers)

        state = peer_state()
        assert not state["available"], state
        assert "EUREKA_PEER_MAX_ANSWER_BYTES" in (state["last_error"] or ""), state
        log = server.server_log_path.read_text()
        assert "start-up sync" in log and "EUREKA_PEER_MAX_ANSWER_BYTES" in log, server.server_log_tail()


# ------------------------------------------------ answers that expand into millions of instances

# Heartbeats come from another loopback address than the node's own traffic.
OTHER_ADDRESS = "127.0.0.2"
# The done-when of issue 44: RSS at most this far above idle (the answer itself is 66 MB, read whole
# as bytes under the 64 MiB-of-JSON cap; as Python objects it was 2 GB).
EXPANDING_PEAK_ABOVE_IDLE_MAX = 200 * MIB
# Expanding answers the remote must have sent while heartbeats are measured (about one a second).
EXPANDING = 4
# Lines the node may log while they are sent: a few per answer at most, never one per instance.
LOG_LINES_MAX = 40


def log_lines(server: LiveServer) -> int:
    return len(server.server_log_path.read_bytes().splitlines())


@pytest.mark.parametrize("http_server", ["gunicorn", "granian"])
def test_a_region_answering_millions_of_instances_holds_neither_the_loop_nor_memory(
    tmp_path, remote, http_server
):
    env = {
        "EUREKA_REMOTE_REGION_URLS": f"us-west={remote.url}",
        "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": "1",
    }
    with running_server(tmp_path, env, server=http_server) as server:

        def served() -> httpx.Response:
            return httpx.get(f"{server.url}apps?regions=us-west", headers=JSON, timeout=5)

        wait_for("the region fetched", lambda: REMOTE_INSTANCE_ID in served().text)
        watch = MemoryWatch(worker_of(server))
        heartbeats = Heartbeats(server, OTHER_ADDRESS)
        idle = watch.measure_idle()
        lines_before = log_lines(server)
        remote.mode = "expanding"
        wait_for(f"{EXPANDING} expanding answers sent", lambda: remote.answered["expanding"] >= EXPANDING, 90)
        peak = watch.peak()
        answers = heartbeats.stop()
        lines = log_lines(server) - lines_before
        check_memory("remote region, expanding answers", idle, peak, EXPANDING_PEAK_ABOVE_IDLE_MAX)
        check_heartbeats(answers, at_least=10)
        assert lines <= LOG_LINES_MAX, server.server_log_tail()

        log = server.server_log_path.read_text()
        assert "EUREKA_REMOTE_REGION_MAX_ANSWER_INSTANCES" in log, server.server_log_tail()
        metrics = httpx.get(f"{server.base_url}/metrics", timeout=5).text
        failures = re.search(r"^eureka_remote_region_fetch_failures\S* (\S+)$", metrics, re.M)
        assert failures and float(failures[1]) >= EXPANDING - 1, metrics
        # The region's last good registry is still served.
        response = served()
        assert response.status_code == 200 and REMOTE_INSTANCE_ID in response.text


@pytest.mark.parametrize("http_server", ["gunicorn", "granian"])
def test_a_peer_answering_millions_of_instances_from_the_start_lets_the_node_become_healthy(
    tmp_path, remote, http_server
):
    remote.mode = "expanding"
    env = {
        "EUREKA_PEER_URLS": remote.url,
        # Each round of the start-up sync meets the expanding answer; the rounds go on every second
        # while nothing was registered, so heartbeats are measured while the sync reads it again.
        "EUREKA_REGISTRY_SYNC_RETRIES": "60",
        "EUREKA_REGISTRY_SYNC_RETRY_WAIT_MS": "1000",
    }
    # running_server waits (30 s at most) for GET /eureka/apps to be served: the start-up sync's
    # first round has ended. A node that parsed the answer whole never got there.
    with running_server(tmp_path, env, server=http_server) as server:
        assert httpx.get(f"{server.base_url}/healthz", timeout=5).status_code == 200
        watch = MemoryWatch(worker_of(server))
        heartbeats = Heartbeats(server, OTHER_ADDRESS)
        idle = watch.measure_idle()
        lines_before = log_lines(server)
        sent_before = remote.answered["expanding"]
        wait_for(
            f"{EXPANDING} more expanding answers sent",
            lambda: remote.answered["expanding"] >= sent_before + EXPANDING,
        )
        wait_for(
            "another start-up sync round",
            lambda: remote.requests[sent_before:].count(("expanding", "GET /eureka/apps/")) >= 2,
        )
        peak = watch.peak()
        answers = heartbeats.stop()
        lines = log_lines(server) - lines_before
        check_memory("peer, expanding answers", idle, peak, EXPANDING_PEAK_ABOVE_IDLE_MAX)
        check_heartbeats(answers, at_least=10)
        assert lines <= LOG_LINES_MAX, server.server_log_tail()

        state = httpx.get(f"{server.base_url}/readyz", timeout=5).json()["replication"]["peers"][0]
        assert not state["available"] and "holds more than" in (state["last_error"] or ""), state
        log = server.server_log_path.read_text()
        assert "start-up sync" in log and "EUREKA_PEER_MAX_ANSWER_INSTANCES" in log, server.server_log_tail()
        # The whole log, start included: a few lines per answer, not one per instance.
        assert log_lines(server) < 200, server.server_log_tail()


# A registry as large as real fleets get: read in full, every second, while heartbeats keep their turn.
LARGE_REGION = 10_000


def test_a_region_of_ten_thousand_instances_is_read_whole_while_heartbeats_keep_their_turn(tmp_path):
    remote = HostileRemote(large=LARGE_REGION)
    env = {
        "EUREKA_REMOTE_REGION_URLS": f"us-west={remote.url}",
        "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": "1",
    }
    try:
        with running_server(tmp_path, env) as server:

            def held() -> int:
                answer = httpx.get(f"{server.url}apps?regions=us-west", headers=JSON, timeout=10)
                if answer.status_code != 200:
                    return 0
                apps = answer.json()["applications"]["application"]
                return sum(len(app["instance"]) for app in apps if app["name"].startswith("APP-"))

            wait_for("the region fetched", lambda: held() == LARGE_REGION)
            heartbeats = Heartbeats(server, OTHER_ADDRESS)
            full_before = remote.requests.count(("fine", "GET /eureka/apps/"))
            wait_for(
                "4 more full fetches",
                lambda: remote.requests.count(("fine", "GET /eureka/apps/")) >= full_before + 4,
            )
            answers = heartbeats.stop()
            check_heartbeats(answers, at_least=10)
            assert held() == LARGE_REGION
            assert "MAX_ANSWER" not in server.server_log_path.read_text(), server.server_log_tail()
    finally:
        remote.close()
