"""What reading names nobody registered costs a node: RSS and write latency before and after 200,000 of them.

Starts one node (gunicorn with deploy/gunicorn.conf.py, gevent, embedded mode, its own database, a
loopback port), registers a small fleet, then measures the node worker's resident memory and the
median latency of writes, one request at a time on a kept-alive connection: re-registrations (each
changes the registry, so each runs the response cache's invalidation under the registry's lock) and
renews. Then it sends ``--names`` (200,000) distinct junk ``GET /eureka/apps/<name>`` (or ``vips``,
``svips``) over ``--connections`` kept-alive connections, waits for a few cache syncs, and measures
again. Printed: both measurements, after/before ratios, and the node's own count of cached payloads
(``eureka_response_cache_keys`` on /metrics) before and after.

  .venv/bin/python bench/junk_names.py                          # 200,000 junk app names
  .venv/bin/python bench/junk_names.py --names 50000 --kind vips

Loopback only; bounded in time (the junk phase stops at ``--max-seconds``, and says so); the node is
stopped at the end. Printed, not asserted.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import re
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from nodes import HOST, ROOT, Node
from setting_cost import start_node

sys.path.insert(0, str(ROOT))
from tests.factories import fleet_member  # noqa: E402

JSON_HEADERS = {"Accept": "application/json", "Accept-Encoding": "gzip", "Content-Type": "application/json"}
# Cache syncs (1 s by default) to wait after the junk phase: what they keep or drop shows in the second
# measurement.
SETTLE_S = 3.0


def instance(k: int, apps: int) -> tuple[str, str, bytes]:
    """Fleet member ``k``: its app, its id and its registration body (the Java client's JSON shape)."""
    body = fleet_member(k, apps)
    return body["app"], body["instanceId"], json.dumps({"instance": body}).encode()


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for {pid}")


def cached_keys(port: int) -> dict[str, int]:
    connection = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    found = re.findall(r'^eureka_response_cache_keys\{tier="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {tier: int(float(value)) for tier, value in found}


def timed_writes(port: int, fleet: list[tuple[str, str, bytes]], count: int) -> dict[str, list[float]]:
    """``count`` re-registrations, then ``count`` renews, one at a time: milliseconds each."""
    connection = http.client.HTTPConnection(HOST, port, timeout=30)
    latencies: dict[str, list[float]] = {"register": [], "renew": []}
    try:
        for kind in latencies:
            for app, instance_id, body in itertools.islice(itertools.cycle(fleet), count):
                if kind == "register":
                    method, path, payload, expected = "POST", f"/eureka/apps/{app}", body, 204
                else:
                    method, path, payload, expected = "PUT", f"/eureka/apps/{app}/{instance_id}", None, 200
                started = time.perf_counter()
                connection.request(method, path, body=payload, headers=JSON_HEADERS)
                response = connection.getresponse()
                response.read()
                latencies[kind].append((time.perf_counter() - started) * 1000)
                if response.status != expected:
                    raise SystemExit(f"{method} {path}: {response.status}, expected {expected}")
    finally:
        connection.close()
    return latencies


def register_fleet(port: int, fleet: list[tuple[str, str, bytes]]) -> None:
    connection = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        for app, _, body in fleet:
            connection.request("POST", f"/eureka/apps/{app}", body=body, headers=JSON_HEADERS)
            response = connection.getresponse()
            response.read()
            if response.status != 204:
                raise SystemExit(f"registering in {app}: {response.status}")
    finally:
        connection.close()


class JunkReads:
    """``names`` distinct ``GET /eureka/<kind>/<name>`` over ``connections`` kept-alive connections, one
    thread each, each request waited for; stops at ``deadline`` (monotonic) if not done by then."""

    def __init__(self, port: int, kind: str, names: int, connections: int, deadline: float):
        self.port, self.kind, self.names, self.connections = port, kind, names, connections
        self.deadline = deadline
        self.prefix = f"junk-{secrets.token_hex(4)}-"
        self.statuses: dict[int, int] = {}
        self.sent = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def _run(self, offset: int) -> None:
        statuses: dict[int, int] = {}
        sent = 0
        connection = http.client.HTTPConnection(HOST, self.port, timeout=30)
        headers = {"Accept": "application/json", "Accept-Encoding": "gzip"}
        try:
            for number in range(offset, self.names, self.connections):
                if sent % 256 == 0 and time.monotonic() > self.deadline:
                    break
                connection.request("GET", f"/eureka/{self.kind}/{self.prefix}{number}", headers=headers)
                response = connection.getresponse()
                response.read()
                statuses[response.status] = statuses.get(response.status, 0) + 1
                sent += 1
        except (OSError, http.client.HTTPException) as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()
            with self._lock:
                self.sent += sent
                for status, count in statuses.items():
                    self.statuses[status] = self.statuses.get(status, 0) + count

    def run(self) -> float:
        started = time.monotonic()
        threads = [threading.Thread(target=self._run, args=(n,)) for n in range(self.connections)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.monotonic() - started


def measure(label: str, node: Node, pid: int, fleet, writes: int) -> dict[str, float]:
    latencies = timed_writes(node.port, fleet, writes)
    result = {
        "rss_mb": resident_mb(pid),
        **{f"{kind}_p50_ms": statistics.median(values) for kind, values in latencies.items()},
        **{f"{kind}_p90_ms": statistics.quantiles(values, n=10)[-1] for kind, values in latencies.items()},
    }
    keys = cached_keys(node.port)
    print(
        f"{label:>6}: RSS {result['rss_mb']:7.1f} MB   register p50 {result['register_p50_ms']:6.2f} ms "
        f"p90 {result['register_p90_ms']:6.2f} ms   renew p50 {result['renew_p50_ms']:6.2f} ms "
        f"p90 {result['renew_p90_ms']:6.2f} ms   cached keys {keys}",
        flush=True,
    )
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--names", type=int, default=200_000, help="distinct junk names (200000)")
    parser.add_argument("--kind", choices=("apps", "vips", "svips"), default="apps", help="what to ask for")
    parser.add_argument("--connections", type=int, default=8, help="kept-alive connections for the junk (8)")
    parser.add_argument("--max-seconds", type=float, default=240, help="the junk phase stops here (240)")
    parser.add_argument("--writes", type=int, default=400, help="timed writes of each kind per measurement")
    parser.add_argument("-n", type=int, default=1_000, help="instances registered (1000)")
    parser.add_argument("--apps", type=int, default=100, help="applications they are spread over (100)")
    args = parser.parse_args(argv)
    if not 1 <= args.names <= 1_000_000 or not 1 <= args.connections <= 64:
        raise SystemExit("--names must be in 1..1000000 and --connections in 1..64")
    fleet = [instance(k, args.apps) for k in range(args.n)]
    node: Node | None = None
    try:
        node = start_node("node", {}, Path(tempfile.mkdtemp(prefix="junk-names-")) / "node")
        # The gunicorn worker: the one process holding the lease map and the response cache.
        pid = node.worker_pid()
        register_fleet(node.port, fleet)
        timed_writes(node.port, fleet, 100)  # warm the worker's paths up; not measured
        time.sleep(SETTLE_S)
        print(f"{args.n} instances in {args.apps} apps; {args.writes} sequential writes of each kind")
        before = measure("before", node, pid, fleet, args.writes)
        junk = JunkReads(
            node.port, args.kind, args.names, args.connections, time.monotonic() + args.max_seconds
        )
        took = junk.run()
        print(
            f"  junk: {junk.sent:,} distinct GET /eureka/{args.kind}/<name> in {took:.1f} s "
            f"({junk.sent / took:,.0f}/s) over {args.connections} connections; answers {junk.statuses}"
            + (
                f"; STOPPED at --max-seconds after {junk.sent:,} of {args.names:,}"
                if junk.sent < args.names
                else ""
            )
            + (f"; errors {junk.errors[:3]}" if junk.errors else ""),
            flush=True,
        )
        time.sleep(SETTLE_S)
        after = measure("after", node, pid, fleet, args.writes)
        print(
            "after/before: "
            + "   ".join(
                f"{name} {after[name] / before[name]:.2f}x"
                for name in ("rss_mb", "register_p50_ms", "register_p90_ms", "renew_p50_ms")
            )
            + f"   (RSS {after['rss_mb'] - before['rss_mb']:+.1f} MB)"
        )
    finally:
        if node is not None:
            node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
