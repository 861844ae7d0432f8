"""Time how long a node takes to answer a peer's replication batch of 250 items.

Spring Cloud Eureka Server sends its batches chunked and gives up on an answer after 200 ms (its
``peerNodeReadTimeoutMs``), then resends the batch a second later: a node that answers slower never
catches up with such a peer. This posts batches of 250 Registers (each a full instance) and of 250
Heartbeats, chunked as SCE sends them, and prints the median, p90 and max answer time. Loopback
only; stops by itself.

  .venv/bin/python bench/replication_batch.py --start          # a fresh node on port 28763
  .venv/bin/python bench/replication_batch.py --url http://127.0.0.1:8761

Target (issue 12): well inside 200 ms. Printed, not asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import orjson
from console_page import registration
from nodes import Node

BATCH = 250
SCE_READ_TIMEOUT_MS = 200


def register_items(count: int) -> list[dict]:
    """``count`` replicated Register items, as a peer sends them (instances of 10 apps)."""
    items = []
    for n in range(count):
        app, body = registration(n, 10)
        instance = body["instance"]
        instance["lastDirtyTimestamp"] = "1000"
        items.append(
            {
                "appName": app,
                "id": instance["instanceId"],
                "lastDirtyTimestamp": 1000,
                "status": instance["status"],
                "instanceInfo": instance,
                "action": "Register",
            }
        )
    return items


def batches() -> dict[str, list[dict]]:
    registers = register_items(BATCH)
    kept = ("appName", "id", "lastDirtyTimestamp", "status")
    heartbeats = [{key: item[key] for key in kept} | {"action": "Heartbeat"} for item in registers]
    return {"250 Register": registers, "250 Heartbeat": heartbeats}


def chunked(body: bytes):
    """An iterator body: httpx sends it with Transfer-Encoding: chunked, as SCE does."""
    middle = len(body) // 2
    yield body[:middle]
    yield body[middle:]


def run(base: str, rounds: int) -> None:
    print(f"node: {base}   rounds: {rounds}   SCE's read timeout: {SCE_READ_TIMEOUT_MS} ms")
    print(f"{'batch':<16}{'size':>9}{'median':>10}{'p90':>10}{'max':>10}")
    with httpx.Client(headers={"Content-Type": "application/json", "Accept": "application/json"}) as client:
        for name, items in batches().items():
            body = orjson.dumps({"replicationList": items})
            times = []
            for _ in range(rounds):
                started = time.perf_counter()
                response = client.post(f"{base}/eureka/peerreplication/batch/", content=chunked(body))
                times.append((time.perf_counter() - started) * 1000)
                answers = response.json()["responseList"]
                assert response.status_code == 200 and len(answers) == BATCH, response.text[:200]
                assert all(answer["statusCode"] == 200 for answer in answers), answers[:3]
            times.sort()
            p90 = times[int(0.9 * (len(times) - 1))]
            print(
                f"{name:<16}{len(body) // 1024:>6} KiB{statistics.median(times):>8.1f} ms"
                f"{p90:>7.1f} ms{times[-1]:>7.1f} ms"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:28763", help="base URL of a running node")
    parser.add_argument("--start", action="store_true", help="start a fresh node on --port, stop it after")
    parser.add_argument("--port", type=int, default=28763)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    if not args.start:
        run(args.url.rstrip("/"), args.rounds)
        return 0
    with tempfile.TemporaryDirectory() as tmp, Node(Path(tmp), port=args.port).start() as node:
        run(node.base, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
