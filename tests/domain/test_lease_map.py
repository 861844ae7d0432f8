"""Unit tests of the lease map (registry/domain/lease_map.py), without a Registry: the counts it keeps
as leases come and go, and the reads it gives. The rules deciding what is stored are in test_core.py."""

from __future__ import annotations

from registry.domain import constants as c
from registry.domain.lease_map import LeaseMap, group_by_app, reconcile_hashcode
from registry.domain.leases import Lease
from tests.domain.test_core import SEC, T0, inst


def lease(app="ORDERS", n=1, **kw) -> Lease:
    return Lease(inst(app, n, **kw), 90 * SEC, T0)


def test_reconcile_hashcode_is_alphabetical_and_skips_statuses_at_zero():
    assert reconcile_hashcode({}) == ""
    assert reconcile_hashcode({"UP": 10, "DOWN": 1, "OUT_OF_SERVICE": 2, "STARTING": 0}) == (
        "DOWN_1_OUT_OF_SERVICE_2_UP_10_"
    )


def test_put_counts_new_leases_and_replaces_an_id_without_counting_it_twice():
    leases = LeaseMap()
    assert leases.put(lease(n=1)) is None
    assert leases.put(lease(n=2, status=c.DOWN)) is None
    first = leases.get("ORDERS", "host1:orders:8080")
    replacement = lease(n=1, status=c.STARTING)
    assert leases.put(replacement) is first
    assert len(leases) == 2 and leases.app_count() == 1
    assert leases.get("ORDERS", "host1:orders:8080") is replacement
    assert leases.status_counts() == {c.STARTING: 1, c.DOWN: 1}
    assert leases.hashcode() == "DOWN_1_STARTING_1_"


def test_pop_takes_the_lease_out_and_an_app_left_empty_with_it():
    leases = LeaseMap()
    leases.put(lease("ORDERS", 1))
    leases.put(lease("BILLING", 2))
    assert leases.pop("ORDERS", "nope") is None and leases.pop("NOPE", "host1:orders:8080") is None
    popped = leases.pop("ORDERS", "host1:orders:8080")
    assert popped is not None and popped.instance.app == "ORDERS"
    assert leases.app_names() == ["BILLING"] and len(leases) == 1
    assert not leases.holds("ORDERS", "host1:orders:8080") and leases.holds("BILLING", "host2:billing:8080")
    assert leases.hashcode() == "UP_1_"


def test_a_new_record_moves_the_status_counts():
    leases = LeaseMap()
    stored = lease()
    leases.put(stored)
    leases.replace_record(stored, stored.instance.evolve(status=c.OUT_OF_SERVICE))
    assert stored.instance.status == c.OUT_OF_SERVICE
    assert leases.status_counts() == {c.OUT_OF_SERVICE: 1} and leases.hashcode() == "OUT_OF_SERVICE_1_"


def test_reads_list_apps_and_ids_in_the_order_they_were_first_stored():
    leases = LeaseMap()
    for app, n in [("ORDERS", 2), ("BILLING", 3), ("ORDERS", 1)]:
        leases.put(lease(app, n))
    leases.put(lease("ORDERS", 2, metadata={"v": "2"}))  # replaced in place
    ids = [(app, [i.instance_id for i in records]) for app, records in leases.records()]
    assert ids == [
        ("ORDERS", ["host2:orders:8080", "host1:orders:8080"]),
        ("BILLING", ["host3:billing:8080"]),
    ]
    assert [(app, [v.instance for v in views]) for app, views in leases.views(False)] == leases.records()
    assert [(app, [x.instance for x in listed]) for app, listed in leases.listed()] == leases.records()
    assert [i for i, _ in leases.leases_of("ORDERS")] == ["host2:orders:8080", "host1:orders:8080"]
    assert leases.app_views("BILLING", False)[0].instance.instance_id == "host3:billing:8080"
    assert leases.app_views("NOPE", False) == [] and leases.leases_of("NOPE") == []


def test_find_gives_the_first_app_holding_an_id():
    leases = LeaseMap()
    shared = inst("ORDERS", 1)
    leases.put(Lease(shared, 90 * SEC, T0))
    leases.put(Lease(shared.evolve(app="BILLING"), 90 * SEC, T0))
    assert leases.find("host1:orders:8080") == "ORDERS"
    assert leases.find("nope") is None


def test_vip_views_match_a_split_vip_exactly_and_group_by_app():
    leases = LeaseMap()
    leases.put(lease("ORDERS", 1, vip="a,b"))
    leases.put(lease("ORDERS", 2, vip="B"))
    leases.put(lease("BILLING", 3, vip="a", secure_vip_address="s"))
    views = leases.vip_views("a", secure=False, eureka_timing=False)
    grouped = [(app, [v.instance.instance_id for v in group]) for app, group in group_by_app(views)]
    assert grouped == [("ORDERS", ["host1:orders:8080"]), ("BILLING", ["host3:billing:8080"])]
    secure = leases.vip_views("s", secure=True, eureka_timing=False)
    assert [v.instance.instance_id for v in secure] == ["host3:billing:8080"]
