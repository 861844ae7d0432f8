"""Unit tests of the eviction run's pieces (registry/domain/eviction.py), without a Registry, on the
fake clock. How a run obeys self-preservation and spares what was renewed meanwhile is in test_core.py."""

from __future__ import annotations

import random

from registry.domain.eviction import Eviction, scan_expired, still_expired
from registry.domain.leases import Lease
from tests.domain.test_core import SEC, T0, inst


def test_a_late_run_is_compensated_for_the_time_past_its_interval():
    eviction = Eviction(random.Random(7))
    assert eviction.start(T0, 60 * SEC) == 0, "the first run sets the baseline"
    assert eviction.start(T0 + 60 * SEC, 60 * SEC) == 0
    assert eviction.start(T0 + 100 * SEC, 60 * SEC) == 0, "early runs get nothing"
    assert eviction.start(T0 + 360 * SEC, 60 * SEC) == 200 * SEC
    assert eviction.last_run == T0 + 360 * SEC


def test_a_run_evicts_at_most_the_share_above_the_threshold_chosen_at_random():
    expired = [("ORDERS", f"i-{n}") for n in range(20)]
    for size, cap in [(1, 1), (2, 1), (10, 2), (100, 15)]:
        assert len(Eviction(random.Random(7)).choose(expired, size, 0.85)) == min(cap, 20)
    picks = {tuple(sorted(Eviction(random.Random(seed)).choose(expired, 20, 0.85))) for seed in range(5)}
    assert len(picks) > 1
    assert len(Eviction(random.Random(7)).choose(expired[:2], 100, 0.85)) == 2, "fewer expired than the cap"


def leases_by_app(count: int, expired_every: int) -> dict[str, list[tuple[str, Lease]]]:
    leases = []
    for n in range(count):
        lease = Lease(inst(n=n), 90 * SEC, T0)
        if n % expired_every:
            lease.renew(T0 + 60 * SEC)
        leases.append((lease.instance.instance_id, lease))
    return {"ORDERS": leases[: count // 2], "BILLING": leases[count // 2 :]}


def test_the_scan_finds_the_expired_leases_in_order_and_gives_turns_every_step():
    apps = leases_by_app(10, expired_every=3)  # hosts 0, 3, 6 and 9 were never renewed
    turns = []
    found = scan_expired(apps, apps.__getitem__, T0 + 100 * SEC, False, 0, 3, lambda: turns.append(1))
    assert [(app, i) for app, i, _ in found] == [
        ("ORDERS", "host0:orders:8080"),
        ("ORDERS", "host3:orders:8080"),
        ("BILLING", "host6:orders:8080"),
        ("BILLING", "host9:orders:8080"),
    ]
    # Slices of at most 3 per app (3 + 2, then 3 + 2): a turn at the end of a slice once 3 were
    # scanned since the last turn, counted across apps.
    assert len(turns) == 2
    late = scan_expired(apps, apps.__getitem__, T0 + 100 * SEC, False, 20 * SEC, 3, lambda: None)
    assert late == [], "the compensation keeps them"


def test_what_was_found_is_evicted_only_if_still_stored_and_still_expired():
    apps = leases_by_app(4, expired_every=1)  # none renewed
    now = T0 + 100 * SEC
    found = scan_expired(apps, apps.__getitem__, now, False, 0, 100, lambda: None)
    stored = {(app, i): lease for app, pairs in apps.items() for i, lease in pairs}
    stored[("ORDERS", "host0:orders:8080")].renew(now)  # renewed meanwhile
    stored[("ORDERS", "host1:orders:8080")] = Lease(inst(n=1), 90 * SEC, now)  # registered again
    del stored[("BILLING", "host2:orders:8080")]  # cancelled
    lease_at = lambda app, instance_id: stored.get((app, instance_id))  # noqa: E731
    assert still_expired(found, lease_at, now, False, 0) == [("BILLING", "host3:orders:8080")]
