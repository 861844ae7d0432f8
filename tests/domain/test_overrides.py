"""Unit tests of the status override map (registry/domain/overrides.py), without a Registry, on the fake
clock. How the registry applies an override (Eureka's first-match-wins rules) is in test_core.py."""

from __future__ import annotations

from registry.domain import constants as c
from registry.domain.overrides import OverrideMap
from tests.domain.test_core import MIN

ID = "host1:orders:8080"
IDLE = 60 * MIN


def test_a_set_override_is_read_with_its_status_and_actor(clock):
    overrides = OverrideMap(IDLE)
    overrides.set(ID, c.OUT_OF_SERVICE, clock.now, actor="admin:ops")
    assert ID in overrides and len(overrides) == 1
    assert overrides.status(ID) == c.OUT_OF_SERVICE and overrides.actor(ID) == "admin:ops"
    assert overrides.statuses() == {ID: c.OUT_OF_SERVICE}
    assert (overrides.status("other"), overrides.actor("other")) == (None, None)


def test_an_override_set_by_a_client_or_a_peer_has_no_actor(clock):
    overrides = OverrideMap(IDLE)
    overrides.set(ID, c.DOWN, clock.now)
    assert overrides.actor(ID) == ""


def test_a_write_keeps_an_override_alive_and_drops_it_once_idle_too_long(clock):
    overrides = OverrideMap(IDLE)
    overrides.set(ID, c.OUT_OF_SERVICE, clock.now)
    assert overrides.use(ID, clock.advance(IDLE)) == c.OUT_OF_SERVICE, "idle exactly the limit: kept"
    assert overrides.use(ID, clock.advance(IDLE)) == c.OUT_OF_SERVICE, "the last use restarted the wait"
    assert overrides.use(ID, clock.advance(IDLE + 1)) is None
    assert ID not in overrides
    assert overrides.use("other", clock.now) is None


def test_a_look_for_a_report_neither_keeps_an_override_alive_nor_drops_it(clock):
    overrides = OverrideMap(IDLE)
    overrides.set(ID, c.OUT_OF_SERVICE, clock.now)
    clock.advance(IDLE + 1)
    assert overrides.status(ID) == c.OUT_OF_SERVICE and overrides.statuses() == {ID: c.OUT_OF_SERVICE}
    assert overrides.use(ID, clock.now) is None, "the looks did not count as a use"


def test_prune_drops_only_the_idle_overrides(clock):
    overrides = OverrideMap(IDLE)
    overrides.set(ID, c.OUT_OF_SERVICE, clock.now)
    overrides.set("fresh", c.DOWN, clock.advance(MIN))
    assert overrides.prune(clock.now + IDLE) == 1
    assert overrides.statuses() == {"fresh": c.DOWN}
    assert overrides.prune(clock.now + IDLE + 1) == 1 and len(overrides) == 0


def test_removing_an_override_returns_the_status_it_had(clock):
    overrides = OverrideMap(IDLE)
    overrides.set(ID, c.OUT_OF_SERVICE, clock.now)
    assert overrides.remove(ID) == c.OUT_OF_SERVICE
    assert overrides.remove(ID) is None and ID not in overrides


def test_set_default_keeps_an_override_already_there(clock):
    overrides = OverrideMap(IDLE)
    overrides.set(ID, c.OUT_OF_SERVICE, clock.now, actor="alice")
    overrides.set_default(ID, c.DOWN, clock.now + 1)
    overrides.set_default("other", c.DOWN, clock.now + 1, actor="health")
    assert overrides.statuses() == {ID: c.OUT_OF_SERVICE, "other": c.DOWN}
    assert (overrides.actor(ID), overrides.actor("other")) == ("alice", "health")


def test_rows_are_what_a_snapshot_saves_and_set_default_reads_them_back(clock):
    overrides = OverrideMap(IDLE)
    overrides.set(ID, c.OUT_OF_SERVICE, clock.now, actor="alice")
    overrides.set("other", c.DOWN, clock.now + 1)
    rows = overrides.rows()
    assert rows == [[ID, c.OUT_OF_SERVICE, clock.now, "alice"], ["other", c.DOWN, clock.now + 1, ""]]
    restored = OverrideMap(IDLE)
    for instance_id, status, last_access, actor in rows:
        restored.set_default(instance_id, status, last_access, actor)
    assert restored.rows() == rows
    assert restored.use(ID, clock.now + IDLE + 1) is None, "the saved last access still counts"


def test_the_idle_limit_can_change_in_place(clock):
    overrides = OverrideMap(IDLE)
    overrides.set(ID, c.OUT_OF_SERVICE, clock.now)
    overrides.idle_expiry_ms = MIN
    assert overrides.use(ID, clock.now + MIN + 1) is None
