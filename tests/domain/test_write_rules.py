"""Unit tests of what a write may store (registry/domain/write_rules.py): Eureka's status rules and the
limits on clients, without a Registry. That a refused write changes nothing is in test_core.py."""

from __future__ import annotations

import pytest

from registry.domain import constants as c
from registry.domain.config import RegistryRules
from registry.domain.leases import Lease
from registry.domain.write_rules import (
    LimitExceeded,
    RegistryFull,
    WriteLimits,
    copy_was_cancelled,
    resolve_status,
)
from tests.domain.test_core import MIN, T0, inst


@pytest.mark.parametrize(
    ("own", "override", "existing", "replication", "expected"),
    [
        (c.DOWN, c.OUT_OF_SERVICE, None, False, c.DOWN),
        (c.STARTING, c.OUT_OF_SERVICE, None, False, c.STARTING),
        (c.UNKNOWN, c.UP, None, False, c.UNKNOWN),
        (c.UP, c.OUT_OF_SERVICE, None, False, c.OUT_OF_SERVICE),
        (c.UP, None, c.OUT_OF_SERVICE, False, c.OUT_OF_SERVICE),
        (c.OUT_OF_SERVICE, None, c.UP, False, c.UP),
        (c.UP, None, c.OUT_OF_SERVICE, True, c.UP),
        (c.UP, None, c.DOWN, False, c.UP),
        (c.UP, None, None, False, c.UP),
    ],
)
def test_override_rules_apply_first_match_wins(own, override, existing, replication, expected):
    lease = Lease(inst(status=existing), 90_000, T0) if existing else None
    assert resolve_status(inst(status=own), lease, override, replication) == expected


@pytest.mark.parametrize(
    ("last_dirty", "last_updated", "cancelled"),
    [
        (T0, T0, True),  # the very copy the peer cancelled
        (T0 - 1, T0 - 1, True),  # an older one
        (T0 + 1, T0, False),  # a new client process registered since
        (T0, T0 + 1, False),  # re-registered here after the cancel, with the same dirty timestamp
    ],
)
def test_a_copy_was_cancelled_unless_registered_again_since(last_dirty, last_updated, cancelled):
    assert copy_was_cancelled(last_dirty, last_updated, T0, T0) is cancelled


def test_metadata_is_held_to_its_key_count_and_bytes():
    limits = WriteLimits(RegistryRules(max_metadata_keys=2, max_metadata_bytes=10))
    limits.check_metadata({"a": "1", "b": "1234567"})  # 2 keys, 10 bytes: at the limits
    with pytest.raises(LimitExceeded, match="3 keys, at most 2"):
        limits.check_metadata({"a": "1", "b": "2", "c": "3"})
    with pytest.raises(LimitExceeded, match="11 bytes of keys and values, at most 10"):
        limits.check_metadata({"é": "123456789"})  # é is 2 bytes of UTF-8
    WriteLimits(RegistryRules(max_metadata_keys=0, max_metadata_bytes=0)).check_metadata({"k": "v" * 99_999})


def test_a_full_registry_refuses_new_instances_but_not_re_registrations():
    limits = WriteLimits(RegistryRules(max_instances=2))
    limits.check_room(inst(n=3), 1, registered=False)
    limits.check_room(inst(n=1), 2, registered=True)
    with pytest.raises(RegistryFull, match="maximum of 2 instances: ORDERS/host3:orders:8080"):
        limits.check_room(inst(n=3), 2, registered=False)
    WriteLimits(RegistryRules(max_instances=0)).check_room(inst(n=3), 10**6, registered=False)


def test_a_record_over_its_size_limit_is_named_with_its_size():
    small = inst()
    big = inst(metadata={"k": "v" * 2_000})
    limits = WriteLimits(RegistryRules(max_instance_bytes=1_000))
    assert limits.too_large(small) is None
    assert limits.too_large(big) is not None and "at most 1000 are allowed" in limits.too_large(big)
    assert WriteLimits(RegistryRules(max_instance_bytes=0)).too_large(big) is None


def test_dirty_timestamps_and_lease_times_are_lowered_to_the_bounds_and_others_pass_unchanged():
    limits = WriteLimits(RegistryRules(max_dirty_ahead_ms=5 * MIN, max_lease_duration_secs=600))
    assert limits.latest_dirty(T0) == T0 + 5 * MIN
    within = inst(dirty=T0 + 5 * MIN, duration=600, renewal_interval_secs=600)
    assert limits.within_bounds(within, T0) is within
    lowered = limits.within_bounds(inst(dirty=2**63 - 1, duration=86_400, renewal_interval_secs=7_200), T0)
    assert (lowered.last_dirty_timestamp, lowered.duration_secs, lowered.renewal_interval_secs) == (
        T0 + 5 * MIN,
        600,
        600,
    )
