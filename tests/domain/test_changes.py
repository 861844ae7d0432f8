"""The change log (registry/domain/changes.py) and what the registry writes to it, on a fake clock."""

from __future__ import annotations

import pytest

from registry.domain import constants as c
from registry.domain.changes import (
    CANCELLED,
    EVICTED,
    IDS_PER_MS,
    METADATA_CHANGED,
    REGISTERED,
    STATUS_CHANGED,
    ChangeLog,
    TooOld,
)
from tests.domain.test_core import MIN, SEC, T0, inst, make_registry


def actions(registry, after=0):
    start = registry.changes.oldest_id() - 1 if after == 0 else after
    return [
        (ch.action, ch.instance_id, ch.old_status, ch.new_status)
        for ch in registry.reads.changes_since(start, 100)
    ]


def test_every_kind_of_change_is_logged_in_order_with_old_and_new_status():
    registry, _ = make_registry()
    first = inst(n=1)
    registry.register(first, T0)
    registry.register(first.evolve(last_dirty_timestamp=T0 + 1), T0 + SEC)  # a re-registration
    registry.set_status_override("ORDERS", first.instance_id, c.OUT_OF_SERVICE, T0 + 2 * SEC)
    registry.remove_status_override("ORDERS", first.instance_id, T0 + 3 * SEC, new_status=c.UP)
    registry.update_metadata("ORDERS", first.instance_id, {"zone": "a"}, T0 + 4 * SEC)
    registry.cancel("ORDERS", first.instance_id, T0 + 5 * SEC)
    assert actions(registry) == [
        (REGISTERED, first.instance_id, None, c.UP),
        (REGISTERED, first.instance_id, c.UP, c.UP),
        (STATUS_CHANGED, first.instance_id, c.UP, c.OUT_OF_SERVICE),
        (STATUS_CHANGED, first.instance_id, c.OUT_OF_SERVICE, c.UP),
        (METADATA_CHANGED, first.instance_id, c.UP, c.UP),
        (CANCELLED, first.instance_id, c.UP, None),
    ]
    logged = registry.reads.changes_since(registry.changes.oldest_id() - 1, 100)
    assert [ch.timestamp for ch in logged] == [T0 + k * SEC for k in range(6)]
    assert [b.id - a.id for a, b in zip(logged, logged[1:], strict=False)] == [1] * 5
    assert logged[2].overridden_status == c.OUT_OF_SERVICE


def test_a_no_op_override_and_heartbeats_log_nothing():
    registry, _ = make_registry()
    registry.register(inst(n=1), T0)
    last = registry.changes.last_id
    registry.renew("ORDERS", inst(n=1).instance_id, T0 + SEC)
    registry.set_status_override("ORDERS", inst(n=1).instance_id, c.UP, T0 + SEC)
    assert registry.changes.last_id == last


def test_evictions_are_logged_as_evictions():
    registry, _ = make_registry(enable_self_preservation=False)
    registry.register(inst(n=1, duration=30), T0)
    registry.run_eviction(T0 + 10 * MIN)
    assert actions(registry)[-1] == (EVICTED, inst(n=1).instance_id, c.UP, None)


def test_replicated_writes_are_marked():
    registry, _ = make_registry()
    registry.register(inst(n=1), T0, is_replication=True)
    registry.set_status_override("ORDERS", inst(n=1).instance_id, c.DOWN, T0 + SEC, is_replication=True)
    assert [ch.replicated for ch in registry.reads.changes_since(registry.changes.oldest_id() - 1, 10)] == [
        True,
        True,
    ]


def test_since_filters_by_app_and_action_and_honours_the_limit():
    registry, _ = make_registry()
    for n in range(1, 4):
        registry.register(inst(app="ORDERS", n=n), T0)
        registry.register(inst(app="BILLING", n=n), T0)
    registry.cancel("BILLING", inst(app="BILLING", n=2).instance_id, T0 + SEC)
    start = registry.changes.oldest_id() - 1
    assert {ch.app for ch in registry.reads.changes_since(start, 100, apps=["billing"])} == {"BILLING"}
    assert [ch.action for ch in registry.reads.changes_since(start, 100, actions=[CANCELLED])] == [CANCELLED]
    first_two = registry.reads.changes_since(start, 2)
    assert len(first_two) == 2
    assert registry.reads.changes_since(first_two[-1].id, 100)[0].id == first_two[-1].id + 1
    assert registry.reads.changes_since(registry.changes.last_id, 100) == []


def test_changes_past_retention_are_too_old_and_say_where_to_go_on_from():
    registry, _ = make_registry(delta_retention_ms=3 * MIN)
    registry.register(inst(n=1), T0)
    kept_from = registry.changes.last_id
    registry.register(inst(n=2), T0 + 2 * MIN)
    registry.prune(T0 + 4 * MIN)  # the first change is past retention, the second is not
    assert [ch.instance_id for ch in registry.reads.changes_since(kept_from, 10)] == [inst(n=2).instance_id]
    with pytest.raises(TooOld) as too_old:
        registry.reads.changes_since(kept_from - 1, 10)
    assert too_old.value.last_id == registry.changes.last_id


def test_ids_start_above_any_id_of_an_earlier_start():
    earlier = ChangeLog(T0, 60_000)
    earlier.append(T0, "A", "a-1", REGISTERED, None, c.UP)
    later = ChangeLog(T0 + 1, 60_000)
    assert later.last_id >= earlier.last_id
    assert later.append(T0 + 1, "A", "a-1", REGISTERED, None, c.UP).id > earlier.last_id
    # An id from before a restart without the log is too old, not an unrelated change.
    with pytest.raises(TooOld):
        later.since(earlier.last_id - 1, 10)
    assert later.last_id == (T0 + 1) * IDS_PER_MS + 1


def test_capacity_drops_the_oldest_and_makes_them_too_old():
    log = ChangeLog(T0, 60 * MIN, capacity=3)
    ids = [log.append(T0, "A", f"a-{k}", REGISTERED, None, c.UP).id for k in range(5)]
    assert [ch.id for ch in log.since(ids[1], 10)] == ids[2:]
    with pytest.raises(TooOld):
        log.since(ids[0], 10)


def test_listeners_see_each_change_and_can_unsubscribe():
    registry, _ = make_registry()
    seen = []
    stop = registry.reads.subscribe_changes(seen.append)
    registry.register(inst(n=1), T0)
    stop()
    registry.register(inst(n=2), T0)
    assert [ch.instance_id for ch in seen] == [inst(n=1).instance_id]


def test_export_and_restore_keep_the_entries_and_go_on_numbering():
    log = ChangeLog(T0, 60 * MIN)
    for k in range(3):
        log.append(T0 + k, "A", f"a-{k}", REGISTERED, None, c.UP)
    state = log.export()
    restarted = ChangeLog(T0 - 5, 60 * MIN)  # a clock that went back: ids still go on from the log's
    restarted.restore(state)
    assert [ch.instance_id for ch in restarted.since(state["entries"][0]["id"] - 1, 10)] == [
        "a-0",
        "a-1",
        "a-2",
    ]
    assert restarted.append(T0 + 9, "A", "a-3", REGISTERED, None, c.UP).id == state["last_id"] + 1
    later = ChangeLog(T0 + 10 * SEC, 60 * MIN)  # the usual case: a start after the saved log
    later.restore(state)
    new = later.append(T0 + 10 * SEC, "A", "a-4", REGISTERED, None, c.UP)
    assert [ch.instance_id for ch in later.since(state["last_id"], 10)] == ["a-4"]
    assert [ch.id for ch in later.since(state["entries"][-1]["id"] - 1, 10)] == [state["last_id"], new.id]


class CountedName(str):
    """An app name that counts how often it is upper-cased: the log compares names upper-cased, so
    this counts the entries a filtered read looks at."""

    looks = 0

    def upper(self) -> str:
        CountedName.looks += 1
        return str.upper(self)


def test_an_app_filter_reads_that_apps_changes_not_the_whole_log():
    log = ChangeLog(T0, 60 * MIN)
    first = log.append(T0, "RARE", "r-1", REGISTERED, None, c.UP)
    for k in range(5_000):
        log.append(T0, CountedName("BUSY"), f"b-{k}", REGISTERED, None, c.UP)
    last = log.append(T0, "rare", "r-2", STATUS_CHANGED, c.UP, c.DOWN)
    CountedName.looks = 0
    found = log.since(first.id - 1, 100, apps=["Rare"])
    assert [ch.id for ch in found] == [first.id, last.id]
    # The busy app's 5,000 entries were not looked at (a scan of the log upper-cases each of them).
    assert CountedName.looks == 0


def test_several_apps_come_back_in_log_order_and_the_index_follows_capacity_prune_and_restore():
    log = ChangeLog(T0, 3 * MIN, capacity=6)
    appended = [
        log.append(T0 + k * MIN, app, f"{app}-{k}", REGISTERED, None, c.UP)
        for k, app in enumerate(["A", "B", "C", "A", "B", "C", "A", "B"])
    ]
    # Capacity 6: the first two (A-0, B-1) are gone from the log and from the index alike.
    assert [ch.instance_id for ch in log.since(appended[1].id, 10, apps=["a", "b"])] == [
        "A-3",
        "B-4",
        "A-6",
        "B-7",
    ]
    assert [ch.instance_id for ch in log.since(appended[4].id, 1, apps=["b", "a"])] == ["A-6"]
    assert log.since(appended[1].id, 10, apps=["NONE"]) == []
    log.prune(T0 + 9 * MIN)  # keeps what is at most 3 minutes old: A-6 and B-7
    assert [ch.instance_id for ch in log.since(log.oldest_id() - 1, 10, apps=["C"])] == []
    assert [ch.instance_id for ch in log.since(log.oldest_id() - 1, 10, apps=["A", "C"])] == ["A-6"]
    restored = ChangeLog(T0, 60 * MIN)
    restored.restore(log.export())
    assert [ch.instance_id for ch in restored.since(restored.oldest_id() - 1, 10, apps=["b"])] == ["B-7"]
    assert [ch.app for ch in restored.since(appended[-1].id, 10, apps=["b"])] == []


def test_a_change_that_repeats_its_instances_previous_one_replaces_it():
    log = ChangeLog(T0, 60 * MIN)
    first = log.append(T0, "A", "a-1", REGISTERED, None, c.UP)
    again = log.append(T0 + 1, "A", "a-1", REGISTERED, c.UP, c.UP)
    other = log.append(T0 + 2, "A", "a-2", REGISTERED, None, c.UP)
    latest = log.append(T0 + 3, "A", "a-1", REGISTERED, c.UP, c.UP)
    # Not a repeat: another action, another status, another origin.
    down = log.append(T0 + 4, "A", "a-1", STATUS_CHANGED, c.UP, c.DOWN)
    log.append(T0 + 5, "A", "a-1", REGISTERED, c.DOWN, c.DOWN, replicated=True)
    peer = log.append(T0 + 6, "A", "a-1", REGISTERED, c.DOWN, c.DOWN)
    assert [ch.id for ch in log.since(first.id - 1, 10)] == [
        first.id,
        other.id,
        latest.id,
        down.id,
        peer.id - 1,
        peer.id,
    ]
    # A reader that had read the repeated change is told of the repeat; one that had not reads it once.
    assert [ch.id for ch in log.since(again.id, 10)][:2] == [other.id, latest.id]
    assert len(log) == 6
    assert log.oldest_id() == first.id


def test_a_loop_of_re_registrations_keeps_one_entry_per_instance_in_the_change_log_and_the_delta():
    registry, _ = make_registry(delta_retention_ms=3 * MIN)
    fleet = [inst(n=n) for n in range(100)]
    for instance in fleet:
        registry.register(instance, T0)
    for loop in range(1, 50):
        for instance in fleet:
            registry.register(instance, T0 + loop * SEC, is_replication=True)
    # Each instance: its first registration, then the latest of its 49 alike re-registrations.
    assert len(registry.changes) == 2 * len(fleet)
    assert registry.reads.stats(T0 + 50 * SEC)["delta_queue_length"] == len(fleet)
    logged = registry.reads.changes_since(registry.changes.oldest_id() - 1, 1_000)
    assert [(ch.old_status, ch.timestamp) for ch in logged[-2:]] == [(c.UP, T0 + 49 * SEC)] * 2
    # The delta still lists every instance once, as of its latest registration.
    delta = registry.reads.snapshot_delta()
    assert sum(len(views) for _, views in delta.apps) == len(fleet)
    assert delta.hashcode == registry.reads.snapshot().hashcode


def test_repeats_read_as_the_log_they_leave_through_compaction_and_capacity():
    log = ChangeLog(T0, 3 * MIN, capacity=50)
    kept = {}
    for k in range(400):
        instance = f"a-{k % 5}"
        kept[instance] = log.append(T0 + k, "A", instance, REGISTERED, c.UP, c.UP)
    # Five instances repeating one change: five entries, each the latest, in id order, however often
    # the superseded ones were compacted away; the capacity was never reached.
    assert log.since(T0 * IDS_PER_MS, 100) == sorted(kept.values(), key=lambda ch: ch.id)
    assert len(log) == 5
    assert log.oldest_id() == min(ch.id for ch in kept.values()), "the oldest entry kept is one read"
    assert [ch.id for ch in log.since(T0 * IDS_PER_MS, 100, apps=["a"])] == [ch.id for ch in kept.values()]
    fresh = [log.append(T0 + 500, "B", f"b-{k}", REGISTERED, None, c.UP) for k in range(50)]
    assert log.since(fresh[0].id - 1, 100) == fresh, "capacity: the oldest went first"
    with pytest.raises(TooOld):
        log.since(fresh[0].id - 2, 100)
    restored = ChangeLog(T0, 3 * MIN, capacity=50)
    restored.restore(log.export())
    assert restored.since(fresh[0].id - 1, 100) == fresh


def test_a_superseded_change_leaving_by_retention_makes_no_reader_too_old():
    log = ChangeLog(T0, 3 * MIN)
    first = log.append(T0, "A", "a-1", REGISTERED, None, c.UP)
    log.append(T0 + SEC, "A", "a-1", REGISTERED, c.UP, c.UP)
    other = log.append(T0 + 2 * SEC, "A", "a-2", REGISTERED, None, c.UP)
    latest = log.append(T0 + 3 * MIN, "A", "a-1", REGISTERED, c.UP, c.UP)
    assert log.prune(T0 + 3 * MIN + 1_500) == 2, "the first change, and the one the latest repeated"
    # Only the first change is lost to a reader: the repeated one is still said, by the latest.
    assert log.since(first.id, 10) == [other, latest]
    with pytest.raises(TooOld):
        log.since(first.id - 1, 10)
