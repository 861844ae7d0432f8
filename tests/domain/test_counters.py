"""Unit tests of the console's counters (registry/domain/counters.py), without a Registry, on the fake clock.
Which writes bump which count is in test_core.py and tests/protocol/test_metrics.py."""

from __future__ import annotations

from registry.domain import constants as c
from registry.domain.counters import (
    CAUSE_CANCEL,
    CAUSE_OVERRIDE,
    CAUSE_REGISTER,
    CAUSE_REREGISTER,
    Counters,
)

A, B, C = ("ORDERS", "a"), ("ORDERS", "b"), ("BILLING", "c")


def test_the_recent_lists_keep_the_last_ones_and_order_events_across_the_lists(clock):
    counters = Counters(kept=2)
    counters.registered(clock.now, *A, CAUSE_REGISTER)
    counters.registered(clock.now, *B, CAUSE_REGISTER)
    counters.overridden(clock.now, *A, CAUSE_OVERRIDE, c.OUT_OF_SERVICE, "admin")
    counters.cancelled(clock.advance(1), *B, CAUSE_CANCEL)
    counters.registered(clock.now, *A, CAUSE_REREGISTER)

    registered, cancelled, overrides = counters.recent()
    assert [(e.instance_id, e.cause) for e in registered] == [("b", CAUSE_REGISTER), ("a", CAUSE_REREGISTER)]
    assert [(e.instance_id, e.timestamp) for e in cancelled] == [("b", clock.now)]
    assert [(e.status, e.actor) for e in overrides] == [(c.OUT_OF_SERVICE, "admin")]
    # Timestamps tie within a millisecond; the sequence numbers still say what came first.
    assert [e.seq for e in (registered[0], overrides[0], cancelled[0], registered[1])] == [2, 3, 4, 5]
    registered.clear()
    assert len(counters.recent()[0]) == 2, "the lists are copies"


def test_an_expired_lease_kept_run_after_run_is_counted_as_prevented_once(clock):
    counters = Counters()
    counters.eviction_run([A, B], [])
    counters.eviction_run([A, B, C], [C])
    assert (counters.evictions, counters.evictions_prevented, counters.counts().expired_kept) == (1, 2, 2)
    counters.eviction_run([], [])
    counters.eviction_run([A], [])
    assert counters.counts().evictions_prevented == 3, "kept again after a stretch without: once more"
    assert counters.counts().expired_kept == 1


def test_the_counts_are_a_copy_by_origin(clock):
    counters = Counters()
    counters.writes[False].registers += 2
    counters.writes[True].renews += 1
    counts = counters.counts()
    counters.writes[False].registers += 1
    assert (counts.from_clients.registers, counts.from_peers.renews, counts.from_peers.registers) == (2, 1, 0)
    assert counters.counts().from_clients.registers == 3
