"""Instance records as the registry stores them. Plain Python, no Django.

Instances are immutable: every change builds a new record with ``dataclasses.replace``. A lease swaps
its record atomically, so a reader that copied a reference under the registry lock can render it later
without holding the lock and without seeing a half-applied change.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType

from . import constants as c

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class DataCenterInfo:
    name: str = "MyOwn"
    # Only an Amazon data center carries metadata; strict Jackson readers reject it on any other kind.
    metadata: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    @property
    def is_amazon(self) -> bool:
        return self.name == "Amazon"


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """One registered instance, in the shape of Netflix ``InstanceInfo``.

    ``instance_id`` always holds the *effective* id (explicit id, else Amazon instance-id, else host
    name), which is the key in the lease map, the ``{id}`` in URLs and the key of the override map.
    """

    instance_id: str
    app: str
    host_name: str
    ip_addr: str
    sid: str = c.DEFAULT_SID
    status: str = c.UP
    overridden_status: str = c.UNKNOWN
    port: int = c.DEFAULT_PORT
    port_enabled: bool = True
    secure_port: int = c.DEFAULT_SECURE_PORT
    secure_port_enabled: bool = False
    country_id: int = c.DEFAULT_COUNTRY_ID
    data_center_info: DataCenterInfo = field(default_factory=DataCenterInfo)
    renewal_interval_secs: int = c.DEFAULT_RENEWAL_INTERVAL_SECS
    duration_secs: int = c.DEFAULT_DURATION_SECS
    metadata: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    app_group_name: str | None = None
    home_page_url: str | None = None
    status_page_url: str | None = None
    health_check_url: str | None = None
    secure_health_check_url: str | None = None
    vip_address: str | None = None
    secure_vip_address: str | None = None
    is_coordinating_discovery_server: bool = False
    last_updated_timestamp: int = 0
    last_dirty_timestamp: int = 0
    action_type: str | None = None
    asg_name: str | None = None

    def evolve(self, **changes) -> InstanceInfo:
        return replace(self, **changes)

    def vips(self) -> list[str]:
        """VIP names as ``/vips/{vip}`` matches them: split on commas, no trimming, case kept."""
        return self.vip_address.split(",") if self.vip_address else []

    def secure_vips(self) -> list[str]:
        return self.secure_vip_address.split(",") if self.secure_vip_address else []


# The values a fleet repeats from record to record (an app's name, its VIPs, statuses, metadata:
# zones, versions, ports) are kept as one shared string each: a parsed body (JSON or XML) brings
# new strings for every value, and a large registry would hold tens of MB of equal copies.
# ``sys.intern`` lets go of a string no record holds any more. Host names, addresses and URLs
# differ per instance and are kept as they come. Every path that builds a record from outside
# (the codecs, a snapshot's restore) shares these fields; tests/domain/test_instances.py checks both.
SHARED_TEXT_FIELDS = (
    "app",
    "status",
    "overridden_status",
    "sid",
    "app_group_name",
    "vip_address",
    "secure_vip_address",
    "action_type",
    "asg_name",
)


def shared(text: str | None) -> str | None:
    """The one string kept for this value (None stays None)."""
    return sys.intern(text) if type(text) is str else text


def freeze(mapping: Mapping[str, str] | None) -> Mapping[str, str]:
    """A read-only copy, so a stored record's metadata cannot change behind the lock's back. Its keys
    and values are the shared strings (a fleet's metadata repeats: zones, versions, ports)."""
    if not mapping:
        return _EMPTY
    intern = sys.intern
    try:
        return MappingProxyType({intern(key): intern(value) for key, value in mapping.items()})
    except TypeError:  # a str subclass cannot be interned: kept as it is
        return MappingProxyType(dict(mapping))


# Data centers without metadata (every kind but Amazon): one object per kind for all records.
_PLAIN_DATA_CENTERS = {name: DataCenterInfo(name) for name in c.DATA_CENTER_NAMES}


def data_center_info(name: str, metadata: Mapping[str, str] | None = None) -> DataCenterInfo:
    """A record's data center; the shared object for a known kind without metadata."""
    if not metadata:
        plain = _PLAIN_DATA_CENTERS.get(name)
        if plain is not None:
            return plain
    return DataCenterInfo(name, freeze(metadata))


# Every text field of a record (the rest are numbers, flags and the two mappings).
TEXT_FIELDS = tuple(f.name for f in fields(InstanceInfo) if f.type in ("str", "str | None"))


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def record_bytes(instance: InstanceInfo) -> int:
    """The UTF-8 bytes of every text a record holds: its text fields, its metadata's keys and values,
    and its data center's name and metadata. What the record costs to keep and to serve grows with
    this (numbers, flags and the payload's own keys add about a kilobyte to every record), and it does
    not depend on the format asked for, so the limit on it (RegistryRules.max_instance_bytes) answers
    the same to JSON and XML clients. Cheap: no encoding of the record."""
    total = 0
    for name in TEXT_FIELDS:
        value = getattr(instance, name)
        if value:
            total += _utf8_len(value)
    data_center = instance.data_center_info
    total += _utf8_len(data_center.name)
    for mapping in (instance.metadata, data_center.metadata):
        for key, value in mapping.items():
            total += _utf8_len(key) + _utf8_len(value)
    return total
