"""Unit tests of the self-preservation arithmetic (registry/domain/preservation.py), without a Registry, on
the fake clock. How eviction and single reads obey it is in test_core.py."""

from __future__ import annotations

from registry.domain.core import RegistryRules
from registry.domain.preservation import Preservation
from tests.domain.test_core import MIN, SEC


def preservation(clock, **config) -> Preservation:
    arithmetic = Preservation(RegistryRules(**config), clock.now)
    arithmetic.open_for_traffic(0, clock.now)
    return arithmetic


def renew(arithmetic: Preservation, times: int, now: int) -> None:
    for _ in range(times):
        arithmetic.renews.increment(now)


def test_the_threshold_is_expected_clients_times_renewals_a_minute_times_the_percentage(clock):
    arithmetic = preservation(clock, expected_client_renewal_interval_secs=20, renewal_percent_threshold=0.5)
    assert (arithmetic.expected_clients, arithmetic.renews_threshold) == (1, int(1 * 3 * 0.5))
    for _ in range(9):
        arithmetic.client_added()
    assert (arithmetic.expected_clients, arithmetic.renews_threshold) == (10, 15)
    arithmetic.client_removed()
    assert (arithmetic.expected_clients, arithmetic.renews_threshold) == (9, 13)


def test_a_count_at_zero_moves_only_when_told_to(clock):
    eureka = preservation(clock, default_open_for_traffic_count=0)
    eureka.client_added()
    eureka.client_removed()
    assert (eureka.expected_clients, eureka.renews_threshold) == (0, 0)
    exact = preservation(clock, default_open_for_traffic_count=0, expected_clients_move_only_above_zero=False)
    exact.client_added()
    exact.client_added()
    assert (exact.expected_clients, exact.renews_threshold) == (2, 3)
    for _ in range(3):
        exact.client_removed()
    assert exact.expected_clients == 0, "never below zero"


def test_leases_expire_only_while_the_last_full_minutes_renewals_are_above_the_threshold(clock):
    arithmetic = preservation(clock)
    for _ in range(9):
        arithmetic.client_added()
    assert arithmetic.renews_threshold == 17
    start = clock.now
    renew(arithmetic, 17, start + 10 * SEC)
    assert arithmetic.renews_last_minute(start + 50 * SEC) == 0, "the current minute is not counted yet"
    assert not arithmetic.lease_expiration_enabled(start + 70 * SEC), "17 is not > 17"
    renew(arithmetic, 18, start + 70 * SEC)
    assert arithmetic.lease_expiration_enabled(start + 130 * SEC)
    assert not arithmetic.lease_expiration_enabled(start + 190 * SEC), "a silent minute reads as 0"


def test_a_threshold_of_zero_never_lets_leases_expire_unless_self_preservation_is_off(clock):
    on = preservation(clock, default_open_for_traffic_count=0)
    renew(on, 100, clock.now)
    assert on.renews_threshold == 0 and not on.lease_expiration_enabled(clock.now + MIN)
    off = preservation(clock, default_open_for_traffic_count=0, enable_self_preservation=False)
    assert off.lease_expiration_enabled(clock.now)


def test_the_recount_adopts_the_size_unless_it_fell_below_the_threshold_share(clock):
    arithmetic = preservation(clock)
    arithmetic.expected_clients = 100
    arithmetic.recount(85)
    assert arithmetic.expected_clients == 100, "85 is not > 0.85 * 100"
    arithmetic.recount(86)
    assert (arithmetic.expected_clients, arithmetic.renews_threshold) == (86, int(86 * 2 * 0.85))
    off = preservation(clock, enable_self_preservation=False)
    off.expected_clients = 100
    off.recount(3)
    assert off.expected_clients == 3


def test_reads_wait_after_an_empty_start_up_sync_and_the_report_says_so(clock):
    arithmetic = preservation(clock, default_open_for_traffic_count=0, wait_time_in_ms_when_sync_empty=MIN)
    opened = clock.now
    assert not arithmetic.allows_reads(opened + MIN)
    report = arithmetic.report(opened + MIN)
    assert report.in_startup_wait and not report.below_threshold, "no banner while waiting"
    assert arithmetic.allows_reads(opened + MIN + 1) and arithmetic.report(opened + MIN + 1).below_threshold
    synced = preservation(clock, default_open_for_traffic_count=0, wait_time_in_ms_when_sync_empty=MIN)
    synced.open_for_traffic(5, clock.now)
    assert synced.allows_reads(clock.now) and synced.expected_clients == 5


def test_a_warm_restart_carries_the_last_minute_over_and_a_later_sync_only_adds(clock):
    arithmetic = Preservation(RegistryRules(), clock.now)
    restarted = clock.advance(5 * SEC)
    arithmetic.restore(10, 20, restarted)
    assert (arithmetic.expected_clients, arithmetic.renews_threshold, arithmetic.start_ts) == (
        10,
        17,
        restarted,
    )
    assert arithmetic.lease_expiration_enabled(restarted), "20 renewals carried over, > 17"
    arithmetic.open_for_traffic(12, restarted + SEC, restored=True)
    assert arithmetic.expected_clients == 12 and arithmetic.start_ts == restarted
    assert arithmetic.renews_last_minute(restarted + 2 * SEC) == 20, "the measurement is kept"
    arithmetic.open_for_traffic(3, restarted + SEC, restored=True)
    assert arithmetic.expected_clients == 12, "fewer from peers lowers nothing"
    assert arithmetic.renews_last_minute(restarted + MIN) == 0, "the first full minute replaces it"
