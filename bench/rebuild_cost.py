"""What a payload rebuild costs the node's event loop, in-process, under a fleet's churn.

A registry of N instances in A apps gets, each simulated second, R registrations and R cancels (new
instances in, random old ones out); after each second ``GET apps`` and ``GET apps/delta`` (JSON) are
rebuilt, as the cache-sync job does when something changed. Printed per variant, over the seconds
after the delta queue has filled (its 180 s retention):

* pieces       the node's builder (registry/wire/payloads.py: instance bytes and app fragments kept)
* whole        one full serialization from a snapshot, as before the pieces (build_payload)
* pieces + gc  the builder with the GC policy's freeze every 60 s (registry/runtime/gc_policy.py)

Each variant runs in a fresh process, so the collector state of one does not leak into the next;
the variants are interleaved over ``--rounds``. A simulated clock, no sleeps: a 300 s run takes about
a minute of CPU. Printed, not asserted.

  .venv/bin/python bench/rebuild_cost.py                     # 10,000 instances, 100 apps, 50 + 50 /s
  .venv/bin/python bench/rebuild_cost.py -n 100000 --apps 1000 --seconds 240
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time

from nodes import ROOT

sys.path.insert(0, str(ROOT))

VARIANTS = ("pieces", "whole", "pieces+gc")
RETENTION_S = 180


def run_variant(variant: str, n: int, apps: int, rate: int, seconds: int, seed: int) -> None:
    from registry.cache.response_cache import APPS, DELTA, CacheKey
    from registry.domain.core import Registry, RegistryRules
    from registry.runtime.gc_policy import GcPolicy
    from registry.wire.codecs import build_instance
    from registry.wire.payloads import PayloadBuilder, build_payload
    from tests.factories import fleet_member

    rng = random.Random(seed)
    now = [1_796_000_000_000]
    holder: list[PayloadBuilder] = []
    registry = Registry(RegistryRules(), now[0], on_change=lambda app, vips: holder[0].invalidate(app))
    builder = PayloadBuilder(registry, lambda: now[0], 180_000)
    holder.append(builder)

    def add(k: int) -> None:
        raw = fleet_member(k, apps)
        registry.register(build_instance(raw, now[0], path_app=raw["app"]), now[0])

    for k in range(n):
        add(k)
    registry.prune(now[0] + RETENTION_S * 1000 + 1)  # start with an empty delta queue
    policy = GcPolicy(3_600_000, now[0]) if variant == "pieces+gc" else None
    if policy:
        policy.run(now[0])
    keys = CacheKey(APPS, "", "json"), CacheKey(DELTA, "", "json")

    def build(key):
        return build_payload(registry, key) if variant == "whole" else builder.build(key)

    build(keys[0])
    live, next_id = list(range(n)), n
    times: dict[str, list[float]] = {"apps": [], "delta": []}
    for second in range(1, seconds + 1):
        now[0] += 1000
        for _ in range(rate):
            add(next_id)
            live.append(next_id)
            next_id += 1
            gone = live.pop(rng.randrange(len(live) - rate))
            registry.cancel(f"APP-{gone % apps}", f"i-{gone}", now[0])
        if second % 30 == 0:
            registry.prune(now[0])
        if policy and second % 60 == 0:
            policy.run(now[0])
        for name, key in zip(("apps", "delta"), keys, strict=True):
            start = time.perf_counter()
            build(key)
            if second > RETENTION_S:
                times[name].append((time.perf_counter() - start) * 1000)
    for name, values in times.items():
        values.sort()
        print(
            f"{variant}\t{name}\t{statistics.median(values):.0f}\t{values[int(len(values) * 0.9)]:.0f}"
            f"\t{values[int(len(values) * 0.99)]:.0f}\t{values[-1]:.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=10_000, help="instances (default 10000)")
    parser.add_argument("--apps", type=int, default=100)
    parser.add_argument("--rate", type=int, default=50, help="registrations and cancels per second, each")
    parser.add_argument("--seconds", type=int, default=300, help="simulated seconds (> 180)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # one variant, in a child process
    args = parser.parse_args()
    if args.seconds <= RETENTION_S:
        parser.error(f"--seconds must be above {RETENTION_S} (the delta queue's retention)")
    if args.variant:
        run_variant(args.variant, args.n, args.apps, args.rate, args.seconds, seed=1)
        return
    rows: dict[tuple[str, str], list[list[int]]] = {}
    for _ in range(args.rounds):
        for variant in args.variants.split(","):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--variant",
                    variant,
                    "-n",
                    str(args.n),
                    "--apps",
                    str(args.apps),
                    "--rate",
                    str(args.rate),
                    "--seconds",
                    str(args.seconds),
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            for line in out.splitlines():
                name, payload, *numbers = line.split("\t")
                rows.setdefault((name, payload), []).append([int(x) for x in numbers])
    print(
        f"{args.n} instances in {args.apps} apps, {args.rate} registrations + {args.rate} cancels/s, "
        f"rebuild after each simulated second, ms over seconds {RETENTION_S + 1}-{args.seconds} "
        f"({args.rounds} round(s); median of rounds)"
    )
    print(f"{'variant':<11} {'payload':<7} {'median':>7} {'p90':>7} {'p99':>7} {'max':>7}")
    for (variant, payload), runs in rows.items():
        cols = [statistics.median(run[i] for run in runs) for i in range(4)]
        print(f"{variant:<11} {payload:<7} " + " ".join(f"{c:>7.0f}" for c in cols))


if __name__ == "__main__":
    main()
