"""Replication lag in a three-node cluster under a fleet's load, and what replication costs a node.

Node A gets the traffic of a fleet: 10,000 instances in 100 apps renewing at 1,000/s, plus 50
registrations and 50 cancels per second (new instances register, old ones leave). Every register and
cancel is then looked for at peer B, three ways, and timed from the moment A answered the client:

* replication  B's live ``GET /eureka/apps/{APP}/{id}`` (not cached): when the change reached B's map;
* apps         B's served ``GET /eureka/apps`` (gzip JSON, B's read-only response cache);
* delta        B's served ``GET /eureka/apps/delta`` (same cache): what polling clients see.

The served views change once per cache refresh (``EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS``, 1 s by
default), so their lag is the replication lag plus up to one refresh interval. A's replication queues
(``/readyz``: queued items and the oldest one's age, per peer) are sampled every second.

Before that, A's renew throughput is measured with and without peers: the Go load generator
(bench/loadgen) renews as fast as it can for a few seconds against a standalone node S with the same
10,000 instances, then against A (whose heartbeats go to B and C), interleaved S, A, S, A.

  .venv/bin/python bench/replication_lag.py --start                 # A, B, C and S on ports 28771-28774
  .venv/bin/python bench/replication_lag.py --start --duration 20 --throughput-rounds 1
  .venv/bin/python bench/replication_lag.py --start --mode production   # Redis outboxes, Celery workers
  .venv/bin/python bench/replication_lag.py --url-a http://127.0.0.1:8761 --url-b http://127.0.0.1:8762

Needs Go 1.22+ (the load generator registers the fleet and measures throughput). Loopback only; every
phase is bounded in time and the nodes it started are stopped at the end. Printed, not asserted.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import http.client
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the virtualenv running this script
LOADGEN = ROOT / "bench" / "bin" / "loadgen"
JSON_GZIP = {"Accept": "application/json", "Accept-Encoding": "gzip"}
VIEWS = ("replication", "apps", "delta")
# After the load stops, how long changes still in flight may take to show (several cache refreshes).
SETTLE_S = 10.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


# ------------------------------------------------------------------------------------------ HTTP


class Conn:
    """One kept-alive HTTP/1.1 connection (http.client: a third of httpx's CPU per request)."""

    def __init__(self, base: str, timeout: float = 10.0):
        parts = urlsplit(base)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout = timeout
        self._conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        for attempt in (0, 1):
            try:
                self._conn.request(method, path, body=body, headers=headers or {})
                response = self._conn.getresponse()
                data = response.read()
                return response.status, {k.lower(): v for k, v in response.getheaders()}, data
            except (http.client.HTTPException, OSError):
                self._conn.close()
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def json(self, path: str) -> dict:
        status, _, data = self.request("GET", path, headers={"Accept": "application/json"})
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status}")
        return orjson.loads(data)

    def close(self) -> None:
        self._conn.close()


# ------------------------------------------------------------------------------------------ nodes


@dataclass
class Node:
    name: str
    base: str  # http://127.0.0.1:PORT
    process: subprocess.Popen | None = None
    # Production mode: the node's Celery worker and beat.
    helpers: list[subprocess.Popen] = field(default_factory=list)

    @property
    def service_url(self) -> str:
        return f"{self.base}/eureka/"

    def worker_pids(self) -> list[int]:
        """gunicorn's worker (where the map lives), for the load generator's CPU figure."""
        if self.process is None:
            return []
        try:
            return [child.pid for child in psutil.Process(self.process.pid).children()]
        except psutil.Error:
            return []

    def ready(self) -> dict:
        conn = Conn(self.base, timeout=5)
        try:
            return conn.json("/readyz")
        finally:
            conn.close()


def start_redis(workdir: Path, port: int) -> subprocess.Popen:
    """One redis-server for the production-mode cluster; each node gets its own database number."""
    server = shutil.which("redis-server")
    if server is None:
        raise SystemExit("--mode production needs redis-server (sudo apt-get install redis-server)")
    workdir.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    return process


def start_node(
    name: str, port: int, workdir: Path, peers: list[str], cache_ms: int, redis_url: str | None = None
) -> Node:
    """A node on ``port``; with ``redis_url``, in production mode with its own Celery worker and beat."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
        "LOG_LEVEL": "WARNING",
        "EUREKA_PEER_URLS": ",".join(peers),
        "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": str(cache_ms),
        # The nodes start together: nothing to copy from each other, so no start-up sync retries.
        "EUREKA_REGISTRY_SYNC_RETRIES": "0",
        # Peers hold kept-alive connections to each other; do not wait 20 s for them at the end.
        "GUNICORN_CMD_ARGS": "--graceful-timeout 2",
    }
    if redis_url:
        env |= {
            "REDIS_URL": redis_url,
            "EUREKA_EMBEDDED": "false",
            "EUREKA_CONTROL_SECRET": "bench-control-secret",
            "EUREKA_CONTROL_URL": f"http://127.0.0.1:{port}",
            "SECRET_KEY": "bench-" + "x" * 50,
        }
    helpers = []
    if redis_url:
        for role, args in (
            ("worker", ["worker", "--loglevel=WARNING", "--concurrency=2"]),
            ("beat", ["beat", "--loglevel=WARNING", f"--schedule={workdir / 'celerybeat-schedule'}"]),
        ):
            with (workdir / f"celery-{role}.log").open("ab") as role_log:
                helpers.append(
                    subprocess.Popen(
                        [str(BIN / "celery"), "-A", "eureka_site", *args],
                        cwd=ROOT,
                        env=env,
                        stdout=role_log,
                        stderr=subprocess.STDOUT,
                    )
                )
    with (workdir / "node.log").open("ab") as node_log:
        process = subprocess.Popen(
            [str(BIN / "gunicorn"), "-c", "deploy/gunicorn.conf.py", "--bind", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=node_log,
            stderr=subprocess.STDOUT,
        )
    node = Node(name, f"http://127.0.0.1:{port}", process, helpers)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"node {name} exited; see {workdir / 'node.log'}")
        try:
            if node.ready().get("open_for_traffic"):
                return node
        except (OSError, http.client.HTTPException, ValueError):
            pass
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"node {name} did not start; see {workdir / 'node.log'}")


def stop_nodes(nodes: list[Node]) -> None:
    processes = [p for node in nodes for p in [node.process, *node.helpers] if p is not None]
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
    return time.monotonic() - started


def queues_empty(node: Node) -> bool:
    replication = node.ready().get("replication") or {"peers": [], "buffered": 0}
    return not replication["buffered"] and all(peer["queued"] == 0 for peer in replication["peers"])


def instance_count(node: Node) -> int:
    return int(node.ready()["instances"])


# -------------------------------------------------------------------------------- load generator


def build_loadgen() -> Path:
    if shutil.which("go") is None:
        raise SystemExit("needs Go 1.22+ for bench/loadgen (registration and throughput)")
    subprocess.run(["go", "build", "-o", str(LOADGEN), "."], cwd=ROOT / "bench" / "loadgen", check=True)
    return LOADGEN


def loadgen(args: list[str], timeout: float) -> dict[str, str]:
    """Run the load generator; returns its ``metric value`` lines."""
    result = subprocess.run(
        [str(LOADGEN), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode not in (0, 1):
        raise SystemExit(f"loadgen {' '.join(args)} failed:\n{result.stderr}")
    metrics = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and not line.startswith("#"):
            metrics[parts[1]] = parts[2]
    return metrics


# ---------------------------------------------------------------------------------- the lag run


@dataclass
class Event:
    kind: str  # register | cancel
    app: str
    instance_id: str
    done: float  # perf_counter when A answered
    seen: dict[str, float] = field(default_factory=dict)


class Fleet:
    """The instances A's clients own: who renews, who was cancelled, what is new."""

    def __init__(self, ids: list[tuple[str, str]], apps: list[str]):
        self.apps = apps
        self.rotation = [f"/eureka/apps/{app}/{quote(instance_id, safe='')}" for app, instance_id in ids]
        self.cancelled: set[str] = set()
        # Cancels take base instances from the end of a shuffled list (spread over the apps).
        self.to_cancel = list(ids)
        random.Random(7).shuffle(self.to_cancel)
        self.registered = 0


class Renewer(threading.Thread):
    """Heartbeats at ``rate``/s over the fleet (one of several threads sharing the rate)."""

    def __init__(self, base: str, fleet: Fleet, rate: float, offset: int, stride: int, stop: threading.Event):
        super().__init__(daemon=True, name=f"renewer-{offset}")
        self.conn = Conn(base)
        self.fleet, self.interval, self.offset, self.stride, self.stop_event = (
            fleet,
            1.0 / rate,
            offset,
            stride,
            stop,
        )
        self.sent = 0
        self.not_ok: dict[int, int] = {}
        self.latencies_ms: list[float] = []

    def run(self) -> None:
        index = self.offset
        next_at = time.perf_counter()
        while not self.stop_event.is_set():
            rotation = self.fleet.rotation
            path = rotation[index % len(rotation)]
            index += self.stride
            if path in self.fleet.cancelled:
                continue
            started = time.perf_counter()
            try:
                status, _, _ = self.conn.request("PUT", path)
            except (OSError, http.client.HTTPException):
                status = 0
            self.latencies_ms.append((time.perf_counter() - started) * 1000)
            self.sent += 1
            if status != 200:
                self.not_ok[status] = self.not_ok.get(status, 0) + 1
            next_at += self.interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:
                next_at = time.perf_counter()  # fell behind by a second: do not burst to catch up


def registration_body(app: str, instance_id: str, n: int) -> bytes:
    ip = f"10.250.{n // 250 % 250}.{1 + n % 250}"
    return orjson.dumps(
        {
            "instance": {
                "instanceId": instance_id,
                "hostName": f"lag-{n}.bench.internal",
                "app": app,
                "ipAddr": ip,
                "status": "UP",
                "port": {"$": 9000, "@enabled": "true"},
                "securePort": {"$": 443, "@enabled": "false"},
                "vipAddress": app.lower(),
                "secureVipAddress": app.lower(),
                "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
                "metadata": {"bench": "replication-lag"},
                "dataCenterInfo": {
                    "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
                    "name": "MyOwn",
                },
            }
        }
    )


class Writer(threading.Thread):
    """``rate`` registrations and ``rate`` cancels per second at A, alternating; each becomes an Event."""

    def __init__(
        self, base: str, fleet: Fleet, rate: float, stop: threading.Event, sinks: list[queue.SimpleQueue]
    ):
        super().__init__(daemon=True, name="writer")
        self.conn = Conn(base)
        self.fleet, self.interval, self.stop_event, self.sinks = fleet, 1.0 / (2 * rate), stop, sinks
        self.events: list[Event] = []
        self.failed: dict[str, int] = {}
        self.latencies_ms: list[float] = []

    def run(self) -> None:
        next_at = time.perf_counter()
        turn = 0
        while not self.stop_event.is_set():
            event = self._register() if turn % 2 == 0 else self._cancel()
            turn += 1
            if event is not None:
                self.events.append(event)
                for sink in self.sinks:
                    sink.put(event)
            next_at += self.interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:
                next_at = time.perf_counter()

    def _timed(self, kind: str, method: str, path: str, body: bytes | None, ok: int) -> float | None:
        started = time.perf_counter()
        headers = {"Content-Type": "application/json"} if body else {}
        try:
            status, _, _ = self.conn.request(method, path, body=body, headers=headers)
        except (OSError, http.client.HTTPException):
            status = 0
        done = time.perf_counter()
        self.latencies_ms.append((done - started) * 1000)
        if status != ok:
            self.failed[f"{kind} {status}"] = self.failed.get(f"{kind} {status}", 0) + 1
            return None
        return done

    def _register(self) -> Event | None:
        n = self.fleet.registered
        self.fleet.registered += 1
        app = self.fleet.apps[n % len(self.fleet.apps)]
        instance_id = f"lag-{n}:{app.lower()}:9000"
        done = self._timed(
            "register", "POST", f"/eureka/apps/{app}", registration_body(app, instance_id, n), 204
        )
        if done is None:
            return None
        self.fleet.rotation.append(f"/eureka/apps/{app}/{quote(instance_id, safe='')}")
        return Event("register", app, instance_id, done)

    def _cancel(self) -> Event | None:
        if not self.fleet.to_cancel:
            return None
        app, instance_id = self.fleet.to_cancel.pop()
        path = f"/eureka/apps/{app}/{quote(instance_id, safe='')}"
        self.fleet.cancelled.add(path)  # its heartbeats stop first, as a client's would
        done = self._timed("cancel", "DELETE", path, None, 200)
        return None if done is None else Event("cancel", app, instance_id, done)


class Poller(threading.Thread):
    """Looks for pending events in one view of node B every ``interval_s``."""

    def __init__(self, view: str, base: str, interval_s: float, stop: threading.Event, sample_every: int = 1):
        super().__init__(daemon=True, name=f"poll-{view}")
        self.view, self.conn, self.interval_s, self.stop_event = view, Conn(base), interval_s, stop
        self.sample_every = sample_every
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.pending: list[Event] = []
        self.received = 0
        self.polls = 0
        self.changes: list[float] = []  # when a served payload changed
        self.cycle_s: list[float] = []
        self._digest = b""

    def run(self) -> None:
        while not self.stop_event.is_set():
            started = time.perf_counter()
            while True:
                try:
                    event = self.inbox.get_nowait()
                except queue.Empty:
                    break
                self.received += 1
                if self.received % self.sample_every == 0:
                    self.pending.append(event)
            try:
                self.poll()
            except (OSError, http.client.HTTPException, ValueError) as exc:
                log(f"{self.view} poll failed: {exc}")
            self.polls += 1
            took = time.perf_counter() - started
            self.cycle_s.append(took)
            self.stop_event.wait(max(0.0, self.interval_s - took))

    def poll(self) -> None:
        if self.view == "replication":
            self._poll_live()
        else:
            self._poll_served("/eureka/apps/" if self.view == "apps" else "/eureka/apps/delta")

    def _poll_live(self) -> None:
        still = []
        for event in self.pending:
            status, _, _ = self.conn.request(
                "GET", f"/eureka/apps/{event.app}/{quote(event.instance_id, safe='')}", headers=JSON_GZIP
            )
            now = time.perf_counter()
            if (event.kind == "register" and status == 200) or (event.kind == "cancel" and status == 404):
                event.seen[self.view] = now
            else:
                still.append(event)
        self.pending = still

    def _poll_served(self, path: str) -> None:
        status, headers, raw = self.conn.request("GET", path, headers=JSON_GZIP)
        now = time.perf_counter()
        if status != 200:
            raise ValueError(f"GET {path}: HTTP {status}")
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        if digest == self._digest:
            return
        self._digest = digest
        self.changes.append(now)
        body = gzip.decompress(raw) if headers.get("content-encoding") == "gzip" else raw
        applications = orjson.loads(body)["applications"]["application"]
        present, added, deleted = set(), set(), set()
        for application in applications:
            for instance in application["instance"]:
                instance_id = instance["instanceId"]
                present.add(instance_id)
                action = instance.get("actionType")
                if action == "DELETED":
                    deleted.add(instance_id)
                elif action in ("ADDED", "MODIFIED"):
                    added.add(instance_id)
        still = []
        for event in self.pending:
            if self.view == "apps":
                visible = (event.instance_id in present) == (event.kind == "register")
            else:
                visible = event.instance_id in (added if event.kind == "register" else deleted)
            if visible:
                event.seen[self.view] = now
            else:
                still.append(event)
        self.pending = still


class QueueSampler(threading.Thread):
    """A's replication numbers from /readyz every ``interval_s``."""

    def __init__(self, node: Node, interval_s: float, stop: threading.Event):
        super().__init__(daemon=True, name="queues")
        self.node, self.interval_s, self.stop_event = node, interval_s, stop
        self.samples: list[tuple[float, dict]] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.samples.append((time.perf_counter(), self.node.ready().get("replication") or {}))
            except (OSError, http.client.HTTPException, ValueError):
                pass
            self.stop_event.wait(self.interval_s)


def fleet_ids(node: Node) -> tuple[list[tuple[str, str]], list[str]]:
    conn = Conn(node.base, timeout=30)
    try:
        applications = conn.json("/eureka/apps/")["applications"]["application"]
    finally:
        conn.close()
    ids = [(app["name"], instance["instanceId"]) for app in applications for instance in app["instance"]]
    return ids, sorted(app["name"] for app in applications)


def lag_run(a: Node, b: Node, args: argparse.Namespace) -> None:
    ids, apps = fleet_ids(a)
    fleet = Fleet(ids, apps)
    log(
        f"lag run: {len(ids)} instances in {len(apps)} apps renewing at {args.renew_rate:.0f}/s, "
        f"{args.write_rate:.0f} registrations + {args.write_rate:.0f} cancels/s at A, {args.duration:.0f} s"
    )
    load_stop, poll_stop = threading.Event(), threading.Event()
    pollers = [
        Poller("replication", b.base, args.live_poll_ms / 1000, poll_stop, args.live_sample_every),
        Poller("apps", b.base, args.poll_ms / 1000, poll_stop),
        Poller("delta", b.base, args.poll_ms / 1000, poll_stop),
    ]
    renewers = [
        Renewer(a.base, fleet, args.renew_rate / args.renew_threads, k, args.renew_threads, load_stop)
        for k in range(args.renew_threads)
    ]
    writer = Writer(a.base, fleet, args.write_rate, load_stop, [poller.inbox for poller in pollers])
    sampler = QueueSampler(a, 1.0, poll_stop)
    cpu_before = time.process_time()
    for thread in [*pollers, sampler, *renewers, writer]:
        thread.start()
    began = time.perf_counter()
    time.sleep(args.duration)
    load_stop.set()
    loaded_s = time.perf_counter() - began
    for thread in [*renewers, writer]:
        thread.join(10)
    # Changes still in flight: give them a few cache refreshes to show, then stop looking.
    settle_deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < settle_deadline and any(p.pending or not p.inbox.empty() for p in pollers):
        time.sleep(0.2)
    poll_stop.set()
    for thread in [*pollers, sampler]:
        thread.join(10)
    client_cpu = (time.process_time() - cpu_before) / (time.perf_counter() - began)
    report_lag(args, fleet, renewers, writer, pollers, sampler, loaded_s, client_cpu)


def ms_row(label: str, values: list[float], asked: int, missing: int) -> str:
    if not values:
        return f"{label:28} {asked:>6} {0:>6} {missing:>7} {'-':>8} {'-':>8} {'-':>8}"
    return (
        f"{label:28} {asked:>6} {len(values):>6} {missing:>7} {statistics.median(values):8.0f} "
        f"{percentile(values, 99):8.0f} {max(values):8.0f}"
    )


def report_lag(args, fleet, renewers, writer, pollers, sampler, loaded_s: float, client_cpu: float) -> None:
    renews = sum(r.sent for r in renewers)
    renew_ms = [ms for r in renewers for ms in r.latencies_ms]
    not_ok: dict[int, int] = {}
    for r in renewers:
        for status, count in r.not_ok.items():
            not_ok[status] = not_ok.get(status, 0) + count
    registers = sum(1 for e in writer.events if e.kind == "register")
    cancels = len(writer.events) - registers
    print()
    print(f"load at A over {loaded_s:.0f} s (this script used {client_cpu:.2f} cores):")
    print(
        f"  renews        {renews / loaded_s:7.0f}/s (asked {args.renew_rate:.0f}/s)  p50 "
        f"{statistics.median(renew_ms):.1f} ms  p99 {percentile(renew_ms, 99):.1f} ms  not 200: {not_ok or 0}"
    )
    print(
        f"  registrations {registers / loaded_s:7.1f}/s, cancels {cancels / loaded_s:.1f}/s (asked "
        f"{args.write_rate:.0f}/s each)  p50 {statistics.median(writer.latencies_ms):.1f} ms  p99 "
        f"{percentile(writer.latencies_ms, 99):.1f} ms  failed: {writer.failed or 0}"
    )
    print()
    print("lag at B, ms from A's answer to the change showing at B:")
    print(f"{'view / change':28} {'asked':>6} {'seen':>6} {'missing':>7} {'p50':>8} {'p99':>8} {'max':>8}")
    for poller in pollers:
        for kind in ("register", "cancel"):
            events = [e for e in writer.events if e.kind == kind]
            if poller.view == "replication":
                events = events[args.live_sample_every - 1 :: args.live_sample_every]
            lags = [(e.seen[poller.view] - e.done) * 1000 for e in events if poller.view in e.seen]
            label = {
                "replication": f"replication (live GET) {kind}",
                "apps": f"served GET apps {kind}",
                "delta": f"served GET apps/delta {kind}",
            }[poller.view]
            print(ms_row(label, lags, len(events), len(events) - len(lags)))
    live = pollers[0]
    cycles = [c * 1000 for c in live.cycle_s] or [0.0]
    print(
        f"(live GETs every {args.live_poll_ms} ms, a cycle took p50 {statistics.median(cycles):.0f} ms, p99 "
        f"{percentile(cycles, 99):.0f} ms; served views polled every {args.poll_ms} ms, B's cache refresh "
        f"{args.cache_ms} ms)"
    )
    for poller in pollers[1:]:
        gaps = [(b - a) * 1000 for a, b in zip(poller.changes, poller.changes[1:], strict=False)]
        if gaps:
            print(
                f"  B's {poller.view} payload changed {len(poller.changes)} times, every "
                f"{statistics.median(gaps):.0f} ms (median)"
            )
    report_queues(sampler.samples)


def report_queues(samples: list[tuple[float, dict]]) -> None:
    if not samples:
        print("\nno /readyz samples of A's replication queues")
        return
    start = samples[0][0]
    urls = [peer["url"] for peer in samples[0][1].get("peers", [])]
    print("\nA's replication queues (/readyz, sampled every second; max over each 5 s):")
    header = f"{'t (s)':>6} {'buffered':>8}"
    for n, _ in enumerate(urls):
        header += f" {'queued':>7}{n + 1} {'lag ms':>7}{n + 1} {'sent':>8}{n + 1} {'dropped':>7}{n + 1}"
    print(header)
    for n, url in enumerate(urls):
        print(f"{'':6} peer {n + 1}: {url}")
    buckets: dict[int, list[dict]] = {}
    for t, sample in samples:
        buckets.setdefault(int((t - start) // 5) * 5, []).append(sample)
    for t, group in sorted(buckets.items()):
        line = f"{t:>6} {max(s.get('buffered', 0) for s in group):>8}"
        for url in urls:
            peers = [p for s in group for p in s.get("peers", []) if p["url"] == url]
            line += (
                f" {max(p['queued'] for p in peers):>8} {max(p['lag_ms'] for p in peers):>8}"
                f" {max(p['sent'] for p in peers):>9} {max(p['dropped'] for p in peers):>8}"
            )
        print(line)


# ------------------------------------------------------------------------------------ throughput


def throughput(a: Node, standalone: Node, args: argparse.Namespace) -> None:
    """Closed-loop renews at the load generator's full speed: S (no peers) and A, interleaved."""
    rows: dict[str, list[dict[str, str]]] = {"standalone (S)": [], "with 2 peers (A)": []}
    log(
        f"throughput: {args.throughput_rounds} rounds of S then A, {args.throughput_seconds:.0f} s each, "
        f"c={args.loadgen_c}"
    )
    for round_no in range(args.throughput_rounds):
        for label, node in (("standalone (S)", standalone), ("with 2 peers (A)", a)):
            pids = ",".join(str(pid) for pid in node.worker_pids())
            sampler_stop = threading.Event()
            sampler = QueueSampler(node, 0.5, sampler_stop)
            sampler.start()
            metrics = loadgen(
                [
                    "-url",
                    node.service_url,
                    "-mode",
                    "renew",
                    "-n",
                    str(args.n),
                    "-apps",
                    str(args.apps),
                    "-duration",
                    str(args.throughput_seconds),
                    "-warmup",
                    "2",
                    "-c",
                    str(args.loadgen_c),
                    *(["-server-pid", pids] if pids else []),
                    "-label",
                    "renew",
                ],
                timeout=args.throughput_seconds + 60,
            )
            sampler_stop.set()
            sampler.join(5)
            peers = [p for _, s in sampler.samples for p in s.get("peers", [])]
            metrics["max_queued"] = str(max((p["queued"] for p in peers), default=0))
            metrics["max_lag_ms"] = str(max((p["lag_ms"] for p in peers), default=0))
            metrics["dropped"] = str(max((p["dropped"] for p in peers), default=0))
            drained = 0.0
            if node is a:
                drained = wait_for(lambda: queues_empty(a), 120, "A's replication queues to drain")
            metrics["drain_s"] = f"{drained:.1f}"
            rows[label].append(metrics)
            log(
                f"  round {round_no + 1} {label}: {metrics.get('req/s')} renews/s,"
                f" p99 {metrics.get('p99_ms')} ms"
            )
    print()
    print(
        f"A's renew throughput, closed loop ({args.loadgen_c} connections,"
        f" {args.throughput_seconds:.0f} s a run):"
    )
    print(
        f"{'configuration':18} {'round':>5} {'renews/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} "
        f"{'node cpu':>8} {'max queued':>10} {'max lag ms':>10} {'dropped':>7} {'drain s':>7}"
    )
    for label, runs in rows.items():
        for n, m in enumerate(runs):
            print(
                f"{label:18} {n + 1:>5} {m.get('req/s', '-'):>9} {m.get('p50_ms', '-'):>7} "
                f"{m.get('p99_ms', '-'):>7} {m.get('errors', '-'):>6} {m.get('server_cpu_cores', '-'):>8} "
                f"{m['max_queued']:>10} {m['max_lag_ms']:>10} {m['dropped']:>7} {m['drain_s']:>7}"
            )
    medians = {
        label: statistics.median(float(m.get("req/s", 0)) for m in runs)
        for label, runs in rows.items()
        if runs
    }
    if len(medians) == 2 and medians["standalone (S)"]:
        ratio = medians["with 2 peers (A)"] / medians["standalone (S)"]
        print(
            f"median: standalone {medians['standalone (S)']:.0f}/s, with 2 peers "
            f"{medians['with 2 peers (A)']:.0f}/s ({ratio:.0%} of standalone)"
        )


# ------------------------------------------------------------------------------------------ main


def loopback(url: str) -> str:
    base = url.rstrip("/")
    if base.endswith("/eureka"):
        base = base[: -len("/eureka")]
    if urlsplit(base).hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"{url}: loopback addresses only")
    return base


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--start", action="store_true", help="start nodes A, B, C (and S) here, stop them after"
    )
    parser.add_argument(
        "--port", type=int, default=28771, help="first of four ports with --start (A, B, C, S)"
    )
    parser.add_argument(
        "--mode",
        choices=("embedded", "production"),
        default="embedded",
        help="with --start: embedded (default) or production (a redis-server here, one database,"
        " Celery worker and beat per node)",
    )
    parser.add_argument("--url-a", help="node A of a running cluster (gets the load)")
    parser.add_argument("--url-b", help="node B of that cluster (watched)")
    parser.add_argument(
        "--url-standalone", help="a running node without peers, for the throughput comparison"
    )
    parser.add_argument(
        "--duration", type=float, default=60, help="seconds of load in the lag run (default 60)"
    )
    parser.add_argument("-n", type=int, default=10_000, help="instances (default 10000)")
    parser.add_argument("--apps", type=int, default=100, help="applications (default 100)")
    parser.add_argument("--renew-rate", type=float, default=1000, help="renews/s at A (default 1000)")
    parser.add_argument("--renew-threads", type=int, default=4)
    parser.add_argument(
        "--write-rate", type=float, default=50, help="registrations/s and cancels/s (default 50)"
    )
    parser.add_argument(
        "--poll-ms", type=int, default=100, help="poll B's served apps and delta (default 100)"
    )
    parser.add_argument("--live-poll-ms", type=int, default=50, help="poll B's live records (default 50)")
    parser.add_argument("--live-sample-every", type=int, default=1, help="follow every k-th change live")
    parser.add_argument("--cache-ms", type=int, default=1000, help="EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS")
    parser.add_argument("--throughput-seconds", type=float, default=10)
    parser.add_argument("--throughput-rounds", type=int, default=2, help="S, A rounds (0: skip)")
    parser.add_argument("--loadgen-c", type=int, default=16, help="load generator connections (default 16)")
    args = parser.parse_args()
    if args.start == bool(args.url_a or args.url_b):
        parser.error("give either --start or --url-a and --url-b")
    if not args.start and not (args.url_a and args.url_b):
        parser.error("--url-a and --url-b go together")
    if args.duration <= 0 or args.duration > 600:
        parser.error("--duration must be in (0, 600]")
    if not 0 <= args.throughput_rounds <= 5 or not 1 <= args.throughput_seconds <= 120:
        parser.error("--throughput-rounds in 0..5 and --throughput-seconds in 1..120")

    build_loadgen()
    nodes: list[Node] = []
    workdir = Path(tempfile.mkdtemp(prefix="replication-lag-"))
    try:
        if args.start:
            ports = [args.port + k for k in range(5)]
            mesh = [f"http://127.0.0.1:{port}/eureka/" for port in ports[:3]]
            redis = None
            if args.mode == "production":
                redis = start_redis(workdir / "redis", ports[4])
                nodes.append(Node("redis", "", redis))

            def redis_url(db: int) -> str | None:
                return f"redis://127.0.0.1:{ports[4]}/{db}" if redis is not None else None

            for db, (name, port) in enumerate(zip("ABC", ports[:3], strict=True)):
                nodes.append(start_node(name, port, workdir / name, mesh, args.cache_ms, redis_url(db)))
            if args.throughput_rounds:
                nodes.append(start_node("S", ports[3], workdir / "S", [], args.cache_ms, redis_url(3)))
            nodes = [n for n in nodes if n.name != "redis"] + [n for n in nodes if n.name == "redis"]
            log(
                f"started A, B, C{' and S' if args.throughput_rounds else ''} on ports "
                f"{ports[0]}-{ports[3 if args.throughput_rounds else 2]} (files in {workdir})"
            )
            a, b = nodes[0], nodes[1]
            standalone = nodes[3] if args.throughput_rounds else None
        else:
            a, b = Node("A", loopback(args.url_a)), Node("B", loopback(args.url_b))
            standalone = Node("S", loopback(args.url_standalone)) if args.url_standalone else None

        targets = [a] + ([standalone] if standalone is not None else [])
        for node in targets:
            began = time.monotonic()
            loadgen(
                [
                    "-url",
                    node.service_url,
                    "-mode",
                    "register",
                    "-n",
                    str(args.n),
                    "-apps",
                    str(args.apps),
                    "-c",
                    str(args.loadgen_c),
                ],
                timeout=600,
            )
            log(f"registered {args.n} instances at {node.name} in {time.monotonic() - began:.1f} s")
        took = wait_for(lambda: instance_count(b) >= args.n, 120, "B to hold the fleet")
        took += wait_for(lambda: queues_empty(a), 120, "A's replication queues to drain")
        log(f"B holds the fleet and A's queues are empty {took:.1f} s later")

        if standalone is not None and args.throughput_rounds:
            throughput(a, standalone, args)
        else:
            print("\nthroughput comparison skipped (no standalone node: --url-standalone, or --start)")
        lag_run(a, b, args)
    finally:
        stop_nodes(nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
