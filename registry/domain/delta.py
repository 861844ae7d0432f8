"""The delta queue: the leases changed in the retention window, as ``GET apps/delta`` lists them.
Plain Python, no Django; time is passed in (ms).

Not thread-safe: the registry calls it under its own lock, except ``changed_views``, which reads the
lease times of what ``DeltaQueue.read`` listed after that lock, in steps.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .instances import InstanceInfo
from .leases import Lease, LeaseView, views_of

# What ``DeltaQueue.read`` lists per app whose part changed: the records (as of the read, which is what
# the hashcode counted) and the (sequence number, lease) entries, in the same order.
Listed = dict[str, tuple[list[InstanceInfo], list[tuple[int, Lease]]]]


@dataclass(frozen=True, slots=True)
class DeltaParts:
    """The delta by parts: every app with the version of its part, in order; instances of the apps
    asked for; the full-registry hashcode and the delta's version number."""

    outline: list[tuple[str, int]]
    changed: dict[str, list[LeaseView]]
    hashcode: str
    version: int


class DeltaQueue:
    """Eureka's recentlyChangedQueue, kept for the retention the registry's prune job gives
    (``prune``), one entry per instance: its latest change.

    The delta lists each instance once, as of its latest entry, grouped by app in the order the apps
    first appear, so an entry an instance's later change supersedes would never be read again: it
    leaves at once instead of at the end of the retention. (Eureka's queue keeps every entry until
    then: a client re-registering the same ids in a loop would make the node keep every record it
    sent for the whole retention window.) ``_queue`` keeps when each instance last changed, oldest first;
    ``_by_app`` keeps, per app, each instance's latest (sequence, lease) in sequence order, so a delta
    read needs no pass over the queue; ``_app_versions`` changes whenever an app's part of the delta
    does, so a payload builder can keep the rest.
    """

    def __init__(self) -> None:
        # (app, instance id) -> when its latest entry was appended, oldest first.
        self._queue: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._by_app: dict[str, dict[str, tuple[int, Lease]]] = {}
        self._app_versions: dict[str, int] = {}
        self._seq = itertools.count()
        self._versions = itertools.count(1)

    def __len__(self) -> int:
        """Instances in the delta (each once)."""
        return len(self._queue)

    def append(self, now: int, lease: Lease) -> None:
        """The lease changed at ``now`` (registered, modified or cancelled: its record says which)."""
        seq = next(self._seq)
        app, instance_id = lease.instance.app, lease.instance.instance_id
        key = (app, instance_id)
        self._queue[key] = now
        self._queue.move_to_end(key)
        entries = self._by_app.setdefault(app, {})
        entries.pop(instance_id, None)  # re-inserted last: the delta lists it where it last changed
        entries[instance_id] = (seq, lease)
        self._app_versions[app] = seq

    def latest(self, app: str, instance_id: str) -> Lease | None:
        """The id's lease as of its latest entry in the queue (a cancelled lease stays cancelled)."""
        entry = self._by_app.get(app, {}).get(instance_id)
        return entry[1] if entry is not None else None

    def prune(self, now: int, retention_ms: int) -> int:
        """Drop the instances whose latest change is older than ``retention_ms``; returns how many. An
        app whose part lost an instance gets a new version; an app left with none leaves the delta."""
        horizon = now - retention_ms
        queue = self._queue
        dropped = 0
        while queue:
            (app, instance_id), changed_at = next(iter(queue.items()))
            if changed_at >= horizon:
                break
            del queue[app, instance_id]
            entries = self._by_app[app]
            del entries[instance_id]
            if entries:
                self._app_versions[app] = next(self._seq)
            else:
                del self._by_app[app], self._app_versions[app]
            dropped += 1
        return dropped

    def read(self, known: Mapping[str, int]) -> tuple[list[tuple[str, int]], Listed, int]:
        """The outline (every app with its part's version, in delta order), what ``changed_views``
        needs of the apps whose version differs from ``known`` (app -> version), and a new version
        number for the delta as a whole.

        Two flat lists per app: a pair per lease would make a tuple per lease under the registry's
        lock, and the collections they set off would make its hold several times longer."""
        versions = self._app_versions
        outline = [(app, versions[app]) for app in self._app_order()]
        listed = {}
        for app, version in outline:
            if known.get(app) != version:
                entries = list(self._by_app[app].values())
                listed[app] = ([lease.instance for _, lease in entries], entries)
        return outline, listed, next(self._versions)

    def _app_order(self) -> list[str]:
        """Apps in the order they first appear in the delta: by their oldest latest entry."""
        return sorted(self._by_app, key=lambda app: next(iter(self._by_app[app].values()))[0])


def changed_views(
    listed: Listed, eureka_timing: bool, step: int, pause: Callable[[], None]
) -> dict[str, list[LeaseView]]:
    """The views of what ``DeltaQueue.read`` listed, with each lease's times as they are now (a lease
    renewed since shows that renewal, which is newer and as true) and the record listed beside it.
    ``pause()`` after every ``step`` leases, in slices, so that one application of many thousands
    also gives the event loop its turns."""
    changed = {}
    unpaused = 0
    for app, (records, entries) in listed.items():
        views = changed[app] = []
        for start in range(0, len(entries), step):
            end = start + step
            part = entries[start:end]
            views.extend(
                views_of(zip(records[start:end], (lease for _, lease in part), strict=True), eureka_timing)
            )
            unpaused += len(part)
            if unpaused >= step:
                pause()
                unpaused = 0
    return changed
