"""Heartbeat stalls under churn: renew latency while the node rebuilds payloads for readers.

One node of ours (``deploy/gunicorn.conf.py``, gevent, embedded mode), 10,000 instances in 100 apps
registered by the Go load generator, then for ``--duration`` seconds at once:

* renews paced at ``--rate`` (1,000/s) by the load generator, latency from each request's scheduled
  start (a stall shows as the queue behind it);
* churn: ``--churn`` registrations and as many cancels a second (10 + 10), from this script;
* readers: clients fetching ``GET apps/delta`` (``--delta-rate``/s) and ``GET apps`` (``--full-rate``/s),
  gzip JSON, from the load generator. Every cache refresh after a change rebuilds both payloads.

That is the performance issue's "paced 1,000 renews/s with churn and clients fetching deltas" (target:
renew max ≤ 50 ms). Each of ``--rounds`` starts a fresh node (bench/nodes.py: its own data
directory). The node's read-only cache refreshes every ``--cache-ms`` (500: the ``fast`` timings'
default). Loopback only, bounded in time, every process stopped at the end. Printed, not asserted.

  .venv/bin/python bench/churn_stall.py                      # about 3 minutes
  .venv/bin/python bench/churn_stall.py --rounds 3 --rate 500
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
from nodes import LOADGEN, Node, build_loadgen, loadgen_metrics


def loadgen(url: str, mode: str, n: int, apps: int, *extra: str) -> subprocess.Popen:
    command = [str(LOADGEN), "-url", url, "-mode", mode, "-n", str(n), "-apps", str(apps), *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def metrics_of(process: subprocess.Popen, timeout: float) -> dict[str, float]:
    out, err = process.communicate(timeout=timeout)
    if process.returncode != 0:
        raise SystemExit(f"loadgen exited {process.returncode}: {err.strip()[-400:]}")
    return loadgen_metrics(out)


class Churn(threading.Thread):
    """``rate`` registrations and ``rate`` cancels a second of instances of its own (``churn-k``), each
    cancel taking the oldest; ``backlog`` of them registered first so cancels start at once."""

    def __init__(self, port: int, rate: int, apps: int, backlog: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.rate, self.apps, self.stop_event = port, rate, apps, stop
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.live: list[tuple[str, str]] = []
        self.next_k = 0
        self.failed = 0
        self.done = 0
        for _ in range(backlog):
            self._register()

    def _request(self, method: str, path: str, body: bytes | None = None) -> int:
        headers = {"Content-Type": "application/json"} if body else {}
        try:
            self.conn.request(method, path, body=body, headers=headers)
            response = self.conn.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            self.conn.close()
            return 0

    def _register(self) -> None:
        k = self.next_k
        self.next_k += 1
        app = f"CHURN-{k % self.apps}"
        instance_id = f"churn-{k}"
        body = orjson.dumps(
            {
                "instance": {
                    "instanceId": instance_id,
                    "hostName": f"churn-{k}.bench.internal",
                    "app": app,
                    "ipAddr": f"10.251.{k // 250 % 250}.{1 + k % 250}",
                    "status": "UP",
                    "port": {"$": 9000, "@enabled": "true"},
                    "vipAddress": app.lower(),
                    "dataCenterInfo": {
                        "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
                        "name": "MyOwn",
                    },
                }
            }
        )
        if self._request("POST", f"/eureka/apps/{app}", body) == 204:
            self.live.append((app, instance_id))
        else:
            self.failed += 1

    def run(self) -> None:
        interval = 1.0 / (2 * self.rate)
        next_at = time.perf_counter()
        turn = 0
        while not self.stop_event.is_set():
            turn += 1
            if turn % 2:
                self._register()
            elif self.live:
                app, instance_id = self.live.pop(0)
                if self._request("DELETE", f"/eureka/apps/{app}/{instance_id}") != 200:
                    self.failed += 1
            self.done += 1
            next_at += interval
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)


def one_round(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    env = {
        "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": str(args.cache_ms),
        "EUREKA_ENABLE_SELF_PRESERVATION": os.environ.get("EUREKA_ENABLE_SELF_PRESERVATION", "false"),
        # The event-loop stall lines (EUREKA_LOOP_STALL_THRESHOLD_MS) are read in its log.
        "LOG_LEVEL": os.environ.get("LOG_LEVEL", "INFO"),
    }
    server = Node(workdir / "data", env, log=workdir / "ours.log")
    try:
        server.start()
        url = server.url
        metrics_of(loadgen(url, "register", args.n, args.apps), timeout=600)
        stop = threading.Event()
        churn = Churn(server.port, args.churn, 10, args.churn * 60, stop)
        pids = ",".join(map(str, server.pids()))
        extra = ("-duration", str(args.duration + args.settle), "-warmup", "0")
        # --settle: the renews' first seconds run but are not timed (churn and readers start at once).
        timed = ("-duration", str(args.duration), "-warmup", str(args.settle))
        renew = loadgen(
            url, "renew", args.n, args.apps, "-rate", str(args.rate), "-c", "16", "-server-pid", pids, *timed
        )
        readers = [
            loadgen(url, mode, args.n, args.apps, "-rate", str(rate), "-c", "4", *extra)
            for mode, rate in (("delta", args.delta_rate), ("full", args.full_rate))
            if rate > 0
        ]
        churn.start()
        found = metrics_of(renew, timeout=args.settle + args.duration + 120)
        stop.set()
        churn.join(10)
        for reader in readers:
            reader_metrics = metrics_of(reader, timeout=args.settle + args.duration + 120)
            found[f"reader_errors_{reader.args[4]}"] = reader_metrics.get("errors", 0)
            found[f"reader_req/s_{reader.args[4]}"] = reader_metrics.get("req/s", 0)
        found["churn_ops/s"] = churn.done / (args.settle + args.duration)
        found["churn_failed"] = churn.failed
        return found
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=10_000)
    parser.add_argument("--apps", type=int, default=100)
    parser.add_argument("--rate", type=int, default=1_000, help="renews per second (paced)")
    parser.add_argument("--churn", type=int, default=10, help="registrations and cancels per second, each")
    parser.add_argument("--delta-rate", type=int, default=20, help="GET apps/delta per second")
    parser.add_argument("--full-rate", type=int, default=2, help="GET apps per second")
    parser.add_argument("--cache-ms", type=int, default=500, help="read-only cache refresh interval")
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument(
        "--settle",
        type=float,
        default=0,
        help="seconds of renews (with churn and readers) before the timed ones: 0 times the first "
        "payload builds after the fleet registered too",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--out",
        type=Path,
        help="keep each round's node log and data here (round-N/ours.log), e.g. to read its "
        "event-loop stall lines (EUREKA_LOOP_STALL_THRESHOLD_MS); by default a temporary directory",
    )
    args = parser.parse_args()
    build_loadgen()
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="churn-stall-") as tmp:
        for round_no in range(1, args.rounds + 1):
            workdir = (args.out or Path(tmp)) / f"round-{round_no}"
            workdir.mkdir(parents=True, exist_ok=True)
            found = one_round(args, workdir)
            rows.append(found)
            print(
                f"round {round_no}: renews {found.get('req/s', 0):,.0f}/s "
                f"p50 {found.get('p50_ms', 0):.1f} p99 {found.get('p99_ms', 0):.1f} "
                f"max {found.get('max_ms', 0):.1f} ms, errors {found.get('errors', 0):.0f}; "
                f"node {found.get('server_cpu_cores', 0):.2f} cores; churn {found['churn_ops/s']:.1f} "
                f"ops/s ({found['churn_failed']:.0f} failed); readers "
                + ", ".join(f"{k[12:]} {v:,.1f}/s" for k, v in found.items() if k.startswith("reader_req/s")),
                flush=True,
            )
    print(
        f"\n{args.n} instances in {args.apps} apps, renews paced at {args.rate}/s, churn {args.churn} + "
        f"{args.churn}/s, GET apps/delta {args.delta_rate}/s, GET apps {args.full_rate}/s, cache refresh "
        f"{args.cache_ms} ms, {args.duration:.0f} s timed per round after {args.settle:g} s; medians over "
        f"{args.rounds} rounds"
    )
    print(f"{'renews/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}   (max of each round)")

    def median(key: str) -> float:
        return statistics.median(row.get(key, 0) for row in rows)

    maxima = ", ".join(f"{row.get('max_ms', 0):.0f}" for row in rows)
    print(
        f"{median('req/s'):>9,.0f} {median('p50_ms'):>8.1f} {median('p99_ms'):>8.1f} "
        f"{median('max_ms'):>8.1f}   ({maxima})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
