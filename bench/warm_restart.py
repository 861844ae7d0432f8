"""Warm restart with 10,000 instances: what a snapshot costs, and how long a restart takes.

1. In-process (registry/domain/core.py, registry/runtime/snapshots.py): ``export_parts(now).as_state()``
   — total and the part that holds the map's lock —, the orjson + gzip encoding, the atomic file write,
   the size, and ``saved_state.restore`` of the same snapshot. Medians of ``--rounds``.
2. Live (gunicorn with deploy/gunicorn.conf.py, embedded mode, a temporary data directory): 10,000
   instances registered, heartbeats paced at ``--rate`` per second over kept-alive connections for
   ``--seconds`` with warm restart on (a snapshot every ``--interval-ms``) and then off, with renew
   latency percentiles for each: what the periodic snapshot costs the event loop. Then, snapshots
   on, SIGTERM → the first 200 of ``GET /eureka/apps`` listing all 10,000 (restart downtime).

    .venv/bin/python bench/warm_restart.py
    .venv/bin/python bench/warm_restart.py --skip-live
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
from nodes import ROOT, Node, free_port

sys.path.insert(0, str(ROOT))

from registry.domain.core import Registry, RegistryRules  # noqa: E402
from registry.runtime.snapshots import FileStore, WarmRestart, decode, encode  # noqa: E402
from registry.wire.codecs import build_instance  # noqa: E402

INSTANCES = 10_000
APPS = 100


def instance(i: int) -> dict:
    app = f"BENCH-SVC-{i % APPS:03d}"
    host = f"10.{100 + i // 62500}.{(i // 250) % 250}.{1 + i % 250}"
    return {
        "instanceId": f"{host}:{app.lower()}:8080",
        "hostName": host,
        "app": app,
        "ipAddr": host,
        "status": "UP",
        "overriddenStatus": "UNKNOWN",
        "port": {"$": 8080, "@enabled": "true"},
        "securePort": {"$": 443, "@enabled": "false"},
        "countryId": 1,
        "dataCenterInfo": {
            "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
            "name": "MyOwn",
        },
        "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
        "metadata": {"management.port": "8080", "zone": f"zone-{i % 3}", "version": "1.4.2"},
        "homePageUrl": f"http://{host}:8080/",
        "statusPageUrl": f"http://{host}:8080/actuator/info",
        "healthCheckUrl": f"http://{host}:8080/actuator/health",
        "vipAddress": app.lower(),
        "secureVipAddress": app.lower(),
        "isCoordinatingDiscoveryServer": "false",
        "lastDirtyTimestamp": "1796000000000",
    }


class TimedLock:
    """The registry's lock, timing how long each acquisition is held."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.held_ms: list[float] = []

    def __enter__(self) -> None:
        self._lock.acquire()
        self._since = time.perf_counter()

    def __exit__(self, *exc) -> None:
        self.held_ms.append((time.perf_counter() - self._since) * 1000)
        self._lock.release()


def in_process(rounds: int) -> None:
    now = 1_796_000_000_000
    registry = Registry(RegistryRules(), now)
    for i in range(INSTANCES):
        registry.register(build_instance(instance(i), now), now)
    # As the node's GC policy does (registry/runtime/gc_policy.py): long-lived leases frozen, so a
    # full collection during the export does not walk them all.
    gc.collect()
    gc.freeze()
    lock = TimedLock()
    registry.saved_state._lock = lock  # bench only: measure the export's hold
    store = FileStore(Path(tempfile.mkdtemp()) / "snapshot.json.gz")
    numbers: dict[str, list[float]] = {name: [] for name in ("lock", "export", "encode", "save", "restore")}
    for _ in range(rounds):
        started = time.perf_counter()
        state = registry.saved_state.export_parts(now).as_state()
        exported = time.perf_counter()
        data = encode(state)
        encoded = time.perf_counter()
        store.save(data)
        saved = time.perf_counter()
        numbers["lock"].append(lock.held_ms[-1])
        numbers["export"].append((exported - started) * 1000)
        numbers["encode"].append((encoded - exported) * 1000)
        numbers["save"].append((saved - encoded) * 1000)
        fresh = Registry(RegistryRules(), now)
        started = time.perf_counter()
        fresh.saved_state.restore(decode(store.load()), now + 1000)
        numbers["restore"].append((time.perf_counter() - started) * 1000)
    plain = len(orjson.dumps(state))
    # What the node runs: the writer, which reuses the encoded form of records that did not change.
    keeper = WarmRestart(registry, store, lambda: now, interval_ms=5000, max_age_ms=90_000)
    keeper_ms = []
    for _ in range(rounds + 1):
        report = keeper.write()
        assert report is not None
        keeper_ms.append((report.took_ms, lock.held_ms[-1]))
    print(f"in-process, {INSTANCES} instances, median of {rounds}:")
    print(f"  export (as_state)     {statistics.median(numbers['export']):7.1f} ms")
    lock_ms = numbers["lock"]
    print(f"    of which under lock {statistics.median(lock_ms):7.1f} ms (max {max(lock_ms):.1f})")
    print(f"  orjson + gzip(1)      {statistics.median(numbers['encode']):7.1f} ms")
    print(f"  atomic file write     {statistics.median(numbers['save']):7.1f} ms")
    print(f"  size                  {len(data) / 1024:7.0f} KiB gzip ({plain / 1024:.0f} KiB JSON)")
    print(f"  decode + restore      {statistics.median(numbers['restore']):7.1f} ms")
    warm = [took for took, _ in keeper_ms[1:]]
    print(
        f"  the node's write (export, encode, save; records encoded before reused): first "
        f"{keeper_ms[0][0]:.1f} ms, then {statistics.median(warm):.1f} ms "
        f"(lock {statistics.median(held for _, held in keeper_ms[1:]):.1f} ms)"
    )


# ------------------------------------------------------------------------------------- live


def start_node(port: int, data_dir: Path, env: dict[str, str], wait: bool = True) -> Node:
    """A node on ``port`` (bench/nodes.py) that keeps ``data_dir`` across restarts: its snapshot, its
    log (``server.log``, read for the node's own warm-restart lines)."""
    node = Node(data_dir, {"LOG_LEVEL": "INFO", **env}, port=port, log=data_dir / "server.log")
    return node.start(wait=wait)


def get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers={"Accept": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def listed(port: int) -> int:
    status, body = get(port, "/eureka/apps")
    if status != 200:
        return -1
    apps = json.loads(body)["applications"].get("application", [])
    return sum(len(app["instance"]) for app in apps)


def register(port: int, threads: int = 8) -> None:
    def work(indexes: range) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in indexes:
            body = json.dumps({"instance": instance(i)}).encode()
            connection.request(
                "POST", f"/eureka/apps/{instance(i)['app']}", body, {"Content-Type": "application/json"}
            )
            response = connection.getresponse()
            response.read()
            assert response.status == 204, response.status
        connection.close()

    workers = [threading.Thread(target=work, args=(range(k, INSTANCES, threads),)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def heartbeat_latencies(port: int, rate: int, seconds: float, threads: int = 4) -> list[float]:
    """Renews paced at ``rate`` per second in all; the latency of each (ms)."""
    latencies: list[float] = []
    lock = threading.Lock()
    per_thread = rate / threads
    stop_at = time.monotonic() + seconds

    def work(offset: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        i, started = offset, time.monotonic()
        sent, mine = 0, []
        while time.monotonic() < stop_at:
            item = instance(i % INSTANCES)
            begin = time.perf_counter()
            connection.request("PUT", f"/eureka/apps/{item['app']}/{item['instanceId']}")
            response = connection.getresponse()
            response.read()
            mine.append((time.perf_counter() - begin) * 1000)
            sent += 1
            i += threads
            delay = started + sent / per_thread - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        connection.close()
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return latencies


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return (
        f"n={len(ordered)} p50 {at(0.5):.1f} ms, p99 {at(0.99):.1f} ms, "
        f"p99.9 {at(0.999):.1f} ms, max {ordered[-1]:.1f} ms"
    )


def live(rate: int, seconds: float, interval_ms: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="warm-restart-bench-"))
    port = free_port()  # the same for every start: the restarted node answers where the first did
    settings = {
        "EUREKA_WARM_RESTART_INTERVAL_MS": str(interval_ms),
        "EUREKA_EMBEDDED_SCHEDULER": "true",
        # The GC freeze a node does every minute, sooner: the runs measure the steady state.
        "EUREKA_GC_FREEZE_INTERVAL_MS": "3000",
    }
    for label, enabled in ((f"snapshots every {interval_ms} ms", "true"), ("warm restart off", "false")):
        node = start_node(port, data_dir, {**settings, "EUREKA_WARM_RESTART": enabled})
        try:
            register(port)
            # Steady state: the first snapshot after 10,000 registrations encodes every record (cold,
            # once: several times a later one, bench/README.md "Warm restart", "first / then"); the
            # window measured here has only the periodic ones after it.
            time.sleep(interval_ms / 1000 + 2)
            latencies = heartbeat_latencies(port, rate, seconds)
            print(f"live renew latency, {rate}/s for {seconds:.0f} s, {label}: {percentiles(latencies)}")
        finally:
            node.stop(60)
        (data_dir / "registry-snapshot.json.gz").unlink(missing_ok=True)

    node = start_node(port, data_dir, {**settings, "EUREKA_WARM_RESTART": "true"})
    try:
        register(port)
        assert listed(port) == INSTANCES
        time.sleep(interval_ms / 1000 + 1)
        stopping = time.monotonic()
        node.stop(60)
        stopped = time.monotonic()
        node = start_node(port, data_dir, {**settings, "EUREKA_WARM_RESTART": "true"}, wait=False)
        while True:
            try:
                if listed(port) == INSTANCES:
                    break
            except OSError:
                pass
            if time.monotonic() - stopping > 120:
                raise SystemExit("the restarted node never listed every instance")
            time.sleep(0.05)
        ready = time.monotonic()
        size = (data_dir / "registry-snapshot.json.gz").stat().st_size
        print(
            f"restart with {INSTANCES} instances: SIGTERM -> full GET apps {ready - stopping:.2f} s "
            f"(stop {stopped - stopping:.2f} s, start + restore {ready - stopped:.2f} s); "
            f"snapshot {size / 1024:.0f} KiB"
        )
        log = (data_dir / "server.log").read_text()
        for line in log.splitlines():
            if "warm restart:" in line:
                print("  node:", line.split("warm restart:", 1)[1].strip())
    finally:
        node.stop(60)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rate", type=int, default=1000, help="renews per second during the latency runs")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--interval-ms", type=int, default=5000)
    parser.add_argument("--skip-live", action="store_true")
    options = parser.parse_args()
    in_process(options.rounds)
    if not options.skip_live:
        live(options.rate, options.seconds, options.interval_ms)


if __name__ == "__main__":
    main()
