"""A lease's renewal gaps (registry/domain/leases.py): what the instance page draws as stretches
without a heartbeat."""

from __future__ import annotations

from registry.domain.core import Registry, RegistryRules
from registry.domain.leases import GAPS_KEPT, Lease
from tests.domain.test_core import SEC, T0, inst


def lease(renewal_interval_secs=30) -> Lease:
    return Lease(inst(renewal_interval_secs=renewal_interval_secs), 90_000, T0)


def test_renewals_on_time_leave_no_gap():
    renewed = lease()
    for n in range(1, 10):
        renewed.renew(T0 + n * 30 * SEC)
    # One and a half intervals late is still on time.
    renewed.renew(T0 + 9 * 30 * SEC + 45 * SEC)
    assert renewed.gaps == ()


def test_a_late_renewal_is_a_gap_from_the_renewal_before():
    renewed = lease()
    renewed.renew(T0 + 30 * SEC)
    renewed.renew(T0 + 30 * SEC + 45 * SEC + 1)
    assert renewed.gaps == ((T0 + 30 * SEC, T0 + 75 * SEC + 1),)


def test_the_gap_follows_the_instances_own_interval():
    renewed = lease(renewal_interval_secs=5)
    assert renewed.gap_after_ms == 7_500
    renewed.renew(T0 + 8 * SEC)
    assert renewed.gaps == ((T0, T0 + 8 * SEC),)


def test_only_the_newest_gaps_are_kept():
    renewed = lease()
    at = T0
    for _ in range(GAPS_KEPT + 5):
        at += 60 * SEC
        renewed.renew(at)
    assert len(renewed.gaps) == GAPS_KEPT
    assert renewed.gaps[-1] == (at - 60 * SEC, at)


def test_a_late_registration_keeps_the_old_leases_gaps_and_adds_its_own():
    registry = Registry(RegistryRules(), T0)
    registry.register(inst(), T0)
    registry.renew("ORDERS", "host1:orders:8080", T0 + 60 * SEC)
    # The instance comes back by registering again, two minutes after its last renewal.
    registry.register(inst(dirty=T0 + 180 * SEC), T0 + 180 * SEC)
    gaps = registry.reads.renew_gaps("ORDERS", "host1:orders:8080")
    assert gaps.gaps == ((T0, T0 + 60 * SEC), (T0 + 60 * SEC, T0 + 180 * SEC))
    assert gaps.last_renewal_ts == T0 + 180 * SEC and gaps.gap_after_ms == 45_000
    assert registry.reads.renew_gaps("ORDERS", "nobody") is None
