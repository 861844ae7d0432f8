"""The warm-restart format: how a node's lease map is saved and read back. Plain Python, no Django.

``SavedStateTransfer.export_parts`` lists the map under its lock and hands the lists to
``SavedParts.collect``; ``SavedStateTransfer.restore`` has ``SavedState.parse`` check a saved state
whole before it touches the map. Where the snapshot is kept and how it is encoded is
registry/runtime/snapshots.py.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields

from .changes import Change, ChangeLog, exported
from .instances import SHARED_TEXT_FIELDS, InstanceInfo, data_center_info, freeze, shared
from .leases import Lease

# The version of the saved shape. A snapshot of any other version is refused, never guessed at.
# Format 2 saves the records and the lease times as two lists (records change seldom, times at every
# renewal: the writer keeps the records' encoded form); format 1, written before, paired them and is
# still read.
SNAPSHOT_FORMAT = 2
READ_FORMATS = (1, SNAPSHOT_FORMAT)
# Each instance is saved as a list of its InstanceInfo fields in this order (named once, in the
# snapshot's header), then the lease's own fields below.
INSTANCE_FIELDS = tuple(f.name for f in fields(InstanceInfo))
LEASE_FIELDS = (
    "duration_ms",
    "registration_ts",
    "last_renewal_ts",
    "renewed",
    "eviction_ts",
    "service_up_ts",
)
_instance_values = operator.attrgetter(*INSTANCE_FIELDS)
# One tuple per lease, in LEASE_FIELDS order, without a Python-level call per field.
_lease_times = operator.attrgetter(*LEASE_FIELDS)
_DATA_CENTER = INSTANCE_FIELDS.index("data_center_info")
_METADATA = INSTANCE_FIELDS.index("metadata")
_TEXT_FIELDS = tuple(
    INSTANCE_FIELDS.index(name)
    for name in ("instance_id", "app", "host_name", "ip_addr", "status", "overridden_status")
)
# Kept as shared strings, as a decoded registration keeps them (registry/domain/instances.py, ``shared``).
_SHARED_FIELDS = tuple(INSTANCE_FIELDS.index(name) for name in SHARED_TEXT_FIELDS)
_HOST_NAME = INSTANCE_FIELDS.index("host_name")
_IP_ADDR = INSTANCE_FIELDS.index("ip_addr")


class BadSnapshot(ValueError):
    """A saved state ``SavedStateTransfer.restore`` refuses: another format, too old, or not the shape
    it writes."""


@dataclass(frozen=True, slots=True)
class Restored:
    """What a warm restart brought back (the console and /readyz say so)."""

    instances: int
    saved_at: int
    restored_at: int
    # Leases of the snapshot already expired when it was restored: dropped (``SavedStateTransfer.restore``).
    expired: int = 0

    @property
    def age_ms(self) -> int:
        return self.restored_at - self.saved_at


def saved_header(
    now: int, overrides: list[list], expected_clients: int, renews_threshold: int, renews_last_minute: int
) -> dict:
    """A snapshot's plain-data part: the format, the field names, the overrides
    (``[instance id, status, last access, actor]``) and the self-preservation numbers."""
    return {
        "format": SNAPSHOT_FORMAT,
        "saved_at": now,
        "instance_fields": list(INSTANCE_FIELDS),
        "lease_fields": list(LEASE_FIELDS),
        "overrides": overrides,
        "expected_clients": expected_clients,
        "renews_threshold": renews_threshold,
        "renews_last_minute": renews_last_minute,
    }


@dataclass(frozen=True)
class SavedParts:
    """A snapshot's content as references (``SavedStateTransfer.export_parts``): ``header`` is plain data;
    ``records`` the instance records by app, ``lease_times`` their leases' ``LEASE_FIELDS`` in the
    same order; ``changes`` the change log's entries."""

    header: dict
    records: list[tuple[str, list[InstanceInfo]]]
    lease_times: list[tuple]
    last_change_id: int
    changes: list[Change]

    @classmethod
    def collect(
        cls,
        header: dict,
        listed: Sequence[tuple[str, list[Lease]]],
        last_change_id: int,
        changes: list[Change],
        step: int,
        pause: Callable[[], None],
    ) -> SavedParts:
        """The parts of leases listed (by app) under the registry's lock, whose records and times are
        read here, after it: ``pause()`` after every ``step`` leases of an app, so that one app of
        many thousands also gives the event loop its turns."""
        records = []
        lease_times: list[tuple] = []
        for app, leases in listed:
            records.append((app, [lease.instance for lease in leases]))
            for start in range(0, len(leases), step):
                lease_times.extend(map(_lease_times, leases[start : start + step]))
                pause()
        return cls(header, records, lease_times, last_change_id, changes)

    def as_state(self) -> dict:
        """The saved state as plain data (the snapshot writer writes the same JSON, in pieces)."""
        return {
            **self.header,
            "records": [instance_row(instance) for _, instances in self.records for instance in instances],
            "lease_times": [list(times) for times in self.lease_times],
            "changes": exported(self.last_change_id, self.changes),
        }


@dataclass(frozen=True)
class SavedState:
    """A saved state, parsed and checked whole (``parse``): what ``SavedStateTransfer.restore`` puts back."""

    leases: list[Lease]
    # (instance id, status, last access, actor)
    overrides: list[tuple[str, str, int, str]]
    saved_at: int
    expected_clients: int
    renews_last_minute: int
    # The change log's saved form, as ``ChangeLog.restore`` reads it (already checked by a scratch log).
    changes: Mapping

    @classmethod
    def parse(cls, state: Mapping, now: int, max_age_ms: int | None = None) -> SavedState:
        """The leases, overrides and numbers of a saved state, or ``BadSnapshot``: another format, a
        state older than ``max_age_ms`` at ``now``, or any part not of the shape written."""
        if not isinstance(state, Mapping):
            raise BadSnapshot(f"a snapshot is a JSON object, not {type(state).__name__}")
        if state.get("format") not in READ_FORMATS:
            raise BadSnapshot(f"snapshot format {state.get('format')!r}, this node reads {READ_FORMATS}")
        try:
            numbers = {
                name: _whole(state[name]) for name in ("saved_at", "expected_clients", "renews_last_minute")
            }
            age = now - numbers["saved_at"]
            if max_age_ms is not None and age > max_age_ms:
                raise BadSnapshot(f"the snapshot is {age} ms old, more than the {max_age_ms} ms allowed")
            instance_fields = list(state["instance_fields"])
            unknown = set(instance_fields) - set(INSTANCE_FIELDS)
            if unknown:
                raise BadSnapshot(f"unknown instance fields {sorted(unknown)}")
            if list(state["lease_fields"]) != list(LEASE_FIELDS):
                raise BadSnapshot(f"lease fields {state['lease_fields']!r}, expected {list(LEASE_FIELDS)}")
            if state["format"] == 1:
                saved_leases = state["leases"]
            else:
                saved_leases = zip(state["records"], state["lease_times"], strict=True)
            leases = [_parse_lease(instance_fields, values, times) for values, times in saved_leases]
            overrides = [_parse_override(entry) for entry in state["overrides"]]
            changes = state.get("changes", {})
            if not isinstance(changes, Mapping):
                raise ValueError("the change log is not an object")
            # The very parse the node's log will do, on a scratch log: a bad entry refuses it all here.
            ChangeLog(0, 1).restore(changes)
        except BadSnapshot:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadSnapshot(f"not a snapshot this node wrote: {type(exc).__name__}: {exc}") from exc
        return cls(leases, overrides, changes=changes, **numbers)


def instance_row(instance: InstanceInfo) -> list:
    """An instance record as a snapshot saves it: its fields' values in ``INSTANCE_FIELDS`` order."""
    values = list(_instance_values(instance))
    data_center = values[_DATA_CENTER]
    values[_DATA_CENTER] = [data_center.name, dict(data_center.metadata)]
    values[_METADATA] = dict(values[_METADATA])
    return values


def _saved_default(name: str) -> object:
    """An InstanceInfo field's default, as ``instance_row`` writes it; KeyError for a required one."""
    if name == "data_center_info":
        return ["MyOwn", {}]
    if name == "metadata":
        return {}
    field_ = next(f for f in fields(InstanceInfo) if f.name == name)
    if field_.default is MISSING:
        raise KeyError(f"the instance field {name!r} is missing")
    return field_.default


def _parse_lease(instance_fields: list[str], values: list, lease_values: list) -> Lease:
    if len(values) != len(instance_fields) or len(lease_values) != len(LEASE_FIELDS):
        raise ValueError("a lease with the wrong number of fields")
    if len(instance_fields) == len(INSTANCE_FIELDS) and instance_fields == list(INSTANCE_FIELDS):
        # The usual case (written by this version): positional, a third of the time of keywords.
        values = list(values)
    else:
        # Written with other fields: by name, and a field the snapshot lacks takes its default.
        record = dict(zip(instance_fields, values, strict=True))
        values = [record[name] if name in record else _saved_default(name) for name in INSTANCE_FIELDS]
    for index in _TEXT_FIELDS:
        _text(values[index])
    for index in _SHARED_FIELDS:
        values[index] = shared(values[index])
    if values[_IP_ADDR] == values[_HOST_NAME]:
        values[_IP_ADDR] = values[_HOST_NAME]
    name, metadata = values[_DATA_CENTER] or ("MyOwn", {})
    values[_DATA_CENTER] = data_center_info(_text(name), _text_map(metadata))
    values[_METADATA] = freeze(_text_map(values[_METADATA] or {}))
    instance = InstanceInfo(*values)
    duration_ms, registration_ts, last_renewal_ts, renewed, eviction_ts, service_up_ts = lease_values
    lease = Lease(instance, _whole(duration_ms), _whole(registration_ts), _whole(service_up_ts))
    lease.last_renewal_ts = _whole(last_renewal_ts)
    lease.renewed = bool(renewed)
    lease.eviction_ts = _whole(eviction_ts)
    return lease


def _parse_override(entry: list) -> tuple[str, str, int, str]:
    """``[instance id, status, last access, actor]`` (the actor came later: absent means none)."""
    instance_id, status, last_access, *rest = entry
    if len(rest) > 1:
        raise ValueError("an override entry with too many fields")
    return _text(instance_id), _text(status), _whole(last_access), _text(rest[0]) if rest else ""


def _whole(value: object) -> int:
    if type(value) is not int:
        raise ValueError(f"expected a whole number, got {value!r:.40}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {value!r:.40}")
    return value


def _text_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError(f"expected an object, got {value!r:.40}")
    return {_text(key): _text(item) for key, item in value.items()}
