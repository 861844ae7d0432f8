"""Side by side: one node of this registry and a stock Spring Cloud Eureka Server (SCE), same machine.

Run through ``bench/compare.sh``, which builds the load generator and the SCE jar first and passes the
jar here (``--sce-jar``), or why SCE is skipped (``--sce-skipped``).

A production SCE runs for weeks with its JIT warm, so one round against a JVM started seconds before
says little. Each server is started **once** and kept for the whole run:

  cold start   spawn -> first 200 on GET /eureka/apps (no Accept header: see wait_first_200)
  RSS idle     a few seconds after that first 200
  round 1      "cold": the phases below, right after start (a JVM still interpreting and compiling)
  warm-up      --warm-up seconds (60) of the same mixed load, recorded nowhere: renew, full, delta
  rounds 2..   "warm": the phases again, --rounds - 1 times

and in each round, servers taking turns (SCE, then ours) so that machine noise falls on both alike:

  register     --n instances over --apps apps, once each (again in later rounds: a re-registration
               is a change, so the delta below is full again), -c connections (16); then RSS
  delta        GET apps/delta (gzip JSON), closed loop, right after: it lists every instance
  renew        closed loop (as fast as possible), -c connections
  renew@RATE   paced at each --rates rate in total (3000 and 6000): achieved rate and latency from
               scheduled start
  full         GET apps/ (gzip JSON), closed loop
  empty delta  GET apps/delta once the delta queue has drained (both servers are given a delta
               retention of --delta-retention seconds, 60, on their command lines, instead of 3 min,
               and the same response-cache auto-expiration: SCE serves its last built delta until
               that expires): the steady state of a fleet whose clients poll the delta every 30 s

The load comes from bench/bin/loadgen, which also reports the server's CPU (``-server-pid``: every
process of the server's tree). The table has the cold round and the warm rounds apart, every round's
value, and the ratios of the medians (ours/SCE), cold and warm.

SCE runs with ``java -Xmx1g -jar`` (``--sce-heap``) and Spring Cloud's documented standalone settings,
on the command line: its own address and port, ``register-with-eureka=false``, ``fetch-registry=false``,
and its own URL as ``defaultZone`` with ``eureka.instance.hostname=127.0.0.1``. That last pair is what
makes it standalone: left at the default (``http://localhost:8761/eureka/``), SCE would take that URL
for a peer and replicate every write to whatever listens there. The delta retention is the only other
setting (with the response cache's auto-expiration), given to both servers alike.

Our node runs as ``bench/run.py phases`` starts it (bench/nodes.py): gunicorn with
deploy/gunicorn.conf.py (the conf's gevent worker, embedded mode), with this process's environment;
``--server granian`` serves it with registry/serving/granian_server.py instead.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
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
from nodes import GUNICORN, HTTP_SERVERS, LOADGEN, Node, Server, free_port, loadgen_metrics, spring_eureka

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


def sce_server(java: str, jar: Path, workdir: Path, heap: str = "1g", retention_s: float = 60) -> Server:
    server = spring_eureka(jar, workdir, heap, java)
    # The delta queue's retention and its pruning period (Eureka's defaults: 3 min and 30 s), and how
    # long a built payload is kept (180 s): pruning the queue does not invalidate the cached delta, so
    # SCE serves the last non-empty one until it expires.
    server.command += [
        f"--eureka.server.retention-time-in-m-s-in-delta-queue={int(retention_s * 1000)}",
        "--eureka.server.delta-retention-timer-interval-in-ms=1000",
        f"--eureka.server.response-cache-auto-expiration-in-seconds={int(retention_s)}",
    ]
    return server


def our_server(workdir: Path, retention_s: float = 60, server: str = HTTP_SERVERS[0], server_args=()) -> Node:
    """A node as bench/run.py phases starts it (deploy/gunicorn.conf.py, embedded mode), with this
    process's environment; DATABASE_URL from it wins over the node's own migrated database."""
    port = free_port()
    env = {
        "LOG_LEVEL": os.environ.get("LOG_LEVEL", "INFO"),
        "EUREKA_RETENTION_TIME_IN_DELTA_QUEUE_MS": str(int(retention_s * 1000)),
        "EUREKA_DELTA_RETENTION_TIMER_INTERVAL_MS": "1000",
        "EUREKA_RESPONSE_CACHE_AUTO_EXPIRATION_SECONDS": str(int(retention_s)),
    }
    if os.environ.get("DATABASE_URL"):
        env["DATABASE_URL"] = os.environ["DATABASE_URL"]
    return Node(
        workdir / f"ours-data-{port}",
        env,
        port=port,
        log=workdir / "ours.log",
        server=server,
        gunicorn_args=server_args,
    )


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


def served_instances(server: Contender, client: httpx.Client, path: str = "apps/") -> int:
    """How many instances ``path`` (``apps/`` or ``apps/delta``) lists, in gzip JSON."""
    response = client.get(
        f"{server.url}{path}", headers={"Accept": "application/json", "Accept-Encoding": "gzip"}
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


def wait_listed(
    server: Contender, client: httpx.Client, path: str, expected: int, timeout_s: float = SERVED_TIMEOUT_S
) -> float:
    """Wait until ``path`` (JSON) lists ``expected`` instances; seconds waited. GET apps/: all of them,
    so both servers' fetch phases serve the same registry. GET apps/delta: every one just registered,
    or none once the queue drained. Both servers serve from a read-only cache (refreshed every 30 s in
    SCE), so what they list follows the map by up to that."""
    started = time.monotonic()
    seen = -1
    while time.monotonic() - started < timeout_s:
        try:
            seen = served_instances(server, client, path)
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
            seen = -1
        if seen == expected:
            return time.monotonic() - started
        time.sleep(0.5)
    raise PhaseError(
        f"{server.side}: GET {path} listed {seen} instances, not {expected}, after {timeout_s:.0f}s"
    )


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
    duration: float | None = None,
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
        str(args.duration if duration is None else duration),
        "-warmup",
        str(args.warmup if warmup is None else warmup),
        "-server-pid",
        ",".join(map(str, server.pids())),
        *extra,
    ]
    # Registration is one request per instance; allow a slow server 20/s plus start-up slack.
    bound = 120 + args.n / 20 if mode == "register" else args.warmup + (duration or args.duration) + 60
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

KINDS = ("cold", "warm")


@dataclass
class Results:
    # side -> kind (cold: round 1, warm: rounds 2..) -> metric -> one value per round
    values: dict[str, dict[str, dict[str, list[float]]]] = field(
        default_factory=lambda: {side: {kind: {} for kind in KINDS} for side in SIDES}
    )

    def add(self, side: str, kind: str, key: str, value: float) -> None:
        self.values[side][kind].setdefault(key, []).append(value)

    def last(self, side: str, kind: str, key: str) -> float:
        return self.values[side][kind][key][-1]


def start_server(server: Contender, results: Results) -> None:
    """Spawn it, time its first 200, and take its idle memory (recorded with the cold round)."""
    with httpx.Client(timeout=2.0) as client:
        results.add(server.side, "cold", "cold_start_s", wait_first_200(server, client))
    worker = re.search(r"Using worker: (\S+)", server.log_tail(200))
    print(
        f"   {SIDE_NAMES[server.side]} up on port {server.port}, pids {server.pids()}"
        f"{' (' + worker.group(1) + ')' if worker else ''}",
        flush=True,
    )
    time.sleep(IDLE_SETTLE_S)
    results.add(server.side, "cold", "rss_idle_mb", server.rss_mb())
    results.add(server.side, "cold", "pss_idle_mb", server.pss_mb())


def warm_up(server: Contender, args: argparse.Namespace, raw: Path) -> None:
    """``--warm-up`` seconds of the rounds' own mixed load, recorded nowhere (the JIT's, and ours).
    The instances are registered again first: the server sat idle while the other was measured, and
    leases that nobody renewed for longer than their 90 s may have been evicted."""
    loadgen(server, "register", args, raw, "-label", "warm-up-register")
    share = args.warm_up / 3
    for mode in ("renew", "full", "delta"):
        loadgen(server, mode, args, raw, "-label", f"warm-up-{mode}", warmup=0, duration=share)


def run_round(server: Contender, kind: str, args: argparse.Namespace, results: Results, raw: Path) -> None:
    side = server.side
    add = lambda key, value: results.add(side, kind, key, value)  # noqa: E731
    errors = 0.0
    other: list[float] = []
    reg, _ = loadgen(server, "register", args, raw)
    add("register_rps", reg["req/s"])
    add("register_cpu", reg.get("server_cpu_cores", float("nan")))
    errors += reg.get("errors", 0)
    add("rss_registered_mb", server.rss_mb())
    add("pss_registered_mb", server.pss_mb())
    # One keep-alive client for the probes; its short timeout keeps a hung server from stalling them.
    with httpx.Client(timeout=2.0) as client:
        waited = wait_listed(server, client, "apps/", args.n)
        # In later rounds GET apps/ lists them all already; the delta shows the re-registration once
        # the read-only cache has refreshed.
        waited = max(waited, wait_listed(server, client, "apps/delta", args.n))
    if waited > 1:
        NOTES.append(
            f"{server.who}: GET apps/ and apps/delta listed all {args.n} instances {waited:.1f}s after "
            "registration ended"
        )

    # Right after registering, while every instance is in the delta queue (retention ≥ 60 s).
    errors += fetch_phase(server, "delta", args, raw, add, other)

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
    for rate in args.rates:
        label = f"renew@{rate:g}"
        paced, noise = loadgen(server, "renew", args, raw, "-rate", f"{rate:g}", "-label", label, warmup=0)
        other.append(noise)
        key = f"paced{rate:g}"
        add(f"{key}_rps", paced["req/s"])
        add(f"{key}_p50", paced["p50_ms"])
        add(f"{key}_p99", paced["p99_ms"])
        add(f"{key}_max", paced["max_ms"])
        add(f"{key}_cpu", paced.get("server_cpu_cores", float("nan")))
        if paced["req/s"] < 0.97 * rate:
            NOTES.append(
                f"{server.who}: paced renew achieved {paced['req/s']:,.0f} of {rate:,g}/s: it fell "
                "behind, and its latencies are the backlog's"
            )
        errors += paced.get("errors", 0)

    errors += fetch_phase(server, "full", args, raw, add, other)
    add(
        "full_per_cpu_s",
        results.last(side, kind, "full_rps") / max(results.last(side, kind, "full_cpu"), 1e-9),
    )

    # The delta once nothing changed for longer than the retention: what clients poll in steady state.
    with httpx.Client(timeout=2.0) as client:
        add("delta_drain_s", wait_listed(server, client, "apps/delta", 0, 2 * args.delta_retention + 60))
    empty, noise = loadgen(server, "delta", args, raw, "-label", "empty-delta")
    other.append(noise)
    add("empty_delta_rps", empty["req/s"])
    add("empty_delta_p99", empty["p99_ms"])
    add("empty_delta_cpu", empty.get("server_cpu_cores", float("nan")))
    add("empty_delta_per_cpu_s", empty["req/s"] / max(empty.get("server_cpu_cores", 0.0), 1e-9))
    errors += empty.get("errors", 0)
    if empty.get("payload_instances"):
        NOTES.append(
            f"{server.who} empty delta: the checked response listed {empty['payload_instances']:.0f}"
        )
    add("rss_end_mb", server.rss_mb())
    add("pss_end_mb", server.pss_mb())
    add("errors", errors)
    add("other_cores", statistics.mean(other))


def fetch_phase(
    server: Contender, mode: str, args: argparse.Namespace, raw: Path, add, other: list[float]
) -> float:
    """A closed-loop fetch of every instance (full, or a delta that lists them all); its errors."""
    fetch, noise = loadgen(server, mode, args, raw)
    other.append(noise)
    add(f"{mode}_rps", fetch["req/s"])
    add(f"{mode}_p99", fetch["p99_ms"])
    add(f"{mode}_cpu", fetch.get("server_cpu_cores", float("nan")))
    add(f"{mode}_kb", fetch.get("bytes/resp", float("nan")) / 1000)
    listed = fetch.get("payload_instances")
    if listed != args.n:
        NOTES.append(f"{server.who} {mode}: the checked response listed {listed} instances, not {args.n}")
    return fetch.get("errors", 0)


# ------------------------------------------------------------------------------------------ the table

# key, row label, decimals, direction (+1 higher is better, -1 lower is better, 0 context only)
HEAD_ROWS: list[tuple[str, str, int, int]] = [
    ("cold_start_s", "cold start: spawn → first 200 on GET /eureka/apps (s)", 1, -1),
    ("rss_idle_mb", "RSS idle (MB)", 0, -1),
    ("rss_registered_mb", "RSS after registering {n} instances in {apps} apps (MB)", 0, -1),
    ("rss_end_mb", "RSS at the end of the round (MB)", 0, -1),
    ("pss_idle_mb", "PSS idle (MB; pages shared between processes counted once)", 0, -1),
    ("pss_registered_mb", "PSS after registering (MB)", 0, -1),
    ("pss_end_mb", "PSS at the end of the round (MB)", 0, -1),
    ("register_rps", "register, {c} connections (req/s)", 0, +1),
    ("register_cpu", "  server CPU during register (cores)", 2, 0),
    ("renew_rps", "renew, closed loop, {c} connections (req/s)", 0, +1),
    ("renew_p99", "  p99 (ms)", 1, -1),
    ("renew_cpu", "  server CPU (cores)", 2, 0),
    ("renew_per_cpu_s", "  renews per server CPU-second", 0, +1),
    ("renew_conns", "  TCP connections opened ({c} if all are kept alive)", 0, 0),
]
TAIL_ROWS: list[tuple[str, str, int, int]] = [
    ("full_rps", "full fetch GET apps/, gzip JSON, closed loop (req/s)", 0, +1),
    ("full_p99", "  p99 (ms)", 1, -1),
    ("full_cpu", "  server CPU (cores)", 2, 0),
    ("full_per_cpu_s", "  full fetches per server CPU-second", 0, +1),
    ("full_kb", "  response size (gzip kB)", 0, 0),
    (
        "delta_rps",
        "delta fetch GET apps/delta, every instance changed, gzip JSON, closed loop (req/s)",
        0,
        +1,
    ),
    ("delta_p99", "  p99 (ms)", 1, -1),
    ("delta_cpu", "  server CPU (cores)", 2, 0),
    ("delta_kb", "  response size (gzip kB)", 0, 0),
    ("delta_drain_s", "  seconds until the delta was empty (retention {retention} s + refresh)", 1, 0),
    ("empty_delta_rps", "empty delta GET apps/delta, closed loop (req/s)", 0, +1),
    ("empty_delta_p99", "  p99 (ms)", 1, -1),
    ("empty_delta_cpu", "  server CPU (cores)", 2, 0),
    ("empty_delta_per_cpu_s", "  empty deltas per server CPU-second", 0, +1),
    ("errors", "errors, all phases of the round (count)", 0, -1),
    ("other_cores", "CPU taken by other processes and steal, timed phases (cores; noise)", 2, 0),
]
DIRECTION = {+1: "higher is better", -1: "lower is better", 0: "context"}


def rows(rates: list[float]) -> list[tuple[str, str, int, int]]:
    paced = []
    for rate in rates:
        key = f"paced{rate:g}"
        paced += [
            (f"{key}_rps", f"renew paced at {rate:,g}/s: achieved (req/s)", 0, +1),
            (f"{key}_p50", "  p50 (ms, from scheduled start)", 1, -1),
            (f"{key}_p99", "  p99 (ms)", 1, -1),
            (f"{key}_max", "  max (ms)", 1, -1),
            (f"{key}_cpu", "  server CPU (cores, for the same load)", 2, -1),
        ]
    return HEAD_ROWS + paced + TAIL_ROWS


def fmt(value: float, decimals: int) -> str:
    if value != value:  # NaN: the load generator did not report it
        return "?"
    return f"{value:,.{decimals}f}"


def joined(values: list[float], decimals: int) -> str:
    if not values:
        return "–"
    texts = [fmt(v, decimals) for v in values]
    return texts[0] if len(texts) == 1 else ", ".join(texts[:-1]) + " and " + texts[-1]


def ratio(ours: list[float], sce: list[float]) -> str:
    if not ours or not sce:
        return "–"
    a, b = statistics.median(ours), statistics.median(sce)
    if b:
        return f"{a / b:.2f}×"
    return "=" if a == 0 else "–"


def table(results: Results, args: argparse.Namespace) -> str:
    words = {
        "n": f"{args.n:,}",
        "apps": f"{args.apps:,}",
        "c": args.c,
        "retention": f"{args.delta_retention:g}",
    }
    lines = [
        "| metric | SCE cold | SCE warm | ours cold | ours warm | ours/SCE cold "
        "| ours/SCE warm (medians) | reading |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for key, label, decimals, direction in rows(args.rates):
        cells = {(side, kind): results.values[side][kind].get(key, []) for side in SIDES for kind in KINDS}
        # The noise row describes the machine, not the servers: no ratio.
        ratios = (
            ["–", "–"]
            if key == "other_cores"
            else [ratio(cells["ours", kind], cells["sce", kind]) for kind in KINDS]
        )
        lines.append(
            f"| {label.format(**words)} | {joined(cells['sce', 'cold'], decimals)} "
            f"| {joined(cells['sce', 'warm'], decimals)} | {joined(cells['ours', 'cold'], decimals)} "
            f"| {joined(cells['ours', 'warm'], decimals)} | {ratios[0]} | {ratios[1]} "
            f"| {DIRECTION[direction]} |"
        )
    return "\n".join(lines)


def machine(sce_heap: str = "1g", server: str = HTTP_SERVERS[0], server_args: str = "") -> list[str]:
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
        f"- ours: Python {platform.python_version()}, "
        + (
            f"granian {importlib.metadata.version('granian')}, "
            f"registry/serving/granian_server.py {server_args}"
            if server == "granian"
            else f"{first_line([str(GUNICORN), '--version'])}, deploy/gunicorn.conf.py {server_args}"
        ).rstrip(),
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
    p.add_argument(
        "--rounds", type=int, default=3, help="rounds of SCE then ours: one cold, then warm ones (default 3)"
    )
    p.add_argument(
        "--rates",
        type=lambda text: [float(x) for x in text.split(",") if x.strip()],
        default=[3000.0, 6000.0],
        help="paced renew rates, req/s, comma-separated (default 3000,6000)",
    )
    p.add_argument(
        "--warm-up",
        type=float,
        default=60,
        help="seconds of mixed load (renew, full, delta) between the cold round and the warm ones "
        "(default 60)",
    )
    p.add_argument(
        "--delta-retention",
        type=float,
        default=60,
        help="delta queue retention given to both servers, seconds (default 60; Eureka's is 180): longer "
        "than registering and the delta phase, shorter than a round",
    )
    p.add_argument("-c", type=int, default=16, help="connections (default 16)")
    p.add_argument(
        "--server",
        choices=HTTP_SERVERS,
        default=HTTP_SERVERS[0],
        help="our node's HTTP server: deploy/gunicorn.conf.py (default) or "
        "registry/serving/granian_server.py",
    )
    p.add_argument(
        "--server-args",
        default="",
        help="options for our node's server, one string (e.g. '--threads 2' for granian)",
    )
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
        (bool(args.rates) and all(rate > 0 for rate in args.rates), "--rates must be > 0"),
        (0 <= args.warm_up <= 1800, "--warm-up must be in [0, 1800]"),
        (1 <= args.delta_retention <= 600, "--delta-retention must be in [1, 600]"),
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
    header = machine(args.sce_heap, args.server, args.server_args)
    results = Results()
    failed = False
    servers: dict[str, Contender] = {}
    pid_file = out / "server.pids"
    try:
        # Each server once, for the whole run: round 1 is its cold JIT, the later rounds a warm one.
        for side in sides:
            print(f"== starting {SIDE_NAMES[side]} (kept for the whole run)", flush=True)
            workdir = out / side
            workdir.mkdir(exist_ok=True)
            server = (
                sce_server(java, args.sce_jar, workdir, args.sce_heap, args.delta_retention)
                if side == "sce"
                else our_server(workdir, args.delta_retention, args.server, args.server_args.split())
            )
            server.pid_file = pid_file
            servers[side] = Contender(side, 1, server)
            start_server(servers[side], results)
        for round_no in range(1, args.rounds + 1):
            kind = "cold" if round_no == 1 else "warm"
            for side in sides:
                current = servers[side]
                current.round_no = round_no
                raw = out / side / "loadgen.txt"
                try:
                    if round_no == 2 and args.warm_up:
                        print(f"== warm-up: {SIDE_NAMES[side]}, {args.warm_up:g} s of mixed load", flush=True)
                        warm_up(current, args, raw)
                    print(f"== round {round_no}/{args.rounds} ({kind}): {SIDE_NAMES[side]}", flush=True)
                    run_round(current, kind, args, results, raw)
                except PhaseError as exc:
                    failed = True
                    print(f"!! {exc}", file=sys.stderr, flush=True)
                    NOTES.append(f"{current.who} failed: {str(exc).splitlines()[0]}")
                    if not args.keep_going:
                        raise
    except PhaseError:
        pass
    except KeyboardInterrupt:
        print("\ninterrupted: the table has what was measured so far", file=sys.stderr)
        NOTES.append("interrupted: the last round's values are partial")
        failed = True
    finally:
        for server in servers.values():
            server.stop()

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
        f"## Side by side: ours vs Spring Cloud Eureka Server, {args.rounds} round(s) on servers kept "
        "for the whole run, interleaved SCE, ours"
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
        f"after {args.warmup:g} s warm-up each; cold = round 1, right after start; warm = rounds 2.., "
        f"after {args.warm_up:g} s of mixed load; delta retention {args.delta_retention:g} s on both; "
        "round values in run order"
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
