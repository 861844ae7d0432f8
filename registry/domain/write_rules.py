"""What a write may store: Eureka's status rules and this node's limits on what clients send. Plain
Python, no Django; time is passed in (ms).

``Registry`` asks these before it changes anything, so a refused write leaves the map as it was. The
limits bound the node's memory and every fetch; with API accounts off anyone may send a write, a
"replicated" one too, so the bounds on stored timestamps and lease times hold for peers' copies
as well (a copy within them passes unchanged).
"""

from __future__ import annotations

from collections.abc import Mapping

from . import constants as c
from .config import RegistryRules
from .instances import InstanceInfo, record_bytes
from .leases import Lease


class LimitExceeded(ValueError):
    """A client's write the limits refuse (nothing was changed); the message says which limit."""


class RegistryFull(LimitExceeded):
    """A client's registration of a new instance while the map holds ``max_instances`` already."""


class RecordTooLarge(LimitExceeded):
    """A record over ``max_instance_bytes``, from a client or a peer (nothing was changed)."""


def resolve_status(
    instance: InstanceInfo, existing: Lease | None, override: str | None, is_replication: bool
) -> str:
    """Eureka's first-match-wins override rules (protocol reference 5.7.1).

    1. an instance reporting DOWN, STARTING or UNKNOWN keeps that status;
    2. an override recorded for the id wins;
    3. a client (not a peer) cannot flip an existing UP / OUT_OF_SERVICE lease by itself;
    4. otherwise the instance's own status.
    """
    status = instance.status
    if status not in (c.UP, c.OUT_OF_SERVICE):
        return status
    if override is not None:
        return override
    if not is_replication and existing is not None and existing.instance.status in (c.UP, c.OUT_OF_SERVICE):
        return existing.instance.status
    return status


def copy_was_cancelled(last_dirty: int, last_updated: int, cancel_dirty: int, cancelled_at: int) -> bool:
    """Whether a copy of an instance (its ``lastDirtyTimestamp`` and ``lastUpdatedTimestamp``) is the one
    a cancel (the cancelled record's dirty timestamp and the cancel's time) removed, or older: a copy
    re-registered since has a newer dirty timestamp (a new client process) or was written after the
    cancel (a client's re-registration on 404 keeps its dirty timestamp)."""
    return last_dirty <= cancel_dirty and last_updated <= cancelled_at


class WriteLimits:
    """The limits of ``RegistryRules`` (``max_instances``, ``max_metadata_keys``/``_bytes``,
    ``max_instance_bytes``, ``max_dirty_ahead_ms``, ``max_lease_duration_secs``); 0 turns a size limit off.

    The ``check_*`` methods raise ``LimitExceeded`` for a write refused whole; ``within_bounds`` and
    ``latest_dirty`` lower what would be stored instead, since a peer's copy or a clock far ahead is
    no reason to refuse an instance that exists.
    """

    def __init__(self, config: RegistryRules):
        self.config = config

    def check_metadata(self, metadata: Mapping[str, str]) -> None:
        """A client's metadata (a peer's is not refused: it accepted it under its own limits)."""
        cfg = self.config
        if cfg.max_metadata_keys and len(metadata) > cfg.max_metadata_keys:
            raise LimitExceeded(
                f"Too much metadata: {len(metadata)} keys, at most {cfg.max_metadata_keys} are allowed"
            )
        if cfg.max_metadata_bytes:
            size = sum(len(key.encode()) + len(value.encode()) for key, value in metadata.items())
            if size > cfg.max_metadata_bytes:
                raise LimitExceeded(
                    f"Too much metadata: {size} bytes of keys and values, at most "
                    f"{cfg.max_metadata_bytes} are allowed"
                )

    def check_room(self, instance: InstanceInfo, size: int, registered: bool) -> None:
        """A client's registration into a map of ``size`` instances; ``registered`` when the map holds
        the id already (a re-registration, which always has room)."""
        limit = self.config.max_instances
        if limit and size >= limit and not registered:
            raise RegistryFull(
                f"The registry holds its maximum of {limit} instances: {instance.app}/"
                f"{instance.instance_id} is not added (instances already registered still renew)"
            )

    def too_large(self, instance: InstanceInfo) -> str | None:
        """Why the record is over ``max_instance_bytes`` (None when it is not). The registry raises
        ``RecordTooLarge`` with it, for anyone's record: the size bounds memory and every fetch."""
        limit = self.config.max_instance_bytes
        if not limit:
            return None
        size = record_bytes(instance)
        if size <= limit:
            return None
        return (
            f"Instance record too large: {size} bytes of text in its fields and metadata, at most "
            f"{limit} are allowed"
        )

    def latest_dirty(self, now: int) -> int:
        """The latest dirty timestamp stored at ``now``: one further ahead comes from a clock far ahead
        of ours, and would win every comparison with the copies its owner sends later."""
        return now + self.config.max_dirty_ahead_ms

    def within_bounds(self, instance: InstanceInfo, now: int) -> InstanceInfo:
        """The record with its dirty timestamp and lease times lowered to the limits."""
        cfg = self.config
        changes = {}
        latest_dirty = self.latest_dirty(now)
        if instance.last_dirty_timestamp > latest_dirty:
            changes["last_dirty_timestamp"] = latest_dirty
        if instance.duration_secs > cfg.max_lease_duration_secs:
            changes["duration_secs"] = cfg.max_lease_duration_secs
        if instance.renewal_interval_secs > cfg.max_lease_duration_secs:
            changes["renewal_interval_secs"] = cfg.max_lease_duration_secs
        return instance.evolve(**changes) if changes else instance
