"""Unit tests of the delta queue (registry/domain/delta.py), without a Registry: leases made by hand on the
fake clock. How the delta reads through the registry (its lock, its hashcode) is in test_core.py."""

from __future__ import annotations

from registry.domain import constants as c
from registry.domain.delta import DeltaQueue, changed_views
from registry.domain.leases import Lease
from tests.domain.test_core import SEC, inst


def lease(clock, app: str = "ORDERS", n: int = 1, **kw) -> Lease:
    return Lease(inst(app, n, **kw), 90 * SEC, clock.now)


def ids(listed: dict) -> dict[str, list[str]]:
    return {app: [record.instance_id for record in records] for app, (records, _) in listed.items()}


def test_an_instance_changed_twice_is_listed_once_where_it_last_changed_and_apps_in_first_order(clock):
    queue = DeltaQueue()
    first, second = lease(clock, n=1), lease(clock, n=2)
    queue.append(clock.now, first)
    queue.append(clock.advance(SEC), lease(clock, "BILLING", 3))
    queue.append(clock.advance(SEC), second)
    queue.append(clock.advance(SEC), first)
    outline, listed, _ = queue.read({})
    # BILLING's only entry is older than ORDERS' oldest latest one (host2's).
    assert [app for app, _ in outline] == ["BILLING", "ORDERS"]
    assert ids(listed) == {
        "BILLING": ["host3:billing:8080"],
        "ORDERS": ["host2:orders:8080", "host1:orders:8080"],
    }
    assert len(queue) == 3, "an entry superseded by a later one of its instance leaves at once"


def test_only_the_apps_whose_part_changed_since_the_known_versions_are_listed(clock):
    queue = DeltaQueue()
    queue.append(clock.now, lease(clock, "ORDERS", 1))
    queue.append(clock.now, lease(clock, "BILLING", 2))
    outline, _, version = queue.read({})
    known = dict(outline)
    assert queue.read(known)[1] == {}
    queue.append(clock.advance(SEC), lease(clock, "BILLING", 3))
    later, listed, later_version = queue.read(known)
    assert ids(listed) == {"BILLING": ["host2:billing:8080", "host3:billing:8080"]}
    assert dict(later)["ORDERS"] == known["ORDERS"] and dict(later)["BILLING"] != known["BILLING"]
    assert later_version > version, "every read has a new version number"


def test_prune_drops_entries_past_retention_and_changes_the_version_of_the_parts_it_shrinks(clock):
    queue = DeltaQueue()
    start = clock.now
    moved = lease(clock, n=1)
    queue.append(start, moved)
    queue.append(start, lease(clock, n=2))
    queue.append(start, lease(clock, "BILLING", 3))
    queue.append(clock.advance(100 * SEC), moved)  # host1's latest change: kept longer
    known = dict(queue.read({})[0])

    assert queue.prune(start + 180 * SEC, 180 * SEC) == 0, "retention is inclusive"
    assert queue.prune(start + 181 * SEC, 180 * SEC) == 2, "host1's latest change is younger: it stays"
    outline, listed, _ = queue.read(known)
    assert [app for app, _ in outline] == ["ORDERS"], "BILLING's part is empty: it leaves the delta"
    assert ids(listed) == {"ORDERS": ["host1:orders:8080"]}, "host2 left ORDERS' part: a new version"
    assert queue.prune(start + 281 * SEC, 180 * SEC) == 1 and queue.read({})[0] == [] and len(queue) == 0


def test_views_are_read_in_steps_with_the_leases_current_times_and_the_records_as_listed(clock):
    queue = DeltaQueue()
    leases = [lease(clock, "ORDERS", n) for n in range(4)] + [lease(clock, "BILLING", 9)]
    for each in leases:
        queue.append(clock.now, each)
    _, listed, _ = queue.read({})
    # Meanwhile (after the registry's lock): a renewal, and a status change that replaced a record.
    renewed_at = clock.advance(5 * SEC)
    leases[0].renew(renewed_at)
    listed_record = leases[1].instance
    leases[1].instance = listed_record.evolve(status=c.DOWN)
    turns = []

    views = changed_views(listed, False, 2, lambda: turns.append(1))
    assert len(turns) == 2, "5 leases, a turn after every 2"
    assert [view.instance.instance_id for view in views["ORDERS"]] == [
        each.instance.instance_id for each in leases[:4]
    ]
    assert views["ORDERS"][0].last_renewal_ts == renewed_at
    assert views["ORDERS"][1].instance is listed_record, "the record the hashcode counted"
    assert changed_views(listed, True, 2, lambda: None)["ORDERS"][0].last_renewal_ts == renewed_at + 90 * SEC
