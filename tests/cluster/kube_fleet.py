"""The clients of tests/cluster/test_kubernetes_live.py, in a process of their own: instances that
heartbeat through a Kubernetes client Service, and that Service's endpoints.

Run as ``python kube_fleet.py CONFIG.json``. The test process keeps its own threads (samples of every
pod, the peer-list watch, starting and stopping pods); with the clients in the same interpreter they
would share one GIL, and on a busy two-core machine the clients' requests waited seconds for their turn
in the test process, not at the pods. Here they have an interpreter to themselves, and use plain
asyncio streams (HTTP/1.1, kept-alive connections) instead of a general HTTP client, at a fraction of
the CPU.

CONFIG: ``port``, ``lease_s`` (unused here, in the bodies), ``renew_s``, ``session_s`` ([min, max]),
``attempts``, ``probe_every_s``, ``probe_timeout_s``, ``probe_failures``, ``request_timeout_s``,
``connections_per_pod``, ``members`` ([app, instance id, registration body as JSON text]) and
``answers`` (the file every answer is appended to).

The endpoints: a pod named on stdin (``created HOST``) is probed (``GET /readyz``) every
``probe_every_s`` with a timeout of ``probe_timeout_s``; it is ready from its first 200 and unready after
``probe_failures`` failures in a row, as Kubernetes' readiness probe with its defaults. ``terminating
HOST`` takes it out at once (its SIGTERM is about to be sent): no new connection goes to it, but a
member whose kept-alive connection was routed there keeps using it until it fails (kube-proxy's
conntrack keeps established connections); ``created HOST`` again when it is started anew. ``stop``
ends the process.

The members: each keeps the ready pod it was given for a session of ``session_s`` seconds (kube-proxy
balances connections, not requests, and a Eureka client keeps its server until a request fails) and
moves to another ready pod when a request fails (transport error or 5xx), up to ``attempts`` pods per
heartbeat. A renew answered 404 registers again at once.

Each answer is one line of ``answers``: monotonic time (CLOCK_MONOTONIC, the same clock as the test
process's ``time.monotonic``), instance id, op, pod address ('' when no pod was ready), status ('' for a
transport error), error, seconds the request took. Every half second a line on stdout says how many
members are registered, the ready pods and the probe failures so far.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass


@dataclass
class Member:
    app: str
    instance_id: str
    body: bytes
    registered: bool = False
    pod: str | None = None
    session_end: float = 0.0


class Closed(Exception):
    """The pod closed the connection before answering."""


class Pool:
    """Kept-alive connections to one pod, at most ``limit`` at once."""

    def __init__(self, host: str, port: int, limit: int):
        self.host = host
        self.port = port
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.slots = asyncio.Semaphore(limit)

    def drop(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()

    async def request(self, method: str, path: str, body: bytes = b"", reuse_only: bool = False) -> int:
        """One request on an idle kept-alive connection, or on a new one unless ``reuse_only``."""
        async with self.slots:
            if self.idle:
                reader, writer = self.idle.pop()
            elif reuse_only:
                raise Closed("no kept-alive connection left, and no new one routed to a terminating pod")
            else:
                reader, writer = await asyncio.open_connection(self.host, self.port)
            try:
                status, keep = await self._exchange(reader, writer, method, path, body)
            except BaseException:
                writer.close()
                raise
            if keep:
                self.idle.append((reader, writer))
            else:
                writer.close()
            return status

    async def _exchange(self, reader, writer, method: str, path: str, body: bytes) -> tuple[int, bool]:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAccept: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
        )
        if body:
            head += "Content-Type: application/json\r\n"
        writer.write(head.encode("ascii") + b"\r\n" + body)
        await writer.drain()
        line = await reader.readline()
        if not line:
            raise Closed("closed before the status line")
        status = int(line.split()[1])
        length, chunked, keep = 0, False, True
        while True:
            line = await reader.readline()
            if not line:
                raise Closed("closed in the headers")
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value:
                chunked = True
            elif name == "connection" and value == "close":
                keep = False
        if chunked:
            while True:
                size = int((await reader.readline()).split(b";")[0], 16)
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        elif length:
            await reader.readexactly(length)
        return status, keep


class Fleet:
    def __init__(self, config: dict):
        self.config = config
        self.port = config["port"]
        self.members = [Member(app, iid, body.encode()) for app, iid, body in config["members"]]
        self.pools: dict[str, Pool] = {}
        # Per pod: ready, failures in a row; and the pods that are terminating.
        self.probed: dict[str, tuple[bool, int]] = {}
        self.ready: tuple[str, ...] = ()
        self.terminating: set[str] = set()
        self.probe_failures = 0
        self.rng = random.Random(35)
        self.out = open(config["answers"], "a", buffering=1 << 16)  # noqa: SIM115 (closed in run)
        self.stopping = asyncio.Event()

    def pool(self, host: str) -> Pool:
        if host not in self.pools:
            self.pools[host] = Pool(host, self.port, self.config["connections_per_pod"])
        return self.pools[host]

    def record(self, at: float, member: Member, op: str, host: str, status, error: str, took: float) -> None:
        status_text = "" if status is None else str(status)
        self.out.write(f"{at:.4f}\t{member.instance_id}\t{op}\t{host}\t{status_text}\t{error}\t{took:.4f}\n")

    # -- the endpoints

    def _update_ready(self) -> None:
        self.ready = tuple(host for host, (ready, _) in self.probed.items() if ready)

    async def _probe(self, host: str) -> None:
        try:
            status = await asyncio.wait_for(
                self.pool(host).request("GET", "/readyz"), self.config["probe_timeout_s"]
            )
        except (TimeoutError, OSError, Closed, ValueError, IndexError):
            status = None
        if host not in self.probed:
            return  # terminating meanwhile
        ready, failures = self.probed[host]
        if status == 200:
            ready, failures = True, 0
        else:
            self.probe_failures += 1
            failures += 1
            if failures >= self.config["probe_failures"]:
                ready = False
        self.probed[host] = (ready, failures)
        self._update_ready()

    async def prober(self) -> None:
        while not self.stopping.is_set():
            await asyncio.gather(*(self._probe(host) for host in list(self.probed)))
            await asyncio.sleep(self.config["probe_every_s"])

    async def commands(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            words = line.split()
            if not words or words[0] == "stop":
                self.stopping.set()
                return
            command, host = words[0], words[1]
            if command == "terminating":
                self.probed.pop(host, None)
                self.terminating.add(host)
                self._update_ready()
            elif command == "created":
                self.probed[host] = (False, 0)
                self.terminating.discard(host)
                self.pool(host).drop()
                self._update_ready()

    async def status(self) -> None:
        while not self.stopping.is_set():
            registered = sum(1 for member in self.members if member.registered)
            self.out.flush()
            numbers = {
                "registered": registered,
                "ready": list(self.ready),
                "probe_failures": self.probe_failures,
            }
            sys.stdout.write(json.dumps(numbers) + "\n")
            sys.stdout.flush()
            await asyncio.sleep(0.5)

    # -- the members

    def _pick(self, member: Member, tried: set[str]) -> str | None:
        now = time.monotonic()
        if member.pod is not None and member.pod not in tried and now < member.session_end:
            if member.pod in self.ready:
                return member.pod
            # Out of the endpoints because it is terminating: a connection kube-proxy routed to it before
            # stays routed (conntrack), so a client keeps sending on its kept-alive connection until that
            # fails; new connections go elsewhere.
            if member.pod in self.terminating and self.pool(member.pod).idle:
                return member.pod
        choices = [host for host in self.ready if host not in tried]
        if not choices:
            return None
        member.pod = self.rng.choice(choices)
        member.session_end = now + self.rng.uniform(*self.config["session_s"])
        return member.pod

    async def _send(self, member: Member, op: str) -> int | None:
        tried: set[str] = set()
        status = None
        for _ in range(self.config["attempts"]):
            host = self._pick(member, tried)
            if host is None:
                if not tried:
                    self.record(time.monotonic(), member, op, "", None, "no endpoint", 0.0)
                return status
            sent = time.monotonic()
            error = ""
            try:
                pool, reuse_only = self.pool(host), host in self.terminating
                if op == "register":
                    request = pool.request("POST", f"/eureka/apps/{member.app}", member.body, reuse_only)
                else:
                    path = f"/eureka/apps/{member.app}/{member.instance_id}"
                    request = pool.request("PUT", path, b"", reuse_only)
                status = await asyncio.wait_for(request, self.config["request_timeout_s"])
            except (TimeoutError, OSError, Closed, ValueError, IndexError) as exc:
                status, error = None, type(exc).__name__
            now = time.monotonic()
            self.record(now, member, op, host, status, error, now - sent)
            if status is not None and status < 500:
                return status
            tried.add(host)
            member.pod = None
        return status

    async def member(self, k: int, member: Member) -> None:
        renew_s = self.config["renew_s"]
        await asyncio.sleep(k * renew_s / len(self.members))
        while not self.stopping.is_set():
            began = time.monotonic()
            if member.registered:
                if await self._send(member, "renew") == 404:
                    member.registered = False
                    continue
            else:
                member.registered = await self._send(member, "register") == 204
            await asyncio.sleep(max(0.0, renew_s - (time.monotonic() - began)))

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.commands()),
            asyncio.create_task(self.prober()),
            asyncio.create_task(self.status()),
        ]
        # The members start once a pod is ready (the test waits for that, bounded).
        while not self.ready and not self.stopping.is_set():
            await asyncio.sleep(0.05)
        members = [asyncio.create_task(self.member(k, m)) for k, m in enumerate(self.members)]
        await self.stopping.wait()
        for task in [*members, *tasks]:
            task.cancel()
        await asyncio.gather(*members, *tasks, return_exceptions=True)
        for pool in self.pools.values():
            pool.drop()
        self.out.close()


def main() -> None:
    with open(sys.argv[1]) as file:
        config = json.load(file)
    asyncio.run(Fleet(config).run())


if __name__ == "__main__":
    main()
