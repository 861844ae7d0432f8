"""Unit tests of the Django-free registry core, on a fake clock (milliseconds passed explicitly)."""

from __future__ import annotations

import random

import pytest

from registry.domain import constants as c
from registry.domain.core import Registry, RegistryRules, Renew
from registry.domain.instances import InstanceInfo
from registry.domain.lease_map import reconcile_hashcode
from registry.domain.leases import Lease, MeasuredRate, expired_among, views_of
from registry.domain.write_rules import LimitExceeded, RegistryFull
from tests.factories import instance_info

T0 = 1_796_000_000_000
SEC = 1000
MIN = 60 * SEC


def inst(app="ORDERS", n=1, status=c.UP, dirty=T0, duration=90, vip=None, **kw) -> InstanceInfo:
    return instance_info(
        app,
        n,
        status=status,
        duration_secs=duration,
        last_dirty_timestamp=dirty,
        vip_address=vip or app.lower(),
        **kw,
    )


def make_registry(**config) -> tuple[Registry, list]:
    changes: list = []
    registry = Registry(
        RegistryRules(**config),
        T0,
        on_change=lambda app, vips: changes.append((app, set(vips))),
        rng=random.Random(7),
    )
    return registry, changes


def status_of(registry: Registry, app: str, instance_id: str) -> str:
    views = {v.instance.instance_id: v for v in registry.reads.snapshot_app(app)}
    return views[instance_id].instance.status


# ------------------------------------------------------------------ register / renew / cancel


def test_register_creates_a_lease_and_counts_a_new_expected_client():
    registry, changes = make_registry()
    registry.register(inst(), T0)
    snapshot = registry.reads.snapshot()
    assert [(app, [v.instance.instance_id for v in views]) for app, views in snapshot.apps] == [
        ("ORDERS", ["host1:orders:8080"])
    ]
    assert snapshot.hashcode == "UP_1_"
    sp = registry.reads.self_preservation(T0)
    assert (sp.expected_clients, sp.renews_threshold) == (2, int(2 * 2 * 0.85))
    assert changes == [("ORDERS", {"orders"})]
    view = registry.reads.snapshot_app("ORDERS")[0]
    assert view.instance.action_type == c.ADDED
    assert view.instance.last_updated_timestamp == T0
    assert view.service_up_ts == T0


def test_reregistration_keeps_the_stored_copy_when_it_has_a_newer_dirty_timestamp():
    registry, _ = make_registry()
    registry.register(inst(dirty=T0 + 5, metadata={"v": "new"}), T0)
    registry.register(inst(dirty=T0 + 1, metadata={"v": "old"}), T0 + SEC)
    assert registry.reads.snapshot_app("ORDERS")[0].instance.metadata == {"v": "new"}
    # A tie goes to the incoming payload.
    registry.register(inst(dirty=T0 + 5, metadata={"v": "tie"}), T0 + 2 * SEC)
    assert registry.reads.snapshot_app("ORDERS")[0].instance.metadata == {"v": "tie"}
    assert registry.reads.self_preservation(T0).expected_clients == 2, "re-registrations are not new clients"


def test_reregistration_resets_the_lease_but_keeps_service_up_timestamp():
    registry, _ = make_registry()
    registry.register(inst(), T0)
    registry.register(inst(), T0 + 10 * SEC)
    view = registry.reads.snapshot_app("ORDERS")[0]
    assert view.registration_ts == T0 + 10 * SEC
    assert view.service_up_ts == T0


def test_renew_of_unknown_lease_is_not_found():
    registry, _ = make_registry()
    assert registry.renew("ORDERS", "nope", T0).outcome is Renew.NOT_FOUND


def test_renew_never_invalidates_the_cache_nor_adds_a_delta_entry():
    registry, changes = make_registry()
    registry.register(inst(), T0)
    changes.clear()
    before = registry.reads.snapshot_delta().apps
    assert registry.renew("ORDERS", "host1:orders:8080", T0 + SEC).outcome is Renew.OK
    assert changes == []
    assert [len(v) for _, v in registry.reads.snapshot_delta().apps] == [len(v) for _, v in before]


def test_renew_with_newer_client_dirty_timestamp_asks_the_client_to_reregister():
    registry, _ = make_registry()
    registry.register(inst(dirty=T0), T0)
    result = registry.renew("ORDERS", "host1:orders:8080", T0 + SEC, last_dirty_timestamp=T0 + 1)
    assert result.outcome is Renew.NOT_FOUND


def test_renew_with_older_dirty_timestamp_conflicts_only_for_replication():
    registry, _ = make_registry()
    registry.register(inst(dirty=T0 + 100), T0)
    client = registry.renew("ORDERS", "host1:orders:8080", T0 + SEC, last_dirty_timestamp=T0)
    assert client.outcome is Renew.OK
    peer = registry.renew(
        "ORDERS", "host1:orders:8080", T0 + SEC, last_dirty_timestamp=T0, is_replication=True
    )
    assert peer.outcome is Renew.CONFLICT
    assert peer.current is not None and peer.current.instance.last_dirty_timestamp == T0 + 100


def test_replicated_renew_with_newer_timestamp_stores_the_peers_override():
    registry, _ = make_registry()
    registry.register(inst(dirty=T0), T0)
    result = registry.renew(
        "ORDERS",
        "host1:orders:8080",
        T0 + SEC,
        last_dirty_timestamp=T0 + 5,
        overridden_status=c.OUT_OF_SERVICE,
        is_replication=True,
    )
    assert result.outcome is Renew.NOT_FOUND
    assert registry.reads.overrides() == {"host1:orders:8080": c.OUT_OF_SERVICE}


def test_dirty_timestamp_check_can_be_switched_off():
    registry, _ = make_registry(sync_when_timestamp_differs=False)
    registry.register(inst(dirty=T0), T0)
    result = registry.renew("ORDERS", "host1:orders:8080", T0 + SEC, last_dirty_timestamp=T0 + 9)
    assert result.outcome is Renew.OK


def test_cancel_removes_lease_override_and_expected_client():
    registry, changes = make_registry()
    registry.register(inst(), T0)
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0)
    assert registry.cancel("ORDERS", "host1:orders:8080", T0 + SEC)
    assert registry.reads.snapshot().apps == []
    assert registry.reads.snapshot().hashcode == ""
    assert registry.reads.overrides() == {}
    assert registry.reads.self_preservation(T0 + SEC).expected_clients == 1
    assert registry.cancel("ORDERS", "host1:orders:8080", T0 + SEC) is False
    delta = dict(registry.reads.snapshot_delta().apps)["ORDERS"]
    assert [v.instance.action_type for v in delta] == [c.DELETED]
    assert delta[0].eviction_ts == T0 + SEC
    assert changes[-1][0] == "ORDERS"


def test_cancel_of_unknown_lease_still_drops_its_override():
    registry, _ = make_registry()
    registry.register(inst(), T0)
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0)
    assert registry.cancel("OTHER", "host1:orders:8080", T0) is False
    assert registry.reads.overrides() == {}


def test_recent_registrations_and_cancellations_keep_the_last_thousand():
    registry, _ = make_registry()
    for n in range(1005):
        registry.register(inst(n=n), T0 + n)
    registry.cancel("ORDERS", "host3:orders:8080", T0 + 2000)
    registered, cancelled, _ = registry.reads.recent_events()
    assert len(registered) == 1000
    assert registered[0].instance_id == "host5:orders:8080"
    assert [e.instance_id for e in cancelled] == ["host3:orders:8080"]


# ------------------------------------------------------------------------------ override rules


def test_status_override_survives_reregistration_and_is_kept_by_renewals():
    registry, _ = make_registry()
    registry.register(inst(), T0)
    assert registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0 + SEC)
    registry.register(inst(dirty=T0 + 10), T0 + 2 * SEC)
    assert status_of(registry, "ORDERS", "host1:orders:8080") == c.OUT_OF_SERVICE
    assert registry.reads.snapshot().hashcode == "OUT_OF_SERVICE_1_"
    # A client registering DOWN beats the override.
    registry.register(inst(status=c.DOWN, dirty=T0 + 20), T0 + 3 * SEC)
    assert status_of(registry, "ORDERS", "host1:orders:8080") == c.DOWN


def test_status_override_is_ignored_when_status_already_matches():
    registry, changes = make_registry()
    registry.register(inst(), T0)
    changes.clear()
    assert registry.set_status_override("ORDERS", "host1:orders:8080", c.UP, T0 + SEC)
    assert registry.reads.overrides() == {}
    assert changes == []


def test_status_override_adopts_a_newer_dirty_timestamp_and_records_a_modified_delta():
    registry, _ = make_registry()
    registry.register(inst(dirty=T0), T0)
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0 + SEC, T0 + 50)
    view = registry.reads.get_instance("ORDERS", "host1:orders:8080", T0 + SEC)
    assert view is not None
    assert view.instance.last_dirty_timestamp == T0 + 50
    assert view.instance.overridden_status == c.OUT_OF_SERVICE
    assert view.instance.action_type == c.MODIFIED


def test_status_override_of_unknown_instance_is_not_found():
    registry, _ = make_registry()
    assert registry.set_status_override("ORDERS", "x", c.OUT_OF_SERVICE, T0) is None
    assert registry.remove_status_override("ORDERS", "x", T0) is None


def test_removing_override_without_value_makes_next_heartbeat_not_found_then_reregister_restores_up():
    registry, _ = make_registry()
    registry.register(inst(), T0)
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0)
    assert registry.remove_status_override("ORDERS", "host1:orders:8080", T0 + SEC)
    assert status_of(registry, "ORDERS", "host1:orders:8080") == c.UNKNOWN
    assert registry.renew("ORDERS", "host1:orders:8080", T0 + 2 * SEC).outcome is Renew.NOT_FOUND
    registry.register(inst(dirty=T0 + 3), T0 + 3 * SEC)
    assert status_of(registry, "ORDERS", "host1:orders:8080") == c.UP
    assert registry.reads.snapshot().hashcode == "UP_1_"


def test_removing_override_with_value_sets_that_status_and_missing_override_changes_nothing():
    registry, changes = make_registry()
    registry.register(inst(), T0)
    changes.clear()
    assert registry.remove_status_override("ORDERS", "host1:orders:8080", T0, c.UP)
    assert changes == [], "no override existed: nothing to record"
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0)
    registry.remove_status_override("ORDERS", "host1:orders:8080", T0 + SEC, c.UP)
    assert status_of(registry, "ORDERS", "host1:orders:8080") == c.UP
    assert registry.reads.overrides() == {}


def test_override_expires_after_an_hour_without_access():
    registry, _ = make_registry()
    registry.register(inst(), T0)
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0)
    registry.prune(T0 + 3_600_000 + 1)
    assert registry.reads.overrides() == {}


def test_metadata_update_is_a_reregistration_recorded_as_added():
    registry, changes = make_registry()
    registry.register(inst(metadata={"a": "1"}), T0)
    changes.clear()
    assert registry.update_metadata("ORDERS", "host1:orders:8080", {"b": "2"}, T0 + SEC)
    view = registry.reads.snapshot_app("ORDERS")[0]
    assert dict(view.instance.metadata) == {"a": "1", "b": "2"}
    assert view.instance.action_type == c.ADDED
    assert changes and changes[0][0] == "ORDERS"
    assert registry.update_metadata("ORDERS", "nope", {"b": "2"}, T0) is False


# ------------------------------------------------------------------------ expiry and eviction


def test_exact_expiry_is_one_duration_after_the_last_renewal():
    lease = Lease(inst(), 90 * SEC, T0)
    lease.renew(T0 + 30 * SEC)
    assert not lease.is_expired(T0 + 120 * SEC, eureka_timing=False)
    assert lease.is_expired(T0 + 120 * SEC + 1, eureka_timing=False)


@pytest.mark.parametrize("eureka_timing", [False, True])
def test_expired_among_keeps_the_expired_leases_in_order(eureka_timing):
    # Expiry as Eureka states it (a lease's last update plus its duration, plus the compensation, is
    # in the past, or it was cancelled), on leases of every kind and at the boundaries.
    rng = random.Random(7)
    leases = []
    for n in range(3000):
        lease = Lease(inst(n=n), rng.choice([1, 30, 90]) * SEC, T0)
        if rng.random() < 0.6:
            lease.renew(T0 + rng.randrange(0, 200) * SEC)
        if rng.random() < 0.05:
            lease.cancel(T0 + rng.randrange(0, 200) * SEC)
        leases.append((f"i-{n}", lease))
    for now in [T0, T0 + 90 * SEC, T0 + 90 * SEC + 1, T0 + 181 * SEC, T0 + 300 * SEC, T0 + 600 * SEC]:
        for additional in [0, 1, 45 * SEC]:
            expected = [
                (key, lease)
                for key, lease in leases
                if lease.eviction_ts > 0
                or now > lease.last_update_ts(eureka_timing) + lease.duration_ms + additional
            ]
            assert expired_among(leases, now, eureka_timing, additional) == expected, (now, additional)


def test_eureka_timing_expires_a_renewed_lease_after_twice_the_duration():
    lease = Lease(inst(), 90 * SEC, T0)
    assert lease.is_expired(T0 + 90 * SEC + 1, eureka_timing=True), "never renewed: one duration"
    lease.renew(T0 + 30 * SEC)
    assert not lease.is_expired(T0 + 210 * SEC, eureka_timing=True)
    assert lease.is_expired(T0 + 210 * SEC + 1, eureka_timing=True)
    assert lease.view(eureka_timing=True).last_renewal_ts == T0 + 120 * SEC


def fill(registry: Registry, count: int, now: int) -> None:
    for n in range(count):
        registry.register(inst(n=n), now)


def keep_renewing(registry: Registry, count: int, start: int, end: int, step: int = 30 * SEC) -> None:
    for t in range(start, end, step):
        for n in range(count):
            registry.renew("ORDERS", f"host{n}:orders:8080", t)


def test_eviction_is_capped_at_fifteen_percent_and_picks_at_random():
    registry, _ = make_registry(enable_self_preservation=False)
    fill(registry, 10, T0)
    evicted = registry.run_eviction(T0 + 100 * SEC).evicted
    assert len(evicted) == 2, "10 leases: at most 10 - int(10 * 0.85) = 2 per run"
    assert registry.reads.size() == 8
    # Repeated runs drain the rest, a capped batch at a time.
    while registry.reads.size():
        assert registry.run_eviction(T0 + 100 * SEC).evicted
    assert registry.reads.snapshot().hashcode == ""


@pytest.mark.parametrize(("size", "cap"), [(1, 1), (2, 1), (10, 2), (100, 15)])
def test_eviction_cap_matches_eureka(size, cap):
    registry, _ = make_registry(enable_self_preservation=False)
    fill(registry, size, T0)
    assert len(registry.run_eviction(T0 + 100 * SEC).evicted) == cap


def test_eviction_choice_depends_on_the_random_source():
    picks = set()
    for seed in range(5):
        registry = Registry(RegistryRules(enable_self_preservation=False), T0, rng=random.Random(seed))
        fill(registry, 20, T0)
        picks.add(tuple(sorted(registry.run_eviction(T0 + 100 * SEC).evicted)))
    assert len(picks) > 1


def test_eviction_spares_live_leases_and_adds_compensation_for_late_runs():
    registry, _ = make_registry(enable_self_preservation=False, eviction_interval_ms=60 * SEC)
    fill(registry, 1, T0)
    registry.run_eviction(T0)  # first run, sets the baseline
    registry.renew("ORDERS", "host0:orders:8080", T0 + 30 * SEC)
    assert registry.run_eviction(T0 + 60 * SEC).evicted == []
    # A run 200 s late tolerates 200 s more: the lease (expired at T0+120s) is still spared.
    assert registry.run_eviction(T0 + 320 * SEC).evicted == []
    assert registry.run_eviction(T0 + 380 * SEC).evicted == [("ORDERS", "host0:orders:8080")]


def test_an_eviction_scan_gives_others_turns_and_spares_what_they_renewed_meanwhile():
    registry, _ = make_registry(enable_self_preservation=False)
    registry.pacing.step = 3
    fill(registry, 10, T0)
    late = T0 + 100 * SEC
    turns = []

    def renew_meanwhile():
        # What the event loop may run between two steps: a heartbeat, and a lease replaced whole.
        turns.append(len(turns))
        if len(turns) == 1:
            registry.renew("ORDERS", "host0:orders:8080", late)
            registry.register(inst(n=1), late)

    registry.pacing.pause = renew_meanwhile
    run = registry.run_eviction(late)
    assert len(turns) == 3, "10 leases, a turn every 3"
    assert run.expired == 8, "the renewed lease and the re-registered one are not expired"
    assert not {("ORDERS", "host0:orders:8080"), ("ORDERS", "host1:orders:8080")} & set(run.evicted)


def ten_leases_read_in_steps_of_three(monkeypatch, meanwhile) -> tuple[Registry, list]:
    """A registry of 10 leases whose long reads (``pacing.step``) turn every 3 leases, running
    ``meanwhile(registry)`` at each turn as the event loop would serve a write; the list counts turns."""
    registry, _ = make_registry()
    registry.pacing.step = 3
    fill(registry, 10, T0)
    turns = []

    def turn():
        # A write needs the lock, so the lock must be free at a turn.
        assert not registry._lock.locked(), "the registry's lock is held across a turn"
        turns.append(meanwhile(registry))

    registry.pacing.pause = turn
    return registry, turns


def test_a_snapshot_export_reads_lease_times_with_the_lock_free_and_turns_for_others(monkeypatch):
    renewed_at = T0 + 10 * SEC
    registry, turns = ten_leases_read_in_steps_of_three(
        monkeypatch, lambda registry: registry.renew("ORDERS", "host9:orders:8080", renewed_at)
    )
    parts = registry.saved_state.export_parts(T0 + 5 * SEC)
    assert len(turns) == 4, "10 leases, a turn every 3"
    assert [app for app, _ in parts.records] == ["ORDERS"]
    assert len(parts.records[0][1]) == len(parts.lease_times) == 10
    # Records and times stay in the same order; a lease renewed after the lock is saved with that
    # renewal (host9 is the last one listed, read after the first turn).
    last = parts.records[0][1][-1]
    assert last.instance_id == "host9:orders:8080" and parts.lease_times[-1][2] == renewed_at


def test_evicted_leases_lose_override_and_show_deleted_in_delta():
    registry, _ = make_registry(enable_self_preservation=False)
    fill(registry, 1, T0)
    registry.set_status_override("ORDERS", "host0:orders:8080", c.OUT_OF_SERVICE, T0)
    registry.run_eviction(T0 + 200 * SEC)
    assert registry.reads.overrides() == {}
    assert dict(registry.reads.snapshot_delta().apps)["ORDERS"][0].instance.action_type == c.DELETED


def test_expired_but_not_evicted_leases_stay_in_full_fetch_and_hide_from_single_reads():
    registry, _ = make_registry(enable_self_preservation=False)
    fill(registry, 1, T0)
    later = T0 + 100 * SEC
    assert registry.reads.snapshot().hashcode == "UP_1_"
    assert registry.reads.get_instance("ORDERS", "host0:orders:8080", later) is None
    assert registry.reads.find_instance("host0:orders:8080", later) is None
    assert registry.set_status_override("ORDERS", "host0:orders:8080", c.DOWN, later) is None


# --------------------------------------------------------------------------- self-preservation


def expected_and_threshold(registry: Registry, now: int = T0) -> tuple[int, int]:
    sp = registry.reads.self_preservation(now)
    return sp.expected_clients, sp.renews_threshold


def test_threshold_follows_expected_clients():
    registry, _ = make_registry()
    assert expected_and_threshold(registry) == (1, 1)
    fill(registry, 10, T0)
    assert expected_and_threshold(registry) == (11, int(11 * 2 * 0.85))
    registry.cancel("ORDERS", "host0:orders:8080", T0)
    assert expected_and_threshold(registry) == (10, 17)


def test_expected_clients_never_move_while_zero():
    registry, _ = make_registry(default_open_for_traffic_count=0)
    assert expected_and_threshold(registry) == (0, 0)
    fill(registry, 3, T0)
    assert expected_and_threshold(registry) == (0, 0)
    sp = registry.reads.self_preservation(T0 + 5 * MIN)
    assert sp.lease_expiration_enabled is False, "threshold 0 disables eviction"


def test_self_preservation_uses_previous_full_minute_and_strict_comparison():
    registry, _ = make_registry()
    fill(registry, 10, T0)  # threshold int(11 * 2 * 0.85) = 18
    assert registry.reads.self_preservation(T0).renews_threshold == 18
    for _ in range(18):
        registry.renew("ORDERS", "host0:orders:8080", T0 + 10 * SEC)
    at = registry.reads.self_preservation
    assert at(T0 + 50 * SEC).renews_last_minute == 0, "current minute is not counted yet"
    assert at(T0 + 70 * SEC).renews_last_minute == 18
    assert at(T0 + 70 * SEC).lease_expiration_enabled is False, "18 is not > 18"
    for _ in range(19):
        registry.renew("ORDERS", "host0:orders:8080", T0 + 130 * SEC)
    assert at(T0 + 190 * SEC).lease_expiration_enabled is True
    assert at(T0 + 250 * SEC).lease_expiration_enabled is False, "a silent minute reads as 0"


def test_no_eviction_in_self_preservation():
    registry, _ = make_registry()
    fill(registry, 10, T0)
    assert registry.run_eviction(T0 + 10 * MIN).evicted == []
    assert registry.reads.size() == 10


def test_healthy_renewals_allow_eviction_of_a_dead_instance():
    registry, _ = make_registry()
    fill(registry, 20, T0)  # expected 21 -> threshold int(21 * 2 * 0.85) = 35
    # 19 live instances heartbeat every 30 s: 38 renewals a minute > 35; host0 is dead.
    for t in range(T0 + 30 * SEC, T0 + 5 * MIN, 30 * SEC):
        for n in range(1, 20):
            registry.renew("ORDERS", f"host{n}:orders:8080", t)
    now = T0 + 5 * MIN
    assert registry.reads.self_preservation(now).lease_expiration_enabled
    assert registry.run_eviction(now).evicted == [("ORDERS", "host0:orders:8080")]


def test_recount_adopts_the_registry_size_unless_it_fell_too_far():
    registry, _ = make_registry()
    fill(registry, 10, T0)
    assert expected_and_threshold(registry) == (11, 18)
    registry.recount_expected_clients(T0)
    assert expected_and_threshold(registry) == (10, 17)
    registry.open_for_traffic(100, T0)  # a start-up sync that found 100 (gone since)
    registry.recount_expected_clients(T0)
    assert expected_and_threshold(registry)[0] == 100, "10 is not > 0.85 * 100: keep the old expectation"


def test_recount_always_adopts_when_self_preservation_is_off():
    registry, _ = make_registry(enable_self_preservation=False)
    fill(registry, 3, T0)
    registry.open_for_traffic(100, T0)
    registry.recount_expected_clients(T0)
    assert expected_and_threshold(registry)[0] == 3


def test_measured_rate_reports_the_previous_bucket():
    rate = MeasuredRate(60_000, T0)
    rate.increment(T0 + 1)
    rate.increment(T0 + 59_999)
    assert rate.count(T0 + 59_999) == 0
    assert rate.count(T0 + 60_000) == 2
    assert rate.count(T0 + 180_000) == 0


def test_read_gate_closes_after_empty_sync_only_when_configured():
    registry, _ = make_registry()
    assert registry.allows_reads(T0)
    gated, _ = make_registry(wait_time_in_ms_when_sync_empty=5 * MIN, default_open_for_traffic_count=0)
    assert not gated.allows_reads(T0 + MIN)
    assert gated.allows_reads(T0 + 5 * MIN + 1)
    gated.open_for_traffic(3, T0 + 6 * MIN)
    assert gated.allows_reads(T0 + 6 * MIN)


# ----------------------------------------------------------------------------- delta and hash


def test_reconcile_hashcode_is_alphabetical_and_counts_every_status():
    assert reconcile_hashcode({}) == ""
    assert reconcile_hashcode({"UP": 10, "DOWN": 1, "OUT_OF_SERVICE": 2, "STARTING": 0}) == (
        "DOWN_1_OUT_OF_SERVICE_2_UP_10_"
    )
    registry, _ = make_registry()
    registry.register(inst(n=1, status=c.STARTING), T0)
    registry.register(inst(n=2, status=c.UNKNOWN), T0)
    registry.register(inst(n=3), T0)
    assert registry.reads.snapshot().hashcode == "STARTING_1_UNKNOWN_1_UP_1_"


def test_delta_shows_each_changed_instance_once_with_current_data_and_full_registry_hash():
    registry, _ = make_registry()
    registry.register(inst(n=1), T0)
    registry.register(inst(n=2), T0)
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0 + SEC)
    registry.cancel("ORDERS", "host2:orders:8080", T0 + 2 * SEC)
    registry.register(inst(app="BILLING", n=3), T0 + 3 * SEC)
    delta = registry.reads.snapshot_delta()
    got = {
        (app, v.instance.instance_id): (v.instance.action_type, v.instance.status)
        for app, views in delta.apps
        for v in views
    }
    assert got == {
        ("ORDERS", "host1:orders:8080"): (c.MODIFIED, c.OUT_OF_SERVICE),
        ("ORDERS", "host2:orders:8080"): (c.DELETED, c.UP),
        ("BILLING", "host3:billing:8080"): (c.ADDED, c.UP),
    }
    assert delta.hashcode == "OUT_OF_SERVICE_1_UP_1_" == registry.reads.snapshot().hashcode


def test_delta_version_grows_with_each_regeneration():
    registry, _ = make_registry()
    first = registry.reads.snapshot_delta().version
    assert registry.reads.snapshot_delta().version == first + 1
    assert registry.reads.snapshot().version == 1


def test_delta_entries_leave_after_retention():
    registry, _ = make_registry(delta_retention_ms=180 * SEC)
    registry.register(inst(n=1), T0)
    registry.register(inst(n=2), T0 + 100 * SEC)
    assert registry.prune(T0 + 180 * SEC) == 0
    assert registry.prune(T0 + 181 * SEC) == 1
    ids = [v.instance.instance_id for _, views in registry.reads.snapshot_delta().apps for v in views]
    assert ids == ["host2:orders:8080"]


def test_an_instance_stays_in_the_delta_while_its_latest_change_is_retained_and_moves_to_it():
    registry, _ = make_registry(delta_retention_ms=180 * SEC)
    registry.register(inst(n=1), T0)
    registry.register(inst(n=2), T0 + 10 * SEC)
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0 + 20 * SEC)

    def listed():
        return [
            (v.instance.instance_id, v.instance.action_type)
            for _, views in registry.reads.snapshot_delta().apps
            for v in views
        ]

    # Listed once, where it last changed (after instance 2), with its data as it is now.
    assert listed() == [("host2:orders:8080", c.ADDED), ("host1:orders:8080", c.MODIFIED)]
    # Its first entry is already gone (superseded); its latest one keeps it listed.
    assert registry.prune(T0 + 181 * SEC) == 0
    assert listed() == [("host2:orders:8080", c.ADDED), ("host1:orders:8080", c.MODIFIED)]
    assert registry.prune(T0 + 201 * SEC) == 2
    assert listed() == []


def test_vip_snapshot_matches_split_vips_exactly_and_hashes_only_the_subset():
    registry, _ = make_registry()
    registry.register(inst(n=1, vip="a,b"), T0)
    registry.register(inst(n=2, vip="B"), T0)
    registry.register(inst(n=3, vip=" a"), T0)
    snap = registry.reads.snapshot_vip("a", secure=False)
    assert [v.instance.instance_id for _, views in snap.apps for v in views] == ["host1:orders:8080"]
    assert snap.hashcode == "UP_1_" and snap.version == -1
    assert registry.reads.snapshot_vip("zzz", secure=False).apps == []


def test_renew_silently_changes_status_when_rules_say_so_and_keeps_hash_consistent():
    registry, _ = make_registry()
    registry.register(inst(), T0)
    # A peer's heartbeat brings an override for an instance already here (stored without a status change).
    registry.renew(
        "ORDERS",
        "host1:orders:8080",
        T0,
        last_dirty_timestamp=T0 + 5,
        overridden_status=c.OUT_OF_SERVICE,
        is_replication=True,
    )
    assert status_of(registry, "ORDERS", "host1:orders:8080") == c.UP
    assert registry.renew("ORDERS", "host1:orders:8080", T0 + SEC).outcome is Renew.OK
    assert status_of(registry, "ORDERS", "host1:orders:8080") == c.OUT_OF_SERVICE
    assert registry.reads.snapshot().hashcode == "OUT_OF_SERVICE_1_"


def test_fast_profile_counts_clients_from_zero_so_one_dead_in_ten_is_evicted():
    registry, _ = make_registry(
        expected_number_of_clients_sending_renews=0,
        default_open_for_traffic_count=0,
        expected_clients_move_only_above_zero=False,
    )
    fill(registry, 10, T0)
    assert expected_and_threshold(registry) == (10, 17)
    # Nine of ten heartbeat every 30 s: 18 renewals a minute > 17, so expiration stays enabled.
    keep_renewing(registry, 10, T0 + 30 * SEC, T0 + 60 * SEC)
    for t in range(T0 + 60 * SEC, T0 + 4 * MIN, 30 * SEC):
        for n in range(1, 10):
            registry.renew("ORDERS", f"host{n}:orders:8080", t)
    now = T0 + 4 * MIN
    assert registry.reads.self_preservation(now).lease_expiration_enabled
    assert registry.run_eviction(now).evicted == [("ORDERS", "host0:orders:8080")]
    assert expected_and_threshold(registry, now)[0] == 9


def test_eureka_arithmetic_keeps_one_dead_in_ten_under_self_preservation():
    registry, _ = make_registry()  # Spring Cloud's start at 1: expected 11, threshold 18
    fill(registry, 10, T0)
    for t in range(T0 + 60 * SEC, T0 + 4 * MIN, 30 * SEC):
        for n in range(1, 10):
            registry.renew("ORDERS", f"host{n}:orders:8080", t)
    assert registry.run_eviction(T0 + 4 * MIN).evicted == []


# ------------------------------------------------------------- what the status console reads


def test_recent_lists_record_why_each_entry_was_added():
    registry, _ = make_registry()
    registry.register(inst(n=1), T0)
    registry.register(inst(n=1, dirty=T0 + 1), T0 + SEC)
    registry.update_metadata("ORDERS", "host1:orders:8080", {"k": "v"}, T0 + 2 * SEC)
    registry.register(inst(n=2), T0)
    registry.cancel("ORDERS", "host2:orders:8080", T0 + 3 * SEC)
    registered, cancelled, overrides = registry.reads.recent_events()
    assert [(e.instance_id, e.cause) for e in registered] == [
        ("host1:orders:8080", "register"),
        ("host1:orders:8080", "re-register"),
        ("host1:orders:8080", "metadata"),
        ("host2:orders:8080", "register"),
    ]
    assert [(e.instance_id, e.cause) for e in cancelled] == [("host2:orders:8080", "cancel")]
    assert overrides == []


def test_evictions_are_listed_as_cancelled_with_cause_eviction():
    registry, _ = make_registry(enable_self_preservation=False)
    registry.register(inst(n=1, duration=10), T0)
    registry.run_eviction(T0 + 11 * SEC)
    _, cancelled, _ = registry.reads.recent_events()
    assert [(e.instance_id, e.cause) for e in cancelled] == [("host1:orders:8080", "eviction")]


def test_overrides_are_listed_with_the_status_they_left_and_who_asked():
    registry, _ = make_registry()
    registry.register(inst(), T0)
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0 + SEC, actor="admin:ops")
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0 + 2 * SEC)
    registry.remove_status_override("ORDERS", "host1:orders:8080", T0 + 3 * SEC, c.UP)
    _, _, overrides = registry.reads.recent_events()
    assert [(e.cause, e.status, e.actor) for e in overrides] == [
        ("override", c.OUT_OF_SERVICE, "admin:ops"),
        ("override removed", c.UP, ""),
    ], "the repeated override changed nothing and is not listed"


def test_status_override_calls_report_what_they_found_and_left():
    registry, _ = make_registry()
    registry.register(inst(), T0)
    change = registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0)
    assert change is not None and change.changed
    assert (change.old_status, change.new_status, change.old_override, change.new_override) == (
        c.UP,
        c.OUT_OF_SERVICE,
        None,
        c.OUT_OF_SERVICE,
    )
    again = registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0)
    assert again is not None and not again.changed
    removed = registry.remove_status_override("ORDERS", "host1:orders:8080", T0, c.UP)
    assert removed is not None
    assert (removed.old_status, removed.new_status, removed.old_override, removed.new_override) == (
        c.OUT_OF_SERVICE,
        c.UP,
        c.OUT_OF_SERVICE,
        None,
    )
    nothing = registry.remove_status_override("ORDERS", "host1:orders:8080", T0, c.UP)
    assert nothing is not None and not nothing.changed


def test_lease_lookup_returns_expired_leases_with_their_override():
    registry, _ = make_registry()
    registry.register(inst(duration=10), T0)
    registry.set_status_override("ORDERS", "host1:orders:8080", c.OUT_OF_SERVICE, T0)
    found = registry.reads.lease("ORDERS", "host1:orders:8080")
    assert found is not None
    view, override = found
    assert view.instance.status == c.OUT_OF_SERVICE and override == c.OUT_OF_SERVICE
    assert registry.reads.lease("ORDERS", "nope") is None


@pytest.mark.parametrize(
    ("renews", "enabled", "below", "expiration"),
    [
        (0, True, True, False),
        (1, True, True, False),  # R == T: still below (<=), and expiration needs R > T
        (2, True, False, True),
        (0, False, True, True),
        (2, False, False, True),
    ],
)
def test_self_preservation_numbers_follow_eurekas_rules(renews, enabled, below, expiration):
    registry, _ = make_registry(
        enable_self_preservation=enabled,
        expected_number_of_clients_sending_renews=0,
        default_open_for_traffic_count=0,
        expected_clients_move_only_above_zero=False,
    )
    registry.register(inst(), T0)  # expected 1, threshold int(1 * 2 * 0.85) = 1
    for n in range(renews):
        registry.renew("ORDERS", "host1:orders:8080", T0 + n * SEC)
    sp = registry.reads.self_preservation(T0 + MIN)
    assert (sp.expected_clients, sp.renews_threshold, sp.renews_last_minute) == (1, 1, renews)
    assert sp.below_threshold is below
    assert sp.lease_expiration_enabled is expiration
    assert sp.in_startup_wait is False


def test_no_verdict_on_self_preservation_during_the_startup_wait():
    registry, _ = make_registry(wait_time_in_ms_when_sync_empty=5 * MIN)
    registry.register(inst(), T0)
    assert registry.reads.self_preservation(T0 + MIN).in_startup_wait
    assert not registry.reads.self_preservation(T0 + MIN).below_threshold
    assert registry.reads.self_preservation(T0 + 5 * MIN + 1).below_threshold


def test_delta_parts_give_instances_only_for_apps_whose_part_changed():
    registry, _ = make_registry(delta_retention_ms=180 * SEC)
    registry.register(inst(n=1), T0)
    registry.register(inst(app="BILLING", n=2), T0 + SEC)
    first = registry.reads.delta_parts({})
    assert [app for app, _ in first.outline] == ["ORDERS", "BILLING"]
    assert set(first.changed) == {"ORDERS", "BILLING"}
    known = dict(first.outline)
    assert registry.reads.delta_parts(known).changed == {}
    registry.set_status_override("BILLING", "host2:billing:8080", c.OUT_OF_SERVICE, T0 + 2 * SEC)
    later = registry.reads.delta_parts(known)
    assert set(later.changed) == {"BILLING"} and later.hashcode == registry.reads.snapshot().hashcode
    assert later.version > first.version
    # ORDERS' only entry leaves the queue: ORDERS leaves the outline.
    registry.prune(T0 + 181 * SEC)
    assert [app for app, _ in registry.reads.delta_parts(known).outline] == ["BILLING"]


def test_a_delta_reads_lease_times_with_the_lock_free_and_keeps_records_as_of_its_hashcode(monkeypatch):
    renewed_at = T0 + 10 * SEC

    def writes_meanwhile(registry):
        registry.renew("ORDERS", "host9:orders:8080", renewed_at)
        registry.set_status_override("ORDERS", "host8:orders:8080", c.OUT_OF_SERVICE, renewed_at)

    registry, turns = ten_leases_read_in_steps_of_three(monkeypatch, writes_meanwhile)
    parts = registry.reads.delta_parts({})
    assert len(turns) == 3, "10 leases, a turn after every 3"
    views = {view.instance.instance_id: view for view in parts.changed["ORDERS"]}
    assert len(views) == 10
    # The hashcode was counted under the lock, before the override: the records agree with it,
    # while a time read after the lock shows the renewal made meanwhile.
    assert parts.hashcode == "UP_10_"
    assert views["host8:orders:8080"].instance.status == c.UP
    assert views["host9:orders:8080"].last_renewal_ts == renewed_at
    assert registry.reads.delta_parts({}).hashcode == "OUT_OF_SERVICE_1_UP_9_"


def test_views_of_many_leases_match_each_lease_view():
    leases = [Lease(inst(n=n), 90 * SEC, T0 + n) for n in range(4)]
    leases[1].renew(T0 + 5 * SEC)
    leases[2].cancel(T0 + 6 * SEC)
    leases[3].service_up(T0 + 7 * SEC)
    pairs = [(lease.instance, lease) for lease in leases]
    assert views_of(pairs, eureka_timing=True)[1].last_renewal_ts == T0 + 5 * SEC + 90 * SEC
    assert views_of(pairs, eureka_timing=False)[1].last_renewal_ts == T0 + 5 * SEC
    for timing in (True, False):
        assert views_of(pairs, timing) == [
            (
                lease.instance,
                lease.registration_ts,
                lease.last_update_ts(timing),
                lease.eviction_ts,
                lease.service_up_ts,
            )
            for lease in leases
        ]


# --------------------------------------------------------------- limits on clients (issue 30)

LONG_MAX = 2**63 - 1
FIVE_MIN = 5 * MIN


def test_no_write_stores_a_dirty_timestamp_more_than_five_minutes_ahead_of_the_clock():
    registry, _ = make_registry()
    instance_id = "host1:orders:8080"

    def stored() -> int:
        return registry.reads.snapshot_app("ORDERS")[0].instance.last_dirty_timestamp

    registry.register(inst(dirty=LONG_MAX), T0, is_replication=True)
    assert stored() == T0 + FIVE_MIN
    registry.set_status_override("ORDERS", instance_id, c.DOWN, T0 + FIVE_MIN + SEC, LONG_MAX)
    assert stored() == T0 + 2 * FIVE_MIN + SEC
    registry.remove_status_override(
        "ORDERS", instance_id, T0 + 2 * FIVE_MIN + 2 * SEC, c.UP, LONG_MAX, is_replication=True
    )
    assert stored() == T0 + 3 * FIVE_MIN + 2 * SEC
    # Within the bound, the newer timestamp is kept as it was sent (Eureka's rule).
    registry.register(inst(dirty=T0 + 3 * FIVE_MIN + 3 * SEC), T0 + 3 * FIVE_MIN + 3 * SEC)
    assert stored() == T0 + 3 * FIVE_MIN + 3 * SEC


def test_lease_times_above_the_cap_are_lowered_for_peers_copies_too():
    registry, _ = make_registry(max_lease_duration_secs=600)
    registry.register(inst(duration=86_400, renewal_interval_secs=7_200), T0, is_replication=True)
    view = registry.reads.snapshot_app("ORDERS")[0]
    assert (view.instance.duration_secs, view.instance.renewal_interval_secs) == (600, 600)
    registry.register(inst(n=2, duration=90), T0)
    assert registry.reads.snapshot_app("ORDERS")[1].instance.duration_secs == 90, "a lease within the cap"


def test_a_client_registration_beyond_max_instances_raises_before_changing_anything():
    registry, changes = make_registry(max_instances=1)
    registry.register(inst(n=1), T0)
    changes.clear()
    before = (
        registry.reads.snapshot(),
        registry.reads.self_preservation(T0),
        registry.reads.recent_events(),
        registry.reads.stats(T0),
    )

    with pytest.raises(RegistryFull, match="maximum of 1 instances"):
        registry.register(inst(n=2), T0 + SEC)

    after = (
        registry.reads.snapshot(),
        registry.reads.self_preservation(T0),
        registry.reads.recent_events(),
        registry.reads.stats(T0),
    )
    assert after == before and changes == []
    registry.register(inst(n=1, metadata={"v": "2"}), T0 + SEC)  # a re-registration has room
    registry.register(inst(n=2), T0 + SEC, is_replication=True)  # a peer's copy is never refused
    assert registry.reads.size() == 2


def test_a_client_metadata_merge_over_the_limits_raises_and_keeps_the_record():
    registry, changes = make_registry(max_metadata_keys=2, max_metadata_bytes=10)
    registry.register(inst(metadata={"a": "1"}), T0)
    changes.clear()
    stored = registry.reads.snapshot_app("ORDERS")[0]

    with pytest.raises(LimitExceeded, match="3 keys"):
        registry.update_metadata("ORDERS", "host1:orders:8080", {"b": "2", "c": "3"}, T0 + SEC)
    with pytest.raises(LimitExceeded, match="11 bytes"):
        registry.update_metadata("ORDERS", "host1:orders:8080", {"b": "x" * 8}, T0 + SEC)

    assert registry.reads.snapshot_app("ORDERS")[0] == stored and changes == []
    assert registry.update_metadata("ORDERS", "host1:orders:8080", {"b": "2"}, T0 + SEC)
