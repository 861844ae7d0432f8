"""Heartbeats and fetches of one node: register -> renew -> full fetch -> delta fetch, repeated, with medians.

  python bench/run.py phases --start            # a node started here (deploy conf), run, stop it
  python bench/run.py phases --start --worker-class gevent --worker-connections 1000 --runs 3
  python bench/run.py phases --url http://127.0.0.1:8761/eureka/   # a node that is already running

Each phase is one run of the Go load generator (bench/loadgen); its output is printed as it comes and
kept in --out. With --start every run gets a fresh node (bench/nodes.py), stopped when the run ends,
on Ctrl-C too. See bench/README.md for how to read the numbers.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from nodes import HOST, Node, build_loadgen, port_in_use

PHASES = ("register", "renew", "full", "delta")
METRICS = ("req/s", "p50_ms", "p90_ms", "p99_ms", "max_ms", "errors", "bytes/resp")
CPU_METRICS = ("server_cpu_cores", "client_cpu_cores")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run.py phases", description=__doc__.split("\n\n")[0])
    p.add_argument("--start", action="store_true", help="start a node for each run, stop it after")
    p.add_argument("--port", type=int, default=28761, help="port of the started node (default 28761)")
    p.add_argument("--worker-class", choices=("sync", "gthread", "gevent"), help="with --start")
    p.add_argument("--threads", type=int, help="gthread threads (with --start)")
    p.add_argument("--worker-connections", type=int, help="gevent/gthread connection limit (with --start)")
    p.add_argument("--url", help="serviceUrl of a running node (default http://127.0.0.1:PORT/eureka/)")
    p.add_argument("--runs", type=int, default=1, help="repeat the sequence, report medians (default 1)")
    p.add_argument("-n", type=int, default=10000, help="instances (default 10000)")
    p.add_argument("--apps", type=int, default=100, help="applications (default 100)")
    p.add_argument("--duration", type=float, default=15, help="measured seconds per timed phase (15)")
    p.add_argument("--warmup", type=float, default=3, help="unrecorded seconds before each (3)")
    p.add_argument("-c", type=int, default=16, help="connections for register/renew (16)")
    p.add_argument("--fetch-c", type=int, help="connections for full/delta (default: -c)")
    p.add_argument("--renew-rate", type=float, help="also a renew phase paced at this many req/s")
    p.add_argument("--phases", default=" ".join(PHASES), help='subset/order of "register renew full delta"')
    p.add_argument("--out", type=Path, help="keep raw results here (default: a new temporary directory)")
    p.add_argument("--pin", action="store_true", help="with --start: node on CPU 1, load generator on CPU 0")
    args = p.parse_args(argv)
    args.phases = args.phases.split()
    if not 1 <= args.port <= 65535 or not 1 <= args.runs <= 20:
        p.error("--port must be a port and --runs in 1..20")
    if set(args.phases) - set(PHASES):
        p.error(f"--phases: a subset of {' '.join(PHASES)}")
    if args.worker_class == "sync" and args.threads not in (None, 1):
        p.error("the sync worker has one thread; --threads does not apply")
    if not args.start and (args.worker_class or args.threads or args.worker_connections or args.pin):
        p.error("--worker-class/--threads/--worker-connections/--pin only apply with --start")
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        p.error("--pin needs two CPUs")
    return args


def gunicorn_args(args: argparse.Namespace) -> list[str]:
    extra = ["--worker-class", args.worker_class] if args.worker_class else []
    if args.worker_class == "sync":
        # gunicorn silently turns "sync" into gthread when threads > 1, and the conf sets more.
        extra += ["--threads", "1"]
    elif args.threads:
        extra += ["--threads", str(args.threads)]
    if args.worker_connections:
        extra += ["--worker-connections", str(args.worker_connections)]
    return extra


def start_node(args: argparse.Namespace, out: Path, run: int) -> Node:
    if port_in_use(args.port):
        raise SystemExit(f"something already listens on {HOST}:{args.port}; pick another --port")
    # As deployed (warm restart on), a fresh data directory per start; DATABASE_URL from the
    # environment wins, as for `make run`.
    env = {"LOG_LEVEL": os.environ.get("LOG_LEVEL", "INFO")}
    if os.environ.get("DATABASE_URL"):
        env["DATABASE_URL"] = os.environ["DATABASE_URL"]
    node = Node(
        Path(tempfile.mkdtemp(prefix="data-", dir=out)),
        env,
        port=args.port,
        gunicorn_args=gunicorn_args(args),
        cpus={1} if args.pin else None,
    )
    node.log = out / f"node-{run}.log"
    return node.start()


def run_phase(
    loadgen: Path, args: argparse.Namespace, url: str, pids: str, mode: str, result: Path, *extra: str
) -> None:
    command = [str(loadgen), "-url", url, "-mode", mode, "-n", str(args.n), "-apps", str(args.apps)]
    command += ["-duration", f"{args.duration:g}", "-warmup", f"{args.warmup:g}"]
    command += ["-server-pid", pids] if pids else []
    pin = (lambda: os.sched_setaffinity(0, {0})) if args.pin else None
    with (
        subprocess.Popen(
            [*command, *extra], stdout=subprocess.PIPE, text=True, preexec_fn=pin
        ) as loadgen_run,
        result.open("a") as raw,
    ):
        for line in loadgen_run.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            raw.write(line)


def median_text(texts: list[str]) -> str:
    """The median as the load generator wrote it (odd count), or the mean of the middle two to 2 places."""
    ordered = sorted((float(text), text) for text in texts)
    if not ordered:
        return "-"
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle][1]
    return f"{(ordered[middle - 1][0] + ordered[middle][0]) / 2:.2f}"


def summary(args: argparse.Namespace, url: str, out: Path, labels: list[str]) -> None:
    texts: dict[tuple[str, str], list[str]] = {}
    for run in range(1, args.runs + 1):
        for line in (out / f"run-{run}.txt").read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and re.fullmatch(r"-?[0-9.]+(e[-+]?[0-9]+)?", parts[2]):
                texts.setdefault((parts[0], parts[1]), []).append(parts[2])
    print()
    fetch_c = args.fetch_c or args.c
    print(
        f"== summary: median of {args.runs} run(s); url={url} n={args.n} apps={args.apps} "
        f"c={args.c} fetch-c={fetch_c}"
    )
    if args.start:
        threads = f"threads={args.threads} " if args.threads else ""
        connections = f"worker-connections={args.worker_connections}" if args.worker_connections else ""
        print(f"   node: {args.worker_class or 'deploy/gunicorn.conf.py worker'} {threads}{connections}")
    row = "%-14s %9s %8s %8s %8s %8s %7s %10s %7s %7s  %s"
    print(
        row
        % (
            "phase",
            "req/s",
            "p50_ms",
            "p90_ms",
            "p99_ms",
            "max_ms",
            "errors",
            "bytes/resp",
            "srv_cpu",
            "cli_cpu",
            "req/s per run",
        )
    )
    for label in labels:
        cells = [median_text(texts.get((label, metric), [])) for metric in (*METRICS, *CPU_METRICS)]
        print(row % (label, *cells, " ".join(texts.get((label, "req/s"), []))))
    print(f"raw results: {out}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    url = args.url or f"http://{HOST}:{args.port}/eureka/"
    out = args.out or Path(tempfile.mkdtemp(prefix="eureka-bench."))
    out.mkdir(parents=True, exist_ok=True)
    print("== building the load generator", flush=True)
    loadgen = build_loadgen()
    rate_label = f"renew@{args.renew_rate:g}" if args.renew_rate else ""
    for run in range(1, args.runs + 1):
        result = out / f"run-{run}.txt"
        result.write_text("")
        print(f"== run {run}/{args.runs} -> {result}", flush=True)
        node = start_node(args, out, run) if args.start else None
        try:
            pids = ",".join(map(str, node.pids())) if node else ""
            if node:
                found = re.search(r"Using worker: .*", node.log.read_text(errors="replace"))
                print(
                    f"   node pids {pids}: {found.group(0) if found else 'worker class unknown'}", flush=True
                )
            for phase in args.phases:
                conc = args.c if phase in ("register", "renew") else (args.fetch_c or args.c)
                run_phase(loadgen, args, url, pids, phase, result, "-c", str(conc))
                if phase == "renew" and args.renew_rate:
                    rate = ("-rate", f"{args.renew_rate:g}", "-label", rate_label)
                    run_phase(loadgen, args, url, pids, "renew", result, "-c", str(args.c), *rate)
        finally:
            if node:
                node.stop()
    labels = [
        label
        for phase in args.phases
        for label in ([phase, rate_label] if phase == "renew" and rate_label else [phase])
    ]
    summary(args, url, out, labels)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
