"""Full fetches with readers: GET /eureka/apps (gzip JSON) from the node alone, then from 1 and 2
reader workers beside it (registry/reader/, deploy/gunicorn_reader.conf.py).

Starts on free loopback ports what production mode runs — redis-server, the node (gunicorn with
deploy/gunicorn.conf.py, production mode), a Celery worker and Celery beat (the cache sync that
publishes the payloads to Redis) — registers --n instances over --apps apps with the Go load
generator (bench/bin/loadgen), then for each round measures, interleaved:

  node       loadgen -mode full against the node itself (its read-only tier is in Redis too)
  reader xN  loadgen -mode full against a reader with N worker processes (the node beside it, idle
             but for its cache syncs); the reader is started for the measurement and stopped after

and prints one table of the rounds and their medians. Server CPU counts every process of the
topology (node, reader, Celery, redis-server). Everything started is stopped at the end, on Ctrl-C
and when this script is killed (the children get SIGTERM when it dies).

    .venv/bin/python bench/readers.py                  # 3 rounds of 10 s (about 4 minutes)
    .venv/bin/python bench/readers.py --rounds 1 --duration 5 --n 2000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from nodes import LOADGEN, Node, Redis, build_loadgen, loadgen_metrics, reader, stop_all

FULL = {"Accept": "application/json", "Accept-Encoding": "gzip"}


@dataclass
class Topology:
    """What production mode runs (bench/nodes.py): redis-server, the node with its Celery worker and
    beat, and a reader while one is measured."""

    redis: Redis
    node: Node
    reader: Node | None = None

    @property
    def node_url(self) -> str:
        return self.node.base

    def stop_reader(self) -> None:
        if self.reader is not None:
            self.reader.stop()
            self.reader = None

    def stop_all(self) -> None:
        self.stop_reader()
        stop_all([self.node, self.redis])

    def server_pids(self) -> list[int]:
        readers = self.reader.pids() if self.reader else []
        return [*self.redis.pids(), *self.node.pids(), *self.node.helper_pids(), *readers]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, OSError, ValueError):
            if predicate():
                return
        time.sleep(0.2)
    raise SystemExit(f"readers.py: {what} within {timeout:.0f}s")


def start_topology(workdir: Path) -> Topology:
    redis = Redis(workdir).start()
    try:
        # Its own data directory and Redis: no warm-restart snapshot of another run is restored.
        secrets = {"EUREKA_CONTROL_SECRET": "bench-readers-secret", "SECRET_KEY": "bench-readers-secret-key"}
        node = Node(workdir, secrets, redis=redis, celery_worker_args=["--pool=solo"]).start()
    except BaseException:
        redis.stop()
        raise
    return Topology(redis, node)


def start_reader(topology: Topology, workers: int) -> str:
    topology.reader = reader(topology.node, workers)
    url = topology.reader.base

    # Every worker serves GET apps from Redis (no Via: not forwarded) before the measurement.
    def all_served() -> bool:
        with httpx.Client(timeout=10) as client:
            return all(
                "Via" not in client.get(f"{url}/eureka/apps", headers={**FULL, "Connection": "close"}).headers
                for _ in range(4 * workers)
            )

    wait_for(all_served, 30, "the reader did not serve GET apps from Redis")
    return url


def loadgen(args: argparse.Namespace, url: str, mode: str, pids: list[int], raw: Path, **extra: str) -> dict:
    command = [
        str(LOADGEN),
        "-url",
        f"{url}/eureka/",
        "-mode",
        mode,
        "-n",
        str(args.n),
        "-apps",
        str(args.apps),
        "-c",
        str(args.c),
        "-duration",
        str(args.duration),
        "-warmup",
        str(args.warmup),
        "-server-pid",
        ",".join(map(str, pids)),
    ]
    for key, value in extra.items():
        command += [f"-{key}", value]
    bound = 120 + args.n / 20 if mode == "register" else args.warmup + args.duration + 60
    cpu_before, wall_before = psutil.cpu_times(), time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=bound)
    busy = busy_cores_since(cpu_before, time.monotonic() - wall_before)
    with raw.open("a") as out:
        out.write(f"$ {shlex.join(command)}\n{done.stdout}{done.stderr}\n")
    metrics = loadgen_metrics(done.stdout)
    if done.returncode != 0 or "req/s" not in metrics:
        raise SystemExit(f"readers.py: loadgen {mode} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    # What the rest of the machine took meanwhile (other people's jobs; approximate: the warm-up is in
    # `busy`, not in the load generator's CPU figures).
    ours = metrics.get("server_cpu_cores", 0.0) + metrics.get("client_cpu_cores", 0.0)
    metrics["other_cores"] = max(0.0, busy - ours)
    return metrics


def busy_cores_since(before, seconds: float) -> float:
    """Cores the whole machine kept busy since ``before`` (psutil.cpu_times()), steal included."""

    def busy(t) -> float:
        return sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))

    return (busy(psutil.cpu_times()) - busy(before)) / max(seconds, 1e-9)


def instances_served(url: str) -> int:
    body = httpx.get(f"{url}/eureka/apps", headers={"Accept": "application/json"}, timeout=30).text
    return body.count('"instanceId"')


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=10_000, help="instances (default 10,000)")
    parser.add_argument("--apps", type=int, default=100, help="applications (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--duration", type=int, default=10, help="measured seconds per run (default 10)")
    parser.add_argument(
        "--warmup", type=int, default=3, help="unrecorded seconds before each run (default 3)"
    )
    parser.add_argument("-c", type=int, default=16, help="connections (default 16)")
    parser.add_argument(
        "--workers", default="1,2", help="reader worker counts to measure, comma-separated (default 1,2)"
    )
    parser.add_argument("--out", type=Path, help="directory for logs and raw loadgen output")
    args = parser.parse_args()
    reader_workers = [int(w) for w in args.workers.split(",") if w.strip()]

    build_loadgen()
    workdir = args.out or Path(tempfile.mkdtemp(prefix="eureka-readers."))
    workdir.mkdir(parents=True, exist_ok=True)
    raw = workdir / "loadgen.txt"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    topology = start_topology(workdir)
    configs = [("node", 0), *((f"reader x{w}", w) for w in reader_workers)]
    results: dict[str, dict[str, list[float]]] = {name: {} for name, _ in configs}
    loads: list[float] = []
    try:
        print(f"registering {args.n:,} instances in {args.apps} apps at the node ...", flush=True)
        loadgen(args, topology.node_url, "register", topology.server_pids(), raw)
        wait_for(
            lambda: instances_served(topology.node_url) == args.n, 60, "GET apps did not list every instance"
        )
        for round_no in range(1, args.rounds + 1):
            for name, workers in configs:
                url = topology.node_url if workers == 0 else start_reader(topology, workers)
                loads.append(os.getloadavg()[0])
                metrics = loadgen(args, url, "full", topology.server_pids(), raw)
                if workers:
                    topology.stop_reader()
                for key in (
                    "req/s",
                    "p99_ms",
                    "server_cpu_cores",
                    "client_cpu_cores",
                    "other_cores",
                    "errors",
                ):
                    results[name].setdefault(key, []).append(metrics.get(key, float("nan")))
                if metrics.get("payload_instances") != args.n:
                    listed = metrics.get("payload_instances")
                    print(f"   note: {name} round {round_no} listed {listed} instances")
                print(
                    f"   round {round_no} {name:<10} {metrics['req/s']:8,.0f} req/s"
                    f"  p99 {metrics['p99_ms']:6.1f} ms"
                    f"  server CPU {metrics.get('server_cpu_cores', float('nan')):.2f}"
                    f"  others {metrics['other_cores']:.2f}",
                    flush=True,
                )
    finally:
        topology.stop_all()

    print()
    print(
        f"GET /eureka/apps, gzip JSON, {args.n:,} instances in {args.apps} apps, {args.c} connections, "
        f"{args.duration} s runs after {args.warmup} s warm-up, {args.rounds} interleaved rounds; "
        f"nproc {os.cpu_count()}, load average during the runs {min(loads):.1f}-{max(loads):.1f}"
    )
    print()
    print(
        "| serves the full fetches | req/s per round | median req/s | vs node | p99 ms (median) "
        "| server CPU (cores) | load generator | other processes |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    base = statistics.median(results["node"]["req/s"])
    labels = {
        "node": "the node alone",
        **{f"reader x{w}": f"{w} reader worker{'s' * (w > 1)}" for w in reader_workers},
    }
    for name, _ in configs:
        values = results[name]
        median = statistics.median(values["req/s"])
        print(
            f"| {labels[name]} | {' · '.join(f'{v:,.0f}' for v in values['req/s'])} | {median:,.0f} "
            f"| {median / base:.2f}× | {statistics.median(values['p99_ms']):.1f} "
            f"| {statistics.median(values['server_cpu_cores']):.2f} "
            f"| {statistics.median(values['client_cpu_cores']):.2f} "
            f"| {statistics.median(values['other_cores']):.2f} |"
        )
    errors = sum(sum(values["errors"]) for values in results.values())
    print()
    print(f"errors: {errors:,.0f}; logs and raw output in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
