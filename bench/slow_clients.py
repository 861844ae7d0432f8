"""Slow clients against one node: thousands of connections that send a body's first byte and then
nothing, while 500 instances heartbeat every second on fresh connections.

Starts one node (bench/nodes.py: gunicorn with deploy/gunicorn.conf.py, embedded mode, as
``make run``), registers 500 instances, and heartbeats each once a second, every heartbeat on a new
connection from the instance's own loopback address (127.1.x.y). After a few seconds an attacker
process opens the slow connections: phase ``one`` 10,500 from 127.0.0.2 (more than gunicorn's 10,000
``worker_connections``), phase ``five`` 2,000 from each of 127.0.0.2-6. Each sends a request's
headers, ``Content-Length: 100`` and one byte, then nothing. With ``--auth`` the node has API accounts
on, the slow requests carry no credentials and their bodies are chunked, and the heartbeats carry a
client account's. Nothing reconnects.

Printed per phase: heartbeats sent and answered, their latency (p50, p99, max), the worker's RSS
before and at its peak, and what became of the slow connections: refused at once (503), answered
(408 at the body deadline, 401 with accounts on) and closed, and when the node closed the last one;
any still open at the end is a failure of the node's deadlines. No loopback address is a trusted
proxy here (EUREKA_TRUSTED_PROXIES=::1), so every address is capped.

  .venv/bin/python bench/run.py slow_clients                 # both phases, accounts off
  .venv/bin/python bench/run.py slow_clients --auth          # both phases, accounts on
  .venv/bin/python bench/run.py slow_clients --phases one --duration 40

Loopback only; each phase is bounded (``--duration`` seconds of attack); the node is stopped at the end.
Needs ``ulimit -n`` above 11,000 (raised here up to the hard limit). Printed, not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from console_page import registration as console_page_registration
from nodes import HOST, Node, rss_mb

ACCOUNT, PASSWORD = "bench-client", "bench-password-not-secret"
INSTANCES = 500
APP = "FLEET"
PHASES = {"one": [("127.0.0.2", 10_500)], "five": [(f"127.0.0.{n}", 2_000) for n in range(2, 7)]}


def registration(index: int) -> bytes:
    """Instance ``index`` of the fleet (console_page's registration, renamed into one app), with a
    lease a missed second of heartbeats would not end but a stopped fleet would within 30 s."""
    _, body = console_page_registration(index, 1)
    body["instance"] |= {
        "instanceId": f"i-{index}",
        "app": APP,
        "status": "UP",
        "leaseInfo": {"renewalIntervalInSecs": 1, "durationInSecs": 30},
    }
    return json.dumps(body).encode()


def instance_address(index: int) -> str:
    """Where instance ``index`` connects from: an address of its own, as instances on their hosts do."""
    return f"127.1.{index // 250}.{index % 250 + 1}"


async def exchange(port: int, request: bytes, source: str = HOST, timeout: float = 10.0) -> bytes:
    """One request on a new connection from ``source``; the status line's code, or b"" on failure."""
    connecting = asyncio.open_connection(HOST, port, local_addr=(source, 0))
    reader, writer = await asyncio.wait_for(connecting, timeout)
    try:
        writer.write(request)
        line = await asyncio.wait_for(reader.readline(), timeout)
        await asyncio.wait_for(reader.read(), timeout)  # Connection: close: to its end
        return line.split(b" ")[1] if line.count(b" ") >= 1 else b""
    finally:
        writer.close()


def request(method: str, path: str, port: int, auth: str, body: bytes = b"") -> bytes:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n"
        f"Accept: application/json\r\nContent-Length: {len(body)}\r\n"
    )
    if body:
        head += "Content-Type: application/json\r\n"
    if auth:
        head += f"Authorization: {auth}\r\n"
    return head.encode() + b"\r\n" + body


async def heartbeats(
    port: int, auth: str, seconds: float, latencies: list, failures: list, instances: int = INSTANCES
) -> None:
    """Each of ``instances`` renews once a second, spread evenly over the second, each on a new
    connection from the instance's own address."""
    started = time.monotonic()
    tasks = []

    async def beat(index: int) -> None:
        sent = time.monotonic()
        try:
            renew = request("PUT", f"/eureka/apps/{APP}/i-{index}", port, auth)
            code = await exchange(port, renew, instance_address(index))
        except (TimeoutError, OSError) as error:
            failures.append(type(error).__name__)
            return
        if code != b"200":
            failures.append(code.decode() or "no answer")
            return
        latencies.append((time.monotonic() - sent) * 1000)

    beat_number = 0
    while time.monotonic() - started < seconds:
        second, index = divmod(beat_number, instances)
        due = started + second + index / instances
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(beat(index)))
        beat_number += 1
    await asyncio.gather(*tasks)


# ---- the attacker (its own process: thousands of idle sockets must not slow the heartbeats' loop) ----


async def slow_connection(source: str, port: int, auth: bool, opened_at: float, results: list) -> None:
    try:
        reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
    except OSError as error:
        results.append(("connect failed: " + type(error).__name__, 0.0))
        return
    opened = time.monotonic()
    framing = "Transfer-Encoding: chunked\r\n\r\n64\r\n{" if auth else "Content-Length: 100\r\n\r\n{"
    writer.write(
        f"POST /eureka/apps/SLOW HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
        f"{framing}".encode()
    )
    answer = b""
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            answer += data
    except OSError:
        pass
    closed = time.monotonic()
    status = answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/1.1 ") else "closed, no answer"
    results.append((status, closed - opened))
    writer.close()


def attacker(port: int, groups: list, auth: bool, seconds: float, queue) -> None:
    """Opens the slow connections (up to 500 connects at a time), waits until the node has closed
    them or ``seconds`` pass, and reports what became of each."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    async def run() -> list:
        results: list = []
        opening = asyncio.Semaphore(500)
        started = time.monotonic()

        async def one(source: str) -> None:
            async with opening:
                task = asyncio.ensure_future(slow_connection(source, port, auth, started, results))
                await asyncio.sleep(0)
            await task

        tasks = [asyncio.ensure_future(one(source)) for source, count in groups for _ in range(count)]
        done, pending = await asyncio.wait(tasks, timeout=seconds)
        for task in pending:
            task.cancel()
        results.extend(("still open", seconds) for _ in pending)
        return results

    queue.put(asyncio.run(run()))


def summarize(results: list) -> dict:
    by_status: dict[str, list[float]] = {}
    for status, after in results:
        by_status.setdefault(status, []).append(after)
    return {
        status: {"count": len(times), "closed_after_max_s": round(max(times), 1)}
        for status, times in sorted(by_status.items())
    }


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def run_phase(node: Node, name: str, args: argparse.Namespace, auth: str) -> dict:
    worker = node.worker_pid()
    latencies: list[float] = []
    failures: list[str] = []
    samples: list[float] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            samples.append(rss_mb(worker))
            time.sleep(0.25)

    # A few seconds of heartbeats alone: the worker's RSS before the attack.
    asyncio.run(heartbeats(node.port, auth, 3, [], []))
    baseline = statistics.median(rss_mb(worker) for _ in range(5))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    queue: multiprocessing.Queue = multiprocessing.Queue()
    groups = PHASES[name]
    attack = multiprocessing.Process(
        target=attacker, args=(node.port, groups, args.auth, args.duration, queue), daemon=True
    )
    attack.start()
    asyncio.run(heartbeats(node.port, auth, args.duration, latencies, failures))
    results = queue.get(timeout=args.duration + 60)
    attack.join(10)
    sampling.set()
    sampler.join()
    sent = len(latencies) + len(failures)
    return {
        "phase": name,
        "slow connections": sum(count for _, count in groups),
        "from": ", ".join(source for source, _ in groups),
        "heartbeats sent": sent,
        "answered 200": len(latencies),
        "failed": {kind: failures.count(kind) for kind in sorted(set(failures))},
        "p50 ms": round(percentile(latencies, 0.50), 1),
        "p99 ms": round(percentile(latencies, 0.99), 1),
        "max ms": round(max(latencies, default=float("nan")), 1),
        "worker RSS before MB": round(baseline, 1),
        "worker RSS peak MB": round(max(samples, default=baseline), 1),
        "RSS growth MB": round(max(samples, default=baseline) - baseline, 1),
        "slow connections by outcome": summarize(results),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", nargs="*", default=["one", "five"], choices=sorted(PHASES))
    parser.add_argument("--auth", action="store_true", help="API accounts on; slow bodies chunked")
    parser.add_argument("--duration", type=float, default=35.0, help="seconds of attack per phase")
    parser.add_argument("--env", nargs="*", default=[], metavar="NAME=value", help="more node settings")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < 11_000:
        raise SystemExit(f"ulimit -n is at most {hard}: 10,500 connections need more than 11,000")

    env = {"EUREKA_TRUSTED_PROXIES": "::1", "EUREKA_ACCOUNT_PASSWORD": PASSWORD}
    if args.auth:
        env["EUREKA_API_AUTH"] = "true"
    for item in args.env:
        key, _, value = item.partition("=")
        env[key] = value
    auth = "Basic " + base64.b64encode(f"{ACCOUNT}:{PASSWORD}".encode()).decode() if args.auth else ""
    with tempfile.TemporaryDirectory(prefix="slow-clients-") as tmp:
        node = Node(Path(tmp), env, name="node", log=Path(tmp) / "gunicorn.log")
        node.manage("eureka_account", ACCOUNT, "--role", "client")
        node.start()
        try:

            async def register() -> None:
                for index in range(INSTANCES):
                    register = request("POST", f"/eureka/apps/{APP}", node.port, auth, registration(index))
                    code = await exchange(node.port, register, instance_address(index))
                    if code != b"204":
                        raise SystemExit(f"registration {index} answered {code!r}")

            asyncio.run(register())
            shown = " ".join(f"{k}={v}" for k, v in env.items() if k != "EUREKA_ACCOUNT_PASSWORD")
            print(f"settings: {shown}")
            for name in args.phases:
                print(json.dumps(run_phase(node, name, args, auth), indent=2), flush=True)
        finally:
            log_tail = node.log_tail(5)
            node.stop()
        print("node log (last lines):\n" + log_tail)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
