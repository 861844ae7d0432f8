"""Warm restart, live: a real gunicorn node (deploy/gunicorn.conf.py) stopped and started again with
the same data directory comes back with its registry (registry/runtime/snapshots.py).

- SIGTERM under 1,000 heartbeating instances: no heartbeat gets a 404 after the restart, no
  self-preservation banner, and an instance that stopped heartbeating before the restart still
  leaves when its lease runs out;
- kill -9 (worker and master): the node starts from its last periodic snapshot;
- production mode (real redis-server): the snapshot is a Redis key, written periodically and at stop.
"""

from __future__ import annotations

import http.client
import json
import logging
import subprocess
import threading
import time
from collections import Counter

import httpx
import psutil
import pytest

from registry.runtime.snapshots import FILE_NAME, decode, redis_key
from tests.factories import instance_body
from tests.interop.conftest import running_server, wait_until
from tests.ports import free_port

pytestmark = pytest.mark.live

logger = logging.getLogger(__name__)

LEASE_S = 10
HEARTBEAT_S = 3
EVICTION_INTERVAL_MS = 500
CACHE_SYNC_MS = 1000
ENV = {
    "EUREKA_EVICTION_INTERVAL_MS": str(EVICTION_INTERVAL_MS),
    "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": str(CACHE_SYNC_MS),
    # The threshold counts a heartbeat every 6 s; the fleet sends one every 3 s, so a busy machine
    # slowing the heartbeaters does not put the node in self-preservation (which is not the subject).
    "EUREKA_EXPECTED_CLIENT_RENEWAL_INTERVAL_SECONDS": "6",
    "EUREKA_WARM_RESTART": "true",  # tests/conftest.py turns it off for every other test's nodes
    "EUREKA_WARM_RESTART_INTERVAL_MS": "2000",
    "LOG_LEVEL": "INFO",
}
BANNER = "RENEWALS ARE LESSER THAN THE THRESHOLD"


def register_body(app: str, n: int) -> bytes:
    body = instance_body(
        app=app,
        host=f"10.{n // 65536}.{n // 256 % 256}.{n % 256}",
        leaseInfo={"renewalIntervalInSecs": HEARTBEAT_S, "durationInSecs": LEASE_S},
        metadata={"n": str(n)},
    )
    return json.dumps(body).encode()


def instance_id(n: int, app: str) -> str:
    return f"10.{n // 65536}.{n // 256 % 256}.{n % 256}:{app.lower()}:8080"


def fleet(size: int) -> list[tuple[str, str, bytes]]:
    """``size`` instances over 10 apps: (app, instance id, registration body)."""
    apps = [f"WARM-{k}" for k in range(10)]
    return [(apps[n % 10], instance_id(n, apps[n % 10]), register_body(apps[n % 10], n)) for n in range(size)]


class Client:
    """One kept-alive connection; reconnects after a connection error (a restart's window)."""

    def __init__(self, port: int):
        self.port = port
        self.connection: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None) -> int:
        if self.connection is None:
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        try:
            self.connection.request(method, path, body=body, headers=headers)
            response = self.connection.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            self.connection.close()
            self.connection = None
            raise

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


def register_all(port: int, instances: list[tuple[str, str, bytes]], threads: int = 4) -> None:
    def work(part: list[tuple[str, str, bytes]]) -> None:
        client = Client(port)
        for app, _, body in part:
            assert client.request("POST", f"/eureka/apps/{app}", body) == 204
        client.close()

    workers = [threading.Thread(target=work, args=(instances[k::threads],)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)


class Heartbeats:
    """Threads renewing every instance every ``HEARTBEAT_S``, as clients would: a connection error is
    retried (the node is restarting), every answer is counted and every 404 is kept."""

    def __init__(self, port: int, instances: list[tuple[str, str, bytes]], threads: int = 4):
        self.port = port
        self.parts = [instances[k::threads] for k in range(threads)]
        self.stopped: set[str] = set()
        self.statuses: Counter[int] = Counter()
        self.not_found: list[tuple[float, str]] = []
        self.connection_errors = 0
        self.last_ok: dict[str, float] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(part,), daemon=True) for part in self.parts]

    def __enter__(self) -> Heartbeats:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def stop_heartbeating(self, instance: str) -> float:
        """Stop renewing ``instance``; returns when it last got a 200 (time.time())."""
        with self._lock:
            self.stopped.add(instance)
        time.sleep(0.3)  # a renewal of it already under way is answered and recorded
        with self._lock:
            return self.last_ok[instance]

    def since(self, mark: float) -> tuple[Counter, list]:
        with self._lock:
            return Counter(self.statuses), [entry for entry in self.not_found if entry[0] >= mark]

    def _run(self, part: list[tuple[str, str, bytes]]) -> None:
        client = Client(self.port)
        while not self._stop.is_set():
            round_started = time.monotonic()
            for app, iid, _ in part:
                if iid in self.stopped:
                    continue
                while not self._stop.is_set():
                    try:
                        status = client.request("PUT", f"/eureka/apps/{app}/{iid}")
                    except (OSError, http.client.HTTPException):
                        with self._lock:
                            self.connection_errors += 1
                        self._stop.wait(0.05)
                        continue
                    with self._lock:
                        self.statuses[status] += 1
                        if status == 200:
                            self.last_ok[iid] = time.time()
                        elif status == 404:
                            self.not_found.append((time.time(), iid))
                    break
            self._stop.wait(max(0.0, HEARTBEAT_S - (time.monotonic() - round_started)))
        client.close()


def listed(base_url: str) -> dict[str, set[str]]:
    """App -> instance ids of ``GET /eureka/apps`` (raises on a connection error or a non-200)."""
    answer = httpx.get(f"{base_url}/eureka/apps", headers={"Accept": "application/json"}, timeout=10)
    answer.raise_for_status()
    apps = answer.json()["applications"].get("application", [])
    return {app["name"]: {instance["instanceId"] for instance in app["instance"]} for app in apps}


def count(apps: dict[str, set[str]]) -> int:
    return sum(len(ids) for ids in apps.values())


def self_preservation_active(base_url: str) -> bool:
    metrics = httpx.get(f"{base_url}/metrics", timeout=10).text
    line = next(line for line in metrics.splitlines() if line.startswith("eureka_self_preservation_active"))
    return float(line.split()[-1]) != 0


def renew_numbers(base_url: str) -> list[str]:
    metrics = httpx.get(f"{base_url}/metrics", timeout=10).text
    wanted = ("eureka_renews_last_minute", "eureka_renews_threshold", "eureka_expected_clients")
    return [line for line in metrics.splitlines() if line.startswith(wanted)]


def console_banner(base_url: str) -> bool:
    return BANNER in httpx.get(f"{base_url}/", timeout=20).text


def warm_restart_row(base_url: str) -> str | None:
    status = httpx.get(f"{base_url}/eureka/status", headers={"Accept": "application/json"}, timeout=10)
    return status.json()["status"]["generalStats"].get("warm-restart")


class FirstFullAnswer:
    """Polls ``GET /eureka/apps`` from a moment on: when it first answers 200 listing ``expected``."""

    def __init__(self, base_url: str, expected: int):
        self.base_url, self.expected = base_url, expected
        self.started = time.monotonic()
        self.at: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        deadline = self.started + 120
        while time.monotonic() < deadline:
            try:
                if count(listed(self.base_url)) >= self.expected:
                    self.at = time.monotonic()
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.05)

    def downtime_s(self) -> float:
        self._thread.join(125)
        assert self.at is not None, "GET /eureka/apps never listed every instance again"
        return self.at - self.started


def stop_gracefully(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(timeout=30)


# ---------------------------------------------------------------------------------- SIGTERM


@pytest.mark.serial  # 1,000 instances re-listed within a deadline that tests running beside it would break
def test_a_node_restarted_under_1000_heartbeating_instances_loses_none_and_still_expires_the_dead(tmp_path):
    port = free_port()
    instances = fleet(1000)
    dead_app, dead_id, dead_body = (
        "WARM-DEAD",
        instance_id(1000, "WARM-DEAD"),
        register_body("WARM-DEAD", 1000),
    )
    with running_server(tmp_path, ENV, port=port) as first:
        register_all(port, [*instances, (dead_app, dead_id, dead_body)])
        assert count(listed(first.base_url)) == 1001
        beats = Heartbeats(port, [*instances, (dead_app, dead_id, dead_body)])
        with beats:
            # A full minute of renewals: before it, any node (warm or not) shows the banner.
            wait_until(
                lambda: not self_preservation_active(first.base_url),
                100,
                lambda: f"standby: {renew_numbers(first.base_url)}, sent {dict(beats.statuses)}",
            )
            assert not console_banner(first.base_url)

            dead_last_renewal = beats.stop_heartbeating(dead_id)
            time.sleep(1)
            stopping = time.time()
            poller = FirstFullAnswer(first.base_url, 1001)
            stop_gracefully(first.process)
            with running_server(tmp_path, ENV, port=port) as second:
                downtime = poller.downtime_s()
                logger.info(
                    "warm restart of 1,001 instances: %.2f s from SIGTERM to a full GET apps", downtime
                )
                # The dead instance came back with the rest (its lease has not run out yet)...
                now = time.time()
                apps = listed(second.base_url)
                if now < dead_last_renewal + LEASE_S - 1:
                    assert dead_id in apps.get(dead_app, set()), "the dead instance was not restored"
                assert count(apps) >= 1000
                assert not self_preservation_active(second.base_url)
                assert not console_banner(second.base_url), "self-preservation banner after the restart"
                row = warm_restart_row(second.base_url)
                assert row is not None and row.startswith("restored 1001 instances"), row

                # ... and leaves when its lease runs out, not sooner and not much later.
                wait_until(
                    lambda: dead_id not in listed(second.base_url).get(dead_app, set()),
                    LEASE_S + 15,
                    "the dead instance to be evicted",
                )
                gone_after = time.time() - dead_last_renewal
                assert (
                    LEASE_S - 0.5 <= gone_after <= LEASE_S + (EVICTION_INTERVAL_MS + CACHE_SYNC_MS) / 1000 + 3
                ), f"the dead instance left {gone_after:.1f} s after its last renewal (lease {LEASE_S} s)"

                # Every live instance renews through the restarted node: two more rounds, no 404.
                time.sleep(2 * HEARTBEAT_S)
                statuses, not_found = beats.since(stopping)
                assert not_found == [], (
                    f"{len(not_found)} heartbeats got 404 after the restart: {not_found[:5]}"
                )
                assert statuses[404] == 0 and set(statuses) == {200}, statuses
                assert count(listed(second.base_url)) == 1000
                assert not self_preservation_active(second.base_url)
        logger.info(
            "heartbeats: %s, connection errors retried during the restart: %d",
            dict(statuses),
            beats.connection_errors,
        )
        assert "restored 1001 instances" in second.server_log_path.read_text()


# ---------------------------------------------------------------------------------- kill -9


def kill_hard(process: subprocess.Popen) -> None:
    """kill -9 of the worker and the master: nothing runs at exit (no last snapshot)."""
    master = psutil.Process(process.pid)
    for worker in master.children(recursive=True):
        worker.kill()
    master.kill()
    process.wait(timeout=10)


def test_after_a_kill_9_the_node_starts_from_its_last_periodic_snapshot(tmp_path):
    port = free_port()
    instances = fleet(300)
    env = {**ENV, "EUREKA_WARM_RESTART_INTERVAL_MS": "1000"}
    with running_server(tmp_path, env, port=port) as first:
        register_all(port, instances)
        snapshot = tmp_path / FILE_NAME
        wait_until(
            lambda: snapshot.exists() and len(decode(snapshot.read_bytes())["records"]) == 300,
            15,
            "a periodic snapshot of every instance",
        )
        kill_hard(first.process)
    assert not [path.name for path in tmp_path.iterdir() if path.name.startswith(f".{FILE_NAME}")], (
        "a temporary snapshot file was left behind"
    )
    with running_server(tmp_path, env, port=port) as second:
        assert count(listed(second.base_url)) == 300
        client = Client(port)
        answers = Counter(client.request("PUT", f"/eureka/apps/{app}/{iid}") for app, iid, _ in instances)
        client.close()
        assert answers == Counter({200: 300}), answers
        row = warm_restart_row(second.base_url)
        assert row is not None and row.startswith("restored 300 instances"), row
        ready = httpx.get(f"{second.base_url}/readyz", timeout=10).json()["warm_restart"]
        assert ready["restored_instances"] == 300 and ready["refused"] is None, ready
        assert ready["store"].endswith(FILE_NAME), ready


def test_a_node_started_with_warm_restart_off_starts_empty(tmp_path):
    port = free_port()
    with running_server(tmp_path, ENV, port=port) as first:
        register_all(port, fleet(20))
        stop_gracefully(first.process)
    assert (tmp_path / FILE_NAME).exists()
    with running_server(tmp_path, {**ENV, "EUREKA_WARM_RESTART": "false"}, port=port) as second:
        assert count(listed(second.base_url)) == 0
        assert warm_restart_row(second.base_url) is None


# ------------------------------------------------------------------------- production mode


def test_in_production_mode_the_snapshot_is_a_redis_key_written_periodically_and_at_stop(tmp_path, redis_url):
    from redis import Redis

    namespace = "warm-node-a"
    env = {
        **ENV,
        "REDIS_URL": redis_url,
        "EUREKA_REDIS_NAMESPACE": namespace,
        "EUREKA_CONTROL_SECRET": "warm-restart-test-secret",
        "EUREKA_EMBEDDED": "false",
        "SECRET_KEY": "warm-restart-test-secret-key",
        "EUREKA_WARM_RESTART_INTERVAL_MS": "1000",
    }
    redis = Redis.from_url(redis_url, socket_timeout=2)
    key = redis_key(namespace)
    port = free_port()
    instances = fleet(200)
    with running_server(tmp_path, env, port=port) as first:
        register_all(port, instances)
        # Written by the node's own thread: no Celery process runs here.
        wait_until(
            lambda: redis.exists(key) and len(decode(redis.get(key))["records"]) == 200,
            15,
            "a periodic snapshot in Redis",
        )
        client = Client(port)
        assert client.request("POST", "/eureka/apps/WARM-LATE", register_body("WARM-LATE", 5000)) == 204
        client.close()
        stopping_ms = int(time.time() * 1000)
        stop_gracefully(first.process)
    at_stop = decode(redis.get(key))
    assert len(at_stop["records"]) == 201 and at_stop["saved_at"] >= stopping_ms - 50
    assert not (tmp_path / FILE_NAME).exists()

    with running_server(tmp_path, env, port=port) as second:
        assert count(listed(second.base_url)) == 201
        client = Client(port)
        answers = Counter(client.request("PUT", f"/eureka/apps/{app}/{iid}") for app, iid, _ in instances)
        client.close()
        assert answers == Counter({200: 200}), answers
        assert warm_restart_row(second.base_url).startswith("restored 201 instances")
    # Another node (another namespace) on the same Redis would not see this snapshot.
    assert not redis.exists(redis_key("warm-node-b"))
