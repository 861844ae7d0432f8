"""One core against two: how each server's heartbeats and empty deltas scale with the cores it may use.

Both servers (a stock Spring Cloud Eureka Server and our node, as ``compare.py`` starts them) are
started once, given the same registry and a warm-up of the same load, then measured in turns with
the server on one core (CPU 1: every thread of it pinned there) and the load generator alone on the
other (CPU 0), and with the server free to use both (the load generator too, as in ``compare.py``).
What a server gains from the second core is what its design gets out of more cores; on this 2-core
machine that is as far as ``taskset`` can go.

    .venv/bin/python bench/run.py cores --server granian          # about 10 minutes
    .venv/bin/python bench/run.py cores --n 2000 --warm-up 10     # a quick check
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from compare import Contender, loadgen, our_server, sce_server, wait_first_200, wait_listed
from nodes import HTTP_SERVERS, build_loadgen

SCE_JAR = Path(__file__).resolve().parents[1] / "tests/interop/sce/target/sce-server.jar"
ONE_CORE = {1}
LOADGEN_CORE = {0}
BOTH = {0, 1}
# (label, the server's CPUs, the load generator's)
SETUPS = (("1 core", ONE_CORE, LOADGEN_CORE), ("2 cores", BOTH, BOTH))


def pin(pids: list[int], cpus: set[int]) -> None:
    """Every thread of every process in ``pids`` on ``cpus`` (threads started later inherit it)."""
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                os.sched_setaffinity(int(task.name), cpus)
            except (ProcessLookupError, PermissionError):
                pass


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run.py cores", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--apps", type=int, default=100)
    p.add_argument("--duration", type=float, default=8, help="measured seconds per phase")
    p.add_argument("--warmup", type=float, default=2, help="unrecorded seconds before each phase")
    p.add_argument("--warm-up", type=float, default=60, help="seconds of mixed load per server first")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("-c", type=int, default=16)
    p.add_argument("--server", choices=HTTP_SERVERS, default=HTTP_SERVERS[1])
    p.add_argument("--server-args", default="")
    p.add_argument("--sce-jar", type=Path, default=SCE_JAR, help="built by bench/compare.sh")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if os.cpu_count() != 2:
        print(f"cores: written for a 2-core machine, this one has {os.cpu_count()}", file=sys.stderr)
        return 2
    build_loadgen()
    out = Path(tempfile.mkdtemp(prefix="eureka-cores-"))
    retention_s = 20
    servers = {
        "sce": sce_server(shutil.which("java") or "java", args.sce_jar, out / "sce", "1g", retention_s),
        "ours": our_server(out / "ours", retention_s, args.server, args.server_args.split()),
    }
    contenders = {side: Contender(side, 0, server) for side, server in servers.items()}
    raw = out / "loadgen.txt"
    results: dict[tuple[str, str, str], list[float]] = {}
    try:
        for contender in contenders.values():
            (out / contender.side).mkdir(exist_ok=True)
            with httpx.Client(timeout=2.0) as client:
                wait_first_200(contender, client)
                loadgen(contender, "register", args, raw)
                wait_listed(contender, client, "apps/", args.n)
            print(f"== {contender.side}: {args.n} registered; {args.warm_up:.0f} s of warm-up", flush=True)
            for mode in ("renew", "full", "delta"):
                loadgen(contender, mode, args, raw, warmup=0, duration=args.warm_up / 3)
        # Each server's delta empties (retention 20 s) before the empty-delta phases.
        time.sleep(retention_s + 5)
        for round_no in range(1, args.rounds + 1):
            for label, server_cpus, loadgen_cpus in SETUPS:
                for contender in contenders.values():
                    pin(contender.pids(), server_cpus)
                    os.sched_setaffinity(0, loadgen_cpus)  # the load generator inherits it
                    for mode in ("renew", "delta"):
                        metrics, _ = loadgen(contender, mode, args, raw)
                        results.setdefault((contender.side, label, mode), []).append(metrics["req/s"])
                        results.setdefault((contender.side, label, mode + " cpu"), []).append(
                            metrics.get("server_cpu_cores", 0.0)
                        )
                        rate, used = metrics["req/s"], metrics.get("server_cpu_cores", 0.0)
                        who = f"round {round_no} {contender.side} {label} {mode}"
                        print(f"   {who}: {rate:,.0f} req/s, {used:.2f} cores", flush=True)
    finally:
        os.sched_setaffinity(0, BOTH)
        for server in servers.values():
            server.stop()
    print(
        f"\n{args.n:,} instances, {args.c} connections, {args.duration:g} s phases, medians of {args.rounds}:"
    )
    print("| server | phase | 1 core (req/s) | 2 cores (req/s) | 2 cores / 1 core | cores used with 2 |")
    print("|---|---|---:|---:|---:|---:|")
    for side in ("sce", "ours"):
        for mode, name in (("renew", "renew, closed loop"), ("delta", "empty delta, closed loop")):
            one = statistics.median(results[(side, "1 core", mode)])
            two = statistics.median(results[(side, "2 cores", mode)])
            used = statistics.median(results[(side, "2 cores", mode + " cpu")])
            print(f"| {side} | {name} | {one:,.0f} | {two:,.0f} | {two / one:.2f}× | {used:.2f} |")
    print(f"\nraw output and server logs: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
