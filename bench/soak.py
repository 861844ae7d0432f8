"""Soak: a fleet heartbeating against the production topology for half an hour, with churn.

10,000 instances over 100 apps, each renewing every 30 s on its own phase (about 333 renews/s, spread
evenly), and 1 % churn a minute: 100 instances cancel and 100 new ones register, one replacement every
0.6 s (the new instance's first heartbeat comes at its slot's next turn, as a real client's would).
Every ``--report-every`` seconds (60) a row says:

* RSS of the registry process (gunicorn's worker, where the map lives), of the Celery worker (with its
  pool processes), of Celery beat and of Redis, read from /proc/PID/status;
* false evictions: instances that heartbeated but disappeared, seen either as a heartbeat answered
  404, or as an instance missing from ``GET /eureka/apps`` (and from the live
  ``GET /eureka/apps/{APP}/{id}``) although it registered more than ``GRACE_S`` before. Must be 0;
* errors: any answer other than the expected one (renew 200, register 204, cancel 200) and connection
  errors or timeouts. Must be 0;
* renew latency p50 / p99 / max as the client measured it, renews sent, and how far behind its
  schedule the heartbeat pacing fell (it should stay near 0: otherwise the client, not the node, is the
  bottleneck). When the node serves ``GET /metrics``, the evictions it counted (should stay 0: every
  instance that leaves here cancels).

  .venv/bin/python bench/soak.py --start                          # make stack on free loopback ports, 30 min
  .venv/bin/python bench/soak.py --start --minutes 2 --instances 2000 --apps 20
  .venv/bin/python bench/soak.py --url http://127.0.0.1:8761     # a running `make stack`

``--start`` runs ``deploy/stack.sh`` (migrations, gunicorn, Celery worker and beat) with its own
``PORT``, ``REDIS_URL`` (a redis-server started here on a free port, without snapshots),
``SECRET_KEY`` and ``EUREKA_DATA_DIR`` (a temporary folder; the stack's output goes to ``stack.log``
there), so nothing is left in the tree, and stops all of it at the end, Ctrl-C included. With
``--url`` the processes are found through the port (gunicorn), the ``EUREKA_CONTROL_URL`` in their
environment (Celery, as ``make stack`` sets it) and the node's ``REDIS_URL`` (Redis).

Python threads on http.client, one kept-alive connection each (32: fewer fall behind the schedule
when the node's latency has a long tail): cheap enough for ~333 renews/s.
Loopback only; bounded by ``--minutes`` (plus start-up and the fleet's registration). Exit status 1
when there were errors or false evictions.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import orjson
import psutil
from nodes import Stack, rss_mb

JSON = {"Accept": "application/json"}
IDENTITY = {"DiscoveryIdentity-Name": "DefaultClient", "DiscoveryIdentity-Version": "1.4"}
# An instance registered this long before a full fetch must be in it (cache sync: 1 s by default).
GRACE_S = 10.0
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


# ------------------------------------------------------------------------------------------ HTTP


class Conn:
    """One kept-alive connection; a failed request is reported (status 0), never retried."""

    def __init__(self, host: str, port: int, timeout: float = 10.0):
        self.host, self.port, self.timeout = host, port, timeout
        self._conn = http.client.HTTPConnection(host, port, timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None, headers=None) -> tuple[int, bytes]:
        try:
            self._conn.request(method, path, body=body, headers={**IDENTITY, **(headers or {})})
            response = self._conn.getresponse()
            return response.status, response.read()
        except (http.client.HTTPException, OSError):
            self._conn.close()
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            return 0, b""

    def close(self) -> None:
        self._conn.close()


# ----------------------------------------------------------------------------------------- fleet


@dataclass
class Slot:
    """One place in the heartbeat schedule; churn replaces the instance in it."""

    app: str
    instance_id: str
    registered_at: float = 0.0  # time.monotonic() when its registration was answered
    dirty: int = 0  # the lastDirtyTimestamp it registered with, sent with each heartbeat (as clients do)
    lock: threading.Lock = field(default_factory=threading.Lock)


def registration_body(app: str, instance_id: str, n: int, dirty: int) -> bytes:
    ip = f"10.{n // 62500 % 250}.{n // 250 % 250}.{1 + n % 250}"
    return orjson.dumps(
        {
            "instance": {
                "instanceId": instance_id,
                "hostName": f"soak-{n}.bench.internal",
                "app": app,
                "ipAddr": ip,
                "status": "UP",
                "overriddenStatus": "UNKNOWN",
                "port": {"$": 8080, "@enabled": "true"},
                "securePort": {"$": 443, "@enabled": "false"},
                "countryId": 1,
                "dataCenterInfo": {
                    "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
                    "name": "MyOwn",
                },
                "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
                "metadata": {"bench": "soak"},
                "homePageUrl": f"http://{ip}:8080/",
                "vipAddress": app.lower(),
                "secureVipAddress": app.lower(),
                "lastDirtyTimestamp": str(dirty),
            }
        }
    )


class Stats:
    """Counters for the current row (``take`` starts the next) and for the whole run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.row: dict = self._fresh()
        self.total: dict = self._fresh()
        self.false_evictions: set[str] = set()
        self.error_samples: list[str] = []

    @staticmethod
    def _fresh() -> dict:
        return {"renews": 0, "latencies": [], "registers": 0, "cancels": 0, "errors": 0, "behind": 0.0}

    def renew(self, latency_ms: float, behind_s: float) -> None:
        with self.lock:
            for bucket in (self.row, self.total):
                bucket["renews"] += 1
                bucket["latencies"].append(latency_ms)
                bucket["behind"] = max(bucket["behind"], behind_s)

    def count(self, key: str) -> None:
        with self.lock:
            self.row[key] += 1
            self.total[key] += 1

    def error(self, what: str) -> None:
        with self.lock:
            self.row["errors"] += 1
            self.total["errors"] += 1
            if len(self.error_samples) < 20:
                self.error_samples.append(f"{time.strftime('%H:%M:%S')} {what}")

    def lost(self, instance_id: str) -> bool:
        """Records a false eviction; True the first time for this id."""
        with self.lock:
            if instance_id in self.false_evictions:
                return False
            self.false_evictions.add(instance_id)
            return True

    def take(self) -> dict:
        with self.lock:
            row, self.row = self.row, self._fresh()
            return row


class Fleet:
    def __init__(self, host: str, port: int, instances: int, apps: int, interval_s: float, stats: Stats):
        self.host, self.port = host, port
        self.interval_s = interval_s
        self.stats = stats
        self.slots = [
            Slot(f"SOAK-{i % apps:03d}", f"soak-{i}-0.bench.internal:8080") for i in range(instances)
        ]
        self.generation = [0] * instances
        self.serial = instances  # the next new instance's number (for its body)
        self.stop = threading.Event()

    def path(self, slot: Slot) -> str:
        return f"/eureka/apps/{slot.app}/{quote(slot.instance_id, safe='')}"

    def register(self, conn: Conn, slot: Slot, n: int) -> bool:
        dirty = int(time.time() * 1000)
        body = registration_body(slot.app, slot.instance_id, n, dirty)
        status, _ = conn.request(
            "POST", f"/eureka/apps/{slot.app}", body, {"Content-Type": "application/json"}
        )
        if status != 204:
            self.stats.error(f"register {slot.instance_id}: HTTP {status or 'connection error'}")
            return False
        slot.registered_at = time.monotonic()
        slot.dirty = dirty
        return True

    def register_all(self, threads: int) -> float:
        started = time.monotonic()

        def part(offset: int) -> None:
            conn = Conn(self.host, self.port)
            for i in range(offset, len(self.slots), threads):
                self.register(conn, self.slots[i], i)
            conn.close()

        workers = [threading.Thread(target=part, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return time.monotonic() - started

    def heartbeats(self, offset: int, threads: int, t0: float, end: float) -> None:
        """Slots offset, offset + threads, ...: each renews every interval at its own phase."""
        conn = Conn(self.host, self.port)
        mine = range(offset, len(self.slots), threads)
        turn = 0
        while not self.stop.is_set():
            for i in mine:
                due = t0 + turn * self.interval_s + i * self.interval_s / len(self.slots)
                if due >= end:
                    conn.close()
                    return
                delay = due - time.monotonic()
                if delay > 0 and self.stop.wait(delay):
                    conn.close()
                    return
                self._renew(conn, self.slots[i], max(0.0, -delay))
            turn += 1
        conn.close()

    def _renew(self, conn: Conn, slot: Slot, behind_s: float) -> None:
        with slot.lock:
            path = f"{self.path(slot)}?status=UP&lastDirtyTimestamp={slot.dirty}"
            started = time.perf_counter()
            status, _ = conn.request("PUT", path)
            latency_ms = (time.perf_counter() - started) * 1000
            if status == 200:
                self.stats.renew(latency_ms, behind_s)
                return
            if status == 404:
                # The node lost an instance that renews: a false eviction. Register again, as clients do.
                if self.stats.lost(slot.instance_id):
                    log(f"FALSE EVICTION: {slot.app}/{slot.instance_id} (heartbeat answered 404)")
                self.register(conn, slot, self.serial)
                return
            self.stats.error(f"renew {slot.instance_id}: HTTP {status or 'connection error'}")

    def churn(self, per_minute: int, end: float, seed: int = 14) -> None:
        """``per_minute`` replacements a minute: cancel one instance, register a new one in its slot."""
        if per_minute <= 0:
            return
        rng = random.Random(seed)
        conn = Conn(self.host, self.port)
        interval = 60.0 / per_minute
        next_at = time.monotonic() + interval
        while not self.stop.is_set():
            delay = next_at - time.monotonic()
            if delay > 0 and self.stop.wait(delay):
                break
            if time.monotonic() >= end:
                break
            next_at += interval
            index = rng.randrange(len(self.slots))
            slot = self.slots[index]
            with slot.lock:
                status, _ = conn.request("DELETE", self.path(slot))
                if status != 200:
                    self.stats.error(f"cancel {slot.instance_id}: HTTP {status or 'connection error'}")
                self.stats.count("cancels")
                self.generation[index] += 1
                self.serial += 1
                slot.instance_id = f"soak-{index}-{self.generation[index]}.bench.internal:8080"
                slot.registered_at = 0.0
                if self.register(conn, slot, self.serial):
                    self.stats.count("registers")
        conn.close()

    def check_listed(self, conn: Conn) -> tuple[int | None, int]:
        """Full fetch (what clients see, from the read-only cache): instances listed, and the settled
        instances of the fleet missing from it that the live map does not know either."""
        started = time.monotonic()
        settled = {
            (slot.app, slot.instance_id)
            for slot in self.slots
            if slot.registered_at and started - slot.registered_at > GRACE_S
        }
        status, data = conn.request("GET", "/eureka/apps", headers={**JSON, "Accept-Encoding": "gzip"})
        if status != 200:
            self.stats.error(f"GET apps: HTTP {status or 'connection error'}")
            return None, 0
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        apps = orjson.loads(data)["applications"]["application"]
        listed = {(app["name"], inst["instanceId"]) for app in apps for inst in app["instance"]}
        missing = 0
        for app, instance_id in settled - listed:
            slot_now = next((s for s in self.slots if s.instance_id == instance_id), None)
            if slot_now is None:
                continue  # churned away meanwhile
            status, _ = conn.request("GET", f"/eureka/apps/{app}/{quote(instance_id, safe='')}", headers=JSON)
            if status == 404 and slot_now.instance_id == instance_id:
                missing += 1
                if self.stats.lost(instance_id):
                    log(f"FALSE EVICTION: {app}/{instance_id} (missing from GET apps and the live map)")
        return len(listed), missing


# ------------------------------------------------------------------------------------- processes


def stack_processes(port: int) -> dict[str, list[int]]:
    """The stack's processes by role: registry (gunicorn's worker), master, celery-worker (with its pool),
    beat, redis. Found by the EUREKA_CONTROL_URL the stack gives them, else by the listening port."""
    control_url = f"http://127.0.0.1:{port}"
    roles: dict[str, list[int]] = {"registry": [], "master": [], "celery-worker": [], "beat": [], "redis": []}
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if process.environ().get("EUREKA_CONTROL_URL") != control_url:
                continue
            cmdline = " ".join(process.info["cmdline"] or [])
        except psutil.Error:
            continue
        if "gunicorn" in cmdline:
            parent = process.parent()
            is_worker = parent is not None and "gunicorn" in " ".join(parent.cmdline())
            roles["registry" if is_worker else "master"].append(process.pid)
        elif "celery" in cmdline and " worker" in cmdline:
            roles["celery-worker"].append(process.pid)
        elif "celery" in cmdline and " beat" in cmdline:
            roles["beat"].append(process.pid)
    if not roles["registry"]:
        # Not started by make stack: the process listening on the port, and gunicorn's worker under it.
        listener = listening_pid(port)
        if listener is not None:
            try:
                roles["registry"] = [child.pid for child in psutil.Process(listener).children()] or [listener]
            except psutil.Error:
                pass
    # Redis rewrites its process title over its environment: found by the port in the node's REDIS_URL.
    for pid in roles["registry"]:
        try:
            redis_url = psutil.Process(pid).environ().get("REDIS_URL", "")
            redis_port = urlsplit(redis_url).port or 6379 if redis_url else None
        except (psutil.Error, ValueError):
            continue
        redis = listening_pid(redis_port) if redis_port else None
        roles["redis"] = [redis] if redis is not None else []
        break
    return roles


def listening_pid(port: int) -> int | None:
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return conn.pid
    return None


def rss_by_role(port: int) -> dict[str, float]:
    return {role: sum(rss_mb(pid) for pid in pids) for role, pids in stack_processes(port).items()}


def server_evictions(conn: Conn) -> int | None:
    status, data = conn.request("GET", "/metrics")
    if status != 200:
        return None
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("eureka_evictions_total "):
            return int(float(line.split()[1]))
    return None


# ------------------------------------------------------------------------------------------- run


def loopback(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host != "localhost" and not host.startswith("127.") and host != "::1":
        raise SystemExit(f"loopback targets only, not {host!r}")
    return host, parts.port or 80


def fmt(value: float, digits: int = 1) -> str:
    return "-" if value != value else f"{value:.{digits}f}"  # NaN -> "-"


HEADER = (
    f"{'min':>5} {'listed':>7} {'renews':>7} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'behind s':>8} "
    f"{'churn':>6} {'errors':>6} {'false ev':>8} {'srv ev':>6} "
    f"{'node MB':>8} {'celery MB':>9} {'beat MB':>8} {'redis MB':>8}"
)


def row_line(elapsed_min: float, listed, row: dict, false_ev: int, srv_ev, rss: dict[str, float]) -> str:
    lat = row["latencies"]
    worst = max(lat, default=float("nan"))
    return (
        f"{elapsed_min:>5.1f} {listed if listed is not None else '-':>7} {row['renews']:>7} "
        f"{fmt(percentile(lat, 50), 2):>7} {fmt(percentile(lat, 99), 2):>7} {fmt(worst):>7} "
        f"{row['behind']:>8.2f} {row['cancels']:>6} {row['errors']:>6} {false_ev:>8} "
        f"{srv_ev if srv_ev is not None else '-':>6} {rss['registry']:>8.1f} {rss['celery-worker']:>9.1f} "
        f"{rss['beat']:>8.1f} {rss['redis']:>8.1f}"
    )


def soak(host: str, port: int, args: argparse.Namespace) -> int:
    stats = Stats()
    fleet = Fleet(host, port, args.instances, args.apps, args.interval, stats)
    log(f"registering {args.instances} instances over {args.apps} apps")
    took = fleet.register_all(args.threads)
    if stats.total["errors"]:
        log(f"{stats.total['errors']} registrations failed: {stats.error_samples[:3]}")
    log(f"registered in {took:.1f} s; soaking for {args.minutes} min, {args.churn} replacements a minute")
    stats.take()
    t0 = time.monotonic()
    end = t0 + args.minutes * 60
    threads = [
        threading.Thread(target=fleet.heartbeats, args=(t, args.threads, t0, end), daemon=True)
        for t in range(args.threads)
    ]
    threads.append(threading.Thread(target=fleet.churn, args=(args.churn, end), daemon=True))
    for thread in threads:
        thread.start()
    checker = Conn(host, port, timeout=30)
    rss_start = rss_by_role(port)
    rss_first_row: dict[str, float] | None = None
    me = psutil.Process()
    cpu_start = sum(me.cpu_times()[:2])
    srv_first = server_evictions(checker)
    rows: list[str] = []
    print(HEADER, flush=True)
    try:
        next_row = t0 + args.report_every
        while True:
            now = time.monotonic()
            if now >= end:
                break
            time.sleep(max(0.0, min(next_row, end) - now))
            if time.monotonic() < next_row and time.monotonic() < end:
                continue
            next_row += args.report_every
            listed, _ = fleet.check_listed(checker)
            srv = server_evictions(checker)
            rss = rss_by_role(port)
            line = row_line(
                (time.monotonic() - t0) / 60,
                listed,
                stats.take(),
                len(stats.false_evictions),
                None if srv is None or srv_first is None else srv - srv_first,
                rss,
            )
            rows.append(line)
            if rss_first_row is None:
                rss_first_row = rss
            print(line, flush=True)
    finally:
        fleet.stop.set()
        for thread in threads:
            thread.join(15)
    tail = stats.take()
    if tail["renews"] and (not rows or (time.monotonic() - t0) % args.report_every > 5):
        listed, _ = fleet.check_listed(checker)
        print(
            row_line(
                (time.monotonic() - t0) / 60,
                listed,
                tail,
                len(stats.false_evictions),
                None,
                rss_by_role(port),
            ),
            flush=True,
        )
    rss_last = rss_by_role(port)
    base = rss_first_row or rss_start
    client_cpu = (sum(me.cpu_times()[:2]) - cpu_start) / max(1.0, time.monotonic() - t0)
    checker.close()
    total = stats.total
    lat = total["latencies"]
    print()
    print(
        f"renews {total['renews']} ({total['renews'] / max(1.0, args.minutes * 60):.0f}/s), "
        f"latency p50 {fmt(percentile(lat, 50), 2)} ms, p99 {fmt(percentile(lat, 99), 2)} ms, "
        f"max {fmt(max(lat, default=float('nan')))} ms; pacing at most {total['behind']:.2f} s behind"
    )
    print(f"churn: {total['cancels']} cancels, {total['registers']} registrations")
    print(
        f"this client used {client_cpu:.0%} of a core (pacing falls behind when it, or the machine, is short)"
    )
    for role in ("registry", "celery-worker", "beat", "redis"):
        print(
            f"RSS {role}: {rss_start[role]:.1f} MB at the start, {base[role]:.1f} MB after the first row, "
            f"{rss_last[role]:.1f} MB at the end ({rss_last[role] - base[role]:+.1f} MB since the first row)"
        )
    print(f"false evictions: {len(stats.false_evictions)} (must be 0)")
    print(f"errors: {total['errors']} (must be 0)")
    for sample in stats.error_samples:
        print(f"  {sample}")
    return 1 if stats.false_evictions or total["errors"] else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--start", action="store_true", help="run make stack (deploy/stack.sh) on free ports")
    where.add_argument("--url", help="a running node's base URL, e.g. http://127.0.0.1:8761")
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--apps", type=int, default=100)
    parser.add_argument(
        "--interval", type=float, default=30.0, help="seconds between an instance's heartbeats"
    )
    parser.add_argument(
        "--churn", type=int, default=None, help="replacements a minute (default: 1 %% of --instances)"
    )
    parser.add_argument("--report-every", type=float, default=60.0, help="seconds per row")
    parser.add_argument("--threads", type=int, default=32, help="heartbeat threads (one connection each)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the stack's folder (stack.log) after --start"
    )
    args = parser.parse_args()
    if args.churn is None:
        args.churn = args.instances // 100
    stack = Stack(Path(tempfile.mkdtemp(prefix="eureka-soak-"))) if args.start else None
    try:
        if stack is not None:
            log(
                f"starting make stack on port {stack.port} (Redis {stack.redis.port}, "
                f"files in {stack.workdir})"
            )
            url = stack.start(timeout=START_TIMEOUT_S).base
            log(f"stack ready at {url}")
        else:
            url = args.url
        host, port = loopback(url)
        return soak(host, port, args)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if stack is not None:
            log("stopping make stack")
            stack.stop(STOP_TIMEOUT_S)
            if not args.keep:
                shutil.rmtree(stack.workdir, ignore_errors=True)
            log("stopped" + (f"; its files are in {stack.workdir}" if args.keep else ""))


if __name__ == "__main__":
    raise SystemExit(main())
