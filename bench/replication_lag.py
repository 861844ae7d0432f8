"""Replication lag in a three-node cluster under a fleet's load, and what replication costs a node.

Node A gets the traffic of a fleet: 10,000 instances in 100 apps renewing at 1,000/s, plus 50
registrations and 50 cancels per second (new instances register, base ones leave). Every register and
cancel is then looked for at peer B, three ways, and timed from the moment A answered the client:

* replication  B's live ``GET /eureka/apps/{APP}/{id}`` (not cached): when the change reached B's map
               (every 5th change, polled every 50 ms: ``--live-sample-every``, ``--live-poll-ms``);
* apps         B's served ``GET /eureka/apps`` (gzip JSON, B's read-only response cache);
* delta        B's served ``GET /eureka/apps/delta`` (same cache): what polling clients see.

The served views change once per cache refresh (``EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS``, 500 ms by
default), so their lag is the replication lag plus up to one refresh interval. Watching them has a
cost at B: like any full-fetching reader, it makes B rebuild its 10,000-instance payloads every
refresh; ``--views replication`` watches B's map only. The watching runs in a process of its own
(parsing those payloads would otherwise hold up the load threads). A's replication queues
(``/readyz``: queued items and the oldest one's age, per peer) are sampled every second, and the
CPU the three nodes used is reported.

Before that, A's renew throughput is measured with and without peers: the Go load generator
(bench/loadgen) renews as fast as it can for a few seconds against a standalone node S with the same
10,000 instances, then against A (whose heartbeats go to B and C), interleaved S, A, S, A. With
``--start`` A and S run on a CPU of their own meanwhile (B, C and the load generator on the other),
so the difference is what replication costs A itself (``--no-pin`` to share the CPUs).

``--start`` runs the nodes in embedded mode (the default: in-process outboxes, sent by the node's own
threads). ``--start --mode production`` starts a redis-server here (on the fifth port) and runs every
node in production mode: its own Redis database, outboxes in Redis, a Celery worker and Celery beat of
its own that send them. A node's CPU figures and pinning then include its Celery worker and beat.

  .venv/bin/python bench/replication_lag.py --start                 # A, B, C and S on ports 28771-28774
  .venv/bin/python bench/replication_lag.py --start --duration 20 --throughput-rounds 1
  .venv/bin/python bench/replication_lag.py --start --throughput-rounds 0 --views replication
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
import multiprocessing
import os
import queue
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import orjson
import psutil
from nodes import LOADGEN, Node, Redis, Server, build_loadgen, port_in_use, stop_all

JSON_GZIP = {"Accept": "application/json", "Accept-Encoding": "gzip"}
_INSTANCE_TOKENS = re.compile(rb'"instanceId":"([^"]*)"|"actionType":"([A-Z]+)"')
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
class Member:
    """A member of the cluster: a node (or the redis-server) started here through bench/nodes.py, or,
    with ``server`` None, a node already running at ``base``."""

    name: str
    base: str  # http://127.0.0.1:PORT
    server: Server | None = None

    @property
    def service_url(self) -> str:
        return f"{self.base}/eureka/"

    def worker_pids(self) -> list[int]:
        """gunicorn's worker (where the map lives), for the load generator's CPU figure."""
        return self.server.worker_pids() if isinstance(self.server, Node) else []

    def helper_pids(self) -> list[int]:
        """Production mode: the Celery worker (with its pool processes) and beat; they send the outboxes."""
        return self.server.helper_pids() if isinstance(self.server, Node) else []

    def pin(self, cpus: set[int]) -> None:
        """Every thread of gunicorn's master and worker (and of the node's Celery processes) on ``cpus``
        (affinity is per thread on Linux)."""
        if self.server is None:
            return
        for pid in [*self.server.pids(), *self.helper_pids()]:
            for task in Path(f"/proc/{pid}/task").glob("*"):
                try:
                    os.sched_setaffinity(int(task.name), cpus)
                except OSError:
                    pass

    def cpu_seconds(self) -> float | None:
        """User + system CPU so far of the worker and, in production mode, of the node's Celery worker
        and beat (None when it is not ours to read)."""
        try:
            times = [psutil.Process(pid).cpu_times() for pid in [*self.worker_pids(), *self.helper_pids()]]
        except psutil.Error:
            return None
        return sum(t.user + t.system for t in times) if times else None

    def ready(self) -> dict:
        conn = Conn(self.base, timeout=5)
        try:
            return conn.json("/readyz")
        finally:
            conn.close()


def start_node(
    name: str,
    port: int,
    workdir: Path,
    peers: list[str],
    cache_ms: int,
    redis_url: str | None = None,
    read_only_cache: bool = True,
) -> Member:
    """A node on ``port``; with ``redis_url``, in production mode with its own Celery worker and beat."""
    env = {
        "EUREKA_PEER_URLS": ",".join(peers),
        "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": str(cache_ms),
        "EUREKA_USE_READ_ONLY_RESPONSE_CACHE": "true" if read_only_cache else "false",
        # The nodes start together: nothing to copy from each other, so no start-up sync retries.
        "EUREKA_REGISTRY_SYNC_RETRIES": "0",
        # Peers hold kept-alive connections to each other; do not wait 20 s for them at the end.
        "GUNICORN_CMD_ARGS": "--graceful-timeout 2",
    }
    node = Node(workdir, env, name=f"node {name}", port=port, redis_url=redis_url)
    member = Member(name, node.base, node)
    node.start(ready=lambda: bool(member.ready().get("open_for_traffic")))
    return member


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)
    return time.monotonic() - started


def queues_empty(node: Member) -> bool:
    replication = node.ready().get("replication") or {"peers": [], "buffered": 0}
    return not replication["buffered"] and all(peer["queued"] == 0 for peer in replication["peers"])


def instance_count(node: Member) -> int:
    return int(node.ready()["instances"])


# -------------------------------------------------------------------------------- load generator


def loadgen(args: list[str], timeout: float, cpus: set[int] | None = None) -> dict[str, str]:
    """Run the load generator (on ``cpus`` only, if given); returns its ``metric value`` lines."""
    result = subprocess.run(
        [str(LOADGEN), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
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
    done: float  # time.monotonic() when A answered (the same clock in every process on Linux)
    seen: dict[str, float] = field(default_factory=dict)
    followed: set[str] = field(default_factory=set)  # the views that looked for it (live GETs: a sample)


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


class Paced(threading.Thread):
    """A loop run ``rate`` times a second; one that falls a second behind does not burst to catch up."""

    def __init__(self, name: str, rate: float, stop: threading.Event):
        super().__init__(daemon=True, name=name)
        self.interval, self.stop_event = 1.0 / rate, stop

    def run(self) -> None:
        next_at = time.perf_counter()
        while not self.stop_event.is_set():
            if not self.step():
                continue
            next_at += self.interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:
                next_at = time.perf_counter()

    def step(self) -> bool:
        """One request; False when there was nothing to send (does not count against the pace)."""
        raise NotImplementedError


class Renewer(Paced):
    """Heartbeats over the fleet, round robin (one of several threads sharing the rate)."""

    def __init__(self, base: str, fleet: Fleet, rate: float, offset: int, stride: int, stop: threading.Event):
        super().__init__(f"renewer-{offset}", rate, stop)
        self.conn, self.fleet, self.index, self.stride = Conn(base), fleet, offset, stride
        self.sent = 0
        self.times: list[float] = []
        self.not_ok: dict[int, int] = {}
        self.latencies_ms: list[float] = []

    def step(self) -> bool:
        rotation = self.fleet.rotation
        path = rotation[self.index % len(rotation)]
        self.index += self.stride
        if path in self.fleet.cancelled:
            return False
        started = time.perf_counter()
        try:
            status, _, _ = self.conn.request("PUT", path)
        except (OSError, http.client.HTTPException):
            status = 0
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        self.times.append(time.monotonic())
        self.sent += 1
        if status != 200:
            self.not_ok[status] = self.not_ok.get(status, 0) + 1
        return True


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


class Writer(Paced):
    """Registrations and cancels at A, alternating (``rate`` of each a second); each is an Event, handed
    to the observer process."""

    def __init__(self, base: str, fleet: Fleet, rate: float, stop: threading.Event, sink):
        super().__init__("writer", 2 * rate, stop)
        self.conn, self.fleet, self.sink = Conn(base), fleet, sink
        self.turn = 0
        self.events: list[Event] = []
        self.failed: dict[str, int] = {}
        self.latencies_ms: list[float] = []

    def step(self) -> bool:
        self.turn += 1
        event = self._register() if self.turn % 2 else self._cancel()
        if event is not None:
            self.events.append(event)
            self.sink.put((event.kind, event.app, event.instance_id, event.done))
        return True

    def _timed(self, kind: str, method: str, path: str, body: bytes | None, ok: int) -> float | None:
        started = time.perf_counter()
        headers = {"Content-Type": "application/json"} if body else {}
        try:
            status, _, _ = self.conn.request(method, path, body=body, headers=headers)
        except (OSError, http.client.HTTPException):
            status = 0
        done = time.monotonic()
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        if status != ok:
            self.failed[f"{kind} {status}"] = self.failed.get(f"{kind} {status}", 0) + 1
            return None
        return done

    def _register(self) -> Event | None:
        n = self.fleet.registered
        self.fleet.registered += 1
        app = self.fleet.apps[n % len(self.fleet.apps)]
        instance_id = f"lag-{n}:{app.lower()}:9000"
        body = registration_body(app, instance_id, n)
        done = self._timed("register", "POST", f"/eureka/apps/{app}", body, 204)
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


class Watcher(threading.Thread):
    """Looks for pending events in one view of node B every ``interval_s`` (in the observer process)."""

    def __init__(self, view: str, base: str, interval_s: float, stop: threading.Event, sample_every: int = 1):
        super().__init__(daemon=True, name=f"watch-{view}")
        self.view, self.base, self.interval_s, self.stop_event = view, base, interval_s, stop
        self.conn = Conn(base)
        self.sample_every = sample_every
        self.inbox: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self.received = 0
        self.pending: list[Event] = []
        self.changes: list[float] = []  # when a served payload changed
        self.cycle_s: list[float] = []
        self.errors = 0
        self.last_size: tuple[int, int] | None = None  # (as sent, uncompressed) of a served payload
        self._digest = b""
        self._local = threading.local()

    def add(self, event: Event) -> None:
        self.received += 1
        if self.received % self.sample_every == 0:
            event.followed.add(self.view)
            self.inbox.put(event)

    @property
    def idle(self) -> bool:
        return not self.pending and self.inbox.empty()

    def run(self) -> None:
        with ThreadPoolExecutor(4) as pool:
            while not self.stop_event.is_set():
                started = time.perf_counter()
                while not self.inbox.empty():
                    self.pending.append(self.inbox.get())
                try:
                    if self.view == "replication":
                        self._poll_live(pool)
                    else:
                        self._poll_served("/eureka/apps/" if self.view == "apps" else "/eureka/apps/delta")
                except (OSError, http.client.HTTPException, ValueError):
                    self.errors += 1
                took = time.perf_counter() - started
                self.cycle_s.append(took)
                self.stop_event.wait(max(0.0, self.interval_s - took))

    def _live_get(self, event: Event) -> tuple[Event, int, float]:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = Conn(self.base)
        path = f"/eureka/apps/{event.app}/{quote(event.instance_id, safe='')}"
        status, _, _ = conn.request("GET", path, headers=JSON_GZIP)
        return event, status, time.monotonic()

    def _poll_live(self, pool: ThreadPoolExecutor) -> None:
        still = []
        for event, status, now in pool.map(self._live_get, self.pending):
            if (event.kind == "register" and status == 200) or (event.kind == "cancel" and status == 404):
                event.seen[self.view] = now
            else:
                still.append(event)
        self.pending = still

    def _poll_served(self, path: str) -> None:
        status, headers, raw = self.conn.request("GET", path, headers=JSON_GZIP)
        now = time.monotonic()
        if status != 200:
            raise ValueError(f"GET {path}: HTTP {status}")
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        if digest == self._digest:
            return
        self._digest = digest
        self.changes.append(now)
        body = gzip.decompress(raw) if headers.get("content-encoding") == "gzip" else raw
        self.last_size = (len(raw), len(body))
        # Tokens instead of a parse: far cheaper than orjson plus walking the dicts (bench/README.md,
        # "Replication"), and the observer's CPU is taken from the same two cores the nodes run on.
        # Each actionType follows its own instance's instanceId (the serializer's key order).
        present, added, deleted = set(), set(), set()
        instance_id = None
        for found_id, action in _INSTANCE_TOKENS.findall(body):
            if found_id:
                instance_id = found_id.decode()
                present.add(instance_id)
            elif action == b"DELETED":
                deleted.add(instance_id)
            elif action in (b"ADDED", b"MODIFIED"):
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


def observe(
    b_base: str, views: list[str], poll_ms: int, live_poll_ms: int, sample_every: int, inbox, results
) -> None:
    """The observer process: watches B's three views for the events the writer sends through ``inbox``
    (None ends the run: what is still pending gets ``SETTLE_S`` more), then puts what it saw on
    ``results``. A process of its own, so that parsing B's 10,000-instance payloads never holds up the
    load generator's threads (one GIL)."""
    stop = threading.Event()
    watchers = [
        Watcher(
            view,
            b_base,
            (live_poll_ms if view == "replication" else poll_ms) / 1000,
            stop,
            sample_every if view == "replication" else 1,
        )
        for view in views
    ]
    for watcher in watchers:
        watcher.start()
    events: list[Event] = []
    ended_at = None
    while True:
        try:
            item = inbox.get(timeout=0.2)
        except queue.Empty:
            item = ()
        if item is None:
            ended_at = time.monotonic()
        elif item:
            event = Event(*item)
            events.append(event)
            for watcher in watchers:
                watcher.add(event)
        if ended_at is not None and (
            all(watcher.idle for watcher in watchers) or time.monotonic() - ended_at > SETTLE_S
        ):
            break
    stop.set()
    for watcher in watchers:
        watcher.join(10)
    results.put(
        {
            "seen": [(e.kind, e.instance_id, e.seen, e.followed) for e in events],
            "cycles": {w.view: w.cycle_s for w in watchers},
            "changes": {w.view: w.changes for w in watchers},
            "errors": {w.view: w.errors for w in watchers},
            "sizes": {w.view: w.last_size for w in watchers},
            "cpu_s": time.process_time(),
        }
    )


class QueueSampler(threading.Thread):
    """A node's replication numbers from /readyz every ``interval_s``."""

    def __init__(self, node: Member, interval_s: float, stop: threading.Event):
        super().__init__(daemon=True, name="queues")
        self.node, self.interval_s, self.stop_event = node, interval_s, stop
        self.samples: list[tuple[float, dict]] = []

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.samples.append((time.monotonic(), self.node.ready().get("replication") or {}))
            except (OSError, http.client.HTTPException, ValueError):
                pass
            self.stop_event.wait(self.interval_s)


def fleet_ids(node: Member, n: int) -> tuple[list[tuple[str, str]], list[str]]:
    """The instances ``node`` serves, once its served registry (read-only cache, ~1 s behind) has all
    ``n``. Asked of B, which holds A's fleet and is read by the watcher anyway: a ``GET apps`` at A
    would make A rebuild and gzip its whole registry at every cache refresh for the rest of the run,
    a read load on A the benchmark does not claim to apply."""
    conn = Conn(node.base, timeout=30)
    deadline = time.monotonic() + 30
    try:
        while True:
            applications = conn.json("/eureka/apps/")["applications"]["application"]
            if sum(len(app["instance"]) for app in applications) >= n or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        conn.close()
    ids = [(app["name"], instance["instanceId"]) for app in applications for instance in app["instance"]]
    return ids, sorted(app["name"] for app in applications)


def lag_run(a: Member, b: Member, c: Member | None, args: argparse.Namespace) -> None:
    ids, apps = fleet_ids(b, args.n)
    fleet = Fleet(ids, apps)
    log(
        f"lag run: {len(ids)} instances in {len(apps)} apps renewing at {args.renew_rate:.0f}/s, "
        f"{args.write_rate:.0f} registrations + {args.write_rate:.0f} cancels/s at A, {args.duration:.0f} s"
    )
    spawn = multiprocessing.get_context("spawn")
    inbox, results = spawn.Queue(), spawn.Queue()
    observer = spawn.Process(
        target=observe,
        args=(b.base, args.views, args.poll_ms, args.live_poll_ms, args.live_sample_every, inbox, results),
        daemon=True,
    )
    observer.start()
    load_stop, sample_stop = threading.Event(), threading.Event()
    renewers = [
        Renewer(a.base, fleet, args.renew_rate / args.renew_threads, k, args.renew_threads, load_stop)
        for k in range(args.renew_threads)
    ]
    writer = Writer(a.base, fleet, args.write_rate, load_stop, inbox)
    sampler = QueueSampler(a, 1.0, sample_stop)
    time.sleep(1.0)  # the observer process imports and starts its watchers
    watched = [node for node in (a, b, c) if node is not None]
    nodes_cpu_before = {node.name: node.cpu_seconds() for node in watched}
    cpu_before = time.process_time()
    began = time.perf_counter()
    for thread in [sampler, *renewers, writer]:
        thread.start()
    time.sleep(args.duration)
    load_stop.set()
    loaded_s = time.perf_counter() - began
    for thread in [*renewers, writer]:
        thread.join(10)
    client_cpu = (time.process_time() - cpu_before) / loaded_s
    nodes_cpu = {}
    for node in watched:
        before, after = nodes_cpu_before[node.name], node.cpu_seconds()
        if before is not None and after is not None:
            nodes_cpu[node.name] = (after - before) / loaded_s
    inbox.put(None)
    try:
        seen = results.get(timeout=SETTLE_S + 30)
    except queue.Empty:
        raise SystemExit("the observer process did not report") from None
    finally:
        sample_stop.set()
        sampler.join(5)
        observer.join(10)
    by_id = {(kind, instance_id): (views, followed) for kind, instance_id, views, followed in seen["seen"]}
    for event in writer.events:
        event.seen, event.followed = by_id.get((event.kind, event.instance_id), ({}, set()))
    observer_cpu = seen["cpu_s"] / (loaded_s + SETTLE_S)
    report_lag(args, renewers, writer, seen, sampler, loaded_s, client_cpu, observer_cpu, nodes_cpu)


def ms_row(label: str, values: list[float], asked: int) -> str:
    missing = asked - len(values)
    if not values:
        return f"{label:36} {asked:>6} {0:>6} {missing:>7} {'-':>7} {'-':>7} {'-':>7}"
    return (
        f"{label:36} {asked:>6} {len(values):>6} {missing:>7} {statistics.median(values):7.0f} "
        f"{percentile(values, 99):7.0f} {max(values):7.0f}"
    )


LABELS = {
    "replication": "replication (live GET {id})",
    "apps": "served GET apps",
    "delta": "served GET apps/delta",
}


def report_lag(args, renewers, writer, seen, sampler, loaded_s, client_cpu, observer_cpu, nodes_cpu) -> None:
    renews = sum(r.sent for r in renewers)
    renew_ms = [ms for r in renewers for ms in r.latencies_ms] or [0.0]
    not_ok: dict[int, int] = {}
    for r in renewers:
        for status, count in r.not_ok.items():
            not_ok[status] = not_ok.get(status, 0) + count
    registers = [e for e in writer.events if e.kind == "register"]
    cancels = [e for e in writer.events if e.kind == "cancel"]
    write_ms = writer.latencies_ms or [0.0]
    print()
    print(
        f"load at A over {loaded_s:.0f} s (load threads {client_cpu:.2f} cores, observer process "
        f"{observer_cpu:.2f} cores; nodes "
        + (", ".join(f"{name} {cores:.2f}" for name, cores in nodes_cpu.items()) or "not measured")
        + f" cores of {len(os.sched_getaffinity(0))}):"
    )
    print(
        f"  renews        {renews / loaded_s:7.0f}/s (asked {args.renew_rate:.0f}/s)  p50 "
        f"{statistics.median(renew_ms):.1f} ms  p99 {percentile(renew_ms, 99):.1f} ms  not 200: {not_ok or 0}"
    )
    print(
        f"  registrations {len(registers) / loaded_s:7.1f}/s, cancels {len(cancels) / loaded_s:.1f}/s (asked "
        f"{args.write_rate:.0f}/s each)  p50 {statistics.median(write_ms):.1f} ms  p99 "
        f"{percentile(write_ms, 99):.1f} ms  failed: {writer.failed or 0}"
    )
    print()
    print("lag at B, ms from A's answer to the change showing at B:")
    print(f"{'view, change':36} {'asked':>6} {'seen':>6} {'missing':>7} {'p50':>7} {'p99':>7} {'max':>7}")
    for view in args.views:
        for kind, events in (("register", registers), ("cancel", cancels)):
            events = [e for e in events if view in e.followed]
            lags = [(e.seen[view] - e.done) * 1000 for e in events if view in e.seen]
            print(ms_row(f"{LABELS[view]} {kind}", lags, len(events)))

    def took(view: str) -> str:
        cycles = [c * 1000 for c in seen["cycles"].get(view, [])] or [0.0]
        return f"p50 {statistics.median(cycles):.0f} ms, p99 {percentile(cycles, 99):.0f} ms"

    # A poll that takes longer than its interval delays the next: a lag includes up to one poll.
    served_polls = "; ".join(f"{view} {took(view)}" for view in ("apps", "delta") if view in seen["cycles"])
    print(
        f"(live GETs of what is pending every {args.live_poll_ms} ms, 4 at a time: a round took "
        f"{took('replication')}; served views polled every {args.poll_ms} ms, a poll took "
        f"{served_polls or '-'}; "
        + (
            f"B's cache refresh every {args.cache_ms} ms"
            if args.read_only_cache
            else "no read-only cache at B: its views are rebuilt after each change"
        )
        + f"; poll errors {seen['errors']})"
    )
    for view in ("apps", "delta"):
        changes = seen["changes"].get(view, [])
        if seen["sizes"].get(view):
            sent, raw = seen["sizes"][view]
            print(f"  B's last {view} payload: {raw / 1e6:.1f} MB of JSON, {sent / 1e6:.2f} MB gzipped")
        gaps = [(later - earlier) * 1000 for earlier, later in zip(changes, changes[1:], strict=False)]
        if gaps:
            print(
                f"  B's {view} payload changed {len(changes)} times, "
                f"every {statistics.median(gaps):.0f} ms (median), p99 {percentile(gaps, 99):.0f} ms, "
                f"longest {max(gaps):.0f} ms"
            )
    report_queues(sampler.samples, sorted(t for r in renewers for t in r.times))


def report_queues(samples: list[tuple[float, dict]], renewed_at: list[float]) -> None:
    if not samples:
        print("\nno /readyz samples of A's replication queues")
        return
    start = samples[0][0]
    urls = [peer["url"] for peer in samples[0][1].get("peers", [])]
    renews: dict[int, int] = {}
    for t in renewed_at:
        bucket = int((t - start) // 5) * 5
        renews[bucket] = renews.get(bucket, 0) + 1
    print("\nA's replication queues (/readyz, sampled every second; max over each 5 s) and renews sent:")
    header = f"{'t (s)':>6} {'renews/s':>8} {'buffered':>8}"
    for n, _ in enumerate(urls):
        header += f" {'queued':>7}{n + 1} {'lag ms':>7}{n + 1} {'sent':>8}{n + 1} {'dropped':>7}{n + 1}"
    print(header)
    for n, url in enumerate(urls):
        print(f"{'':6} peer {n + 1}: {url}")
    buckets: dict[int, list[dict]] = {}
    for t, sample in samples:
        buckets.setdefault(int((t - start) // 5) * 5, []).append(sample)
    for t, group in sorted(buckets.items()):
        line = f"{t:>6} {renews.get(t, 0) / 5:>8.0f} {max(s.get('buffered', 0) for s in group):>8}"
        for url in urls:
            peers = [p for s in group for p in s.get("peers", []) if p["url"] == url]
            line += (
                f" {max(p['queued'] for p in peers):>8} {max(p['lag_ms'] for p in peers):>8}"
                f" {max(p['sent'] for p in peers):>9} {max(p['dropped'] for p in peers):>8}"
            )
        print(line)


# ------------------------------------------------------------------------------------ throughput


def throughput(a: Member, standalone: Member, others: list[Member], args: argparse.Namespace) -> None:
    """Closed-loop renews at the load generator's full speed: S (no peers) and A, interleaved.

    Pinned (the default with ``--start`` on a machine with two CPUs or more; ``--no-pin`` to share), A and
    S run on the last CPU and ``others`` (B, C, and the redis-server in production mode), the load
    generator and this script on the rest, so that A and S get the same core whatever B and C do with
    theirs: the difference is what replication costs A itself. A node's Celery worker and beat
    (production mode) are pinned with it."""
    rows: dict[str, list[dict[str, str]]] = {"standalone (S)": [], "with 2 peers (A)": []}
    everything = os.sched_getaffinity(0)
    loadgen_cpus = None
    if args.pin:
        node_cpu = {max(everything)}
        loadgen_cpus = everything - node_cpu
        for node in (a, standalone):
            node.pin(node_cpu)
        for node in others:
            node.pin(loadgen_cpus)
        os.sched_setaffinity(0, loadgen_cpus)
        log(
            f"pinned: A and S on CPU {sorted(node_cpu)}; {', '.join(node.name for node in others)}, "
            f"the load generator and this script on {sorted(loadgen_cpus)}"
        )
    try:
        _throughput_rounds(a, standalone, args, rows, loadgen_cpus)
    finally:
        if args.pin:
            for node in (a, standalone, *others):
                node.pin(everything)
            os.sched_setaffinity(0, everything)
    report_throughput(args, rows)


def _throughput_rounds(a, standalone, args, rows, loadgen_cpus) -> None:
    log(
        f"throughput: {args.throughput_rounds} rounds of S then A, {args.throughput_seconds:.0f} s each, "
        f"c={args.loadgen_c}"
    )
    for round_no in range(args.throughput_rounds):
        for label, node in (("standalone (S)", standalone), ("with 2 peers (A)", a)):
            pids = ",".join(str(pid) for pid in [*node.worker_pids(), *node.helper_pids()])
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
                cpus=loadgen_cpus,
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


def report_throughput(args: argparse.Namespace, rows: dict[str, list[dict[str, str]]]) -> None:
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
        "--port",
        type=int,
        default=28771,
        help="first of five ports with --start (A, B, C, S, and redis-server in production mode)",
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
    parser.add_argument("--renew-threads", type=int, default=8)
    parser.add_argument(
        "--write-rate", type=float, default=50, help="registrations/s and cancels/s (default 50)"
    )
    parser.add_argument(
        "--views",
        default=",".join(VIEWS),
        help="what to watch at B, of replication,apps,delta (default all; the served views make B rebuild "
        "its 10,000-instance payloads every cache refresh, as any full-fetching reader does)",
    )
    parser.add_argument(
        "--poll-ms", type=int, default=100, help="poll B's served apps and delta (default 100)"
    )
    parser.add_argument("--live-poll-ms", type=int, default=50, help="poll B's live records (default 50)")
    parser.add_argument(
        "--live-sample-every",
        type=int,
        default=5,
        help="follow every k-th change in B's map (default 5: each is polled every --live-poll-ms, and "
        "many polls would load B themselves)",
    )
    parser.add_argument("--cache-ms", type=int, default=500, help="EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS")
    parser.add_argument(
        "--no-read-only-cache",
        dest="read_only_cache",
        action="store_false",
        help="EUREKA_USE_READ_ONLY_RESPONSE_CACHE=false on the nodes: served views come from the "
        "read-write cache, emptied by each change, instead of the copy refreshed every --cache-ms",
    )
    parser.add_argument("--throughput-seconds", type=float, default=10)
    parser.add_argument("--throughput-rounds", type=int, default=2, help="S, A rounds (0: skip)")
    parser.add_argument("--loadgen-c", type=int, default=16, help="load generator connections (default 16)")
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="with --start, do not pin A and S to a CPU of their own for the throughput runs",
    )
    args = parser.parse_args()
    args.pin = args.pin and args.start and len(os.sched_getaffinity(0)) >= 2
    args.views = [view.strip() for view in args.views.split(",") if view.strip()]
    if not args.views or set(args.views) - set(VIEWS):
        parser.error(f"--views: a comma-separated subset of {','.join(VIEWS)}")
    if args.start == bool(args.url_a or args.url_b):
        parser.error("give either --start or --url-a and --url-b")
    if not args.start and not (args.url_a and args.url_b):
        parser.error("--url-a and --url-b go together")
    if args.duration <= 0 or args.duration > 600:
        parser.error("--duration must be in (0, 600]")
    if not 0 <= args.throughput_rounds <= 5 or not 1 <= args.throughput_seconds <= 120:
        parser.error("--throughput-rounds in 0..5 and --throughput-seconds in 1..120")

    build_loadgen()
    nodes: list[Member] = []
    workdir = Path(tempfile.mkdtemp(prefix="replication-lag-"))
    try:
        if args.start:
            ports = [args.port + k for k in range(5)]  # A, B, C, S, redis-server
            used = ports[:3] + ports[3:4] * bool(args.throughput_rounds)
            used += ports[4:] * (args.mode == "production")
            for port in used:
                if port_in_use(port):
                    raise SystemExit(f"port {port} is taken (another run?): choose others with --port")
            mesh = [f"http://127.0.0.1:{port}/eureka/" for port in ports[:3]]
            redis = None
            if args.mode == "production":
                redis = Redis(workdir / "redis", port=ports[4]).start()
                nodes.append(Member("redis", "", redis))

            def redis_url(db: int) -> str | None:
                return redis.redis_url(db) if redis is not None else None

            for db, (name, port) in enumerate(zip("ABC", ports[:3], strict=True)):
                nodes.append(
                    start_node(
                        name, port, workdir / name, mesh, args.cache_ms, redis_url(db), args.read_only_cache
                    )
                )
            if args.throughput_rounds:
                nodes.append(
                    start_node(
                        "S", ports[3], workdir / "S", [], args.cache_ms, redis_url(3), args.read_only_cache
                    )
                )
            nodes = [n for n in nodes if n.name != "redis"] + [n for n in nodes if n.name == "redis"]
            log(
                f"started A, B, C{' and S' if args.throughput_rounds else ''} on ports "
                f"{ports[0]}-{ports[3 if args.throughput_rounds else 2]} (files in {workdir})"
            )
            a, b = nodes[0], nodes[1]
            standalone = nodes[3] if args.throughput_rounds else None
        else:
            a, b = Member("A", loopback(args.url_a)), Member("B", loopback(args.url_b))
            standalone = Member("S", loopback(args.url_standalone)) if args.url_standalone else None

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
            throughput(a, standalone, [node for node in nodes if node.name in ("B", "C", "redis")], args)
            if standalone.server is not None:
                standalone.server.stop()  # idle from here on: leave its CPU to the cluster
        else:
            print("\nthroughput comparison skipped (no standalone node: --url-standalone, or --start)")
        lag_run(a, b, next((node for node in nodes if node.name == "C"), None), args)
    finally:
        stop_all(node.server for node in nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
