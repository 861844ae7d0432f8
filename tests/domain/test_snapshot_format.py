"""Unit tests of the warm-restart format (registry/domain/snapshot_format.py), without a Registry: leases made
by hand on the fake clock. Round trips through a whole registry are in tests/runtime/test_snapshots.py."""

from __future__ import annotations

import pytest

from registry.domain import constants as c
from registry.domain.changes import REGISTERED, ChangeLog
from registry.domain.instances import freeze
from registry.domain.leases import Lease
from registry.domain.snapshot_format import (
    INSTANCE_FIELDS,
    LEASE_FIELDS,
    SNAPSHOT_FORMAT,
    BadSnapshot,
    SavedParts,
    SavedState,
    instance_row,
    saved_header,
)
from tests.domain.test_core import SEC, inst


def leases_of(clock, app: str, count: int) -> list[Lease]:
    leases = []
    for n in range(count):
        lease = Lease(inst(app, n, metadata=freeze({"n": str(n)})), 90 * SEC, clock.now, service_up_ts=n)
        lease.renew(clock.now + n * SEC)
        leases.append(lease)
    return leases


def saved(clock, listed, overrides=None, step=1000, pause=lambda: None) -> SavedParts:
    log = ChangeLog(clock.now, 180 * SEC)
    log.append(clock.now, "ORDERS", "host0:orders:8080", REGISTERED, None, c.UP)
    header = saved_header(clock.now, overrides or [], 3, 5, 7)
    return SavedParts.collect(header, listed, *log.copy(), step, pause)


def test_the_parts_list_each_leases_times_in_the_order_of_its_record_and_pause_every_step(clock):
    orders, billing = leases_of(clock, "ORDERS", 5), leases_of(clock, "BILLING", 2)
    turns = []
    parts = saved(clock, [("ORDERS", orders), ("BILLING", billing)], step=2, pause=lambda: turns.append(1))
    assert len(turns) == 3 + 1, "ORDERS in slices of 2 (3 turns), BILLING in one"
    assert [(app, [i.instance_id for i in records]) for app, records in parts.records] == [
        ("ORDERS", [lease.instance.instance_id for lease in orders]),
        ("BILLING", [lease.instance.instance_id for lease in billing]),
    ]
    assert parts.lease_times == [
        tuple(getattr(lease, name) for name in LEASE_FIELDS) for lease in orders + billing
    ]
    assert parts.header["saved_at"] == clock.now and parts.header["format"] == SNAPSHOT_FORMAT
    assert parts.header["instance_fields"] == list(INSTANCE_FIELDS)


def test_a_saved_state_parses_back_to_the_same_leases_overrides_and_numbers(clock):
    leases = leases_of(clock, "ORDERS", 3)
    leases[2].cancel(clock.now + 5 * SEC)
    overrides = [["host1:orders:8080", c.OUT_OF_SERVICE, clock.now, "admin"]]
    state = saved(clock, [("ORDERS", leases)], overrides).as_state()
    clock.advance(30 * SEC)

    parsed = SavedState.parse(state, clock.now, max_age_ms=60 * SEC)
    assert [lease.instance for lease in parsed.leases] == [lease.instance for lease in leases]
    assert [[getattr(lease, name) for name in LEASE_FIELDS] for lease in parsed.leases] == [
        [getattr(lease, name) for name in LEASE_FIELDS] for lease in leases
    ]
    assert parsed.overrides == [("host1:orders:8080", c.OUT_OF_SERVICE, clock.now - 30 * SEC, "admin")]
    assert (parsed.saved_at, parsed.expected_clients, parsed.renews_last_minute) == (
        clock.now - 30 * SEC,
        3,
        7,
    )
    assert parsed.changes == state["changes"]


def test_an_override_saved_before_actors_were_has_none_and_one_with_more_fields_is_refused(clock):
    state = saved(clock, [("ORDERS", leases_of(clock, "ORDERS", 1))]).as_state()
    state["overrides"] = [["host0:orders:8080", c.DOWN, clock.now]]
    assert SavedState.parse(state, clock.now).overrides == [("host0:orders:8080", c.DOWN, clock.now, "")]
    state["overrides"][0] += ["admin", "extra"]
    with pytest.raises(BadSnapshot, match="too many fields"):
        SavedState.parse(state, clock.now)


def test_a_state_is_refused_when_too_old_of_another_format_or_with_a_bad_change_log(clock):
    state = saved(clock, [("ORDERS", leases_of(clock, "ORDERS", 1))]).as_state()
    clock.advance(61 * SEC)
    with pytest.raises(BadSnapshot, match="61000 ms old"):
        SavedState.parse(state, clock.now, max_age_ms=60 * SEC)
    assert SavedState.parse(state, clock.now, max_age_ms=61 * SEC).saved_at == clock.now - 61 * SEC
    with pytest.raises(BadSnapshot, match="this node reads"):
        SavedState.parse({**state, "format": 0}, clock.now)
    with pytest.raises(BadSnapshot, match="not a snapshot this node wrote"):
        SavedState.parse({**state, "changes": {"last_id": "many"}}, clock.now)


def without_field(state: dict, name: str) -> dict:
    dropped = state["instance_fields"].index(name)
    return {
        **state,
        "instance_fields": [field for field in state["instance_fields"] if field != name],
        "records": [row[:dropped] + row[dropped + 1 :] for row in state["records"]],
    }


def test_a_row_saved_without_an_optional_field_takes_its_default_and_a_required_one_is_refused(clock):
    lease = leases_of(clock, "ORDERS", 1)[0]
    state = saved(clock, [("ORDERS", [lease])]).as_state()
    assert state["records"] == [instance_row(lease.instance)]
    restored = SavedState.parse(without_field(state, "metadata"), clock.now).leases[0].instance
    assert restored.metadata == {} and restored.instance_id == lease.instance.instance_id
    with pytest.raises(BadSnapshot, match="'host_name' is missing"):
        SavedState.parse(without_field(state, "host_name"), clock.now)
    with pytest.raises(BadSnapshot, match="unknown instance fields"):
        SavedState.parse({**state, "instance_fields": ["colour", *INSTANCE_FIELDS[1:]]}, clock.now)
