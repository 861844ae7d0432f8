"""Heartbeats while clients flood ``peerreplication/batch`` (issue 34, item 2).

One node of ours (``deploy/gunicorn.conf.py``, gevent, API accounts off: anyone may post a batch), one
instance heartbeating every ``--interval-ms`` (50) on a fresh connection each time, its latency taken
from the moment it was due. Phase by phase, each ``--seconds`` long, ``--flooders`` (2) clients post
batches back to back on kept-alive connections:

* ``quiet``: no flood, the heartbeats' own baseline;
* ``50,000 bad Cancels``: the issue's 1 MB batch, every item lacking its app name and id;
* ``cap x bad Cancels``: as many bad items as a batch may hold (EUREKA_REPLICATION_BATCH_MAX_ITEMS);
* ``cap x Registers``: as many valid Registers (the costliest item to apply) as a batch may hold.

Printed per phase: batches answered by status, heartbeats due and answered, p50/p99/max, and the lines
and bytes the node logged meanwhile. Target: every heartbeat answered, p99 ≤ 50 ms. Loopback only,
bounded in time, the node stopped at the end. Printed, not asserted.

  .venv/bin/python bench/replication_flood.py               # about a minute
  .venv/bin/python bench/replication_flood.py --seconds 10 --cap 1000
"""

from __future__ import annotations

import argparse
import http.client
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
from console_page import registration
from nodes import HOST, Node
from replication_batch import register_items

HEARTBEAT_TIMEOUT_S = 5.0
BATCH_PATH = "/eureka/peerreplication/batch/"
JSON = {"Content-Type": "application/json", "Accept": "application/json"}


def bad_cancels(count: int) -> bytes:
    # 20 bytes an item, as short as an item gets: 50,000 of them make the 1 MB batch.
    return orjson.dumps({"replicationList": [{"action": "Cancel"}] * count})


def registers(count: int) -> bytes:
    return orjson.dumps({"replicationList": register_items(count)})


class Flooder(threading.Thread):
    """Posts ``body`` back to back on one kept-alive connection until ``stop``; counts the answers."""

    def __init__(self, port: int, body: bytes, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.body, self.stop_event = port, body, stop
        self.answers: Counter[str] = Counter()

    def run(self) -> None:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=30)
        while not self.stop_event.is_set():
            try:
                conn.request("POST", BATCH_PATH, body=self.body, headers=JSON)
                response = conn.getresponse()
                response.read()
                self.answers[str(response.status)] += 1
            except (OSError, http.client.HTTPException) as exc:
                self.answers[type(exc).__name__] += 1
                conn.close()
                conn = http.client.HTTPConnection(HOST, self.port, timeout=30)
        conn.close()


def heartbeat(port: int, path: str) -> bool:
    conn = http.client.HTTPConnection(HOST, port, timeout=HEARTBEAT_TIMEOUT_S)
    try:
        conn.request("PUT", path)
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def heartbeats(port: int, path: str, seconds: float, interval_s: float) -> tuple[int, list[float]]:
    """One heartbeat due every ``interval_s``, each sent on time by a pool (a slow answer does not delay
    the next), its latency counted from when it was due. Returns (due, latencies of those answered)."""
    latencies: list[float] = []
    lock = threading.Lock()

    def one(due: float) -> None:
        ok = heartbeat(port, path)
        took = time.perf_counter() - due
        if ok:
            with lock:
                latencies.append(took * 1000)

    due_count = int(seconds / interval_s)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=32) as pool:
        for k in range(due_count):
            due = start + k * interval_s
            time.sleep(max(0.0, due - time.perf_counter()))
            pool.submit(one, due)
    return due_count, latencies


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def run(node: Node, args: argparse.Namespace) -> None:
    app, body = registration(999_999, 10)
    instance_id = body["instance"]["instanceId"]
    conn = http.client.HTTPConnection(HOST, node.port, timeout=10)
    conn.request("POST", f"/eureka/apps/{app}", body=orjson.dumps(body), headers=JSON)
    assert conn.getresponse().status == 204
    conn.close()
    path = f"/eureka/apps/{app}/{instance_id}?status=UP"
    phases = [
        ("quiet", None),
        ("50,000 bad Cancels", bad_cancels(50_000)),
        (f"{args.cap:,} bad Cancels", bad_cancels(args.cap)),
        (f"{args.cap:,} Registers", registers(args.cap)),
    ]
    print(f"node: {node.base}   flooders: {args.flooders}   a heartbeat every {args.interval_ms} ms")
    header = f"{'phase':<22}{'batch KiB':>10}  {'batches':<24}{'beats':>10}{'p50':>8}{'p99':>8}{'max':>8}"
    print(header + f"{'log lines':>11}{'log KiB':>9}")
    for name, batch in phases:
        stop = threading.Event()
        flooders = [Flooder(node.port, batch, stop) for _ in range(args.flooders if batch else 0)]
        log_before = node.log.read_bytes()
        for flooder in flooders:
            flooder.start()
        due, latencies = heartbeats(node.port, path, args.seconds, args.interval_ms / 1000)
        stop.set()
        for flooder in flooders:
            flooder.join(timeout=60)
        logged = node.log.read_bytes()[len(log_before) :]
        answers = sum((flooder.answers for flooder in flooders), Counter())
        batches = " ".join(f"{status}:{count}" for status, count in sorted(answers.items())) or "-"
        size = f"{len(batch) // 1024:,}" if batch else "-"
        lines = logged.count(b"\n")
        print(
            f"{name:<22}{size:>10}  {batches:<24}{len(latencies):>5}/{due:<4}"
            f"{percentile(latencies, 0.5):>8.1f}{percentile(latencies, 0.99):>8.1f}"
            f"{max(latencies, default=float('nan')):>8.1f}{lines:>11,}{len(logged) // 1024:>9,}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--flooders", type=int, default=2)
    parser.add_argument("--interval-ms", type=int, default=50)
    parser.add_argument("--cap", type=int, default=1000, help="items in the 'at the cap' batches")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Node(Path(tmp)).start() as node:
        run(node, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
