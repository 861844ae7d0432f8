"""Measure how fast a killed instance leaves GET /eureka/apps on a running node (e.g. `make stack`).

Starts N unmodified py-eureka-client processes with default client settings (30 s heartbeats, 90 s
lease), waits until all appear in GET /eureka/apps, SIGKILLs one, and reports the seconds between its
last heartbeat (the lease's lastRenewalTimestamp) and its disappearance, plus whether the others
stayed. Loopback only; stops by itself (bounded by --timeout).

  .venv/bin/python bench/stack_eviction.py --url http://127.0.0.1:8761/eureka/ -n 10   # `make stack` running
  .venv/bin/python bench/stack_eviction.py --start      # deploy/stack.sh on free ports (bench/nodes.py)
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from nodes import ROOT, Stack

CLIENT = ROOT / "tests" / "integration" / "py_client_process.py"


def listed(url: str) -> dict[str, dict]:
    body = httpx.get(f"{url}apps", headers={"Accept": "application/json"}, timeout=5).json()
    return {
        inst["instanceId"]: inst
        for app in body["applications"]["application"]
        for inst in app["instance"]
        if inst["app"].startswith("STACK-")
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--url", default="http://127.0.0.1:8761/eureka/", help="a running node's serviceUrl")
    where.add_argument("--start", action="store_true", help="run make stack (deploy/stack.sh) on free ports")
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=400)
    args = parser.parse_args()
    if not args.url.startswith(("http://127.", "http://localhost")):
        parser.error("loopback targets only")
    if not args.start:
        return measure(args)
    workdir = Path(tempfile.mkdtemp(prefix="stack-eviction-"))
    try:
        with Stack(workdir).start() as stack:
            args.url = stack.url
            return measure(args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def measure(args: argparse.Namespace) -> int:
    started = time.monotonic()
    clients = []
    for i in range(args.n):
        port = 9300 + i
        clients.append(
            subprocess.Popen(
                [sys.executable, str(CLIENT), args.url, f"stack-{i}", str(port), "30", "90"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    ids = [f"127.0.0.1:stack-{i}:{9300 + i}" for i in range(args.n)]
    try:
        while set(ids) - set(listed(args.url)):
            if time.monotonic() - started > args.timeout:
                print("not all clients appeared", file=sys.stderr)
                return 1
            time.sleep(0.5)
        print(f"all {args.n} instances listed after {time.monotonic() - started:.1f} s")
        # Kill right after a heartbeat, so "since last heartbeat" is measured from a known renewal.
        victim = ids[0]
        first = listed(args.url)[victim]["leaseInfo"]["lastRenewalTimestamp"]
        while True:
            single = httpx.get(
                f"{args.url}apps/STACK-0/{victim}", headers={"Accept": "application/json"}, timeout=5
            )
            last_renewal = single.json()["instance"]["leaseInfo"]["lastRenewalTimestamp"]
            if last_renewal != first or time.monotonic() - started > args.timeout:
                break
            time.sleep(0.2)
        clients[0].send_signal(signal.SIGKILL)
        print(f"killed {victim}; its last heartbeat reached the server at {last_renewal}")
        while victim in listed(args.url):
            if time.monotonic() - started > args.timeout:
                print("the killed instance was never evicted", file=sys.stderr)
                return 1
            time.sleep(0.5)
        gone_ms = time.time_ns() // 1_000_000
        remaining = set(listed(args.url))
        print(f"evicted: gone from /eureka/apps {(gone_ms - last_renewal) / 1000:.1f} s after last heartbeat")
        print(f"the other {args.n - 1} stayed: {remaining == set(ids[1:])}")
        return 0 if remaining == set(ids[1:]) else 1
    finally:
        for client in clients:
            client.kill()
            client.wait(10)


if __name__ == "__main__":
    raise SystemExit(main())
