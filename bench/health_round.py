"""One round of active health checks over a fleet: does it finish inside its interval, and at what cost?

Starts a node (gunicorn, embedded mode, EUREKA_HEALTH_CHECKS=true) and a few instance servers on
loopback in this process, registers -n instances (default 2,000) whose metadata asks for an http
check every --interval seconds (default 10) against those servers, then watches from the servers'
side: when every instance has been probed once (the round), probes per second over the next full
interval, the most probes in flight at once, and the node's CPU over that interval. Each target
answers after --delay-ms (default 20) so that concurrency means something. Stops what it started.

  .venv/bin/python bench/health_round.py
  .venv/bin/python bench/health_round.py -n 5000 --targets 8 --delay-ms 50

Target: the round finishes inside its interval. Printed, not asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil
from nodes import Node


class Probes:
    """What the instance servers saw: first probe time per instance, every probe time, concurrency."""

    def __init__(self):
        self.lock = threading.Lock()
        self.first: dict[int, float] = {}
        self.times: list[float] = []
        self.by_instance: list[tuple[int, float]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def begin(self, n: int) -> None:
        now = time.monotonic()
        with self.lock:
            self.first.setdefault(n, now)
            self.times.append(now)
            self.by_instance.append((n, now))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def gaps(self, start: float, end: float) -> tuple[float, float]:
        """Median and max time between consecutive probes of one instance, for probes in [start, end)."""
        last: dict[int, float] = {}
        gaps: list[float] = []
        for n, at in self.by_instance:
            if start <= at < end and n in last:
                gaps.append(at - last[n])
            last[n] = at
        gaps.sort()
        return (gaps[len(gaps) // 2], gaps[-1]) if gaps else (0.0, 0.0)

    def end(self) -> None:
        with self.lock:
            self.in_flight -= 1


def serve_target(probes: Probes, delay_s: float) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self):  # noqa: N802
            n = int(self.path.rsplit("/", 1)[-1])
            probes.begin(n)
            try:
                time.sleep(delay_s)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:
                pass  # the probe timed out first and closed the connection
            finally:
                probes.end()

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def registration(n: int, target_port: int, interval: int) -> tuple[str, dict]:
    app = f"HEALTH-{n % 20:02d}"
    instance_id = f"bench-{n}"
    return app, {
        "instance": {
            "instanceId": instance_id,
            "hostName": "127.0.0.1",
            "app": app,
            "ipAddr": "127.0.0.1",
            "status": "UP",
            "port": {"$": target_port, "@enabled": "true"},
            "securePort": {"$": 443, "@enabled": "false"},
            "healthCheckUrl": f"http://127.0.0.1:{target_port}/health/{n}",
            "metadata": {
                "eureka-django.health-check": "http",
                "eureka-django.health-check.interval": str(interval),
            },
            "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 300},
            "dataCenterInfo": {
                "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
                "name": "MyOwn",
            },
        }
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=2000, help="instances (default 2000)")
    parser.add_argument("--targets", type=int, default=4, help="instance servers (default 4)")
    parser.add_argument("--interval", type=int, default=10, help="check interval, seconds (default 10)")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="each target's answer time (default 20)")
    parser.add_argument("--concurrency", type=int, default=50, help="EUREKA_HEALTH_CHECK_CONCURRENCY")
    args = parser.parse_args()

    probes = Probes()
    servers = [serve_target(probes, args.delay_ms / 1000) for _ in range(args.targets)]
    settings = {
        "EUREKA_HEALTH_CHECKS": "true",
        "EUREKA_HEALTH_CHECK_CONCURRENCY": str(args.concurrency),
        # The instance servers listen on loopback, which probes reach only where it is allowed.
        "EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS": "127.0.0.0/8",
    }
    with tempfile.TemporaryDirectory(prefix="health-round-") as tmp:
        node = Node(Path(tmp), settings).start()
        try:
            worker = psutil.Process(node.worker_pid())
            base = node.base
            started = time.monotonic()
            with httpx.Client(base_url=base, timeout=10) as client:
                for n in range(args.n):
                    app, body = registration(n, servers[n % len(servers)].server_address[1], args.interval)
                    client.post(f"/eureka/apps/{app}", json=body).raise_for_status()
            registered = time.monotonic()
            print(f"registered {args.n} instances in {registered - started:.1f} s")

            # The round: every instance probed once, counted from the end of the registrations.
            deadline = registered + 3 * args.interval
            while len(probes.first) < args.n and time.monotonic() < deadline:
                time.sleep(0.05)
            with probes.lock:
                probed = len(probes.first)
                last_first = max(probes.first.values(), default=registered)
            round_s = last_first - registered
            verdict = "inside" if probed == args.n and round_s <= args.interval else "NOT inside"

            # Steady state: one whole interval, the node's CPU over it.
            cpu_before = worker.cpu_times()
            window_start = time.monotonic()
            time.sleep(args.interval)
            window_end = time.monotonic()
            cpu_after = worker.cpu_times()
            cpu_s = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
            with probes.lock:
                in_window = sum(1 for at in probes.times if window_start <= at < window_end)
                distinct = len({n for n, at in probes.by_instance if window_start <= at < window_end})
                gaps = probes.gaps(window_start, window_end)
            seconds = window_end - window_start
            metrics = httpx.get(f"{base}/metrics", timeout=10).text
            failures = [
                line for line in metrics.splitlines() if line.startswith("eureka_health_probes_total")
            ]

            print(
                f"first round: {probed}/{args.n} instances probed in {round_s:.2f} s "
                f"(interval {args.interval} s): {verdict} its interval"
            )
            print(
                f"steady state: {in_window / seconds:.1f} probes/s over {seconds:.1f} s "
                f"(expected {args.n / args.interval:.0f}/s); {distinct}/{args.n} instances probed in it; "
                f"between two probes of one instance: median {gaps[0]:.2f} s, max {gaps[1]:.2f} s"
            )
            print(
                f"max probes in flight at the targets: {probes.max_in_flight} "
                f"(pool {args.concurrency}, each answer {args.delay_ms:g} ms)"
            )
            print(f"node worker CPU: {cpu_s:.2f} s over {seconds:.1f} s = {cpu_s / seconds:.3f} cores")
            print("node counters: " + "; ".join(failures))
        finally:
            node.stop()
            for server in servers:
                server.shutdown()
                server.server_close()


if __name__ == "__main__":
    main()
