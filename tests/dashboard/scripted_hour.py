"""An hour in a node's life on the fake clock, for the charts' tests (page and browser).

Twenty instances (12 ORDERS, 8 PAYMENTS) register and renew every 30 s, and the node's own jobs run
at their intervals (eviction, the expected-clients recount, the delta's pruning, the history's
sampling). Then:

* minute 10: ORDERS 1 and 2 stop renewing; renews stay above the threshold, so they are evicted;
* minute 20: the 8 PAYMENTS and ORDERS 3 and 4 stop; renews fall below the threshold and
  self-preservation keeps their expired leases;
* minute 35: the ten come back (they renew again) and eviction is allowed again;
* minute 45: ORDERS 5 registers again as DOWN; minute 50: UP again.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.domain import constants as c
from tests.domain.test_core import inst

SEC = 1_000
MIN = 60 * SEC
STEP_MS = 10 * SEC
# The jobs a serving node runs, driven here by the fake clock instead of the embedded scheduler.
JOBS = ("evict", "recount_expected_clients", "prune_delta_queue", "sample_history")


@dataclass
class Hour:
    started_at: int
    ended_at: int
    evicted: list[str]
    # Instance ids by name: "orders-3" -> "host3:orders:8080".
    ids: dict[str, str]

    def at(self, minute: float) -> int:
        return self.started_at + int(minute * MIN)


def instances() -> dict[str, tuple[str, int]]:
    named = {f"orders-{n}": ("ORDERS", n) for n in range(1, 13)}
    named.update({f"payments-{n}": ("PAYMENTS", 12 + n) for n in range(1, 9)})
    return named


def live_through_an_hour(node, clock) -> Hour:
    registry = node.registry
    named = instances()
    start = clock()
    for app, n in named.values():
        registry.register(inst(app=app, n=n, dirty=start), start)
    ids = {name: inst(app=app, n=n).instance_id for name, (app, n) in named.items()}
    silent: set[str] = set()
    last_run = dict.fromkeys(JOBS, start)
    intervals = node.job_intervals()
    node.run_job("sample_history", start, "test")
    for step in range(1, 361):
        now = clock.advance(STEP_MS)
        minute = (now - start) / MIN
        if minute == 10:
            silent |= {"orders-1", "orders-2"}
        elif minute == 20:
            silent |= {"orders-3", "orders-4"} | {f"payments-{n}" for n in range(1, 9)}
        elif minute == 35:
            silent -= {"orders-3", "orders-4"} | {f"payments-{n}" for n in range(1, 9)}
        elif minute == 45:
            registry.register(inst(app="ORDERS", n=5, status=c.DOWN, dirty=now), now)
        elif minute == 50:
            registry.register(inst(app="ORDERS", n=5, status=c.UP, dirty=now), now)
        for index, (name, (app, _n)) in enumerate(named.items()):
            if name not in silent and (step + index) % 3 == 0:
                registry.renew(app, ids[name], now)
        for job in JOBS:
            if now - last_run[job] >= intervals[job]:
                node.run_job(job, now, "test")
                last_run[job] = now
    registered = {view.instance_id for _, views in registry.reads.instances() for view in views}
    return Hour(start, clock(), sorted(set(ids.values()) - registered), ids)
