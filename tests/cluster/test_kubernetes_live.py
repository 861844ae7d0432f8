"""Kubernetes on loopback (issue 35, point 3): a StatefulSet of nodes that find their peers through DNS
scales 3 -> 5 -> 3, rolls and loses a node for good while 500 instances heartbeat through its client
Service, and no instance is lost.

No Kubernetes runs here, so the test plays its parts with real processes:

- the headless Service's DNS: tests/cluster/dns_server.py on 127.0.0.1 (UDP and TCP;
  ``headless_dns``) answering A records for ``eureka-headless.ns.svc.cluster.local`` (and SRV for
  ``_eureka._tcp.`` that name), TTL 1 s. The test changes the answer as the StatefulSet
  controller's pods come and go: a pod's record appears when the pod is created, before it is ready
  (``publishNotReadyAddresses``), and goes when the pod is deleted;
- the pods: gunicorn nodes in embedded mode on 127.0.0.2 ... 127.0.0.6, all on one port, each given
  only ``EUREKA_PEER_DNS=<name>:<port>`` (no static peer URL) and ``EUREKA_DNS_NAMESERVERS`` naming the
  test's server, re-resolving every ``RESOLVE_S`` seconds. Each pod keeps its files (SQLite database,
  warm-restart snapshot, logs) in a directory of its own across restarts, as with a PersistentVolume;
- the client Service and its endpoints controller: a prober reads each pod's ``/readyz`` every second
  (timeout 1 s; unready after 3 failures in a row, Kubernetes' defaults) and keeps the ready ones; a
  pod is taken out the moment its SIGTERM is sent, as the endpoints controller does with a terminating
  pod (requests already on their way to it may still fail);
- the clients: 500 instances (10 apps x 50) on a ``LEASE_S`` lease renewed every ``RENEW_S`` seconds,
  from one asyncio loop with kept-alive connections. They and the endpoints run in a process of their
  own (``Fleet``, tests/cluster/kube_fleet.py), so the test's own threads never delay them. Like
  kube-proxy (one endpoint per connection) and a Eureka client (which keeps the server it talks to
  until a request to it fails, and reconnects now and then), each instance keeps the ready pod it was
  given for a session of ``SESSION_S`` seconds and moves to another ready pod at once when a request
  fails (transport error or 5xx, as a client with several service URLs does) or its pod leaves the
  Service. A renew answered 404 registers again. Every answer is recorded: time, instance, pod,
  status.

Observers: ``Sampler`` reads each running pod's served ``GET /eureka/apps`` (JSON) every second. A pod
is complete from its first sample that lists every instance, and must list every one at every later
sample until it is stopped (a sample that lacks one is a violation). ``PeerWatch`` reads each pod's
``/readyz`` ``replication.peers`` every quarter second and remembers when each peer URL appeared and
went. Evictions are read from each pod's server log (``LOG_FORMAT=json``: the ``eviction`` events).

Each test runs under a hard deadline (``TEST_LIMIT_S``): the waits are bounded, and a watchdog kills
every process the test started if the deadline passes anyway. Every process is stopped at the end,
whatever happened. The measured numbers (convergence per step, 5xx counts, durations) are written in a
``K8S`` log line per test (``pytest -o log_cli=true`` shows them as they come).

Without peers from DNS none of this holds: the pods never list each other as peers (the peer checks
fail at once), and a pod learns only the instances whose clients happen to talk to it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype
import httpx
import psutil
import pytest

from tests.cluster.dns_server import DnsServer
from tests.factories import instance_body
from tests.interop.conftest import LiveServer, require_toolchain, running_server
from tests.ports import free_port

pytestmark = pytest.mark.cluster

logger = logging.getLogger(__name__)

HEADLESS = "eureka-headless.ns.svc.cluster.local"
SRV_NAME = f"_eureka._tcp.{HEADLESS}"
# The StatefulSet's pods eureka-0 ... eureka-4, one loopback address each (Linux routes all of 127/8 to lo).
HOSTS = tuple(f"127.0.0.{k}" for k in range(2, 7))

# Re-resolve period of the pods' peer DNS. A change of the answer shows in every pod's peer list within
# one period, plus this much for a busy two-core machine (the resolve itself, the quarter-second poll of
# /readyz, scheduling with five nodes and the fleet on two cores).
RESOLVE_S = 3
PEER_SLACK_S = 2.0

# The fleet: 10 apps x 50 instances, leases of 15 s renewed every 3 s (Eureka's 90 s / 30 s, scaled
# down), each instance keeping its pod 20-40 s before it reconnects.
APPS = 10
PER_APP = 50
LEASE_S = 15
RENEW_S = 3.0
SESSION_S = (20.0, 40.0)
ATTEMPTS = 3
CONNECTIONS_PER_POD = 64
REQUEST_TIMEOUT_S = 5.0

# Every pod lists every live instance within this of each step (issue 35).
COMPLETE_LIMIT_S = 30.0
# Samples of each pod's served registry, and how long a step is watched once its pods are complete.
SAMPLE_EVERY_S = 1.0
WATCH_S = 8.0
# Readiness probe of the client Service (Kubernetes' periodSeconds, timeoutSeconds and failureThreshold,
# at their defaults), and the peer-list poll.
PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 1.0
PROBE_FAILURES = 3
PEER_POLL_S = 0.25
# A pod that stays gone: nothing may reach its address in this window once every peer list dropped it.
QUIET_S = 5.0

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
# The whole of one test, start to cleanup; the watchdog kills what is left this long after the limit.
TEST_LIMIT_S = 170.0
WATCHDOG_GRACE_S = 10.0

JSON = {"Accept": "application/json"}
CANARY_APP = "KUBE-CANARY"
CANARY_ID = "canary-never-renewed"


# ------------------------------------------------------------------------------------------- time


class Deadline:
    """The hard limit of one test. ``check`` fails the test past it; the watchdog (``Kube``) kills the
    test's processes a little later, so that no blocking wait outlives it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = time.monotonic()
        self.at = self.started + seconds

    def left(self) -> float:
        return self.at - time.monotonic()

    def check(self, what: str) -> None:
        if time.monotonic() >= self.at:
            pytest.fail(f"test limit of {self.seconds:.0f} s passed while waiting for {what}", pytrace=False)


def wait_for(
    predicate: Callable[[], object],
    timeout: float,
    what: str | Callable[[], str],
    deadline: Deadline,
    interval: float = 0.1,
):
    """Poll ``predicate`` until it is truthy (returned); fail at ``timeout`` or at the test's deadline."""
    limit = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        text = what() if callable(what) else what
        if time.monotonic() >= limit:
            pytest.fail(f"timed out after {timeout:.1f} s: {text}", pytrace=False)
        deadline.check(text)
        time.sleep(interval)


# -------------------------------------------------------------------------------------------- DNS


@pytest.fixture
def headless_dns() -> Iterator[DnsServer]:
    """The test's DNS server (tests/cluster/dns_server.py), checked over both transports first."""
    server = DnsServer()
    server.start()
    try:
        probe = "probe.ns.svc.cluster.local"
        server.set(probe, "A", ["127.0.0.9"])
        query = dns.message.make_query(probe, dns.rdatatype.A)
        for ask in (dns.query.udp, dns.query.tcp):
            answer = ask(query, "127.0.0.1", port=server.port, timeout=2)
            assert [item.address for rrset in answer.answer for item in rrset] == ["127.0.0.9"], ask
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------- pods


def common_port(hosts: Iterable[str]) -> int:
    """A TCP port free on every one of ``hosts`` (the StatefulSet's pods all listen on one port)."""
    hosts = list(hosts)
    for _ in range(50):
        port = free_port(hosts[0])
        try:
            for host in hosts[1:]:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no port free on all of {hosts}")


def loopback_aliases_work() -> bool:
    try:
        for host in HOSTS:
            free_port(host)
    except OSError:
        return False
    return True


def pod_env(dns_port: int, peer_dns: str) -> dict[str, str]:
    return {
        "EUREKA_EMBEDDED": "true",
        "EUREKA_PEER_DNS": peer_dns,
        "EUREKA_DNS_NAMESERVERS": f"127.0.0.1:{dns_port}",
        "EUREKA_PEER_DNS_INTERVAL_SECONDS": str(RESOLVE_S),
        # Jobs every second, as in tests/cluster/test_cluster_live.py: eviction, and the read-only cache
        # the samples read.
        "EUREKA_EVICTION_INTERVAL_MS": "1000",
        "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": "1000",
        # Start-up sync: a pod that finds nothing tries again twice, 300 ms apart (Eureka: 5 x 30 s).
        "EUREKA_REGISTRY_SYNC_RETRIES": "2",
        "EUREKA_REGISTRY_SYNC_RETRY_WAIT_MS": "300",
        # An instance that misses its renewals must be evicted, so that a lost one shows: self-preservation
        # would (rightly) hold expired leases when many expire at once.
        "EUREKA_ENABLE_SELF_PRESERVATION": "false",
        "EUREKA_EXPECTED_CLIENT_RENEWAL_INTERVAL_SECONDS": str(int(RENEW_S)),
        # JSON lines at INFO: the eviction, peer_added and peer_removed events, read by the tests.
        "LOG_FORMAT": "json",
        "LOG_LEVEL": "INFO",
    }


@dataclass
class Pod:
    ordinal: int
    host: str
    port: int
    workdir: Path
    env: dict[str, str]
    context: contextlib.AbstractContextManager | None = None
    server: LiveServer | None = None
    # Bumped at each launch: samples and completeness belong to one lifetime of the pod.
    lifetime: int = 0
    launched_at: float | None = None
    ready_at: float | None = None
    # Out of the client Service from its SIGTERM until it is launched again.
    terminating: bool = False

    @property
    def name(self) -> str:
        return f"eureka-{self.ordinal}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The peer URL other pods make of this pod's address: ``http://<ip>:<port>/eureka/``."""
        return f"{self.base_url}/eureka/"

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.process.poll() is None

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def events(self, name: str) -> list[dict]:
        """The JSON log records of this pod (every lifetime) whose ``event`` is ``name``."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        found = []
        for line in text.splitlines():
            if f'"{name}"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("event") == name:
                found.append(record)
        return found


def mentions(record: dict, pod: Pod) -> bool:
    return f"{pod.host}:{pod.port}" in json.dumps(record)


def listed_ids(client: httpx.Client, pod: Pod) -> set[str] | None:
    """Instance ids in the pod's served ``GET /eureka/apps`` (read-only cache), None if it did not answer."""
    try:
        response = client.get(f"{pod.base_url}/eureka/apps", headers=JSON, timeout=5.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    applications = response.json()["applications"].get("application") or []
    if isinstance(applications, dict):
        applications = [applications]
    ids: set[str] = set()
    for application in applications:
        instances = application.get("instance") or []
        if isinstance(instances, dict):
            instances = [instances]
        ids.update(instance["instanceId"] for instance in instances)
    return ids


def readyz(client: httpx.Client, pod: Pod, timeout: float = 2.0) -> tuple[int, dict] | None:
    try:
        response = client.get(f"{pod.base_url}/readyz", timeout=timeout)
        return response.status_code, response.json()
    except (httpx.HTTPError, ValueError):
        return None


def peer_urls(body: dict) -> frozenset[str]:
    replication = body.get("replication") or {"peers": []}
    return frozenset(peer["url"] for peer in replication["peers"])


def console_replicas(pod: Pod) -> set[str]:
    """The peer URLs in the console's DS Replicas list."""
    page = httpx.get(f"{pod.base_url}/", timeout=5.0).text
    block = re.search(r'<ul class="list-group" id="replicas">(.*?)</ul>', page, re.DOTALL)
    assert block is not None, f"{pod.name}: no replicas list on the console"
    return set(re.findall(r'<a href="([^"]+)"', block.group(1)))


# ------------------------------------------------------------------------------------------ fleet


FLEET_SCRIPT = Path(__file__).with_name("kube_fleet.py")


@dataclass(frozen=True)
class Answer:
    at: float
    instance: str
    op: str
    pod: str  # the pod's address; '' when no pod was ready
    status: int | None  # None: a transport error
    error: str = ""
    took: float = 0.0


class Fleet:
    """The 500 instances and the client Service's endpoints, run by tests/cluster/kube_fleet.py in a
    process of their own (see there); this is the test's side of it."""

    def __init__(self, workdir: Path, port: int, apps: int = APPS, per_app: int = PER_APP):
        self.workdir = workdir
        self.answers_path = workdir / "answers.tsv"
        now = time.time_ns() // 1_000_000
        members = []
        for k in range(apps * per_app):
            app = f"KUBE-APP-{k % apps}"
            instance_id = f"kube-{k % apps}-{k // apps:03d}"
            body = instance_body(
                app=app,
                host=f"{instance_id}.pods.test",
                port=8080,
                instance_id=instance_id,
                last_dirty=now,
                ipAddr=f"10.{k // 250}.{k % 250}.7",
            )
            body["instance"]["leaseInfo"] = {"renewalIntervalInSecs": int(RENEW_S), "durationInSecs": LEASE_S}
            members.append([app, instance_id, json.dumps(body)])
        self.ids = frozenset(member[1] for member in members)
        self.size = len(members)
        self.config_path = workdir / "fleet.json"
        self.config_path.write_text(
            json.dumps(
                {
                    "port": port,
                    "renew_s": RENEW_S,
                    "session_s": list(SESSION_S),
                    "attempts": ATTEMPTS,
                    "probe_every_s": PROBE_EVERY_S,
                    "probe_timeout_s": PROBE_TIMEOUT_S,
                    "probe_failures": PROBE_FAILURES,
                    "request_timeout_s": REQUEST_TIMEOUT_S,
                    "connections_per_pod": CONNECTIONS_PER_POD,
                    "members": members,
                    "answers": str(self.answers_path),
                }
            )
        )
        self.status: dict = {}
        self.process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None

    def start(self, hosts: Iterable[str]) -> None:
        with (self.workdir / "fleet.log").open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(FLEET_SCRIPT), str(self.config_path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self._reader = threading.Thread(target=self._read, name="fleet-status", daemon=True)
        self._reader.start()
        for host in hosts:
            self.created(host)

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):
                self.status = json.loads(line)

    def _send(self, line: str) -> None:
        with self._lock:
            if self.process is None or self.process.poll() is not None:
                return
            with contextlib.suppress(OSError):
                assert self.process.stdin is not None
                self.process.stdin.write(line + "\n")
                self.process.stdin.flush()

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.workdir / "fleet.log").read_text(errors="replace")[-2000:]
        return ""

    def created(self, host: str) -> None:
        """A pod (re)started at ``host``: probed from now on, in the Service once ready."""
        self._send(f"created {host}")

    def terminating(self, host: str) -> None:
        """Its SIGTERM is about to be sent: out of the Service at once."""
        self._send(f"terminating {host}")

    def registered(self) -> int:
        return int(self.status.get("registered", 0))

    def ready(self) -> list[str]:
        return list(self.status.get("ready", []))

    def probe_failures(self) -> int:
        return int(self.status.get("probe_failures", 0))

    def answers(self) -> list[Answer]:
        """Every answer so far (flushed by the fleet every half second)."""
        try:
            text = self.answers_path.read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            parts = line.split("\t")
            if len(parts) != 7:
                continue  # a line being written
            at, instance, op, pod, status, error, took = parts
            out.append(
                Answer(float(at), instance, op, pod, int(status) if status else None, error, float(took))
            )
        return out

    def stop(self) -> None:
        if self.process is None:
            return
        self._send("stop")
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        with contextlib.suppress(OSError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        if self._reader is not None:
            self._reader.join(timeout=5)


# -------------------------------------------------------------------------------------- observers


class Sampler:
    """Every running pod's served registry, every ``SAMPLE_EVERY_S``: when each lifetime of a pod first
    listed every instance, and every later sample that lacked one."""

    def __init__(self, pods: list[Pod], expected: frozenset[str]):
        self.pods = pods
        self.expected = expected
        self.complete_at: dict[tuple[str, int], float] = {}
        self.violations: list[str] = []
        self.first_missing: str | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def _run(self) -> None:
        with httpx.Client() as client:
            while not self._stop.is_set():
                began = time.monotonic()
                for pod in self.pods:
                    if not pod.running or pod.terminating:
                        continue
                    key = (pod.host, pod.lifetime)
                    ids = listed_ids(client, pod)
                    at = time.monotonic()
                    if pod.terminating or not pod.running or key != (pod.host, pod.lifetime):
                        continue  # stopped (or restarted) while it was read
                    self.samples += 1
                    missing = None if ids is None else self.expected - ids
                    if key in self.complete_at:
                        if ids is None or missing:
                            what = "did not answer" if ids is None else f"lacked {len(missing)}"
                            example = "" if not missing else f" (e.g. {sorted(missing)[:3]})"
                            self.violations.append(f"{pod.name} {what}{example} at t={at:.1f}")
                            if missing and self.first_missing is None:
                                self.first_missing = min(missing)
                    elif ids is not None and not missing:
                        self.complete_at[key] = at
                self._stop.wait(max(0.0, SAMPLE_EVERY_S - (time.monotonic() - began)))

    def complete(self, pod: Pod) -> float | None:
        return self.complete_at.get((pod.host, pod.lifetime))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


class PeerWatch:
    """Each running pod's ``/readyz`` peer URLs every ``PEER_POLL_S``: the list at each change."""

    def __init__(self, pods: list[Pod]):
        self.pods = pods
        self.history: dict[str, list[tuple[float, frozenset[str]]]] = {pod.host: [] for pod in pods}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peer-watch", daemon=True)

    def _run(self) -> None:
        with httpx.Client() as client:
            while not self._stop.wait(PEER_POLL_S):
                for pod in self.pods:
                    if not pod.running or pod.terminating:
                        continue
                    answer = readyz(client, pod)
                    if answer is None:
                        continue
                    urls = peer_urls(answer[1])
                    history = self.history[pod.host]
                    if not history or history[-1][1] != urls:
                        history.append((time.monotonic(), urls))

    def current(self, pod: Pod) -> frozenset[str] | None:
        history = self.history[pod.host]
        return history[-1][1] if history else None

    def first(self, pod: Pod, since: float, holds: Callable[[frozenset[str]], bool]) -> float | None:
        """When the pod's peer list first satisfied ``holds`` at or after ``since`` (``since`` itself if it
        already did then), or None."""
        history = self.history[pod.host]
        before = [urls for at, urls in history if at < since]
        if before and holds(before[-1]):
            return since
        for at, urls in history:
            if at >= since and holds(urls):
                return at
        return None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


class Listener:
    """A plain TCP listener on a gone pod's address: every connection it is offered, with what came."""

    def __init__(self, host: str, port: int):
        self.connections: list[tuple[float, str, bytes]] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="listener", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, address = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(0.5)
                try:
                    data = conn.recv(4096)
                except OSError:
                    data = b""
            self.connections.append((time.monotonic(), f"{address[0]}:{address[1]}", data[:200]))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


# ---------------------------------------------------------------------------------- the cluster


class Kube:
    """The StatefulSet, its DNS, the client Service, the fleet and the observers of one test."""

    def __init__(
        self, name: str, root: Path, dns_server: DnsServer, replicas: int, peer_dns: str | None = None
    ):
        require_toolchain(
            "loopback addresses 127.0.0.2-127.0.0.6",
            loopback_aliases_work(),
            "these tests bind 127.0.0.2 ... 127.0.0.6 (Linux routes all of 127/8 to lo)",
        )
        self.name = name
        self.root = root
        self.dns = dns_server
        self.deadline = Deadline(TEST_LIMIT_S)
        self.port = common_port(HOSTS[:replicas])
        peer_dns = peer_dns or f"{HEADLESS}:{self.port}"
        self.pods = []
        for ordinal, host in enumerate(HOSTS[:replicas]):
            workdir = root / f"eureka-{ordinal}"
            workdir.mkdir(parents=True, exist_ok=True)
            self.pods.append(Pod(ordinal, host, self.port, workdir, pod_env(dns_server.port, peer_dns)))
        self.peers = PeerWatch(self.pods)
        self.fleet: Fleet | None = None
        self.sampler: Sampler | None = None
        self.published: dict[str, float] = {}
        self.unpublished: dict[str, float] = {}
        self.report: dict[str, object] = {}
        self._watchdog = threading.Timer(TEST_LIMIT_S + WATCHDOG_GRACE_S, self._kill_everything)
        self._watchdog.daemon = True

    # -- the headless Service's records

    def publish(self, ordinals: Iterable[int]) -> float:
        """The headless name now answers the addresses of these pods (A records)."""
        hosts = [self.pods[o].host for o in ordinals]
        now = time.monotonic()
        before = set(self.published) - set(self.unpublished)
        for host in hosts:
            if host not in before:
                self.published[host] = now
                self.unpublished.pop(host, None)
        for host in before - set(hosts):
            self.unpublished[host] = now
        self.dns.set(HEADLESS, "A", hosts)
        return now

    # -- pods

    def launch(self, ordinal: int) -> Pod:
        pod = self.pods[ordinal]
        assert not pod.running, f"{pod.name} is running"
        self.deadline.check(f"launch of {pod.name}")
        pod.lifetime += 1
        pod.launched_at = time.monotonic()
        pod.ready_at = None
        pod.terminating = False
        pod.context = running_server(pod.workdir, pod.env, host=pod.host, port=pod.port)
        pod.server = pod.context.__enter__()
        if self.fleet is not None:
            self.fleet.created(pod.host)
        return pod

    def wait_ready(self, ordinal: int, timeout: float = START_TIMEOUT_S) -> float:
        """Until /readyz answers 200 with the start-up sync done (or nothing to sync); seconds since
        launch."""
        pod = self.pods[ordinal]
        client = httpx.Client()

        def ready() -> bool:
            answer = readyz(client, pod, timeout=1.0)
            if answer is None or answer[0] != 200:
                return False
            replication = answer[1].get("replication")
            return replication is None or replication.get("synced_at_start") is not None

        try:
            wait_for(ready, timeout, f"{pod.name} ready", self.deadline)
        finally:
            client.close()
        pod.ready_at = time.monotonic()
        assert pod.launched_at is not None
        return pod.ready_at - pod.launched_at

    def terminate(self, ordinal: int) -> tuple[float, float]:
        """As the kubelet deletes a pod: out of the Service, SIGTERM, wait for the exit (SIGKILL past
        ``STOP_TIMEOUT_S``). Returns (when the SIGTERM was sent, seconds until the exit)."""
        pod = self.pods[ordinal]
        assert pod.server is not None and pod.context is not None
        pod.terminating = True
        if self.fleet is not None:
            self.fleet.terminating(pod.host)
        sent = time.monotonic()
        process = pod.server.process
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except Exception:  # noqa: BLE001 (subprocess.TimeoutExpired: killed below, and reported)
            self._kill(pod)
            pytest.fail(
                f"{pod.name} did not stop within {STOP_TIMEOUT_S:.0f} s of its SIGTERM", pytrace=False
            )
        took = time.monotonic() - sent
        context, pod.context, pod.server = pod.context, None, None
        context.__exit__(None, None, None)
        return sent, took

    def _kill(self, pod: Pod) -> None:
        if pod.server is None:
            return
        popen = pod.server.process
        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(popen.pid)
            for victim in [*process.children(recursive=True), process]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    victim.send_signal(signal.SIGKILL)
        with contextlib.suppress(Exception):
            popen.wait(timeout=10)

    def _kill_everything(self) -> None:
        logger.error("test limit passed: killing every pod")
        for pod in self.pods:
            self._kill(pod)

    def live(self) -> list[Pod]:
        return [pod for pod in self.pods if pod.running and not pod.terminating]

    # -- clients and observers

    def start_fleet(self) -> Fleet:
        self.fleet = Fleet(self.root, self.port)
        self.sampler = Sampler(self.pods, self.fleet.ids)
        self.sampler.start()
        self.fleet.start(pod.host for pod in self.live())
        return self.fleet

    def wait_registered(self, timeout: float = 60.0) -> float:
        """Until every instance of the fleet has registered; seconds it took."""
        assert self.fleet is not None
        began = time.monotonic()
        wait_for(
            lambda: self.fleet.registered() == self.fleet.size,
            timeout,
            lambda: (
                f"the fleet registered ({self.fleet.registered()} of {self.fleet.size}); "
                f"its log: {self.fleet.log_tail()}"
            ),
            self.deadline,
            interval=0.2,
        )
        return time.monotonic() - began

    def wait_complete(self, pods: Iterable[Pod], since: float, what: str) -> dict[str, float]:
        """Until each pod (this lifetime) has listed every instance; seconds from ``since`` per pod,
        asserted under ``COMPLETE_LIMIT_S``."""
        assert self.sampler is not None
        pods = list(pods)
        sampler = self.sampler
        wait_for(
            lambda: all(sampler.complete(pod) is not None for pod in pods),
            COMPLETE_LIMIT_S + 5,
            lambda: (
                f"{what}: every instance listed at {[p.name for p in pods if sampler.complete(p) is None]}"
            ),
            self.deadline,
            interval=0.2,
        )
        took = {pod.name: round(max(0.0, sampler.complete(pod) - since), 2) for pod in pods}
        logger.info("%s: complete after %s s", what, took)
        slow = {name: t for name, t in took.items() if t > COMPLETE_LIMIT_S}
        assert not slow, f"{what}: not every instance listed within {COMPLETE_LIMIT_S:.0f} s at {slow}"
        return took

    def watch(self, seconds: float) -> None:
        """Let the fleet and the sampler run (the samples must find every pod complete)."""
        self.deadline.check("a watch")
        time.sleep(min(seconds, max(0.0, self.deadline.left())))
        self.assert_no_violation()

    def assert_no_violation(self) -> None:
        if self.sampler is not None:
            assert not self.sampler.violations, (
                f"{len(self.sampler.violations)} samples of a complete pod lacked instances: "
                f"{self.sampler.violations[:10]}; {self.story(self.sampler.first_missing)}"
            )

    def story(self, instance_id: str | None) -> str:
        """What the fleet saw of one instance lately, and the pods' log lines naming it (for failures)."""
        if instance_id is None or self.fleet is None:
            return ""
        began = self.deadline.started
        answers = [
            (round(a.at - began, 2), a.op, a.pod, a.status or a.error, round(a.took, 2))
            for a in self.fleet.answers()
            if a.instance == instance_id
        ]
        lines = [
            f"{pod.name}: {line[:300]}"
            for pod in self.pods
            if pod.log_path.exists()
            for line in pod.log_path.read_text(errors="replace").splitlines()
            if instance_id in line
        ]
        return (
            f"{instance_id}'s last answers (s since the test began): {answers[-12:]}; "
            f"log lines: {lines[-10:]}"
        )

    def bring_up(self, ordinals: list[int]) -> tuple[dict[str, float], dict[str, float]]:
        """A new StatefulSet's pods: their records published, each launched, each ready, and each a peer
        of the others. Returns each pod's seconds to ready, and to its peers from the publication."""
        began = self.publish(ordinals)
        for ordinal in ordinals:
            self.launch(ordinal)
        ready = {self.pods[o].name: round(self.wait_ready(o), 2) for o in ordinals}
        members = [self.pods[o] for o in ordinals]
        peers = self.wait_peers(members, lambda p: self.others(p, members), began, f"{len(members)} pods")
        return ready, peers

    def wait_peers(
        self, observers: Iterable[Pod], expected: Callable[[Pod], set[str]], since: float, what: str
    ) -> dict[str, float]:
        """Until each observer's /readyz peer list is ``expected(observer)``; seconds from ``since``."""
        observers = list(observers)
        wanted = {pod.host: frozenset(expected(pod)) for pod in observers}
        wait_for(
            lambda: all(self.peers.current(pod) == wanted[pod.host] for pod in observers),
            RESOLVE_S + PEER_SLACK_S + 15,
            lambda: f"{what}: peer lists {self._lists(observers)}, wanted {wanted}",
            self.deadline,
            interval=PEER_POLL_S,
        )
        took = {}
        for pod in observers:
            at = self.peers.first(pod, since, lambda urls, pod=pod: urls == wanted[pod.host])
            assert at is not None
            took[pod.name] = round(at - since, 2)
        logger.info("%s: peer lists right after %s s", what, took)
        return took

    def _lists(self, pods: list[Pod]) -> dict[str, list[str]]:
        return {pod.name: sorted(self.peers.current(pod) or []) for pod in pods}

    def others(self, pod: Pod, among: Iterable[Pod]) -> set[str]:
        return {other.url for other in among if other is not pod}

    # -- answers

    def server_errors(self) -> list[Answer]:
        assert self.fleet is not None
        return [
            answer for answer in self.fleet.answers() if answer.status is not None and answer.status >= 500
        ]

    def register_canary(self) -> None:
        """One instance on a 1 s lease that never renews, at the first pod: its eviction must show in the
        logs, or the eviction check below would be looking at nothing."""
        body = instance_body(app=CANARY_APP, host="canary.pods.test", instance_id=CANARY_ID)
        body["instance"]["leaseInfo"] = {"renewalIntervalInSecs": 1, "durationInSecs": 1}
        response = httpx.post(f"{self.pods[0].url}apps/{CANARY_APP}", json=body, headers=JSON, timeout=5)
        assert response.status_code == 204, response.text

    def canary_evicted(self) -> list[str]:
        canary = f"{CANARY_APP}/{CANARY_ID}"
        return [
            pod.name
            for pod in self.pods
            if any(canary in e.get("instances", []) for e in pod.events("eviction"))
        ]

    def evictions(self) -> dict[str, int]:
        """Instances of the fleet each pod evicted (its log, every lifetime), the canary left out."""
        canary = f"{CANARY_APP}/{CANARY_ID}"
        return {
            pod.name: sum(
                int(e.get("evicted", 1)) - (canary in e.get("instances", [])) for e in pod.events("eviction")
            )
            for pod in self.pods
        }

    def summary(self, passed: bool) -> None:
        answers = self.fleet.answers() if self.fleet is not None else []
        self.report.setdefault("answers", len(answers))
        self.report.setdefault("transport_errors", sum(1 for a in answers if a.status is None and a.pod))
        self.report.setdefault("no_ready_endpoint", sum(1 for a in answers if not a.pod))
        self.report.setdefault("5xx", sum(1 for a in answers if a.status is not None and a.status >= 500))
        took = sorted(a.took for a in answers if a.pod)
        if took:
            self.report["answer_ms"] = {
                "p50": round(1000 * took[len(took) // 2]),
                "p99": round(1000 * took[min(len(took) - 1, int(len(took) * 0.99))]),
                "max": round(1000 * took[-1]),
            }
        slowest: dict[str, float] = {}
        for a in answers:
            if a.pod:
                slowest[a.pod] = max(slowest.get(a.pod, 0.0), round(a.took, 2))
        self.report["slowest_answer_s_by_pod"] = slowest
        if self.fleet is not None:
            self.report["probe_failures"] = self.fleet.probe_failures()
        self.report["duration_s"] = round(time.monotonic() - self.deadline.started, 1)
        line = json.dumps(self.report, sort_keys=True)
        logger.warning("K8S %s (%s): %s", self.name, "passed" if passed else "failed", line)

    # -- lifecycle

    def __enter__(self) -> Kube:
        self._watchdog.start()
        self.peers.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._watchdog.cancel()
        if self.fleet is not None:
            self.fleet.stop()
        self.summary(exc_info[0] is None)
        for observer in (self.sampler, self.peers):
            if observer is not None:
                observer.stop()
        # Every pod at once (each would otherwise wait for its peers' connections in turn).
        stoppers = [
            threading.Thread(target=self._stop_pod, args=(pod,), daemon=True)
            for pod in self.pods
            if pod.context
        ]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(timeout=STOP_TIMEOUT_S)
        for pod in self.pods:
            self._kill(pod)

    def _stop_pod(self, pod: Pod) -> None:
        context, pod.context = pod.context, None
        if context is not None:
            with contextlib.suppress(Exception):
                context.__exit__(None, None, None)


# ------------------------------------------------------------------------------------------- tests


def test_scaling_3_to_5_to_3_through_dns_loses_no_instance(tmp_path, headless_dns):
    """Scale 3 -> 5 -> 3 by changing the headless answer and starting and stopping pods, none restarted:
    every pod lists every live instance within 30 s of each step and at every sample after it."""
    with Kube("scale 3->5->3", tmp_path, headless_dns, replicas=5) as kube:
        pods = kube.pods
        report = kube.report

        # Three replicas: each record appears as its pod is created (publishNotReadyAddresses).
        report["start_3_ready_s"], report["peers_at_start_s"] = kube.bring_up([0, 1, 2])
        three = pods[:3]

        fleet_began = time.monotonic()
        kube.start_fleet()
        kube.register_canary()
        report["registered_s"] = round(kube.wait_registered(), 2)
        report["step1_register_complete_s"] = kube.wait_complete(
            three, fleet_began, "500 registered at 3 pods"
        )
        kube.watch(WATCH_S)

        # Scale to 5: the StatefulSet creates eureka-3, waits for it to be ready, then eureka-4.
        step = time.monotonic()
        for ordinal in (3, 4):
            kube.publish(range(ordinal + 1))
            kube.launch(ordinal)
            kube.wait_ready(ordinal)
        report["scale_up_ready_s"] = {p.name: round(p.ready_at - p.launched_at, 2) for p in pods[3:]}
        five = pods[:5]
        peers_up = kube.wait_peers(five, lambda p: kube.others(p, five), step, "5 pods")
        # The old pods took the new addresses at their next resolve after each record appeared.
        added = {}
        for pod in three:
            for new in pods[3:]:
                at = kube.peers.first(pod, kube.published[new.host], lambda urls, new=new: new.url in urls)
                assert at is not None, f"{pod.name} never listed {new.name}"
                added[f"{pod.name}<-{new.name}"] = round(at - kube.published[new.host], 2)
        report["scale_up_peer_added_s"] = added
        late = {k: v for k, v in added.items() if v > RESOLVE_S + PEER_SLACK_S}
        assert not late, f"new pods became peers later than {RESOLVE_S} s + {PEER_SLACK_S} s: {late}"
        report["scale_up_peers_all_s"] = peers_up
        complete = kube.wait_complete(three, step, "scale to 5 (old pods)")
        for pod in pods[3:]:
            complete |= kube.wait_complete([pod], pod.launched_at, f"scale to 5 ({pod.name} from its launch)")
        report["step2_scale_up_complete_s"] = complete
        kube.watch(WATCH_S)
        for pod in five:
            assert console_replicas(pod) == kube.others(pod, five), f"{pod.name}'s console"

        # Scale to 3: eureka-4 is deleted (record gone, SIGTERM), then eureka-3 once eureka-4 is gone.
        step = time.monotonic()
        stops = {}
        for ordinal in (4, 3):
            kube.publish(range(ordinal))
            _, stops[pods[ordinal].name] = kube.terminate(ordinal)
        report["scale_down_stop_s"] = {name: round(t, 2) for name, t in stops.items()}
        dropped = {}
        for pod in three:
            for gone in pods[3:]:
                at = kube.peers.first(
                    pod, kube.unpublished[gone.host], lambda urls, gone=gone: gone.url not in urls
                )
                if at is None:
                    kube.wait_peers([pod], lambda p: kube.others(p, three), step, "scale to 3")
                    at = kube.peers.first(
                        pod, kube.unpublished[gone.host], lambda urls, gone=gone: gone.url not in urls
                    )
                assert at is not None
                dropped[f"{pod.name}-x-{gone.name}"] = round(at - kube.unpublished[gone.host], 2)
        report["scale_down_peer_removed_s"] = dropped
        late = {k: v for k, v in dropped.items() if v > RESOLVE_S + PEER_SLACK_S}
        assert not late, f"gone pods stayed peers longer than {RESOLVE_S} s + {PEER_SLACK_S} s: {late}"
        kube.wait_peers(three, lambda p: kube.others(p, three), step, "3 pods again")
        kube.watch(WATCH_S)
        report["step3_scale_down_complete"] = {
            pod.name: kube.sampler.complete(pod) is not None for pod in three
        }
        for pod in three:
            assert console_replicas(pod) == kube.others(pod, three), f"{pod.name}'s console"
            # Added and removed, each logged once.
            for other in pods[3:]:
                added_events = [e for e in pod.events("peer_added") if mentions(e, other)]
                removed_events = [e for e in pod.events("peer_removed") if mentions(e, other)]
                assert len(added_events) == 1, f"{pod.name}: peer_added of {other.name}: {added_events}"
                assert len(removed_events) == 1, f"{pod.name}: peer_removed of {other.name}: {removed_events}"

        errors = kube.server_errors()
        report["5xx_by_pod"] = _count_by_pod(errors)
        report["samples"] = kube.sampler.samples
        evictions = kube.evictions()
        report["evictions"] = evictions
        report["canary_evicted_at"] = kube.canary_evicted()
        kube.assert_no_violation()
        assert not any(evictions.values()), f"live instances evicted: {evictions}"
        assert report["canary_evicted_at"], (
            "the canary's eviction is in no log: the eviction check sees nothing"
        )
        # No pod was restarted; a 5xx could only come from a pod being stopped.
        stray = [a for a in errors if a.pod not in {p.host for p in pods[3:]}]
        assert not stray, f"5xx from pods not being stopped: {stray[:10]}"


def _count_by_pod(answers: Iterable[Answer]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for answer in answers:
        counts[answer.pod] = counts.get(answer.pod, 0) + 1
    return counts


def test_a_rolling_upgrade_loses_no_instance_and_only_the_stopping_pod_answers_5xx(tmp_path, headless_dns):
    """The StatefulSet controller's rolling update, highest ordinal first: SIGTERM, wait for the exit,
    start again on the same address, wait for ready, next pod. No client sees a 5xx but from the pod
    being stopped, nothing live is evicted anywhere, and each pod lists everything within 30 s of its
    restart."""
    with Kube("rolling upgrade", tmp_path, headless_dns, replicas=3) as kube:
        pods = kube.pods
        report = kube.report
        kube.bring_up([0, 1, 2])
        fleet_began = time.monotonic()
        kube.start_fleet()
        kube.register_canary()
        report["registered_s"] = round(kube.wait_registered(), 2)
        report["register_complete_s"] = kube.wait_complete(pods, fleet_began, "500 registered at 3 pods")
        kube.watch(3.0)

        windows: dict[str, list[tuple[float, float]]] = {pod.host: [] for pod in pods}
        rolled = {}
        for ordinal in (2, 1, 0):
            pod = pods[ordinal]
            sent, stop_took = kube.terminate(ordinal)
            kube.launch(ordinal)
            ready_took = kube.wait_ready(ordinal)
            windows[pod.host].append((sent, pod.ready_at))
            complete = kube.wait_complete([pod], pod.launched_at, f"{pod.name} restarted")[pod.name]
            rolled[pod.name] = {
                "stop_s": round(stop_took, 2),
                "ready_after_launch_s": round(ready_took, 2),
                "complete_after_launch_s": complete,
            }
        report["rolled"] = rolled
        # Past a whole lease after the last restart: an instance whose renewals were lost would be gone.
        kube.wait_peers(pods, lambda p: kube.others(p, pods), time.monotonic(), "3 pods after the roll")
        kube.watch(LEASE_S + 2)

        errors = kube.server_errors()

        def stopping(answer: Answer) -> bool:
            return any(start <= answer.at <= end for start, end in windows[answer.pod])

        report["5xx_by_pod"] = _count_by_pod(errors)
        report["5xx_outside_stop"] = sum(1 for a in errors if not stopping(a))
        failed = [a for a in kube.fleet.answers() if a.status is None and a.pod]
        report["transport_errors_by_pod"] = _count_by_pod(failed)
        report["transport_errors_outside_stop"] = sum(1 for a in failed if not stopping(a))
        evictions = kube.evictions()
        report["evictions"] = evictions
        report["canary_evicted_at"] = kube.canary_evicted()
        report["samples"] = kube.sampler.samples
        kube.assert_no_violation()
        assert not any(evictions.values()), f"live instances evicted: {evictions}"
        assert report["canary_evicted_at"], (
            "the canary's eviction is in no log: the eviction check sees nothing"
        )
        stray = [a for a in errors if not stopping(a)]
        assert not stray, f"5xx from pods not being stopped: {stray[:10]}"
        # Nor did a pod that was not being stopped fail a request any other way.
        stray = [a for a in failed if not stopping(a)]
        assert not stray, f"requests failed at pods not being stopped: {stray[:10]}"
        assert kube.fleet.registered() == kube.fleet.size


def test_a_pod_that_stays_gone_is_dropped_from_every_peer_list_and_gets_nothing_after(tmp_path, headless_dns):
    """Scale 3 -> 2 for good: eureka-2's record goes and it stops. Every other pod drops it from its
    peers within one re-resolve interval (+ ``PEER_SLACK_S``), and then nothing connects to its address,
    while the fleet keeps writing at the others."""
    with Kube("pod gone for good", tmp_path, headless_dns, replicas=3) as kube:
        pods = kube.pods
        report = kube.report
        kube.bring_up([0, 1, 2])
        fleet_began = time.monotonic()
        kube.start_fleet()
        kube.wait_registered()
        kube.wait_complete(pods, fleet_began, "500 registered at 3 pods")

        gone, stay = pods[2], pods[:2]
        removed = kube.publish([0, 1])
        _, report["stop_s"] = kube.terminate(2)
        report["stop_s"] = round(report["stop_s"], 2)
        took = kube.wait_peers(stay, lambda p: kube.others(p, stay), removed, f"{gone.name} dropped")
        report["dropped_after_s"] = took
        report["drop_limit_s"] = RESOLVE_S + PEER_SLACK_S
        late = {name: t for name, t in took.items() if t > RESOLVE_S + PEER_SLACK_S}
        assert not late, (
            f"{gone.name} stayed a peer longer than one re-resolve interval ({RESOLVE_S} s) "
            f"+ {PEER_SLACK_S} s: {late}"
        )
        for pod in stay:
            events = [e for e in pod.events("peer_removed") if mentions(e, gone)]
            assert len(events) == 1, f"{pod.name}: peer_removed of {gone.name} logged {len(events)} times"

        # Its address now answers, but to no one: nothing may connect while writes go on elsewhere.
        received_before = {pod.name: _received_items(pod) for pod in stay}
        listener = Listener(gone.host, gone.port)
        try:
            extra = NodeWriter(stay)
            extra.churn(QUIET_S, kube.deadline)
        finally:
            listener.close()
        received_after = {pod.name: _received_items(pod) for pod in stay}
        report["quiet_window_s"] = QUIET_S
        report["connections_to_gone_pod"] = len(listener.connections)
        report["replicated_items_meanwhile"] = {
            name: received_after[name] - received_before[name] for name in received_after
        }
        report["churned_writes"] = extra.writes
        assert not listener.connections, (
            f"connections to {gone.name}'s address after it was dropped: {listener.connections[:5]}"
        )
        # Writes did go on between the pods that stay (else the quiet would prove nothing).
        assert all(n > 100 for n in report["replicated_items_meanwhile"].values()), report
        kube.assert_no_violation()


def _received_items(pod: Pod) -> int:
    return httpx.get(f"{pod.base_url}/readyz", timeout=5).json()["received_replication"]["items"]


class NodeWriter:
    """Registrations and cancels at the given pods, in turn (writes that replicate to every peer)."""

    def __init__(self, pods: list[Pod]):
        self.pods = pods
        self.writes = 0

    def churn(self, seconds: float, deadline: Deadline) -> None:
        end = time.monotonic() + seconds
        k = 0
        with httpx.Client(headers=JSON, timeout=5) as client:
            while time.monotonic() < end:
                deadline.check("writes in the quiet window")
                pod = self.pods[k % len(self.pods)]
                instance_id = f"churn-{k}"
                body = instance_body(
                    app="KUBE-CHURN", host=f"{instance_id}.pods.test", instance_id=instance_id
                )
                response = client.post(f"{pod.url}apps/KUBE-CHURN", json=body)
                assert response.status_code == 204, response.text
                assert client.delete(f"{pod.url}apps/KUBE-CHURN/{instance_id}").status_code == 200
                self.writes += 2
                k += 1
                time.sleep(0.05)


def test_srv_records_let_two_pods_find_each_other_and_replicate(tmp_path, headless_dns):
    """``EUREKA_PEER_DNS=_eureka._tcp.<headless name>``: the SRV answer names each pod's host name and
    port, the host names resolve through the same server, and the two pods replicate to each other."""
    with Kube("SRV", tmp_path, headless_dns, replicas=2, peer_dns=SRV_NAME) as kube:
        pods = kube.pods
        targets = [f"eureka-{pod.ordinal}.{HEADLESS}" for pod in pods]
        for pod, target in zip(pods, targets, strict=True):
            headless_dns.set(target, "A", [pod.host])
        headless_dns.set(
            SRV_NAME, "SRV", [(0, 10, pod.port, target) for pod, target in zip(pods, targets, strict=True)]
        )
        began = time.monotonic()
        for pod in pods:
            kube.launch(pod.ordinal)
        for pod in pods:
            kube.wait_ready(pod.ordinal)
        kube.report["peers_after_first_launch_s"] = kube.wait_peers(
            pods, lambda p: kube.others(p, pods), began, "SRV peers"
        )
        assert headless_dns.asked(SRV_NAME, "SRV") >= 2
        assert all(headless_dns.asked(target, "A") >= 1 for target in targets)

        travel = {}
        with httpx.Client(headers=JSON, timeout=5) as client:
            for writer, reader in ((pods[0], pods[1]), (pods[1], pods[0])):
                instance_id = f"srv-written-at-{writer.name}"
                body = instance_body(app="KUBE-SRV", host=f"{instance_id}.pods.test", instance_id=instance_id)
                written = time.monotonic()
                assert client.post(f"{writer.url}apps/KUBE-SRV", json=body).status_code == 204
                wait_for(
                    lambda reader=reader, instance_id=instance_id: (
                        instance_id in (listed_ids(client, reader) or ())
                    ),
                    15,
                    f"{instance_id} listed at {reader.name}",
                    kube.deadline,
                    interval=0.05,
                )
                travel[f"{writer.name}->{reader.name}"] = round(time.monotonic() - written, 2)
        kube.report["replicated_after_s"] = travel
        sent = {
            pod.name: {
                peer["url"]: peer["sent"]
                for peer in httpx.get(f"{pod.base_url}/readyz").json()["replication"]["peers"]
            }
            for pod in pods
        }
        kube.report["sent"] = sent
        for pod in pods:
            (other,) = [p for p in pods if p is not pod]
            assert sent[pod.name][other.url] >= 1, sent
