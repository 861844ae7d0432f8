"""Side by side: one node of this registry and a stock Spring Cloud Eureka Server (SCE), same machine.

Run through ``bench/compare.sh``, which builds the load generator and the SCE jar first and passes the
jar here (``--sce-jar``), or why SCE is skipped (``--sce-skipped``). For each round, SCE and then our
node are started fresh and put through the same phases, one server at a time, so that machine noise
(this is a shared two-core machine) falls on both sides alike:

  cold start   spawn -> first 200 on GET /eureka/apps (no Accept header: see wait_first_200)
  RSS idle     a few seconds after that first 200
  register     --n instances over --apps apps, once each, -c connections (16); then RSS
  renew        closed loop (as fast as possible), -c connections
  renew@RATE   paced at --rate requests/s in total: achieved rate and latency from scheduled start
  full         GET apps/ (gzip JSON), closed loop
  delta        GET apps/delta (gzip JSON), closed loop; then RSS at the end

The load comes from bench/bin/loadgen, which also reports the server's CPU (``-server-pid``: every
process of the server's tree). The table shows every round's value and the ratio of the medians.

SCE runs with ``java -Xmx1g -jar`` (``--sce-heap``) and Spring Cloud's documented standalone settings,
on the command line: its own address and port, ``register-with-eureka=false``, ``fetch-registry=false``,
and its own URL as ``defaultZone`` with ``eureka.instance.hostname=127.0.0.1``. That last pair is what
makes it standalone: left at the default (``http://localhost:8761/eureka/``), SCE would take that URL
for a peer and replicate every write to whatever listens there. Nothing else is set, neither for nor
against.

Our node runs as ``bench/run.py phases`` starts it (bench/nodes.py): gunicorn with
deploy/gunicorn.conf.py (the conf's gevent worker, embedded mode), with this process's environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import psutil
from nodes import GUNICORN, LOADGEN, Node, Server, free_port, loadgen_metrics, spring_eureka

SIDES = ("sce", "ours")
SIDE_NAMES = {"sce": "SCE", "ours": "ours"}

# Bounds, so that no phase can hang the run. A JVM on a busy two-core machine may take a while.
START_TIMEOUT_S = {"sce": 180.0, "ours": 60.0}
# Both servers keep GET apps/ in a read-only cache refreshed every 30 s (Eureka's default): what they
# serve can lag a registration by that much.
SERVED_TIMEOUT_S = 45.0
# Let start-up work (JIT, the first scheduler ticks) settle before the idle RSS is taken.
IDLE_SETTLE_S = 3.0
POLL_S = 0.05


# Remarks for under the table (failed phases, errors, a server that fell behind), in run order.
NOTES: list[str] = []


class PhaseError(Exception):
    """A phase that failed or ran over its bound; the server's round stops there."""


# ------------------------------------------------------------------------------------------ servers


@dataclass
class Contender:
    """One server of a round, SCE or our node; bench/nodes.py starts and stops both."""

    side: str
    round_no: int
    server: Server

    @property
    def who(self) -> str:
        return f"round {self.round_no} {SIDE_NAMES[self.side]}"

    def __getattr__(self, name: str):
        # url, port, pids(), rss_mb(), pss_mb(), alive(), log_tail(), stop(): the server's own.
        return getattr(self.server, name)


def sce_server(java: str, jar: Path, workdir: Path, heap: str = "1g") -> Server:
    return spring_eureka(jar, workdir, heap, java)


def our_server(workdir: Path) -> Node:
    """A node as bench/run.py phases starts it (deploy/gunicorn.conf.py, embedded mode), with this
    process's environment; DATABASE_URL from it wins over the node's own migrated database."""
    port = free_port()
    env = {"LOG_LEVEL": os.environ.get("LOG_LEVEL", "INFO")}
    if os.environ.get("DATABASE_URL"):
        env["DATABASE_URL"] = os.environ["DATABASE_URL"]
    return Node(workdir / f"ours-data-{port}", env, port=port, log=workdir / "ours.log")


def wait_first_200(server: Contender, client: httpx.Client) -> float:
    """Seconds from spawn to the first 200 on GET /eureka/apps. No Accept header: a JSON request here
    would put the empty registry into the read-only cache of the JSON key that the fetch phases read."""
    started = time.monotonic()
    server.start(wait=False)
    deadline = started + START_TIMEOUT_S[server.side]
    while time.monotonic() < deadline:
        if not server.alive():
            raise PhaseError(f"{server.side} exited during start-up:\n{server.log_tail()}")
        try:
            if client.get(f"{server.url}apps").status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(POLL_S)
    raise PhaseError(
        f"{server.side}: no 200 within {START_TIMEOUT_S[server.side]:.0f}s:\n{server.log_tail()}"
    )


def served_instances(server: Contender, client: httpx.Client) -> int:
    response = client.get(
        f"{server.url}apps/", headers={"Accept": "application/json", "Accept-Encoding": "gzip"}
    )
    response.raise_for_status()
    apps = orjson.loads(response.content)["applications"].get("application") or []
    if isinstance(apps, dict):
        apps = [apps]
    count = 0
    for app in apps:
        instances = app.get("instance") or []
        count += len(instances) if isinstance(instances, list) else 1
    return count


def wait_served(server: Contender, client: httpx.Client, n: int) -> float:
    """Wait until GET apps/ (JSON) lists all n instances, so both servers' fetch phases serve the same
    registry; seconds waited."""
    started = time.monotonic()
    seen = -1
    while time.monotonic() - started < SERVED_TIMEOUT_S:
        try:
            seen = served_instances(server, client)
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            seen = -1
        if seen == n:
            return time.monotonic() - started
        time.sleep(0.5)
    raise PhaseError(f"{server.side}: GET apps/ listed {seen} of {n} instances after {SERVED_TIMEOUT_S:.0f}s")


# ------------------------------------------------------------------------------------------ load


def busy_cores_since(before, seconds: float) -> float:
    """Cores the whole machine kept busy since ``before`` (a psutil.cpu_times()), all processes, plus
    what the hypervisor stole. Not guest time: Linux counts it in user already."""

    def busy(t) -> float:
        return sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))

    return (busy(psutil.cpu_times()) - busy(before)) / max(seconds, 1e-9)


def phase_label(mode: str, extra: tuple[str, ...]) -> str:
    return extra[extra.index("-label") + 1] if "-label" in extra else mode


def loadgen(
    server: Contender,
    mode: str,
    args: argparse.Namespace,
    raw: Path,
    *extra: str,
    warmup: float | None = None,
) -> tuple[dict[str, float], float]:
    """One loadgen phase: its ``phase metric value`` lines as {metric: value}, and the cores that
    processes other than the server and the load generator kept busy meanwhile (the noise)."""
    command = [
        str(LOADGEN),
        "-url",
        server.url,
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
        str(args.warmup if warmup is None else warmup),
        "-server-pid",
        ",".join(map(str, server.pids())),
        *extra,
    ]
    # Registration is one request per instance; allow a slow server 20/s plus start-up slack.
    bound = 120 + args.n / 20 if mode == "register" else args.warmup + args.duration + 60
    cpu_before, wall_before = psutil.cpu_times(), time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=bound)
    except subprocess.TimeoutExpired as exc:
        raise PhaseError(f"{server.side} {mode}: loadgen ran over {bound:.0f}s") from exc
    busy = busy_cores_since(cpu_before, time.monotonic() - wall_before)
    with raw.open("a") as out:
        out.write(f"$ {shlex.join(command)}\n{done.stdout}{done.stderr}\n")
    metrics = loadgen_metrics(done.stdout)
    if done.returncode != 0 or "req/s" not in metrics:
        raise PhaseError(
            f"{server.side} {mode}: loadgen exited {done.returncode}: {done.stderr.strip()[-500:]}"
        )
    if metrics.get("errors"):
        kinds = ", ".join(f"{k[7:]} {v:,.0f}" for k, v in sorted(metrics.items()) if k.startswith("errors."))
        NOTES.append(f"{server.who} {phase_label(mode, extra)}: {metrics['errors']:,.0f} errors ({kinds})")
    # Approximate: `busy` spans the whole run of the load generator (warm-up included), its CPU figures
    # the measured seconds only. Good enough to tell a quiet machine from a busy one.
    other = max(0.0, busy - metrics.get("server_cpu_cores", 0.0) - metrics.get("client_cpu_cores", 0.0))
    return metrics, other


# ------------------------------------------------------------------------------------------ one round


@dataclass
class Results:
    values: dict[str, dict[str, list[float]]] = field(default_factory=lambda: {side: {} for side in SIDES})

    def add(self, side: str, key: str, value: float) -> None:
        self.values[side].setdefault(key, []).append(value)


def run_round(server: Contender, args: argparse.Namespace, results: Results, raw: Path) -> None:
    side = server.side
    add = lambda key, value: results.add(side, key, value)  # noqa: E731
    errors = 0.0
    other: list[float] = []
    # One keep-alive client for the probes; its short timeout keeps a hung server from stalling them.
    with httpx.Client(timeout=2.0) as client:
        add("cold_start_s", wait_first_200(server, client))
        worker = re.search(r"Using worker: (\S+)", server.log_tail(200))
        print(
            f"   {SIDE_NAMES[side]} up on port {server.port}, pids {server.pids()}"
            f"{' (' + worker.group(1) + ')' if worker else ''}",
            flush=True,
        )
        time.sleep(IDLE_SETTLE_S)
        add("rss_idle_mb", server.rss_mb())
        add("pss_idle_mb", server.pss_mb())

        reg, _ = loadgen(server, "register", args, raw)
        add("register_rps", reg["req/s"])
        add("register_cpu", reg.get("server_cpu_cores", float("nan")))
        errors += reg.get("errors", 0)
        add("rss_registered_mb", server.rss_mb())
        add("pss_registered_mb", server.pss_mb())
        waited = wait_served(server, client, args.n)
        if waited > 1:
            NOTES.append(
                f"{server.who}: GET apps/ listed all {args.n} instances {waited:.1f}s "
                "after registration ended"
            )

    renew, noise = loadgen(server, "renew", args, raw)
    other.append(noise)
    add("renew_rps", renew["req/s"])
    add("renew_p99", renew["p99_ms"])
    add("renew_cpu", renew.get("server_cpu_cores", float("nan")))
    add("renew_per_cpu_s", renew["req/s"] / max(renew.get("server_cpu_cores", 0.0), 1e-9))
    add("renew_conns", renew.get("connections_opened", float("nan")))
    errors += renew.get("errors", 0)

    # No warm-up here (the closed-loop phase just warmed the server): a server that cannot keep up
    # would spend the recorded window working off the warm-up's backlog, and the loadgen's req/s,
    # which counts requests scheduled in that window only, would understate what it served. With
    # every request recorded, req/s is the rate it achieved and latency shows the growing backlog.
    label = f"renew@{args.rate:g}"
    paced, noise = loadgen(server, "renew", args, raw, "-rate", f"{args.rate:g}", "-label", label, warmup=0)
    other.append(noise)
    add("paced_rps", paced["req/s"])
    add("paced_p50", paced["p50_ms"])
    add("paced_p99", paced["p99_ms"])
    add("paced_max", paced["max_ms"])
    add("paced_cpu", paced.get("server_cpu_cores", float("nan")))
    if paced["req/s"] < 0.97 * args.rate:
        NOTES.append(
            f"{server.who}: paced renew achieved {paced['req/s']:,.0f} of {args.rate:,g}/s: it fell "
            "behind, and its latencies are the backlog's"
        )
    errors += paced.get("errors", 0)

    for mode in ("full", "delta"):
        fetch, noise = loadgen(server, mode, args, raw)
        other.append(noise)
        add(f"{mode}_rps", fetch["req/s"])
        add(f"{mode}_p99", fetch["p99_ms"])
        add(f"{mode}_cpu", fetch.get("server_cpu_cores", float("nan")))
        add(f"{mode}_kb", fetch.get("bytes/resp", float("nan")) / 1000)
        errors += fetch.get("errors", 0)
        listed = fetch.get("payload_instances")
        if listed != args.n:
            NOTES.append(f"{server.who} {mode}: the checked response listed {listed} instances, not {args.n}")
    add(
        "full_per_cpu_s",
        results.values[side]["full_rps"][-1] / max(results.values[side]["full_cpu"][-1], 1e-9),
    )
    add("rss_end_mb", server.rss_mb())
    add("pss_end_mb", server.pss_mb())
    add("errors", errors)
    add("other_cores", statistics.mean(other))


# ------------------------------------------------------------------------------------------ the table

# key, row label, decimals, direction (+1 higher is better, -1 lower is better, 0 context only)
ROWS: list[tuple[str, str, int, int]] = [
    ("cold_start_s", "cold start: spawn → first 200 on GET /eureka/apps (s)", 1, -1),
    ("rss_idle_mb", "RSS idle (MB)", 0, -1),
    ("rss_registered_mb", "RSS after registering {n} instances in {apps} apps (MB)", 0, -1),
    ("rss_end_mb", "RSS at the end (MB)", 0, -1),
    ("pss_idle_mb", "PSS idle (MB; pages shared between processes counted once)", 0, -1),
    ("pss_registered_mb", "PSS after registering (MB)", 0, -1),
    ("pss_end_mb", "PSS at the end (MB)", 0, -1),
    ("register_rps", "register, {c} connections (req/s)", 0, +1),
    ("register_cpu", "  server CPU during register (cores)", 2, 0),
    ("renew_rps", "renew, closed loop, {c} connections (req/s)", 0, +1),
    ("renew_p99", "  p99 (ms)", 1, -1),
    ("renew_cpu", "  server CPU (cores)", 2, 0),
    ("renew_per_cpu_s", "  renews per server CPU-second", 0, +1),
    ("renew_conns", "  TCP connections opened ({c} if all are kept alive)", 0, 0),
    ("paced_rps", "renew paced at {rate}/s: achieved (req/s)", 0, +1),
    ("paced_p50", "  p50 (ms, from scheduled start)", 1, -1),
    ("paced_p99", "  p99 (ms)", 1, -1),
    ("paced_max", "  max (ms)", 1, -1),
    ("paced_cpu", "  server CPU (cores, for the same load)", 2, -1),
    ("full_rps", "full fetch GET apps/, gzip JSON, closed loop (req/s)", 0, +1),
    ("full_p99", "  p99 (ms)", 1, -1),
    ("full_cpu", "  server CPU (cores)", 2, 0),
    ("full_per_cpu_s", "  full fetches per server CPU-second", 0, +1),
    ("full_kb", "  response size (gzip kB)", 0, 0),
    ("delta_rps", "delta fetch GET apps/delta, gzip JSON, closed loop (req/s)", 0, +1),
    ("delta_p99", "  p99 (ms)", 1, -1),
    ("delta_cpu", "  server CPU (cores)", 2, 0),
    ("delta_kb", "  response size (gzip kB)", 0, 0),
    ("errors", "errors, all phases (count)", 0, -1),
    ("other_cores", "CPU taken by other processes and steal, timed phases (cores; noise)", 2, 0),
]
DIRECTION = {+1: "higher is better", -1: "lower is better", 0: "context"}


def fmt(value: float, decimals: int) -> str:
    if value != value:  # NaN: the load generator did not report it
        return "?"
    return f"{value:,.{decimals}f}"


def joined(values: list[float], decimals: int) -> str:
    if not values:
        return "–"
    texts = [fmt(v, decimals) for v in values]
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]


def table(results: Results, args: argparse.Namespace) -> str:
    words = {"n": f"{args.n:,}", "apps": f"{args.apps:,}", "c": args.c, "rate": f"{args.rate:,g}"}
    lines = ["| metric | SCE | ours | ours/SCE (medians) | reading |", "|---|---:|---:|---:|---|"]
    for key, label, decimals, direction in ROWS:
        sce, ours = results.values["sce"].get(key, []), results.values["ours"].get(key, [])
        ratio = "–"
        # The noise row describes the machine, not the servers: no ratio.
        if sce and ours and key != "other_cores":
            a, b = statistics.median(ours), statistics.median(sce)
            if b:
                ratio = f"{a / b:.2f}×"
            elif a == 0:
                ratio = "="
        lines.append(
            f"| {label.format(**words)} | {joined(sce, decimals)} | {joined(ours, decimals)} "
            f"| {ratio} | {DIRECTION[direction]} |"
        )
    return "\n".join(lines)


def machine(sce_heap: str = "1g") -> list[str]:
    def first_line(command: list[str]) -> str:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=30)
            return (done.stdout or done.stderr).strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired, IndexError):
            return "?"

    model = "?"
    with contextlib.suppress(OSError):
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        model = found.group(1) if found else "?"
    return [
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"- machine: nproc {os.cpu_count()}, {model}, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
        f"Linux {platform.release()}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"- SCE: {first_line(['java', '-version'])}, `java -Xmx{sce_heap} -jar` tests/interop/sce (stock)",
        f"- ours: Python {platform.python_version()}, {first_line([str(GUNICORN), '--version'])}, "
        "deploy/gunicorn.conf.py",
    ]


# ------------------------------------------------------------------------------------------ main


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/compare.sh",
        # compare.sh looks for --ours-only, --out ... by their full names.
        allow_abbrev=False,
        description="This registry vs Spring Cloud Eureka Server, interleaved rounds, one table.",
    )
    p.add_argument("--n", type=int, default=10000, help="instances (default 10000)")
    p.add_argument("--apps", type=int, default=100, help="applications (default 100)")
    p.add_argument("--duration", type=float, default=10, help="measured seconds per timed phase (default 10)")
    p.add_argument("--warmup", type=float, default=3, help="unrecorded seconds before each (default 3)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of SCE then ours (default 2)")
    p.add_argument("--rate", type=float, default=3000, help="paced renew rate, req/s (default 3000)")
    p.add_argument("-c", type=int, default=16, help="connections (default 16)")
    p.add_argument(
        "--sce-heap", default="1g", help="SCE's -Xmx (default 1g; the issue's 100,000-instance run uses 2g)"
    )
    side = p.add_mutually_exclusive_group()
    side.add_argument("--ours-only", action="store_true", help="measure our node only")
    side.add_argument("--sce-only", action="store_true", help="measure SCE only")
    p.add_argument(
        "--keep-going",
        action="store_true",
        help="after a failed phase, go on with the next server/round instead of stopping",
    )
    p.add_argument("--out", type=Path, help="directory for logs and raw results (compare.sh makes one)")
    # Set by compare.sh, not by hand.
    p.add_argument("--sce-jar", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--sce-skipped", default="", help=argparse.SUPPRESS)
    p.add_argument("--command", default="", help=argparse.SUPPRESS)
    p.add_argument("--parse-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    checks = [
        (1 <= args.n <= 1_000_000, "--n must be in 1..1000000"),
        (1 <= args.apps <= args.n, "--apps must be in 1..n"),
        (0 < args.duration <= 600, "--duration must be in (0, 600]"),
        (0 <= args.warmup <= 60, "--warmup must be in [0, 60]"),
        (1 <= args.rounds <= 10, "--rounds must be in 1..10"),
        (args.rate > 0, "--rate must be > 0"),
        (1 <= args.c <= 4096, "-c must be in 1..4096"),
        (
            re.fullmatch(r"[1-9][0-9]*[mMgG]", args.sce_heap) is not None,
            "--sce-heap must look like 2g or 1536m",
        ),
    ]
    for ok, message in checks:
        if not ok:
            p.error(message)
    return args


def on_sigterm(signum, frame):
    # Turn SIGTERM into the same unwinding as Ctrl-C, so the finally below stops the servers.
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.parse_only:
        return 0
    signal.signal(signal.SIGTERM, on_sigterm)
    out: Path = args.out or Path(os.environ.get("TMPDIR", "/tmp")) / f"eureka-compare-{os.getpid()}"
    out.mkdir(parents=True, exist_ok=True)
    sides = [s for s in SIDES if not (s == "sce" and args.ours_only) and not (s == "ours" and args.sce_only)]
    java = shutil.which("java") or "java"
    if "sce" in sides and (args.sce_skipped or not args.sce_jar):
        if not args.sce_skipped:  # compare.sh has said why already
            print("== SCE skipped: no --sce-jar", flush=True)
        sides.remove("sce")
    if not sides:
        print("compare: nothing to measure", file=sys.stderr)
        return 2
    header = machine(args.sce_heap)
    results = Results()
    failed = False
    current: Contender | None = None
    pid_file = out / "server.pids"
    try:
        for round_no in range(1, args.rounds + 1):
            for side in sides:
                print(f"== round {round_no}/{args.rounds}: {SIDE_NAMES[side]}", flush=True)
                workdir = out / f"{side}-{round_no}"
                workdir.mkdir(exist_ok=True)
                server = (
                    sce_server(java, args.sce_jar, workdir, args.sce_heap)
                    if side == "sce"
                    else our_server(workdir)
                )
                server.pid_file = pid_file
                current = Contender(side, round_no, server)
                try:
                    run_round(current, args, results, workdir / "loadgen.txt")
                except PhaseError as exc:
                    failed = True
                    print(f"!! {exc}", file=sys.stderr, flush=True)
                    NOTES.append(f"{current.who} failed: {str(exc).splitlines()[0]}")
                    if not args.keep_going:
                        raise
                finally:
                    current.stop()
                    current = None
    except PhaseError:
        pass
    except KeyboardInterrupt:
        print("\ninterrupted: the table has what was measured so far", file=sys.stderr)
        NOTES.append("interrupted: the last round's values are partial")
        failed = True
    finally:
        if current is not None:
            current.stop()

    (out / "results.json").write_text(
        json.dumps(
            {
                "args": vars(args) | {"out": str(out), "sce_jar": str(args.sce_jar)},
                "values": results.values,
                "notes": NOTES,
            },
            indent=1,
            default=str,
        )
    )
    print()
    print(
        f"## Side by side: ours vs Spring Cloud Eureka Server, {args.rounds} round(s), interleaved SCE, ours"
    )
    print()
    print(f"command: `{args.command or shlex.join(['bench/compare.sh', *argv])}`")
    print()
    print("\n".join(header))
    print(f"- load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.sce_skipped and not args.ours_only:
        print(f"- SCE skipped: {args.sce_skipped}")
    print(
        f"- {args.n:,} instances in {args.apps:,} apps, {args.c} connections, {args.duration:g} s phases "
        f"after {args.warmup:g} s warm-up; round values in run order"
    )
    print()
    print(table(results, args))
    if NOTES:
        print()
        print("\n".join(f"- note: {note}" for note in NOTES))
    print()
    print(f"raw results and server logs: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
