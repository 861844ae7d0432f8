"""The collector policy: young collections and a freeze each run, a full collection once per period."""

from __future__ import annotations

import gc

import pytest

from registry.runtime.gc_policy import GcPolicy

T0 = 1_796_000_000_000


@pytest.fixture(autouse=True)
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


class Cycle:
    def __init__(self):
        self.me = self


def test_survivors_are_frozen_and_young_cycles_are_collected_first():
    policy = GcPolicy(full_every_ms=3_600_000, now=T0)
    kept = [Cycle() for _ in range(100)]
    Cycle()  # garbage with a cycle: only the collector can free it
    result = policy.run(T0 + 60_000)
    assert result["collection"] == "young" and result["collected"] >= 1
    assert gc.get_freeze_count() > len(kept)
    assert gc.get_count()[2] == 0, "nothing left for an automatic full collection to walk"


def test_between_freezes_a_run_only_counts_and_leaves_the_collector_alone():
    policy = GcPolicy(full_every_ms=3_600_000, now=T0, freeze_every_ms=60_000, bulk_objects=50_000)
    policy.run(T0 + 60_000)
    frozen = gc.get_freeze_count()
    kept = [Cycle() for _ in range(1_000)]
    gc.collect(1)
    gc.collect(1)  # now in the old generation: a few thousand objects, below the bulk mark
    assert policy.run(T0 + 61_000) == {"collection": None, "collected": 0}
    # Nothing frozen since. (Another thread, a test server's handler finishing, may free a frozen
    # object meanwhile: the count can only have fallen.)
    assert gc.get_freeze_count() <= frozen
    assert policy.run(T0 + 120_000)["collection"] == "young"
    assert gc.get_freeze_count() > frozen + len(kept) // 2


def test_a_bulk_of_new_long_lived_objects_is_frozen_at_the_next_run_not_a_minute_later():
    policy = GcPolicy(full_every_ms=3_600_000, now=T0, freeze_every_ms=60_000, bulk_objects=5_000)
    policy.run(T0 + 60_000)
    fleet = [Cycle() for _ in range(20_000)]  # a fleet registering: long-lived, tracked objects
    gc.collect(1)
    gc.collect(1)
    assert policy.unfrozen_old() >= len(fleet)
    assert policy.run(T0 + 61_000)["collection"] == "young"
    assert policy.unfrozen_old() < 1_000, "a full collection now walks what came since, not the fleet"


def test_a_full_collection_runs_once_per_period_and_frees_frozen_cycles():
    policy = GcPolicy(full_every_ms=3_600_000, now=T0)
    garbage = Cycle()
    policy.run(T0 + 60_000)  # frozen while still referenced
    del garbage
    assert policy.run(T0 + 120_000)["collection"] == "young"
    full = policy.run(T0 + 3_600_000)
    assert full["collection"] == "full" and full["collected"] >= 1
    assert policy.run(T0 + 3_660_000)["collection"] == "young"


def test_memory_goes_back_to_the_system_after_collections_only():
    trims = []
    policy = GcPolicy(
        full_every_ms=3_600_000,
        now=T0,
        freeze_every_ms=60_000,
        bulk_objects=10**9,
        trim=lambda: trims.append(1) or True,
    )
    assert policy.run(T0 + 1_000) == {"collection": None, "collected": 0}
    assert trims == []
    result = policy.run(T0 + 61_000)
    assert result["collection"] == "young"
    assert result["trimmed"] is True
    assert trims == [1]
