"""What timing protocol requests for GET /metrics costs a renew, measured in-process.

Renews go through the WSGI application (lean protocol handler, DRF view, registry; no gunicorn, no
sockets) against 10,000 leases. Each variant runs ``--blocks`` blocks of ``--block-size`` renews in
rotating order, and each block's CPU time per request is compared with the "off" block of the same
round, so load from other processes spreads over all variants alike (see bench/README.md, "Metrics
cost"). Variants:

* off — ``EUREKA_METRICS_ENABLED=false``: the view asks and is told not to time;
* noop — timed, the observation thrown away: the cost of the timing itself;
* histogram — timed into prometheus-client's Histogram, as the node does;
* light — timed into a bare bucket list (bisect, no lock), for comparison.

    .venv/bin/python bench/metrics_cost.py
    .venv/bin/python bench/metrics_cost.py --blocks 400 --block-size 500
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import sys
import time
from bisect import bisect_left

from nodes import ROOT

sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")
os.environ["EUREKA_EMBEDDED_SCHEDULER"] = "false"

import django  # noqa: E402

django.setup(set_prefix=False)

from registry.protocol import metrics  # noqa: E402
from registry.runtime.process import get_node  # noqa: E402
from registry.wire.codecs import build_instance  # noqa: E402
from registry.wire.handlers import RoutingApplication  # noqa: E402

INSTANCES = 10_000
APPS = 100


def register_instances() -> list[tuple[str, str]]:
    node = get_node()
    now = node.now()
    ids = []
    for i in range(INSTANCES):
        app = f"BENCH-SVC-{i % APPS:03d}"
        host = f"10.{100 + i // 62500}.{(i // 250) % 250}.{1 + i % 250}"
        body = {
            "instanceId": f"{host}:{app.lower()}:8080",
            "hostName": host,
            "app": app,
            "ipAddr": host,
            "status": "UP",
            "port": {"$": 8080, "@enabled": "true"},
            "dataCenterInfo": {
                "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
                "name": "MyOwn",
            },
        }
        node.registry.register(build_instance(body, now), now)
        ids.append((app, body["instanceId"]))
    return ids


def renew_environ(app: str, instance_id: str) -> dict:
    return {
        "REQUEST_METHOD": "PUT",
        "PATH_INFO": f"/eureka/apps/{app}/{instance_id}",
        "QUERY_STRING": "status=UP&lastDirtyTimestamp=1",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8761",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.url_scheme": "http",
        "CONTENT_LENGTH": "0",
    }


def start_response(status: str, headers: list) -> None:
    if not status.startswith("200"):
        raise SystemExit(f"renew answered {status}")


def light_observer():
    bounds = list(metrics.LATENCY_BUCKETS)
    counts = [0] * (len(bounds) + 1)
    total = [0.0]

    def observe(seconds: float) -> None:
        counts[bisect_left(bounds, seconds)] += 1
        total[0] += seconds

    return observe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=200)
    parser.add_argument("--block-size", type=int, default=1000)
    args = parser.parse_args()

    ids = register_instances()
    application = RoutingApplication(trust_forwarded_prefix=False)
    position = [0]

    def renews(count: int) -> float:
        started = time.process_time()
        for _ in range(count):
            app, instance_id = ids[position[0] % INSTANCES]
            position[0] += 1
            application(renew_environ(app, instance_id), start_response)
        return (time.process_time() - started) / count * 1e6

    histogram = dict(metrics._OBSERVERS)
    variants = {
        "off": (False, histogram),
        "noop": (True, {route: (lambda seconds: None) for route in histogram}),
        "histogram": (True, histogram),
        "light": (True, {route: light_observer() for route in histogram}),
    }

    def use(name: str) -> None:
        timing, observers = variants[name]
        metrics._timing = timing
        metrics._OBSERVERS.clear()
        metrics._OBSERVERS.update(observers)

    renews(args.block_size)  # warm-up
    gc.collect()
    gc.freeze()  # as the node's freeze_gc job leaves the heap
    names = list(variants)
    blocks: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(args.blocks):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            use(name)
            blocks[name].append(renews(args.block_size))
    use("histogram")

    count = args.blocks
    print(f"{INSTANCES} leases, {count} blocks of {args.block_size} renews per variant, CPU µs per renew")
    print(f"{'variant':10s} {'min':>7s} {'p10':>7s} {'median':>7s}  paired vs off (median of ratios)")
    for name in names:
        values = sorted(blocks[name])
        ratios = sorted(a / b for a, b in zip(blocks[name], blocks["off"], strict=True))
        print(
            f"{name:10s} {values[0]:7.1f} {values[count // 10]:7.1f} {values[count // 2]:7.1f}"
            f"  {100 * (ratios[count // 2] - 1):+.1f} %"
        )


if __name__ == "__main__":
    main()
