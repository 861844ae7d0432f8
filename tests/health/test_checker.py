"""The health checker's state machine (registry/health/checker.py) on a real lease map and a fake
clock: probe results are fed in by hand, no network, no sleeps."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from registry.domain import constants as c
from registry.domain.core import Registry, RegistryRules
from registry.domain.instances import InstanceInfo, freeze
from registry.health.checker import ACTOR, CLAIM_GRACE_MS, HealthChecker, ProbeResult
from registry.health.config import KEY_INTERVAL, KEY_KIND, KEY_RECOVER, KEY_THRESHOLD, CheckDefaults
from tests.factories import instance_info

T0 = 1_796_000_000_000
SEC = 1000
INTERVAL = 10 * SEC
DEFAULTS = CheckDefaults(interval_ms=INTERVAL, timeout_ms=2 * SEC, threshold=3, recover=2)
APP = "ORDERS"


def instance(n=1, status=c.UP, metadata=None, **fields) -> InstanceInfo:
    return instance_info(
        APP,
        n,
        status=status,
        health_check_url=f"http://10.0.0.{n}:8080/health",
        metadata=freeze({KEY_KIND: "http"} if metadata is None else metadata),
        **fields,
    )


class Fleet:
    """A registry with checked instances, a checker and a fake clock."""

    def __init__(self, instances=(1,), **metadata):
        self.now = T0
        # No self-preservation: a one-instance registry would otherwise never evict.
        self.registry = Registry(RegistryRules(enable_self_preservation=False), T0)
        for n in instances:
            self.registry.register(instance(n, metadata={KEY_KIND: "http", **metadata}), T0)
        self.checker = HealthChecker(self.registry, DEFAULTS, T0)

    def probe(self, ok: bool, n: int = 1, reason: str | None = None) -> str | None:
        """Move to the instance's next probe, claim it and report ``ok``; the checker's action."""
        target = self.next_target(n)
        result = ProbeResult(
            APP, target.instance_id, target.claim, ok, 3.5, reason or ("HTTP 200" if ok else "HTTP 500")
        )
        return self.checker.apply(result, self.now)

    def next_target(self, n: int = 1):
        wanted = f"host{n}:orders:8080"
        for _ in range(3):
            # It still heartbeats: the process is alive, whatever its service does.
            self.registry.renew(APP, wanted, self.now)
            self.checker.refresh(self.now)
            for target in self.checker.claim_due(self.now, 1000):
                if target.instance_id == wanted:
                    return target
            self.now += INTERVAL
        raise AssertionError(f"{wanted} was never due")

    def status(self, n: int = 1) -> str:
        return self.registry.reads.get_instance(APP, f"host{n}:orders:8080", self.now).instance.status

    def override(self, n: int = 1) -> str | None:
        return self.registry.reads.overrides().get(f"host{n}:orders:8080")

    def operator_sets(self, status: str, n: int = 1) -> None:
        self.registry.set_status_override(APP, f"host{n}:orders:8080", status, self.now, actor="alice")

    def operator_removes(self, n: int = 1, new_status: str = c.UP) -> None:
        self.registry.remove_status_override(APP, f"host{n}:orders:8080", self.now, new_status, actor="alice")


def test_it_marks_down_only_after_threshold_consecutive_failures(caplog):
    fleet = Fleet()
    caplog.set_level(logging.WARNING, logger="registry.health.checker")
    assert fleet.probe(False) is None and fleet.probe(False) is None
    assert fleet.status() == c.UP and fleet.override() is None
    assert fleet.probe(False, reason="timed out after 2s") == "down"
    assert fleet.status() == c.DOWN and fleet.override() == c.DOWN
    view = fleet.checker.view(APP, "host1:orders:8080")
    assert view.holds_down and view.failures == 3 and view.last_reason == "timed out after 2s"
    assert view.last_latency_ms == 3.5 and view.last_probe_at == fleet.now
    # Through the override path: the "last 1000" list names the checker as the actor.
    _, _, overrides = fleet.registry.reads.recent_events()
    assert (overrides[-1].status, overrides[-1].actor) == (c.DOWN, ACTOR)
    [line] = [r for r in caplog.records if getattr(r, "event", "") == "health_check_down"]
    assert "marked ORDERS/host1:orders:8080 DOWN after 3 consecutive failures" in line.getMessage()


def test_a_success_between_failures_starts_the_count_again():
    fleet = Fleet()
    for ok in (False, False, True, False, False):
        assert fleet.probe(ok) is None
    assert fleet.status() == c.UP
    assert fleet.probe(False) == "down"


def test_it_lifts_its_own_override_after_recover_successes_and_restores_up(caplog):
    fleet = Fleet()
    caplog.set_level(logging.WARNING, logger="registry.health.checker")
    for _ in range(3):
        fleet.probe(False)
    assert fleet.probe(True) is None
    assert fleet.status() == c.DOWN
    assert fleet.probe(True) == "up"
    assert fleet.status() == c.UP and fleet.override() is None
    assert not fleet.checker.view(APP, "host1:orders:8080").holds_down
    assert fleet.checker.stats.marked_down == 1 and fleet.checker.stats.lifted == 1
    assert [r.event for r in caplog.records if getattr(r, "event", "").startswith("health_check_")] == [
        "health_check_down",
        "health_check_up",
    ]


def test_the_instance_own_metadata_sets_threshold_and_recover():
    fleet = Fleet(**{KEY_THRESHOLD: "1", KEY_RECOVER: "1"})
    assert fleet.probe(False) == "down"
    assert fleet.probe(True) == "up"


def test_an_operator_override_set_first_is_never_touched():
    fleet = Fleet()
    fleet.operator_sets(c.OUT_OF_SERVICE)
    for _ in range(10):
        assert fleet.probe(False) is None
    assert fleet.status() == c.OUT_OF_SERVICE and fleet.override() == c.OUT_OF_SERVICE
    view = fleet.checker.view(APP, "host1:orders:8080")
    assert not view.holds_down and view.foreign_override == c.OUT_OF_SERVICE
    # Once the operator's override is gone the count starts from zero.
    fleet.operator_removes()
    assert fleet.probe(False) is None and fleet.probe(False) is None
    assert fleet.status() == c.UP
    assert fleet.probe(False) == "down"


def test_an_operator_taking_it_out_of_service_while_the_checker_holds_down_wins():
    fleet = Fleet()
    for _ in range(3):
        fleet.probe(False)
    assert fleet.override() == c.DOWN
    fleet.operator_sets(c.OUT_OF_SERVICE)
    for _ in range(5):
        assert fleet.probe(True) is None
    assert fleet.status() == c.OUT_OF_SERVICE and fleet.override() == c.OUT_OF_SERVICE
    view = fleet.checker.view(APP, "host1:orders:8080")
    assert not view.holds_down and view.foreign_override == c.OUT_OF_SERVICE
    assert fleet.checker.stats.lifted == 0


def test_an_operator_removing_the_checkers_override_makes_it_forget_and_count_afresh():
    fleet = Fleet()
    for _ in range(3):
        fleet.probe(False)
    fleet.operator_removes(new_status=c.UP)
    assert fleet.status() == c.UP
    # Still failing: it takes a whole new threshold before the checker acts again.
    assert fleet.probe(False) is None and fleet.probe(False) is None
    assert fleet.status() == c.UP
    assert fleet.probe(False) == "down"


def test_a_change_by_the_operator_is_noticed_by_refresh_before_any_probe():
    fleet = Fleet()
    for _ in range(3):
        fleet.probe(False)
    fleet.operator_sets(c.OUT_OF_SERVICE)
    fleet.checker.refresh(fleet.now)
    assert fleet.checker.held_down() == []


def test_an_operator_override_landing_between_look_and_write_is_put_back(monkeypatch):
    fleet = Fleet()
    fleet.probe(False)
    fleet.probe(False)
    original_lease = fleet.registry.reads.lease

    def lease_then_operator_acts(app, instance_id):
        found = original_lease(app, instance_id)
        fleet.operator_sets(c.OUT_OF_SERVICE)
        return found

    monkeypatch.setattr(fleet.registry.reads, "lease", lease_then_operator_acts)
    assert fleet.probe(False) is None
    assert fleet.override() == c.OUT_OF_SERVICE and fleet.status() == c.OUT_OF_SERVICE
    assert fleet.checker.held_down() == []


def test_an_instance_that_is_not_up_is_never_marked_down():
    fleet = Fleet(instances=())
    fleet.registry.register(instance(1, status=c.STARTING), T0)
    fleet.checker.refresh(T0)
    for _ in range(5):
        assert fleet.probe(False) is None
    assert fleet.status() == c.STARTING and fleet.override() is None


def test_a_cancelled_instance_is_dropped_and_its_late_result_ignored():
    fleet = Fleet()
    fleet.probe(False)
    target = fleet.next_target()
    fleet.registry.cancel(APP, "host1:orders:8080", fleet.now)
    result = ProbeResult(APP, target.instance_id, target.claim, False, 1.0, "HTTP 500")
    assert fleet.checker.apply(result, fleet.now) is None
    fleet.checker.refresh(fleet.now)
    assert fleet.checker.view(APP, "host1:orders:8080") is None
    assert fleet.checker.stats.results_ignored == 1
    # Registered again: a new instance, counted from zero.
    fleet.registry.register(instance(1), fleet.now)
    fleet.checker.refresh(fleet.now)
    assert fleet.checker.view(APP, "host1:orders:8080").failures == 0


def test_an_evicted_instance_loses_its_state_and_the_checkers_override_with_it():
    fleet = Fleet()
    for _ in range(3):
        fleet.probe(False)
    fleet.now += 10 * 60 * SEC
    fleet.registry.run_eviction(fleet.now)
    fleet.checker.refresh(fleet.now)
    assert fleet.checker.view(APP, "host1:orders:8080") is None
    assert fleet.checker.held_down() == [] and fleet.override() is None


def test_dropping_the_metadata_while_held_down_lifts_the_override():
    fleet = Fleet()
    for _ in range(3):
        fleet.probe(False)
    fleet.registry.register(instance(1, metadata={"zone": "a"}, last_dirty_timestamp=T0 + 1), fleet.now)
    fleet.checker.refresh(fleet.now)
    assert fleet.override() is None and fleet.status() == c.UP
    assert fleet.checker.view(APP, "host1:orders:8080") is None


def test_a_re_registration_with_status_up_keeps_the_checkers_down():
    fleet = Fleet()
    for _ in range(3):
        fleet.probe(False)
    fleet.registry.register(instance(1, last_dirty_timestamp=T0 + 5), fleet.now)
    fleet.checker.refresh(fleet.now)
    assert fleet.status() == c.DOWN and fleet.checker.held_down() == [(APP, "host1:orders:8080")]
    fleet.probe(True)
    assert fleet.probe(True) == "up" and fleet.status() == c.UP


def test_a_claimed_probe_is_not_handed_out_twice_until_its_claim_expires():
    fleet = Fleet()
    first = fleet.next_target()
    later = fleet.now + INTERVAL
    assert fleet.checker.claim_due(later, 10) == []
    expired = fleet.now + DEFAULTS.timeout_ms + CLAIM_GRACE_MS + INTERVAL
    [second] = fleet.checker.claim_due(expired, 10)
    assert second.claim != first.claim
    stale = ProbeResult(APP, first.instance_id, first.claim, False, 1.0, "late")
    assert fleet.checker.apply(stale, expired) is None
    assert fleet.checker.view(APP, first.instance_id).probes == 0


def test_probes_of_a_fleet_are_spread_over_the_interval():
    fleet = Fleet(instances=range(1, 201))
    per_second: Counter[int] = Counter()
    for second in range(10):
        now = T0 + second * SEC + SEC - 1
        for target in fleet.checker.claim_due(now, 10_000):
            per_second[second] += 1
            assert target.timeout_ms == DEFAULTS.timeout_ms
    assert sum(per_second.values()) == 200
    assert max(per_second.values()) <= 40, per_second  # 20 a second on average, never the whole fleet


def test_the_interval_comes_from_the_metadata():
    fleet = Fleet(**{KEY_INTERVAL: "2"})
    probed_at = []
    for step in range(200):  # 20 s in 100 ms steps, each result back at once
        now = T0 + step * 100
        for target in fleet.checker.claim_due(now, 10):
            probed_at.append(now)
            fleet.checker.apply(ProbeResult(APP, target.instance_id, target.claim, True, 1.0, "ok"), now)
    assert len(probed_at) == 10
    assert {later - earlier for earlier, later in zip(probed_at, probed_at[1:], strict=False)} == {2_000}


def test_a_configuration_error_is_shown_and_nothing_is_probed():
    fleet = Fleet(instances=())
    fleet.registry.register(instance(1, metadata={KEY_KIND: "smtp"}), T0)
    fleet.checker.refresh(T0 + 1)
    view = fleet.checker.view(APP, "host1:orders:8080")
    assert view.kind is None and "not one of http, tcp" in view.errors[0]
    assert fleet.checker.claim_due(T0 + 10 * INTERVAL, 100) == []
    assert fleet.checker.checked() == 0


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"app": "A", "instance_id": "i", "claim": 1, "ok": "yes", "latency_ms": 1},
        {"app": "A", "instance_id": "i", "claim": 0, "ok": True, "latency_ms": 1},
        {"app": "A", "instance_id": "i", "claim": True, "ok": True, "latency_ms": 1},
        {"app": "", "instance_id": "i", "claim": 1, "ok": True, "latency_ms": 1},
        {"app": "A", "instance_id": "i", "claim": 1, "ok": True, "latency_ms": -1},
        {"app": "A", "instance_id": "i", "claim": 1, "ok": True, "latency_ms": 1, "reason": 5},
    ],
)
def test_unreadable_results_are_refused(data):
    from registry.health.checker import BadResult

    with pytest.raises(BadResult):
        ProbeResult.from_dict(data)


def test_probes_due_before_the_next_pass_are_claimed_with_their_own_start_time():
    fleet = Fleet(instances=range(1, 201))
    now = T0 + INTERVAL // 2
    ahead = fleet.checker.claim_due(now, 1000, ahead_ms=250)
    assert ahead and all(T0 <= target.due <= now + 250 for target in ahead)
    assert any(target.due > now for target in ahead), "some start later in the pass, at their time"
    # Each once: the next pass, 250 ms on, does not get them again.
    again = fleet.checker.claim_due(now + 250, 1000, ahead_ms=250)
    assert not {target.instance_id for target in ahead} & {target.instance_id for target in again}


def test_after_a_warm_restart_the_checker_takes_its_own_down_back_and_lifts_it():
    before = Fleet()
    for _ in range(3):
        before.probe(ok=False)
    assert before.override() == c.DOWN
    # The node restarts: the map (with the override and who set it) comes back; the checker is new.
    state = before.registry.saved_state.export_parts(before.now).as_state()
    after = Fleet(instances=())
    after.now = before.now + 5 * SEC
    after.registry.saved_state.restore(state, after.now)
    after.checker = HealthChecker(after.registry, DEFAULTS, after.now)
    assert after.registry.reads.override_actor("host1:orders:8080") == ACTOR
    after.probe(ok=True)
    assert after.checker.view(APP, "host1:orders:8080").holds_down
    assert after.probe(ok=True) == "up"
    assert (after.override(), after.status()) == (None, c.UP)


def test_after_a_warm_restart_an_operators_down_stays_the_operators():
    before = Fleet()
    before.operator_sets(c.DOWN)
    state = before.registry.saved_state.export_parts(before.now).as_state()
    after = Fleet(instances=())
    after.registry.saved_state.restore(state, before.now)
    after.now = before.now
    after.checker = HealthChecker(after.registry, DEFAULTS, after.now)
    assert after.registry.reads.override_actor("host1:orders:8080") == "alice"
    for _ in range(4):
        assert after.probe(ok=True) is None
    assert (after.override(), after.status()) == (c.DOWN, c.DOWN)


def refused(fleet: Fleet, reason: str = "10.0.0.1 is the node's own address: not probed", n: int = 1):
    target = fleet.next_target(n)
    result = ProbeResult(APP, target.instance_id, target.claim, False, 0.1, reason, refused=True)
    return fleet.checker.apply(result, fleet.now)


def test_a_refused_probe_is_not_a_failure_and_the_reason_is_kept_and_logged_once(caplog):
    fleet = Fleet()
    caplog.set_level(logging.WARNING, logger="registry.health.checker")
    for _ in range(5):
        assert refused(fleet) is None
    assert fleet.status() == c.UP and fleet.override() is None
    view = fleet.checker.view(APP, "host1:orders:8080")
    assert view.failures == 0 and view.probes == 0 and view.health == "unknown"
    assert view.refused_reason == "10.0.0.1 is the node's own address: not probed"
    assert fleet.checker.stats.probes_refused == 5 and fleet.checker.stats.probes_failed == 0
    [line] = [r for r in caplog.records if getattr(r, "event", "") == "health_check_refused"]
    assert "ORDERS/host1:orders:8080 not probed: 10.0.0.1 is the node's own address" in line.getMessage()
    # Probed again (the operator allowed the network): the reason goes, the health is the probe's.
    fleet.probe(True)
    view = fleet.checker.view(APP, "host1:orders:8080")
    assert view.refused_reason == "" and view.health == c.UP


def test_a_refused_probe_lifts_a_down_the_checker_holds():
    fleet = Fleet()
    for _ in range(3):
        fleet.probe(False)
    assert fleet.checker.view(APP, "host1:orders:8080").health == c.DOWN
    refused(fleet)
    assert fleet.status() == c.UP and fleet.override() is None
    assert fleet.checker.view(APP, "host1:orders:8080").health == "unknown"
