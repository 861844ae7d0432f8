"""Attacks on one node, each while a fleet heartbeats on fresh connections from addresses of its own.

For each HTTP server (gunicorn, granian) and each attack named: starts a node (bench/nodes.py, embedded
mode, as ``make run``; an attack may start things beside it first, e.g. a hostile remote region, and
add settings), registers the fleet (``--fleet`` instances, each renewing once a second on a new
connection from its own loopback address 127.1.x.y) and any extra instances the attack wants, reads
the worker's idle RSS, then runs the attack in a child process for ``--duration`` seconds while the
heartbeats go on. After the attack the heartbeats go on for the attack's settle time (past the delta
retention for the churn attacks) and the worker's RSS is read again.

Printed per server and attack: heartbeats sent and answered, their latency (p50, p99, max), the
worker's RSS idle / peak during the attack / after it, the node log's growth during the attack, the
load average, and what the attack itself saw. No loopback address is a trusted proxy here
(EUREKA_TRUSTED_PROXIES=::1), so every address gets its own share.

  .venv/bin/python bench/run.py attacks                       # every attack, on both servers
  .venv/bin/python bench/run.py attacks --attacks console --servers granian
  .venv/bin/python bench/run.py attacks --list

Loopback only; each attack is bounded by its duration; nodes are stopped at the end. Needs
``ulimit -n`` well above the largest attack's connections (raised here up to the hard limit).
Printed, not asserted. The attacks of the first round (slow bodies) are bench/slow_clients.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import json
import multiprocessing
import os
import resource
import select
import socket
import statistics
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import orjson
from nodes import HOST, HTTP_SERVERS, Node, rss_mb
from slow_clients import APP as FLEET_APP
from slow_clients import exchange, instance_address, percentile, registration, request
from slow_clients import heartbeats as slow_clients_heartbeats

# Extra instances (not heartbeating) are registered through the replication batch, this many a batch.
BATCH_ITEMS = 500


@contextlib.contextmanager
def no_surroundings() -> Iterator[dict[str, str]]:
    yield {}


@dataclass
class Attack:
    """One way to attack a node.

    ``run(port, seconds)`` runs in a child process during the attack window and returns what became
    of the attack; ``surroundings()`` is entered before the node starts and yields node settings;
    ``registered`` instances are registered (not renewed) before the attack; ``settle_s`` is how long
    after the attack the worker's RSS is read again."""

    name: str
    run: Callable[[int, float], dict]
    surroundings: Callable[[], contextlib.AbstractContextManager[dict[str, str]]] = no_surroundings
    env: dict[str, str] = field(default_factory=dict)
    fleet: int = 100
    registered: int = 0
    settle_s: float = 10.0
    duration_s: float = 30.0


# ---- the fleet ----


async def heartbeats(port: int, fleet: int, seconds: float, latencies: list, failures: list) -> None:
    """The fleet's renewals (bench/slow_clients.py's, without credentials)."""
    await slow_clients_heartbeats(port, "", seconds, latencies, failures, instances=fleet)


async def register_fleet(port: int, fleet: int) -> None:
    for index in range(fleet):
        body = registration(index)
        code = await exchange(
            port, request("POST", f"/eureka/apps/{FLEET_APP}", port, "", body), instance_address(index)
        )
        if code != b"204":
            raise SystemExit(f"fleet registration {index} answered {code!r}")


def extra_instance(n: int) -> dict:
    """Instance ``n`` of the extra registry: 100 apps, a few metadata keys, as a console shows them."""
    app = f"APP-{n % 100:03d}"
    host = f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"
    instance = {
        "instanceId": f"{host}:{app.lower()}:8080",
        "hostName": f"host-{n}.bench.internal",
        "app": app,
        "ipAddr": host,
        "status": "DOWN" if n % 50 == 7 else "UP",
        "overriddenStatus": "UNKNOWN",
        "port": {"$": 8080, "@enabled": "true"},
        "securePort": {"$": 8443, "@enabled": "false"},
        "vipAddress": app.lower(),
        "statusPageUrl": f"http://{host}:8080/actuator/info",
        "healthCheckUrl": f"http://{host}:8080/actuator/health",
        "homePageUrl": f"http://{host}:8080/",
        "metadata": {"zone": f"z{n % 3}", "version": f"1.{n % 4}", "team": f"team-{n % 7}"},
        "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 600},
        "dataCenterInfo": {
            "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
            "name": "MyOwn",
        },
        "lastDirtyTimestamp": "1000",
    }
    return {
        "appName": app,
        "id": instance["instanceId"],
        "lastDirtyTimestamp": "1000",
        "status": instance["status"],
        "instanceInfo": instance,
        "action": "Register",
    }


def register_extra(base: str, count: int) -> None:
    with httpx.Client(base_url=base, timeout=60, headers={"Accept": "application/json"}) as client:
        for first in range(0, count, BATCH_ITEMS):
            items = [extra_instance(n) for n in range(first, min(count, first + BATCH_ITEMS))]
            answer = client.post(
                "/eureka/peerreplication/batch",
                content=orjson.dumps({"replicationList": items}),
                headers={"Content-Type": "application/json"},
            )
            answer.raise_for_status()


# ---- one attack on one server ----


def _attacker(run: Callable[[int, float], dict], port: int, seconds: float, queue) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        queue.put(run(port, seconds))
    except Exception as error:  # the report says what broke instead of hanging the bench
        queue.put({"attack failed": f"{type(error).__name__}: {error}"})


def median_rss(pid: int, samples: int = 5) -> float:
    values = []
    for _ in range(samples):
        values.append(rss_mb(pid))
        time.sleep(0.2)
    return statistics.median(values)


def attack_node(attack: Attack, server: str, fleet: int, duration: float | None) -> dict:
    seconds = duration or attack.duration_s
    fleet = attack.fleet if fleet is None else fleet
    with tempfile.TemporaryDirectory(prefix=f"attack-{attack.name}-") as tmp, attack.surroundings() as extra:
        env = {"EUREKA_TRUSTED_PROXIES": "::1", **attack.env, **extra}
        log = Path(tmp) / "node.log"
        node = Node(Path(tmp) / "node", env, name=f"{server} node", log=log, server=server)
        node.start()
        try:
            if attack.registered:
                register_extra(node.base, attack.registered)
            asyncio.run(register_fleet(node.port, fleet))
            worker = node.worker_pid()
            asyncio.run(heartbeats(node.port, fleet, 5, [], []))  # the fleet settles in
            idle = median_rss(worker)
            samples: list[float] = []
            sampling = threading.Event()

            def sample() -> None:
                while not sampling.is_set():
                    samples.append(rss_mb(worker))
                    time.sleep(0.25)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            log_before = log.stat().st_size
            queue: multiprocessing.Queue = multiprocessing.Queue()
            attacker = multiprocessing.Process(
                target=_attacker, args=(attack.run, node.port, seconds, queue), daemon=True
            )
            latencies: list[float] = []
            failures: list[str] = []
            attacker.start()
            asyncio.run(heartbeats(node.port, fleet, seconds, latencies, failures))
            load = os.getloadavg()[0]
            try:
                outcome = queue.get(timeout=seconds + 120)
            except Exception:
                outcome = {"attack failed": "no report within its duration + 120 s"}
            attacker.join(10)
            if attacker.is_alive():
                attacker.kill()
            sampling.set()
            sampler.join()
            log_growth = log.stat().st_size - log_before
            # The node after the attack, heartbeats going on as before it.
            asyncio.run(heartbeats(node.port, fleet, attack.settle_s, [], []))
            after = median_rss(worker)
            alive = node.alive()
        finally:
            node.stop()
    sent = len(latencies) + len(failures)
    peak = max(samples, default=idle)
    return {
        "server": server,
        "attack": attack.name,
        "attack seconds": seconds,
        "heartbeats sent": sent,
        "answered 200": len(latencies),
        "failed": {kind: failures.count(kind) for kind in sorted(set(failures))},
        "p50 ms": round(percentile(latencies, 0.50), 1),
        "p99 ms": round(percentile(latencies, 0.99), 1),
        "max ms": round(max(latencies, default=float("nan")), 1),
        "RSS idle MB": round(idle, 1),
        "RSS peak MB": round(peak, 1),
        "RSS after MB": round(after, 1),
        "settled s": attack.settle_s,
        "node log growth KB": round(log_growth / 1024, 1),
        "load average (1 min)": round(load, 2),
        "node still running": alive,
        "attack saw": outcome,
    }


def table(rows: list[dict]) -> str:
    """The rows as bench/README.md's table."""
    lines = [
        "| attack | server | heartbeats answered | p50 / p99 / max ms | RSS idle / peak / after MB "
        "| log growth KB | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['attack']} | {row['server']} | {row['answered 200']} of {row['heartbeats sent']} "
            f"| {row['p50 ms']} / {row['p99 ms']} / {row['max ms']} "
            f"| {row['RSS idle MB']} / {row['RSS peak MB']} / {row['RSS after MB']} "
            f"| {row['node log growth KB']} | {row['load average (1 min)']} |"
        )
    return "\n".join(lines)


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    """One answer off a kept-alive connection (Content-Length or chunked): its status code."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line[15:]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")), None
    )
    if length is None:
        await reader.readuntil(b"0\r\n\r\n")
    else:
        await reader.readexactly(length)
    return head.split(b" ", 2)[1]


async def keep_sending(port: int, source: str, deadline: float, posts: list[bytes], answers: Counter) -> None:
    """``posts`` in turn, each as soon as the one before was answered, on one kept-alive connection
    from ``source`` (a new one if the node closes it) until ``deadline``."""
    sent = 0
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
        except OSError as error:
            answers[type(error).__name__] += 1
            await asyncio.sleep(0.1)
            continue
        try:
            while time.monotonic() < deadline:
                writer.write(posts[sent % len(posts)])
                sent += 1
                answers[(await asyncio.wait_for(read_answer(reader), 30)).decode()] += 1
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as error:
            answers[type(error).__name__] += 1
        finally:
            writer.close()


# ---- the attacks, in the order of issue 44 ----

ATTACKS: dict[str, Attack] = {}


def add(attack: Attack) -> None:
    ATTACKS[attack.name] = attack


def quiet(port: int, seconds: float) -> dict:
    """No attack: the fleet's heartbeats alone, the row the others are read against."""
    time.sleep(seconds)
    return {}


add(Attack("baseline", quiet, duration_s=20.0))


# ---- 1. answers under the size cap that expand into millions of instances ----

# The hostile server's records: 66 MB of JSON (``{},`` each), 64 KB of gzip, under the 64 MiB cap.
AMPLIFIED_RECORDS = 22_000_000
# The running hostile server's URL, set by its surroundings before the attack's child is forked.
_AMPLIFIER: dict[str, str] = {}


def _amplified_body(batch: bool) -> bytes:
    """``GET apps`` with one app of ``AMPLIFIED_RECORDS`` empty instances (or a batch answer of as
    many empty items), one gzip member compressed in 1 MiB slices."""
    if batch:
        head, tail = b'{"responseList":[', b"{}]}"
    else:
        head = b'{"applications":{"apps__hashcode":"UP_1_","application":[{"name":"X","instance":['
        tail = b"{}]}]}}"
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    per_slice = (1 << 20) // 3
    slices, rest = divmod(AMPLIFIED_RECORDS - 1, per_slice)
    parts = [compressor.compress(head)]
    parts.extend(compressor.compress(b"{}," * per_slice) for _ in range(slices))
    parts += [compressor.compress(b"{}," * rest + tail), compressor.flush()]
    return b"".join(parts)


@contextlib.contextmanager
def amplifier(settings: Callable[[str], dict[str, str]], empty: bool = False) -> Iterator[dict[str, str]]:
    """A peer or remote region on 127.0.0.1 that answers as a small Eureka server would (one instance
    in its registry unless ``empty``, 200 for every batch item) until ``POST /_mode`` with
    ``expanding`` turns every answer into the amplified one (``fine`` turns it back); ``GET /_stats``
    counts the answers."""
    bodies = {False: _amplified_body(False), True: _amplified_body(True)}
    instance = extra_instance(1)["instanceInfo"] | {"actionType": "ADDED"}
    apps = [] if empty else [{"name": instance["app"], "instance": [instance]}]
    fine_registry = orjson.dumps(
        {
            "applications": {
                "versions__delta": "1",
                "apps__hashcode": "" if empty else "UP_1_",
                "application": apps,
            }
        }
    )
    state = {"mode": "fine"}
    answered: dict[str, int] = {}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            sent = self.rfile.read(length) if length else b""
            headers = {"Content-Type": "application/json"}
            if self.path == "/_mode":
                state["mode"] = sent.decode()
                body = b""
            elif self.path == "/_stats":
                body = orjson.dumps(answered)
            else:
                batch = "peerreplication/batch" in self.path
                key = f"{state['mode']} {'batch' if batch else self.path}"
                answered[key] = answered.get(key, 0) + 1
                if state["mode"] == "expanding":
                    body = bodies[batch]
                    headers["Content-Encoding"] = "gzip"
                elif batch:
                    items = orjson.loads(sent or b"{}").get("replicationList", [])
                    body = orjson.dumps({"responseList": [{"statusCode": 200}] * len(items)})
                elif "apps" in self.path:
                    body = fine_registry
                else:
                    body = b""
            self.send_response(200)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            with contextlib.suppress(OSError):  # the node hung up on an answer over its limits
                self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/eureka/"
    _AMPLIFIER["url"] = url
    try:
        yield settings(url)
    finally:
        server.shutdown()
        server.server_close()


def _amplify(seconds: float) -> dict:
    url = _AMPLIFIER["url"]
    httpx.post(f"{url.removesuffix('eureka/')}_mode", content=b"expanding", timeout=5)
    time.sleep(seconds)
    httpx.post(f"{url.removesuffix('eureka/')}_mode", content=b"fine", timeout=5)
    return httpx.get(f"{url.removesuffix('eureka/')}_stats", timeout=5).json()


def amplified_region(port: int, seconds: float) -> dict:
    """The node's remote region answers every fetch (one a second) with 64 KB of gzip: valid JSON of
    22 million empty instances, 66 MB inflated, under the byte cap."""
    return _amplify(seconds)


def amplified_peer(port: int, seconds: float) -> dict:
    """The node's peer answers every request with 64 KB of gzip expanding into 22 million empty
    instances (or batch answers): its start-up sync, still retrying every second since the peer held
    nothing, reads it at each round, and so do replication batches and probes."""
    return _amplify(seconds)


add(
    Attack(
        "amplified-region",
        amplified_region,
        surroundings=lambda: amplifier(
            lambda url: {
                "EUREKA_REMOTE_REGION_URLS": f"us-west={url}",
                "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": "1",
            }
        ),
    )
)
add(
    Attack(
        "amplified-peer",
        amplified_peer,
        surroundings=lambda: amplifier(
            lambda url: {
                "EUREKA_PEER_URLS": url,
                # The peer holds nothing at first, so the start-up sync asks again every second (as
                # Eureka's syncUp does while it found nothing) and meets the amplified answer too.
                "EUREKA_REGISTRY_SYNC_RETRIES": "1000",
                "EUREKA_REGISTRY_SYNC_RETRY_WAIT_MS": "1000",
            },
            empty=True,
        ),
    )
)


# ---- 2. the status console ----

CONSOLE_READERS = 16  # clients reading the console back to back, as many connections


async def _console_reader(port: int, source: str, path: str, deadline: float, seen: dict) -> None:
    """``GET path`` on a kept-alive connection, the next as soon as the answer is in, until the deadline
    (a new connection when the node closes one)."""
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
        except OSError as error:
            seen["answers"][type(error).__name__] += 1
            await asyncio.sleep(0.1)
            continue
        try:
            while time.monotonic() < deadline:
                sent = time.monotonic()
                writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                length = next(
                    (
                        int(line[15:])
                        for line in head.lower().split(b"\r\n")
                        if line.startswith(b"content-length:")
                    ),
                    None,
                )
                body = await asyncio.wait_for(reader.readexactly(length), 30) if length else b""
                seen["answers"][head.split(b" ", 2)[1].decode()] += 1
                seen["times"].append(time.monotonic() - sent)
                seen["largest"] = max(seen["largest"], len(body))
                if b"connection: close" in head.lower():
                    break
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as error:
            seen["answers"][type(error).__name__] += 1
        finally:
            writer.close()


def console_readers(port: int, seconds: float, path: str = "/") -> dict:
    """16 clients read the status console (``GET /``) back to back, with 10,000 instances registered.

    Each on a kept-alive connection from 127.0.0.2-5, its next request sent as soon as an answer is
    in. Four such readers once pushed heartbeats to p50 3.6 s, sixteen made half of them time out
    (issue 44, item 2): every view rendered the page, whose scans of the whole registry held the
    event loop. Reported: the answers by status, pages a second, their median time, the largest."""

    async def attack() -> dict:
        deadline = time.monotonic() + seconds
        seen: dict = {"answers": Counter(), "times": [], "largest": 0}
        await asyncio.gather(
            *(
                _console_reader(port, f"127.0.0.{2 + n % 4}", path, deadline, seen)
                for n in range(CONSOLE_READERS)
            )
        )
        times = seen["times"]
        return {
            "answers": dict(seen["answers"]),
            "pages/s": round(len(times) / seconds),
            "page p50 ms": round(statistics.median(times) * 1000, 1) if times else None,
            "largest page KB": round(seen["largest"] / 1024),
        }

    return asyncio.run(attack())


add(Attack("console", console_readers, registered=10_000))


# ---- 3. readers that never read their answer ----

SLOW_READERS = 2_000
SLOW_READER_SOURCES = [f"127.0.0.{n}" for n in range(2, 10)]  # 8 addresses, 250 connections each
# A receive buffer this small (set before connecting, so the window the node sees is tiny from the
# start); the kernel rounds it up to its minimum.
SLOW_READER_RCVBUF = 1024
# Connections opened (and the ones the node closes opened again) at most this many a second: faster, the
# attack is a flood of requests for the registry, which costs the node the same whether or not their
# answers are read.
SLOW_READERS_OPENED_PER_S = 200
CHURN_SOURCE = "127.0.0.100"


def open_slow_reader(port: int, source: str) -> socket.socket:
    """A connection from ``source`` that asks for the whole registry, uncompressed, and reads nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_READER_RCVBUF)
        sock.bind((source, 0))
        sock.settimeout(5)
        sock.connect((HOST, port))
        sock.sendall(
            f"GET /eureka/apps HTTP/1.1\r\nHost: {HOST}:{port}\r\nAccept: application/json\r\n\r\n".encode()
        )
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def churn_registrations(port: int, stop: threading.Event, counts: dict) -> None:
    """Registers (and re-registers) instances of the extra registry's apps, 20 a second on fresh
    connections, so that the registry's payload keeps changing while the slow readers hold theirs."""
    number = 0
    while not stop.is_set():
        body = extra_instance(number % 100)["instanceInfo"] | {"instanceId": f"churn-{number % 500}"}
        app = body["app"]
        try:
            code = asyncio.run(
                exchange(
                    port,
                    request("POST", f"/eureka/apps/{app}", port, "", json.dumps({"instance": body}).encode()),
                    CHURN_SOURCE,
                )
            ).decode()
        except (TimeoutError, OSError) as error:
            code = type(error).__name__
        counts[code] = counts.get(code, 0) + 1
        number += 1
        stop.wait(0.05)


def slow_readers(port: int, seconds: float, connections: int = SLOW_READERS) -> dict:
    """Slow readers: 2,000 connections from 8 addresses ask for ``GET /eureka/apps`` (no gzip)
    with a 1 KB receive buffer and never read, while registrations go on.

    They are opened 200 a second, and a connection the node closes is opened again (within the same
    200 a second), so the attack holds its count for its whole duration.

    Reported: connections opened, refused (503), reset or closed by the node, how long the node let
    them sit (p50/max), and how many were still open at the end."""
    started = time.monotonic()
    stop = threading.Event()
    registered: dict[str, int] = {}
    churn = threading.Thread(target=churn_registrations, args=(port, stop, registered), daemon=True)
    churn.start()
    poller = select.poll()
    held: dict[int, tuple[socket.socket, str, float]] = {}
    outcome = {
        "opened": 0,
        "connect failed": 0,
        "refused 503": 0,
        "reset by the node": 0,
        "closed by the node": 0,
    }
    held_s: list[float] = []
    # Which addresses still have a connection to (re)open, and when the next may open.
    wanted = [SLOW_READER_SOURCES[n % len(SLOW_READER_SOURCES)] for n in range(connections)]
    next_open = started
    while time.monotonic() - started < seconds:
        while wanted and time.monotonic() >= next_open and time.monotonic() - started < seconds:
            source = wanted.pop()
            next_open = max(next_open, time.monotonic() - 1) + 1 / SLOW_READERS_OPENED_PER_S
            try:
                sock = open_slow_reader(port, source)
            except OSError:
                outcome["connect failed"] += 1
                wanted.insert(0, source)
                break
            outcome["opened"] += 1
            held[sock.fileno()] = (sock, source, time.monotonic())
            poller.register(sock, select.POLLERR | select.POLLHUP | select.POLLRDHUP)
        for fd, _ in poller.poll(50):
            sock, source, opened = held.pop(fd)
            poller.unregister(fd)
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNRESET:
                kind = "reset by the node"
            else:
                try:
                    # Only a refusal is short enough to have arrived whole through the tiny window.
                    head = sock.recv(12, socket.MSG_PEEK)
                    kind = "refused 503" if head.startswith(b"HTTP/1.1 503") else "closed by the node"
                except ConnectionResetError:
                    kind = "reset by the node"
                except OSError as error:
                    kind = f"error {error.errno}"
            outcome[kind] = outcome.get(kind, 0) + 1
            if kind != "refused 503":
                held_s.append(time.monotonic() - opened)
            sock.close()
            wanted.append(source)
    stop.set()
    outcome["still open at the end"] = len(held)
    for sock, _, _ in held.values():
        sock.close()
    churn.join(15)
    outcome["held s (p50/max)"] = (
        [round(percentile(held_s, 0.5), 1), round(max(held_s), 1)] if held_s else None
    )
    outcome["registrations"] = registered
    return outcome


add(
    Attack(
        "slow-readers",
        slow_readers,
        registered=10_000,
        duration_s=60.0,
        settle_s=15.0,
    )
)
add(
    Attack(
        "slow-readers-at-cap",
        slow_readers,
        env={"EUREKA_MAX_CONNECTIONS": str(SLOW_READERS)},
        registered=10_000,
        duration_s=60.0,
        settle_s=15.0,
    )
)


# ---- 4. one slow body beside registrations ----

SLOW_BODY_SOURCE = "127.0.0.2"
SLOW_BODY_REGISTRAR = "127.0.0.3"


def slow_body(port: int, seconds: float) -> dict:
    """One slow body: a registration's headers with ``Content-Length: 100`` and one byte of its body,
    then nothing, from one address for the whole attack; meanwhile another address registers an
    instance a second, each on a fresh connection.

    Reported: the registrations' answers by status (and the slowest), and what became of the slow
    body: the status the node answered it with and when, and when the node closed its connection
    (None: not within the attack)."""
    started = time.monotonic()
    slow = socket.create_connection((HOST, port), timeout=5, source_address=(SLOW_BODY_SOURCE, 0))
    slow.sendall(
        f"POST /eureka/apps/SLOW HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n{".encode()
    )
    slow.setblocking(False)
    answer, answered_s, closed_s = b"", None, None
    codes: Counter = Counter()
    slowest = 0.0
    number = 0

    def watch_slow() -> None:
        nonlocal answer, answered_s, closed_s
        if closed_s is not None:
            return
        try:
            while data := slow.recv(65536):
                answer += data
                answered_s = answered_s or round(time.monotonic() - started, 1)
            closed_s = round(time.monotonic() - started, 1)
        except BlockingIOError:
            pass
        except OSError:
            closed_s = round(time.monotonic() - started, 1)

    while time.monotonic() - started < seconds:
        body = extra_instance(number)["instanceInfo"] | {"app": "OTHERS", "instanceId": f"other-{number}"}
        sent = time.monotonic()
        try:
            code = asyncio.run(
                exchange(
                    port,
                    request("POST", "/eureka/apps/OTHERS", port, "", json.dumps({"instance": body}).encode()),
                    SLOW_BODY_REGISTRAR,
                )
            ).decode()
        except (TimeoutError, OSError) as error:
            code = type(error).__name__
        slowest = max(slowest, time.monotonic() - sent)
        codes[code or "no answer"] += 1
        number += 1
        watch_slow()
        time.sleep(max(0.0, started + number - time.monotonic()))
    watch_slow()
    slow.close()
    return {
        "registrations": dict(codes),
        "slowest registration s": round(slowest, 2),
        "slow body answered": answer.split(b"\r\n", 1)[0].decode(errors="replace") or None,
        "answered at s": answered_s,
        "closed at s": closed_s,
    }


add(Attack("slow-body", slow_body, duration_s=60.0))


# ---- 5. re-registration churn ----

CHURN_IDS = 1_000  # the same instances, registered again and again
CHURN_BATCH_CONNECTIONS = 2  # kept-alive connections posting batches back to back
CHURN_REGISTER_CONNECTIONS = 8  # kept-alive connections posting registrations back to back
# Past the delta's retention (180 s) and the prune job's interval (30 s) after it: what is left then
# is what the node keeps for good.
CHURN_SETTLE_S = 215.0


def _post(path: str, port: int, body: bytes) -> bytes:
    """A POST of a JSON body on a kept-alive connection."""
    return (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nAccept: application/json\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _churn(port: int, seconds: float, connections: int, posts: list[bytes]) -> Counter:
    async def attack() -> Counter:
        deadline = time.monotonic() + seconds
        answers: Counter = Counter()
        await asyncio.gather(
            *(
                keep_sending(port, f"127.0.0.{2 + n % 4}", deadline, posts, answers)
                for n in range(connections)
            )
        )
        return answers

    return asyncio.run(attack())


def churn_batch(port: int, seconds: float) -> dict:
    """1,000-item Register batches of the same 1,000 instances, back to back.

    Posted to ``/eureka/peerreplication/batch`` (open to anyone with API accounts off, the default) on
    two kept-alive connections from 127.0.0.2-3. Every item registers an instance again; each write
    once stayed in the change log and the delta queue for their whole retention, and RSS grew by
    gigabytes and stayed there (issue 44, item 5)."""
    body = orjson.dumps({"replicationList": [extra_instance(n) for n in range(CHURN_IDS)]})
    answers = _churn(
        port, seconds, CHURN_BATCH_CONNECTIONS, [_post("/eureka/peerreplication/batch", port, body)]
    )
    done = answers.get("200", 0)
    return {
        "batches answered": dict(answers),
        "registrations": done * CHURN_IDS,
        "registrations/s": round(done * CHURN_IDS / seconds),
    }


def churn_register(port: int, seconds: float) -> dict:
    """``POST /eureka/apps/{app}`` re-registrations of the same 1,000 instances, as fast as possible.

    What any client (a ``client`` account with API accounts on) may send: eight kept-alive connections
    from 127.0.0.2-5 registering the 1,000 instances again and again, in turn."""
    posts = []
    for n in range(CHURN_IDS):
        item = extra_instance(n)
        body = orjson.dumps({"instance": item["instanceInfo"]})
        posts.append(_post(f"/eureka/apps/{item['appName']}", port, body))
    answers = _churn(port, seconds, CHURN_REGISTER_CONNECTIONS, posts)
    return {
        "registrations answered": dict(answers),
        "registrations/s": round(answers.get("204", 0) / seconds),
    }


add(Attack("churn-batch", churn_batch, duration_s=60.0, settle_s=CHURN_SETTLE_S))
add(Attack("churn-register", churn_register, duration_s=60.0, settle_s=CHURN_SETTLE_S))


# ---- 6. log floods ----

LOG_FLOOD_HOSTS = "127.0.0.1,localhost"
# Paths a bad Host is sent to: the site's (Django logged a traceback for each) and the protocol's.
LOG_FLOOD_PATHS = (
    "/",
    "/admin/",
    "/admin/login/",
    "/healthz",
    "/metrics",
    "/static/x.css",
    "/nope",
    "/eureka/apps",
)
# Requests gunicorn's parser refuses (a line each before the fix); granian's parser answers them too.
LOG_FLOOD_MALFORMED = (
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad\x01Name: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n",
    b"POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nxx\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,
)
LOG_FLOOD_CONNECTIONS = 8  # kept-alive connections sending bad Hosts
LOG_FLOOD_MALFORMED_LOOPS = 4  # loops sending malformed requests, each on a new connection
# The bad-Host requests, sent in turn on each kept-alive connection: every path, seven Hosts.
BAD_HOSTS = [
    f"GET {path} HTTP/1.1\r\nHost: evil-{n}.example\r\n\r\n".encode()
    for n in range(7)
    for path in LOG_FLOOD_PATHS
]


async def _malformed(port: int, source: str, deadline: float, answers: Counter) -> None:
    sent = 0
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
            writer.write(LOG_FLOOD_MALFORMED[sent % len(LOG_FLOOD_MALFORMED)])
            sent += 1
            line = await asyncio.wait_for(reader.readline(), 10)
            answers[line.split(b" ", 2)[1].decode() if line.count(b" ") >= 2 else "no answer"] += 1
            writer.close()
        except (OSError, TimeoutError) as error:
            answers[type(error).__name__] += 1


def log_flood(port: int, seconds: float) -> dict:
    """Bad Host headers and malformed requests, as fast as one process sends them.

    Requests with a Host not in ALLOWED_HOSTS on the site's paths and the protocol's, on kept-alive
    connections, and malformed requests (bad request line, version, header, chunk framing, TLS) each
    on a new connection, from 127.0.0.2-5. Each bad Host once logged a traceback and each malformed
    request a line (issue 44, item 6): the row's log growth is what they cost now."""

    async def attack() -> dict:
        deadline = time.monotonic() + seconds
        hosts: Counter = Counter()
        malformed: Counter = Counter()
        sources = [f"127.0.0.{2 + n % 4}" for n in range(LOG_FLOOD_CONNECTIONS + LOG_FLOOD_MALFORMED_LOOPS)]
        await asyncio.gather(
            *(
                keep_sending(port, sources[n], deadline, BAD_HOSTS, hosts)
                for n in range(LOG_FLOOD_CONNECTIONS)
            ),
            *(
                _malformed(port, sources[LOG_FLOOD_CONNECTIONS + n], deadline, malformed)
                for n in range(LOG_FLOOD_MALFORMED_LOOPS)
            ),
        )
        return {
            "bad Host requests answered": dict(hosts),
            "malformed requests answered": dict(malformed),
            "requests/s": round((sum(hosts.values()) + sum(malformed.values())) / seconds),
        }

    return asyncio.run(attack())


add(Attack("log-flood", log_flood, env={"ALLOWED_HOSTS": LOG_FLOOD_HOSTS}, duration_s=15.0))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attacks", nargs="*", default=None, help="names (default: all)")
    parser.add_argument("--servers", nargs="*", default=list(HTTP_SERVERS), choices=HTTP_SERVERS)
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds of attack (default: each one's)"
    )
    parser.add_argument(
        "--fleet", type=int, default=None, help="heartbeating instances (default: each one's)"
    )
    parser.add_argument(
        "--settle", type=float, default=None, help="seconds before RSS after (default: each one's)"
    )
    parser.add_argument("--list", action="store_true", help="list the attacks and stop")
    args = parser.parse_args(argv)
    if args.list:
        for attack in ATTACKS.values():
            summary = " ".join((attack.run.__doc__ or "").split("\n\n")[0].split())
            print(f"{attack.name}: {summary}")
        return 0
    names = args.attacks or list(ATTACKS)
    unknown = sorted(set(names) - set(ATTACKS))
    if unknown:
        raise SystemExit(f"unknown attacks {unknown}; --list names them")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rows = []
    for name in names:
        for server in args.servers:
            attack = ATTACKS[name]
            if args.settle is not None:
                attack = dataclasses.replace(attack, settle_s=args.settle)
            row = attack_node(attack, server, args.fleet, args.duration)
            print(json.dumps(row, indent=2), flush=True)
            rows.append(row)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
