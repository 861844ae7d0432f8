"""Where a node's memory goes, in-process: the registry, each payload, the warm-restart rows.

Builds a node as the server does (``build_node`` with this checkout's settings, embedded mode, warm
restart on, its data under a temporary directory), registers N instances in A apps through the
registry, then reads ``GET apps`` and ``GET apps/delta`` in JSON and XML the way a gzip client does
(the payload, then its gzip copy), then writes two warm-restart snapshots. After each step it collects
garbage, asks glibc to return free pages (registry/runtime/memory.py) and prints the process's
resident memory and what the step added. No server, no sockets, no timing: one run is enough.

  .venv/bin/python bench/memory_cost.py                  # 100,000 instances in 1,000 apps
  .venv/bin/python bench/memory_cost.py -n 10000 --apps 100
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile

from nodes import ROOT

sys.path.insert(0, str(ROOT))


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


class Steps:
    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self, label: str) -> None:
        from registry.runtime import memory

        gc.collect()
        memory.trim()
        now = resident_mb()
        print(f"{label:<44} {now:>8.0f} MB {now - self.last:>+8.0f} MB")
        self.last = now


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=100_000, help="instances (default 100000)")
    parser.add_argument("--apps", type=int, default=1_000, help="applications (default 1000)")
    args = parser.parse_args()

    data_dir = tempfile.mkdtemp(prefix="memory-cost-")
    os.environ["EUREKA_DATA_DIR"] = data_dir
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")
    import django

    django.setup()
    from django.conf import settings

    from registry.cache.response_cache import APPS, DELTA, CacheKey
    from registry.runtime import memory
    from registry.runtime.composition import build_node
    from registry.wire.codecs import build_instance
    from tests.factories import fleet_member

    memory.tune()
    step = Steps()
    print(f"{'step':<44} {'resident':>11} {'added':>11}")
    step("Django loaded")
    node = build_node(settings.EUREKA)
    now = node.clock()
    for k in range(args.n):
        raw = fleet_member(k, args.apps)
        node.registry.register(build_instance(raw, now, path_app=raw["app"]), now)
    step(f"{args.n:,} instances registered")
    for fmt in ("json", "xml"):
        for entity, name in ((APPS, "GET apps"), (DELTA, "GET apps/delta")):
            payload = node.cache.get(CacheKey(entity, "", fmt), node.clock(), gzip=True)
            size = len(payload.body)
            zipped = len(payload.gzipped())
            step(f"{name} {fmt.upper()} ({size / 1e6:.0f} MB, gzip {zipped / 1e6:.1f} MB)")
    if node.warm_restart is not None:
        node.warm_restart.write()
        step("warm-restart snapshot written")
        node.warm_restart.write()
        step("and again")


if __name__ == "__main__":
    main()
