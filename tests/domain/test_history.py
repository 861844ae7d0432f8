"""The node's sampled last hour (registry/domain/history.py): bounded, ordered, rates from counts,
self-preservation's stretches, and a warm-restart round trip."""

from __future__ import annotations

import orjson
import pytest

from registry.domain.changes import Change
from registry.domain.history import (
    STATUS_ORDER,
    History,
    PeerPoint,
    RegionPoint,
    Sample,
    StatusTrail,
    holding_stretches,
    per_minute,
    status_tuple,
)

T0 = 1_796_000_000_000
SEC = 1_000


def sample(at_ms, *, renews=100, threshold=85, holding=False, up=10, registrations=0, evictions=0, **more):
    return Sample(
        at_ms=at_ms,
        renews_last_minute=renews,
        renews_threshold=threshold,
        preservation_holding=holding,
        statuses=status_tuple({"UP": up, **more.pop("statuses", {})}),
        registrations=registrations,
        cancels=more.pop("cancels", 0),
        evictions=evictions,
        **more,
    )


def test_keeps_the_newest_samples_up_to_its_capacity():
    history = History(capacity=3, interval_ms=10 * SEC)
    for n in range(5):
        assert history.record(sample(T0 + n * 10 * SEC, renews=n))
    assert [s.renews_last_minute for s in history.samples()] == [2, 3, 4]
    assert len(history) == 3


def test_a_sample_not_newer_than_the_last_is_dropped():
    history = History()
    history.record(sample(T0 + 10 * SEC))
    assert not history.record(sample(T0 + 10 * SEC, renews=1))
    assert not history.record(sample(T0, renews=2))
    assert [s.renews_last_minute for s in history.samples()] == [100]


def test_samples_since_a_time():
    history = History()
    for n in range(4):
        history.record(sample(T0 + n * 10 * SEC, renews=n))
    assert [s.renews_last_minute for s in history.samples(since_ms=T0 + 20 * SEC)] == [2, 3]


@pytest.mark.parametrize("capacity, interval", [(1, 10_000), (360, 0)])
def test_refuses_a_history_that_cannot_hold_a_rate(capacity, interval):
    with pytest.raises(ValueError):
        History(capacity=capacity, interval_ms=interval)


def test_status_counts_in_the_charts_order():
    assert STATUS_ORDER[0] == "UP"
    counts = status_tuple({"DOWN": 2, "UP": 5, "UNKNOWN": 1})
    assert dict(zip(STATUS_ORDER, counts, strict=True)) == {
        "UP": 5,
        "STARTING": 0,
        "OUT_OF_SERVICE": 0,
        "DOWN": 2,
        "UNKNOWN": 1,
    }
    assert sample(T0, up=5, statuses={"DOWN": 2}).instances == 7


def test_rates_per_minute_from_cumulative_counts_and_a_reset_reads_as_zero():
    samples = [
        sample(T0, registrations=10),
        sample(T0 + 10 * SEC, registrations=15),  # 5 in 10 s: 30 a minute
        sample(T0 + 30 * SEC, registrations=15),
        sample(T0 + 40 * SEC, registrations=2),  # counters reset (a restart)
    ]
    assert per_minute(samples, "registrations") == [
        (T0 + 10 * SEC, 30.0),
        (T0 + 30 * SEC, 0.0),
        (T0 + 40 * SEC, 0.0),
    ]
    assert per_minute(samples[:1], "registrations") == []


def test_holding_stretches_run_to_the_first_sample_that_does_not_hold():
    flags = [False, True, True, False, False, True]
    samples = [sample(T0 + n * 10 * SEC, holding=flag) for n, flag in enumerate(flags)]
    assert holding_stretches(samples) == [(T0 + 10 * SEC, T0 + 30 * SEC), (T0 + 50 * SEC, T0 + 50 * SEC)]
    assert holding_stretches([]) == []


def test_export_and_restore_round_trip_through_json():
    history = History(capacity=360, interval_ms=10 * SEC)
    peers = (PeerPoint("http://peer-b:8761/eureka/", 3, 1_500),)
    regions = (RegionPoint("us-west", None), RegionPoint("eu-east", 12_000))
    for n in range(3):
        history.record(sample(T0 + n * 10 * SEC, renews=n, peers=peers, regions=regions, evictions=n))
    data = orjson.loads(orjson.dumps(history.export()))
    restored = History(capacity=360, interval_ms=10 * SEC)
    assert restored.restore(data, now=T0 + 60 * SEC) == 3
    assert restored.samples() == history.samples()


def test_restore_takes_only_the_last_hour_and_skips_broken_rows():
    history = History(capacity=6, interval_ms=10 * SEC)  # a minute
    for n in range(6):
        history.record(sample(T0 + n * 10 * SEC, renews=n))
    data = history.export()
    data["samples"].insert(2, ["not", "a", "sample"])
    restored = History(capacity=6, interval_ms=10 * SEC)
    # 90 s later, only the samples of the last minute are still in the window.
    assert restored.restore(data, now=T0 + 90 * SEC) == 3
    assert [s.renews_last_minute for s in restored.samples()] == [3, 4, 5]


@pytest.mark.parametrize(
    "change",
    [{"format": 99}, {"statuses": ["UP", "DOWN"]}],
)
def test_restore_refuses_another_format_or_status_order(change):
    history = History()
    history.record(sample(T0))
    data = {**history.export(), **change}
    assert History().restore(data, now=T0 + SEC) == 0


def change(
    at_ms, action="STATUS_CHANGED", old="UP", new="DOWN", app="ORDERS", instance_id="host1:orders:8080"
):
    return Change(at_ms, at_ms, app, instance_id, action, old, new)


def test_a_status_trail_keeps_each_instances_changes_of_the_window():
    trail = StatusTrail(window_ms=60 * SEC, kept=3)
    trail.note(change(T0, "REGISTERED", None, "UP"))
    trail.note(change(T0 + SEC, "METADATA_CHANGED", "UP", "UP"))  # not a status: not kept
    trail.note(change(T0 + 2 * SEC))
    trail.note(change(T0 + 3 * SEC, old="DOWN", new="UP", app="orders"))  # the app's case does not matter
    trail.note(change(T0 + 4 * SEC, instance_id="other"))
    assert [c.timestamp for c in trail.of("ORDERS", "host1:orders:8080", T0 + 5 * SEC)] == [
        T0,
        T0 + 2 * SEC,
        T0 + 3 * SEC,
    ]
    trail.note(change(T0 + 5 * SEC, old="UP", new="OUT_OF_SERVICE"))
    # Three kept: the oldest went.
    assert [c.timestamp for c in trail.of("orders", "host1:orders:8080", T0 + 6 * SEC)][0] == T0 + 2 * SEC
    # Out of the window: not shown, and forgotten by prune.
    assert trail.of("ORDERS", "other", T0 + 65 * SEC) == []
    assert trail.prune(T0 + 65 * SEC) == 1 and len(trail) == 1
    assert trail.of("ORDERS", "nobody", T0) == []


def test_a_status_trail_keeps_a_loop_of_re_registrations_as_one_change():
    trail = StatusTrail(window_ms=60 * SEC, kept=3)
    trail.note(change(T0, "REGISTERED", None, "UP"))
    for k in range(1, 100):
        trail.note(change(T0 + k * 10, "REGISTERED", "UP", "UP"))
    trail.note(change(T0 + 2 * SEC, "STATUS_CHANGED", "UP", "DOWN"))
    shown = trail.of("ORDERS", "host1:orders:8080", T0 + 3 * SEC)
    # The first registration, the latest of the 99 alike, the status change: the loop took one place.
    assert [(c.old_status, c.new_status, c.timestamp) for c in shown] == [
        (None, "UP", T0),
        ("UP", "UP", T0 + 990),
        ("UP", "DOWN", T0 + 2 * SEC),
    ]
