"""What a setting costs heartbeats: closed-loop renews/s of two nodes that differ only in settings.

Starts node A and node B (bench/nodes.py: gunicorn with deploy/gunicorn.conf.py, embedded mode, a
database each, loopback ports), gives both the same client account (so both receive the very same requests,
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
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from nodes import HOST, LOADGEN, Node, build_loadgen, loadgen_metrics, stop_all

ACCOUNT, PASSWORD = "bench-client", "bench-password-not-secret"


def settings_pairs(text: list[str]) -> dict[str, str]:
    pairs = {}
    for item in text:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise SystemExit(f"not NAME=value: {item!r}")
        pairs[name] = value
    return pairs


def start_node(label: str, env: dict[str, str], workdir: Path) -> Node:
    """A node (bench/nodes.py) with the bench's client account, started."""
    node = Node(
        workdir, {"EUREKA_ACCOUNT_PASSWORD": PASSWORD, **env}, name=label, log=workdir / "gunicorn.log"
    )
    node.manage("eureka_account", ACCOUNT, "--role", "client")
    return node.start()


def client_url(node: Node) -> str:
    """The serviceUrl with the client account's credentials in it (a node with accounts off ignores them)."""
    return f"http://{ACCOUNT}:{PASSWORD}@{HOST}:{node.port}/eureka/"


def loadgen(node: Node, mode: str, args: argparse.Namespace) -> dict[str, float]:
    command = [
        str(LOADGEN),
        *("-url", client_url(node), "-mode", mode, "-n", str(args.n), "-apps", str(args.apps), "-c", "16"),
        *(
            "-duration",
            str(args.duration),
            "-warmup",
            str(args.warmup),
            "-server-pid",
            ",".join(map(str, node.pids())),
        ),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.n / 20 + 300)
    metrics = loadgen_metrics(done.stdout)
    if done.returncode != 0 or "req/s" not in metrics:
        raise SystemExit(f"loadgen {mode} at {node.name} failed: {done.stderr.strip()[-400:]}")
    if metrics.get("errors"):
        raise SystemExit(f"loadgen {mode} at {node.name}: {metrics['errors']:.0f} errors (see its log)")
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
    settings = {"A": settings_pairs(args.a), "B": settings_pairs(args.b)}
    nodes: list[Node] = []
    rates: dict[str, list[float]] = {"A": [], "B": []}
    try:
        for label, env in settings.items():
            nodes.append(start_node(label, env, workdir / label))
            loadgen(nodes[-1], "register", args)
        print(f"A: {' '.join(args.a) or '(defaults)'}\nB: {' '.join(args.b) or '(defaults)'}")
        print(f"{args.n} instances, {args.apps} apps; closed-loop renews, 16 conns, {args.duration:g} s")
        for round_no in range(1, args.rounds + 1):
            for node in nodes:
                metrics = loadgen(node, "renew", args)
                rates[node.name].append(metrics["req/s"])
                print(
                    f"round {round_no} {node.name}: {metrics['req/s']:8,.0f} renews/s  "
                    f"p50 {metrics.get('p50_ms', 0):.2f} ms  p99 {metrics.get('p99_ms', 0):.2f} ms  "
                    f"server {metrics.get('server_cpu_cores', 0):.2f} cores",
                    flush=True,
                )
        median_a, median_b = statistics.median(rates["A"]), statistics.median(rates["B"])
        print(f"median A {median_a:,.0f}/s, B {median_b:,.0f}/s: B = {median_b / median_a:.1%} of A")
    finally:
        stop_all(nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
