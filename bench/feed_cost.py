"""What open change streams cost heartbeats: closed-loop renews/s of one node with 0 vs N idle SSE streams.

Starts one node (gunicorn with deploy/gunicorn.conf.py, gevent, embedded mode, loopback port),
registers a fleet with the Go load generator, then alternates rounds without streams and with
``--streams`` (1,000) idle ``GET /api/v1/changes/stream`` connections held open by this process
(renews make no change, so the streams only wait and send their keep-alive comments), and prints each
round, the medians and the ratio. The open count is checked on /metrics before each measured round.

  .venv/bin/python bench/feed_cost.py                                  # 3 rounds of 10 s each way
  .venv/bin/python bench/feed_cost.py --rounds 5 --duration 5 --streams 2000 -n 5000

Needs Go (bench/loadgen is built on first use). Loopback only; bounded in time; the node and every
connection are closed at the end. Printed, not asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from nodes import HOST, Node, build_loadgen
from setting_cost import loadgen, start_node

OPEN_TIMEOUT_S = 60


class IdleStreams:
    """``count`` open SSE streams on raw sockets; a thread reads and discards their keep-alives."""

    def __init__(self, port: int, count: int):
        self.port = port
        self.count = count
        self.sockets: list[socket.socket] = []
        self._selector = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._reader: threading.Thread | None = None

    def open(self) -> None:
        request = f"GET /api/v1/changes/stream HTTP/1.1\r\nHost: {HOST}\r\nAccept: text/event-stream\r\n\r\n"
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        for _ in range(self.count):
            sock = socket.create_connection((HOST, self.port), timeout=10)
            sock.sendall(request.encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    raise SystemExit(f"stream {len(self.sockets) + 1} closed before its answer")
                head += chunk
            if not head.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"stream {len(self.sockets) + 1} refused: {head.splitlines()[0]!r}")
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)
            self.sockets.append(sock)
            if time.monotonic() > deadline:
                raise SystemExit(f"opening {self.count} streams took over {OPEN_TIMEOUT_S} s")
        self._stop.clear()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.5):
                try:
                    key.fileobj.recv(65536)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join(5)
            self._reader = None
        for sock in self.sockets:
            self._selector.unregister(sock)
            sock.close()
        self.sockets.clear()


def open_streams(port: int) -> int:
    text = httpx.get(f"http://{HOST}:{port}/metrics", timeout=5).text
    found = re.search(r"^eureka_change_streams_open (\S+)$", text, re.MULTILINE)
    return int(float(found.group(1))) if found else -1


def wait_for_open(port: int, expected: int) -> None:
    deadline = time.monotonic() + 30
    while (now_open := open_streams(port)) != expected:
        if time.monotonic() > deadline:
            raise SystemExit(f"expected {expected} open streams on the node, /metrics says {now_open}")
        time.sleep(0.2)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of the node's processes so far (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def idle_cpu(node: Node, seconds: float) -> float:
    """Cores the node uses while nothing but the open streams (if any) is going on."""
    pids = node.pids()
    before, started = cpu_seconds(pids), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pids) - before) / (time.monotonic() - started)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1_000, help="idle streams in the 'with' rounds (1000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each (default 3)")
    parser.add_argument("--duration", type=float, default=10, help="measured seconds per round (10)")
    parser.add_argument("--warmup", type=float, default=2, help="unmeasured seconds per round (2)")
    parser.add_argument("-n", type=int, default=10_000, help="instances (10000)")
    parser.add_argument("--apps", type=int, default=100, help="applications (100)")
    args = parser.parse_args(argv)
    if not 1 <= args.streams <= 10_000 or not 1 <= args.rounds <= 20:
        raise SystemExit("--streams must be in 1..10000 and --rounds in 1..20")
    build_loadgen()
    workdir = Path(tempfile.mkdtemp(prefix="feed-cost-"))
    node: Node | None = None
    streams: IdleStreams | None = None
    rates: dict[str, list[float]] = {"0 streams": [], f"{args.streams} streams": []}
    # The node's CPU per renew: less sensitive than req/s to a load generator starved by neighbours.
    cpu_per_renew: dict[str, list[float]] = {label: [] for label in rates}
    try:
        # Room for the streams whatever EUREKA_CHANGE_STREAMS_MAX says in the environment.
        node = start_node("node", {"EUREKA_CHANGE_STREAMS_MAX": str(args.streams + 10)}, workdir / "node")
        loadgen(node, "register", args)
        print(
            f"{args.n} instances, {args.apps} apps; closed-loop renews, 16 conns, {args.duration:g} s a round"
        )
        for round_no in range(1, args.rounds + 1):
            for label in rates:
                if label != "0 streams":
                    streams = IdleStreams(node.port, args.streams)
                    streams.open()
                wait_for_open(node.port, args.streams if streams else 0)
                metrics = loadgen(node, "renew", args)
                rates[label].append(metrics["req/s"])
                cores = metrics.get("server_cpu_cores", 0)
                cpu_per_renew[label].append(1000 * cores / metrics["req/s"])
                print(
                    f"round {round_no} {label:>12}: {metrics['req/s']:8,.0f} renews/s  "
                    f"p50 {metrics.get('p50_ms', 0):.2f} ms  p99 {metrics.get('p99_ms', 0):.2f} ms  "
                    f"server {cores:.2f} cores = {cpu_per_renew[label][-1]:.3f} ms CPU a renew",
                    flush=True,
                )
                if streams is not None:
                    if round_no == 1:
                        print(f"  idle node with {args.streams} open streams: {idle_cpu(node, 10):.3f} cores")
                    streams.close()
                    streams = None
                elif round_no == 1:
                    print(f"  idle node without streams: {idle_cpu(node, 10):.3f} cores")
        without, with_streams = (statistics.median(values) for values in rates.values())
        cpu_without, cpu_with = (statistics.median(values) for values in cpu_per_renew.values())
        print(f"median node CPU a renew: {cpu_without:.3f} ms without streams, {cpu_with:.3f} ms with")
        print(
            f"median without streams {without:,.0f}/s, with {args.streams} idle streams "
            f"{with_streams:,.0f}/s: {with_streams / without:.1%}"
        )
    finally:
        if streams is not None:
            streams.close()
        if node is not None:
            node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
