"""The mesh process at scale (docs/mesh.md): xDS snapshot push and change propagation to many clients,
its memory and CPU, DNS queries/s, and what running it costs the node's heartbeats.

1. Starts a node (gunicorn, embedded mode) and registers ``-n`` instances in ``--apps`` apps with the Go
   load generator.
2. Starts ``manage.py mesh`` (xDS and DNS) beside it and ``--clients`` xDS streams (``mesh.py clients``,
   in ``--client-processes`` processes), each subscribed to every cluster and its endpoints. Prints the
   time each stream took to hold the full snapshot, and when the last one had it.
3. ``--changes`` times: announces the change to the clients, then flips one instance's status at the
   node (``PUT .../status?value=OUT_OF_SERVICE``, then ``?value=UP``), and prints, over the
   changes, the median, p99 and maximum of the time from the node's answer to the LAST client holding
   the new endpoints (and to the first).
4. The mesh process's resident memory and CPU seconds over each phase.
5. DNS: ``--dns-seconds`` of A queries for random service names from ``--dns-senders`` UDP sockets with
   many in flight; prints answers/s.
6. Renew throughput: ``--rounds`` interleaved closed-loop renew rounds with the mesh stopped (off) and
   running with its xDS clients connected and a DNS load of ``--dns-rate`` queries/s (on); prints
   each round, the medians and the ratio.

  .venv/bin/python bench/mesh.py                         # 10,000 instances, 100 apps, 200 clients
  .venv/bin/python bench/mesh.py -n 2000 --apps 20 --clients 20 --changes 10 --rounds 2

Needs Go (bench/loadgen). Loopback only; bounded in time; every process is stopped at the end. Printed,
not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import dns.exception
import dns.message
import dns.rdatatype
import grpc
import httpx
import psutil
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2, health_check_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from nodes import BIN, HOST, ROOT, Mesh, Node, build_loadgen, die_with_parent, stop_all
from setting_cost import loadgen

MESH_READY_TIMEOUT_S = 120
SNAPSHOT_TIMEOUT_S = 300
CHANGE_TIMEOUT_S = 30


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def mesh_answers(mesh: Mesh) -> bool:
    """The mesh follows the node: DNS answers the first app's name."""
    try:
        answer = dns_query(mesh.dns_port, "bench-svc-000.service.eureka", timeout=0.5)
    except dns.exception.DNSException:
        return False  # not following the node yet
    return bool(answer.answer)


def dns_query(port: int, name: str, timeout: float = 2.0):
    import dns.query

    return dns.query.udp(dns.message.make_query(name, dns.rdatatype.A), HOST, port=port, timeout=timeout)


class Clients:
    """The xDS client processes (``mesh.py clients``) and what they print."""

    def __init__(self, mesh: Mesh, clients: int, processes: int, names: int):
        per = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
        self.processes: list[subprocess.Popen] = []
        self.lines: list[dict] = []
        self._lock = threading.Lock()
        first = 0
        for count in per:
            command = [
                str(BIN / "python"),
                str(ROOT / "bench" / "mesh.py"),
                "clients",
                *("--target", f"{HOST}:{mesh.xds_port}", "--streams", str(count), "--first", str(first)),
                *("--names", str(names)),
            ]
            first += count
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
                cwd=ROOT,
                preexec_fn=die_with_parent,  # none outlives a benchmark killed by a signal
            )
            self.processes.append(process)
            threading.Thread(target=self._read, args=(process,), daemon=True).start()

    def _read(self, process: subprocess.Popen) -> None:
        for line in process.stdout:
            record = json.loads(line)
            with self._lock:
                self.lines.append(record)

    def records(self, key: str) -> list[dict]:
        with self._lock:
            return [line for line in self.lines if key in line]

    def announce(self, seq: int, app: str, instance_id: str, health: str) -> None:
        for process in self.processes:
            process.stdin.write(f"watch {seq} {app} {instance_id} {health}\n")
            process.stdin.flush()

    def wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            errors = self.records("error")
            if errors:
                raise SystemExit(f"an xDS client failed: {errors[0]}")
            time.sleep(0.02)
        raise SystemExit(f"timed out waiting for {what}")

    def cpu_seconds(self) -> float:
        total = 0.0
        for process in self.processes:
            times = psutil.Process(process.pid).cpu_times()
            total += times.user + times.system
        return total

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait(timeout=10)


def instances_of(node: Node, app: str) -> list[str]:
    answer = httpx.get(f"{node.url}apps/{app}", headers={"Accept": "application/json"}, timeout=10)
    answer.raise_for_status()
    return [instance["instanceId"] for instance in answer.json()["application"]["instance"]]


def propagation(node: Node, clients: Clients, changes: int, streams: int) -> tuple[list[float], list[float]]:
    """Per change: seconds from the node's answer to the first and to the last stream holding it."""
    apps = sorted(
        {
            app["name"]
            for app in httpx.get(
                f"{node.url}apps", headers={"Accept": "application/json"}, timeout=30
            ).json()["applications"]["application"]
        }
    )
    firsts, lasts = [], []
    rng = random.Random(47)
    with httpx.Client(timeout=10) as http:
        for seq in range(changes):
            out = seq % 2 == 0
            if out:  # a new instance goes out of service; the next change brings the same one back
                app = rng.choice(apps)
                instance_id = rng.choice(instances_of(node, app))
            # Out of service → DRAINING; then UP → HEALTHY (both overrides: removing the override would
            # leave the instance UNKNOWN until its next heartbeat, and this phase sends none).
            clients.announce(seq, app, instance_id, "DRAINING" if out else "HEALTHY")
            time.sleep(0.05)  # the clients have read the announcement
            value = "OUT_OF_SERVICE" if out else "UP"
            answer = http.put(f"{node.url}apps/{app}/{instance_id}/status", params={"value": value})
            changed_at = time.time()
            if answer.status_code != 200:
                raise SystemExit(f"status change {seq} answered {answer.status_code}")
            clients.wait(
                lambda s=seq: sum(1 for r in clients.records("seen") if r["seen"] == s) >= streams,
                CHANGE_TIMEOUT_S,
                f"change {seq} at every stream",
            )
            seen = [r["at"] for r in clients.records("seen") if r["seen"] == seq]
            firsts.append(max(0.0, min(seen) - changed_at))
            lasts.append(max(0.0, max(seen) - changed_at))
            if not out:
                time.sleep(0.2)
    return firsts, lasts


async def dns_flood(
    port: int, names: list[str], seconds: float, senders: int, window: int
) -> tuple[int, int]:
    """(answers, sent) from ``senders`` UDP sockets, each keeping ``window`` queries in flight."""
    loop = asyncio.get_running_loop()
    answered = sent = 0
    deadline = time.monotonic() + seconds

    async def sender() -> None:
        nonlocal answered, sent
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        sock.connect((HOST, port))
        rng = random.Random()
        in_flight = 0
        while time.monotonic() < deadline:
            while in_flight < window:
                query = dns.message.make_query(rng.choice(names), dns.rdatatype.A).to_wire()
                sock.send(query)
                sent += 1
                in_flight += 1
            try:
                await asyncio.wait_for(loop.sock_recv(sock, 4096), timeout=0.5)
                answered += 1
                in_flight -= 1
            except TimeoutError:
                in_flight = 0  # lost: start the window again
        sock.close()

    await asyncio.gather(*(sender() for _ in range(senders)))
    return answered, sent


class DnsLoad:
    """A steady ``rate`` of A queries/s on a thread (the "on" rounds of the renew comparison)."""

    def __init__(self, port: int, names: list[str], rate: int):
        self.port, self.names, self.rate = port, names, rate
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.connect((HOST, self.port))
        sock.setblocking(False)
        selector = selectors.DefaultSelector()
        selector.register(sock, selectors.EVENT_READ)
        rng = random.Random()
        interval = 1 / self.rate
        next_at = time.monotonic()
        while not self.stopping.is_set():
            now = time.monotonic()
            if now >= next_at:
                sock.send(dns.message.make_query(rng.choice(self.names), dns.rdatatype.A).to_wire())
                next_at += interval
            for key, _ in selector.select(timeout=max(0.0, next_at - time.monotonic())):
                try:
                    key.fileobj.recv(4096)
                except OSError:
                    pass
        sock.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)


# ------------------------------------------------------------------------------------------ clients
# ``mesh.py clients``: ``--streams`` state-of-the-world ADS streams in one process, each subscribed to
# every cluster (CDS wildcard) and every cluster's endpoints (EDS), ACKing as Envoy does. One JSON line
# per event on stdout: ``{"snapshot": S, "stream": i}`` once a stream holds every cluster's endpoints;
# ``{"seen": SEQ, "at": T, "stream": i}`` when a stream receives the endpoints of a change announced on
# stdin (``watch SEQ APP INSTANCE_ID HEALTH``, written before the change is made; T is the wall clock,
# shared with the controller); ``{"ready": true}`` once every stream holds the snapshot; ``{"error": ...}``.
# Only the watched app's assignments are decoded past their names.

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
HEALTH = {
    "HEALTHY": health_check_pb2.HEALTHY,
    "UNHEALTHY": health_check_pb2.UNHEALTHY,
    "DRAINING": health_check_pb2.DRAINING,
}


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class Watches:
    """Changes the controller announced: SEQ → (cluster, instance id, health)."""

    def __init__(self) -> None:
        self.pending: dict[int, tuple[str, str, int]] = {}

    def by_cluster(self, cluster: str) -> list[tuple[int, str, int]]:
        return [(seq, iid, health) for seq, (name, iid, health) in self.pending.items() if name == cluster]


async def read_watches(watches: Watches) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        parts = line.decode().split()
        if len(parts) == 5 and parts[0] == "watch":
            watches.pending[int(parts[1])] = (parts[2].lower(), parts[3], HEALTH[parts[4]])


async def one_stream(index: int, target: str, names: int, watches: Watches, ready: asyncio.Event) -> None:
    queue: asyncio.Queue = asyncio.Queue()
    node = base_pb2.Node(id=f"bench-{index}", cluster="bench")

    async def requests():
        while True:
            yield await queue.get()

    async with grpc.aio.insecure_channel(
        target, options=[("grpc.max_receive_message_length", 64 << 20)]
    ) as channel:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        started = time.monotonic()
        await queue.put(discovery_pb2.DiscoveryRequest(node=node, type_url=CDS))
        call = stub.StreamAggregatedResources(requests())
        clusters: list[str] = []
        held: set[str] = set()
        seen: dict[int, bool] = {}
        snapshot_done = False
        async for response in call:
            if response.type_url == CDS:
                fresh = sorted({_cluster_name(any_) for any_ in response.resources})
                await queue.put(
                    discovery_pb2.DiscoveryRequest(
                        node=node,
                        type_url=CDS,
                        version_info=response.version_info,
                        response_nonce=response.nonce,
                    )
                )
                if fresh != clusters:
                    clusters = fresh
                    await queue.put(
                        discovery_pb2.DiscoveryRequest(node=node, type_url=EDS, resource_names=clusters)
                    )
                continue
            if response.type_url != EDS:
                continue
            now = time.time()
            for any_ in response.resources:
                assignment = endpoint_pb2.ClusterLoadAssignment.FromString(any_.value)
                held.add(assignment.cluster_name)
                for seq, instance_id, health in watches.by_cluster(assignment.cluster_name):
                    if seq in seen:
                        continue
                    if _has(assignment, instance_id, health):
                        seen[seq] = True
                        emit({"seen": seq, "at": now, "stream": index})
            await queue.put(
                discovery_pb2.DiscoveryRequest(
                    node=node,
                    type_url=EDS,
                    resource_names=clusters,
                    version_info=response.version_info,
                    response_nonce=response.nonce,
                )
            )
            if not snapshot_done and len(held) >= names:
                snapshot_done = True
                emit({"snapshot": time.monotonic() - started, "stream": index})
                ready.set()


def _cluster_name(any_) -> str:
    return cluster_pb2.Cluster.FromString(any_.value).name


def _has(assignment, instance_id: str, health: int) -> bool:
    for locality in assignment.endpoints:
        for endpoint in locality.lb_endpoints:
            fields = endpoint.metadata.filter_metadata["eureka"].fields
            if fields["instanceId"].string_value == instance_id:
                return endpoint.health_status == health
    return False


async def run_clients(args: argparse.Namespace) -> None:
    watches = Watches()
    # Held: the loop keeps only a weak reference to a task, and a collected reader drops the watches.
    reader = asyncio.create_task(read_watches(watches))
    events = [asyncio.Event() for _ in range(args.streams)]
    tasks = []
    for index in range(args.streams):
        tasks.append(
            asyncio.create_task(
                one_stream(args.first + index, args.target, args.names, watches, events[index])
            )
        )
    await asyncio.gather(*(event.wait() for event in events))
    emit({"ready": True})
    done, _ = await asyncio.wait([*tasks, reader], timeout=args.duration)
    for task in done:
        if task is not reader and task.exception() is not None:
            emit({"error": repr(task.exception())})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10_000, help="instances (10000)")
    parser.add_argument("--apps", type=int, default=100, help="applications (100)")
    parser.add_argument("--clients", type=int, default=200, help="xDS streams subscribed to everything (200)")
    parser.add_argument("--client-processes", type=int, default=4, help="processes the streams run in (4)")
    parser.add_argument("--changes", type=int, default=40, help="status changes timed (40)")
    parser.add_argument("--dns-seconds", type=float, default=5, help="seconds of DNS flood (5)")
    parser.add_argument("--dns-senders", type=int, default=4, help="UDP sockets of the flood (4)")
    parser.add_argument(
        "--dns-rate", type=int, default=200, help="DNS queries/s during 'on' renew rounds (200; 0: none)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="off/on renew rounds (3)")
    parser.add_argument("--duration", type=float, default=10, help="measured seconds per renew round (10)")
    parser.add_argument("--warmup", type=float, default=2, help="unmeasured seconds per renew round (2)")
    parser.add_argument(
        "--settle", type=float, default=5, help="seconds between the mesh's start and an 'on' round (5)"
    )
    args = parser.parse_args(argv)
    build_loadgen()
    workdir = Path(tempfile.mkdtemp(prefix="bench-mesh-"))
    node = Node(workdir / "node", name="node")
    mesh: Mesh | None = None
    clients: Clients | None = None
    try:
        node.start()
        loadgen(node, "register", args)
        print(f"node on {node.base}: {args.n} instances in {args.apps} apps registered")
        # bench/loadgen names its apps BENCH-SVC-000... with the same VIP address.
        names = [f"bench-svc-{i:03d}.service.eureka" for i in range(args.apps)]

        mesh = Mesh(node, workdir)
        mesh.start()
        mesh.wait_ready(lambda: mesh_answers(mesh))
        rss, cpu0 = mesh.usage()
        print(f"mesh: following the node, {rss:.0f} MiB resident before any xDS client")

        # -- full snapshot to every client
        started = time.monotonic()
        clients = Clients(mesh, args.clients, args.client_processes, args.apps)
        clients.wait(
            lambda: len(clients.records("ready")) == len(clients.processes), SNAPSHOT_TIMEOUT_S, "snapshots"
        )
        all_had = time.monotonic() - started
        snapshots = [r["snapshot"] for r in clients.records("snapshot")]
        rss, cpu1 = mesh.usage()
        print(
            f"full snapshot ({args.apps} clusters, {args.n} endpoints) to {len(snapshots)} streams: "
            f"per stream median {statistics.median(snapshots):.2f} s, "
            f"p99 {percentile(snapshots, 0.99):.2f} s; "
            f"the last had it {all_had:.2f} s after the clients started"
        )
        print(f"mesh during the push: {cpu1 - cpu0:.1f} CPU s, {rss:.0f} MiB resident")

        # -- propagation
        firsts, lasts = propagation(node, clients, args.changes, args.clients)
        rss, cpu2 = mesh.usage()
        print(
            f"a status change at the node → every one of {args.clients} streams holding it, over "
            f"{len(lasts)} changes: median {statistics.median(lasts) * 1000:.0f} ms, "
            f"p99 {percentile(lasts, 0.99) * 1000:.0f} ms, max {max(lasts) * 1000:.0f} ms "
            f"(to the first stream: median {statistics.median(firsts) * 1000:.0f} ms)"
        )
        print(f"mesh over the changes: {cpu2 - cpu1:.1f} CPU s, {rss:.0f} MiB resident")

        # -- DNS
        answered, sent = asyncio.run(dns_flood(mesh.dns_port, names, args.dns_seconds, args.dns_senders, 32))
        rss, cpu3 = mesh.usage()
        print(
            f"DNS: {answered / args.dns_seconds:,.0f} answers/s "
            f"({sent:,} queries sent in {args.dns_seconds:.0f} s, "
            f"A for services of n/apps instances, {args.dns_senders} senders × 32 in flight), "
            f"mesh {(cpu3 - cpu2) / args.dns_seconds:.2f} cores"
        )

        # -- renews with the mesh off and on, interleaved
        rates: dict[str, list[float]] = {"off": [], "on": []}
        for round_ in range(args.rounds):
            for side in ("off", "on"):
                if side == "off":
                    if clients is not None:
                        clients.stop()
                        clients = None
                    if mesh is not None:
                        mesh.stop()
                        mesh = None
                    metrics = loadgen(node, "renew", args)
                else:
                    mesh = Mesh(node, workdir)
                    mesh.start()
                    mesh.wait_ready(lambda m=mesh: mesh_answers(m))
                    clients = started_clients = Clients(mesh, args.clients, args.client_processes, args.apps)
                    started_clients.wait(
                        lambda c=started_clients: len(c.records("ready")) == len(c.processes),
                        SNAPSHOT_TIMEOUT_S,
                        "snapshots",
                    )
                    # The node built its registry page and the mesh pushed 200 snapshots: let both settle.
                    time.sleep(args.settle)
                    _, mesh_cpu = mesh.usage()
                    clients_cpu = started_clients.cpu_seconds()
                    round_started = time.monotonic()
                    if args.dns_rate:
                        with DnsLoad(mesh.dns_port, names, args.dns_rate):
                            metrics = loadgen(node, "renew", args)
                    else:
                        metrics = loadgen(node, "renew", args)
                    took = time.monotonic() - round_started
                    used = (
                        (mesh.usage()[1] - mesh_cpu) / took,
                        (started_clients.cpu_seconds() - clients_cpu) / took,
                    )
                rates[side].append(metrics["req/s"])
                beside = (
                    f"; the mesh used {used[0]:.3f} cores, its xDS clients {used[1]:.3f}"
                    if side == "on"
                    else ""
                )
                print(
                    f"round {round_ + 1} mesh {side:>3}: {metrics['req/s']:,.0f} renews/s{beside}, "
                    f"p99 {metrics.get('p99_ms', 0):.1f} ms"
                )
        off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
        print(f"renews/s, medians: mesh off {off:,.0f}, on {on:,.0f}: {on / off * 100:.1f} %")
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    finally:
        if clients is not None:
            clients.stop()
        stop_all([mesh, node])
    return 0


def clients_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mesh.py clients", description="xDS clients of bench/mesh.py")
    parser.add_argument("--target", required=True, help="host:port of the xDS server")
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--first", type=int, default=0, help="number of the first stream (for node ids)")
    parser.add_argument("--names", type=int, required=True, help="clusters a full snapshot holds")
    parser.add_argument("--duration", type=float, default=600, help="seconds to run at most")
    asyncio.run(run_clients(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["clients"]:
        sys.exit(clients_main(sys.argv[2:]))
    sys.exit(main(sys.argv[1:]))
