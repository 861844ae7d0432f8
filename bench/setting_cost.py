"""What a setting costs heartbeats: closed-loop renews/s of two nodes that differ only in settings.

Starts node A and node B (gunicorn with deploy/gunicorn.conf.py, embedded mode, a database each,
loopback ports), gives both the same client account (so both receive the very same requests,
credentials included; a node with API accounts off ignores them), registers the same fleet at each
with the Go load generator, then renews as fast as 16 connections allow, interleaved A B A B so the
machine's noise hits both, and prints each round, the medians and B's share of A.

  .venv/bin/python bench/setting_cost.py --b EUREKA_API_AUTH=true                 # what accounts cost
  .venv/bin/python bench/setting_cost.py --a EUREKA_METRICS_ENABLED=false --b EUREKA_METRICS_ENABLED=true
  .venv/bin/python bench/setting_cost.py --b EUREKA_API_AUTH=true --rounds 5 --duration 10 -n 10000

Needs Go (bench/loadgen is built on first use). Loopback only; bounded in time; both nodes are
stopped at the end. Printed, not asserted.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
LOADGEN = ROOT / "bench" / "bin" / "loadgen"
HOST = "127.0.0.1"
ACCOUNT, PASSWORD = "bench-client", "bench-password-not-secret"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def build_loadgen() -> None:
    if LOADGEN.exists():
        return
    LOADGEN.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", str(LOADGEN), "."], cwd=ROOT / "bench" / "loadgen", check=True)


def settings_pairs(text: list[str]) -> dict[str, str]:
    pairs = {}
    for item in text:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise SystemExit(f"not NAME=value: {item!r}")
        pairs[name] = value
    return pairs


@dataclass
class Node:
    label: str
    env: dict[str, str]
    workdir: Path
    port: int = 0
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{ACCOUNT}:{PASSWORD}@{HOST}:{self.port}/eureka/"

    def start(self) -> None:
        self.workdir.mkdir(parents=True)
        self.port = free_port()
        self.env = {
            **os.environ,
            "DATABASE_URL": f"sqlite:///{self.workdir / 'db.sqlite3'}",
            # A data directory per node: no node restores another's (or an earlier run's) snapshot.
            "EUREKA_DATA_DIR": str(self.workdir),
            "LOG_LEVEL": "WARNING",
            "EUREKA_ACCOUNT_PASSWORD": PASSWORD,
            **self.env,
        }
        for command in (["migrate", "-v0"], ["eureka_account", ACCOUNT, "--role", "client"]):
            subprocess.run(
                [str(BIN / "python"), "manage.py", *command],
                cwd=ROOT,
                env=self.env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        log = (self.workdir / "gunicorn.log").open("ab")
        self.process = subprocess.Popen(
            [str(BIN / "gunicorn"), "-c", "deploy/gunicorn.conf.py", "--bind", f"{HOST}:{self.port}"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://{HOST}:{self.port}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise SystemExit(f"node {self.label} did not start: see {self.workdir / 'gunicorn.log'}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def pids(self) -> str:
        children = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True
        ).stdout.split()
        return ",".join([str(self.process.pid), *children])


def loadgen(node: Node, mode: str, args: argparse.Namespace) -> dict[str, float]:
    command = [
        str(LOADGEN),
        *("-url", node.url, "-mode", mode, "-n", str(args.n), "-apps", str(args.apps), "-c", "16"),
        *("-duration", str(args.duration), "-warmup", str(args.warmup), "-server-pid", node.pids()),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.n / 20 + 300)
    metrics = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and not line.startswith("#"):
            try:
                metrics[parts[1]] = float(parts[2])
            except ValueError:
                pass
    if done.returncode != 0 or "req/s" not in metrics:
        raise SystemExit(f"loadgen {mode} at {node.label} failed: {done.stderr.strip()[-400:]}")
    if metrics.get("errors"):
        raise SystemExit(f"loadgen {mode} at {node.label}: {metrics['errors']:.0f} errors (see its log)")
    return metrics


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", nargs="*", default=[], metavar="NAME=value", help="settings of node A")
    parser.add_argument("--b", nargs="*", default=[], metavar="NAME=value", help="settings of node B")
    parser.add_argument("--rounds", type=int, default=3, help="A B rounds (default 3)")
    parser.add_argument("--duration", type=float, default=10, help="measured seconds per round (10)")
    parser.add_argument("--warmup", type=float, default=2, help="unmeasured seconds per round (2)")
    parser.add_argument("-n", type=int, default=10_000, help="instances (10000)")
    parser.add_argument("--apps", type=int, default=100, help="applications (100)")
    args = parser.parse_args(argv)
    build_loadgen()
    workdir = Path(tempfile.mkdtemp(prefix="setting-cost-"))
    nodes = [
        Node("A", settings_pairs(args.a), workdir / "A"),
        Node("B", settings_pairs(args.b), workdir / "B"),
    ]
    rates: dict[str, list[float]] = {"A": [], "B": []}
    try:
        for node in nodes:
            node.start()
            loadgen(node, "register", args)
        print(f"A: {' '.join(args.a) or '(defaults)'}\nB: {' '.join(args.b) or '(defaults)'}")
        print(f"{args.n} instances, {args.apps} apps; closed-loop renews, 16 conns, {args.duration:g} s")
        for round_no in range(1, args.rounds + 1):
            for node in nodes:
                metrics = loadgen(node, "renew", args)
                rates[node.label].append(metrics["req/s"])
                print(
                    f"round {round_no} {node.label}: {metrics['req/s']:8,.0f} renews/s  "
                    f"p50 {metrics.get('p50_ms', 0):.2f} ms  p99 {metrics.get('p99_ms', 0):.2f} ms  "
                    f"server {metrics.get('server_cpu_cores', 0):.2f} cores",
                    flush=True,
                )
        median_a, median_b = statistics.median(rates["A"]), statistics.median(rates["B"])
        print(f"median A {median_a:,.0f}/s, B {median_b:,.0f}/s: B = {median_b / median_a:.1%} of A")
    finally:
        for node in nodes:
            node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
