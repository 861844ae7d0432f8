"""The lease map itself: ``app -> {instance id -> Lease}``, with the number of instances and of each
status kept as leases come and go, so that neither the size nor the reconcile hashcode is a pass
over the map. Plain Python, no Django.

Not thread-safe: ``Registry`` owns one and calls it under its own lock. It decides nothing: which
lease is stored, and when, are the registry's write rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .instances import InstanceInfo
from .leases import Lease, LeaseView

# Leases a long scan looks at between two turns given to others (``ScanPacing``).
SCAN_STEP = 2_000


def _no_pause() -> None:
    pass


@dataclass(slots=True)
class ScanPacing:
    """How a long scan of the map (eviction, the delta's views, a snapshot's lease times) shares the
    event loop: ``pause`` is called between two pieces of ``step`` leases, with the registry's lock
    free, so that a server's event loop gets a turn (threads need none: the interpreter preempts
    them). The registry and its reads and saved state hold one; the node sets its pacer's tick."""

    pause: Callable[[], None] = _no_pause
    step: int = SCAN_STEP


def reconcile_hashcode(counts: Mapping[str, int]) -> str:
    """``STATUS_count_`` per status present, alphabetically (``Applications.getReconcileHashCode``)."""
    return "".join(f"{status}_{counts[status]}_" for status in sorted(counts) if counts[status] > 0)


def group_by_app(views: Iterable[LeaseView]) -> list[tuple[str, list[LeaseView]]]:
    grouped: dict[str, list[LeaseView]] = {}
    for view in views:
        grouped.setdefault(view.instance.app, []).append(view)
    return list(grouped.items())


class LeaseMap:
    """The leases by app, in the order the apps (and, within one, the ids) were first stored: the
    order every full fetch lists them in."""

    def __init__(self) -> None:
        self._apps: dict[str, dict[str, Lease]] = {}
        self._size = 0
        self._status_counts: Counter[str] = Counter()

    def __len__(self) -> int:
        return self._size

    def get(self, app: str, instance_id: str) -> Lease | None:
        return self._apps.get(app, {}).get(instance_id)

    def holds(self, app: str, instance_id: str) -> bool:
        return instance_id in self._apps.get(app, ())

    def put(self, lease: Lease) -> Lease | None:
        """Store the lease under its record's app and id; returns the lease it replaced, if any."""
        instance = lease.instance
        leases = self._apps.setdefault(instance.app, {})
        existing = leases.get(instance.instance_id)
        leases[instance.instance_id] = lease
        if existing is None:
            self._size += 1
        else:
            self._status_counts[existing.instance.status] -= 1
        self._status_counts[instance.status] += 1
        return existing

    def pop(self, app: str, instance_id: str) -> Lease | None:
        """Take the lease out (an app left without leases goes too); None when there is none."""
        leases = self._apps.get(app)
        lease = leases.pop(instance_id, None) if leases is not None else None
        if lease is None:
            return None
        if not leases:
            del self._apps[app]
        self._size -= 1
        self._status_counts[lease.instance.status] -= 1
        return lease

    def replace_record(self, lease: Lease, instance: InstanceInfo) -> None:
        """Give a stored lease a new record (of the same app and id), counting its status."""
        self._status_counts[lease.instance.status] -= 1
        self._status_counts[instance.status] += 1
        lease.instance = instance

    def hashcode(self) -> str:
        return reconcile_hashcode(self._status_counts)

    def status_counts(self) -> dict[str, int]:
        return {status: count for status, count in self._status_counts.items() if count > 0}

    def app_names(self) -> list[str]:
        return list(self._apps)

    def app_count(self) -> int:
        return len(self._apps)

    def leases_of(self, app: str) -> list[tuple[str, Lease]]:
        """A copy of the app's (id, lease) pairs."""
        return list(self._apps.get(app, {}).items())

    def listed(self) -> list[tuple[str, list[Lease]]]:
        """Every lease by app, as references (a copy of each app's list)."""
        return [(app, list(leases.values())) for app, leases in self._apps.items()]

    def records(self) -> list[tuple[str, list[InstanceInfo]]]:
        return [(app, [lease.instance for lease in leases.values()]) for app, leases in self._apps.items()]

    def views(self, eureka_timing: bool) -> list[tuple[str, list[LeaseView]]]:
        return [
            (app, [lease.view(eureka_timing) for lease in leases.values()])
            for app, leases in self._apps.items()
        ]

    def app_views(self, app: str, eureka_timing: bool) -> list[LeaseView]:
        return [lease.view(eureka_timing) for lease in self._apps.get(app, {}).values()]

    def vip_views(self, vip: str, secure: bool, eureka_timing: bool) -> list[LeaseView]:
        """The leases whose (secure) vip list holds ``vip`` exactly."""
        return [
            lease.view(eureka_timing)
            for leases in self._apps.values()
            for lease in leases.values()
            if vip in (lease.instance.secure_vips() if secure else lease.instance.vips())
        ]

    def find(self, instance_id: str) -> str | None:
        """The first app (in the map's order) holding the id."""
        for app, leases in self._apps.items():
            if instance_id in leases:
                return app
        return None
