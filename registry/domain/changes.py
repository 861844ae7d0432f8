"""The change log: every change to the lease map, numbered, kept for a retention window. Plain Python.

The registry appends one ``Change`` per register, cancel, eviction, status change and metadata change,
under its lock (so the numbering is the order the map saw them), whether the write came from a
client, a peer, an operator or a job. Readers — the change feed's HTTP views, webhook delivery, the
Redis publisher — ask for what came after an id they already have (``since``), or subscribe to be
told that something came (``subscribe``: called under the registry lock, so it must be cheap).

Ids grow across restarts too: the first id of a node is its start time in milliseconds times 1,000,
so an id a reader kept from before a restart is older than every id after it and is answered
"too old" rather than matched to an unrelated change (unless a warm restart brought the log back).

A change that repeats its instance's previous change — the same action, statuses and origin: a client
re-registering in a loop — replaces it: the previous one leaves the log, the new one comes last with
its new id, as the delta keeps only an instance's latest change. A reader that had not read the
previous one reads the new one instead, and one that had reads the new one too: none misses that the
instance registered again, none gets the same news a thousand times over, and a loop of
re-registrations costs the log one entry per instance, not one per write for the whole retention
window.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

REGISTERED = "REGISTERED"
CANCELLED = "CANCELLED"
EVICTED = "EVICTED"
STATUS_CHANGED = "STATUS_CHANGED"
METADATA_CHANGED = "METADATA_CHANGED"
ACTIONS = (REGISTERED, CANCELLED, EVICTED, STATUS_CHANGED, METADATA_CHANGED)

# Ids per millisecond of start time: a node would need a thousand changes a millisecond since its
# start to reach the first id of a node started a millisecond later.
IDS_PER_MS = 1_000
# Upper bound on entries whatever the retention window (10,000 instances re-registering at once
# stay well inside it); the oldest go first, and a reader behind them is answered "too old".
DEFAULT_CAPACITY = 200_000


@dataclass(frozen=True, slots=True)
class Change:
    id: int
    timestamp: int  # epoch ms, the registry's clock
    app: str
    instance_id: str
    action: str
    old_status: str | None  # None: the instance was not there before (REGISTERED of a new one)
    new_status: str | None  # None: the instance is gone (CANCELLED, EVICTED)
    overridden_status: str | None = None
    replicated: bool = False  # arrived from a peer rather than from the instance or an operator

    def as_dict(self) -> dict:
        """The fields by name (as a snapshot saves them); written out, far faster than asdict."""
        return {
            "id": self.id,
            "timestamp": self.timestamp,
            "app": self.app,
            "instance_id": self.instance_id,
            "action": self.action,
            "old_status": self.old_status,
            "new_status": self.new_status,
            "overridden_status": self.overridden_status,
            "replicated": self.replicated,
        }

    def as_json(self) -> dict:
        """The change as the feed and webhooks show it (Eureka's camelCase names)."""
        return {
            "id": self.id,
            "timestamp": self.timestamp,
            "app": self.app,
            "instanceId": self.instance_id,
            "action": self.action,
            "oldStatus": self.old_status,
            "newStatus": self.new_status,
            "overriddenStatus": self.overridden_status,
            "replicated": self.replicated,
        }


class TooOld(Exception):
    """Changes after the id asked for have left the log: the reader must fetch the registry
    (``GET /eureka/apps``) and follow on from ``last_id``."""

    def __init__(self, asked: int, oldest_id: int | None, last_id: int):
        super().__init__(f"change {asked} is no longer kept")
        self.asked, self.oldest_id, self.last_id = asked, oldest_id, last_id


Listener = Callable[[Change], None]


class ChangeLog:
    """The numbered changes of the retention window, oldest first, with an index by app.

    A change that repeats its instance's previous change (``repeats``) replaces it: the previous one
    is marked superseded (``_superseded``), readers skip it, and it leaves the deques when they are
    compacted (once superseded entries are half of them) or when it reaches the front. Removing it at
    once would take a pass over a deque."""

    def __init__(self, start_ms: int, retention_ms: int, capacity: int = DEFAULT_CAPACITY):
        self.retention_ms = retention_ms
        self.capacity = capacity
        self._entries: deque[Change] = deque()
        # The same entries by upper-cased app name: a feed reader following one app reads that app's
        # changes only, instead of scanning up to ``capacity`` others under the registry lock.
        self._by_app: dict[str, deque[Change]] = {}
        # Each instance id's newest entry, and the ids of the entries a repeat superseded.
        self._newest: dict[str, Change] = {}
        self._superseded: set[int] = set()
        self._ids = itertools.count(start_ms * IDS_PER_MS + 1)
        # The id before the first this log will hand out, or the newest one handed out.
        self.last_id = start_ms * IDS_PER_MS
        # Everything up to this id has left the log (retention, capacity): asking for it is too old.
        self._dropped_through = self.last_id
        self._listeners: list[Listener] = []

    # ------------------------------------------------------------------ writing (registry lock)

    def append(
        self,
        now: int,
        app: str,
        instance_id: str,
        action: str,
        old_status: str | None,
        new_status: str | None,
        overridden_status: str | None = None,
        replicated: bool = False,
    ) -> Change:
        change = Change(
            next(self._ids),
            now,
            app,
            instance_id,
            action,
            old_status,
            new_status,
            overridden_status,
            replicated,
        )
        self._keep(change)
        self.last_id = change.id
        for listener in self._listeners:
            listener(change)
        return change

    def _keep(self, change: Change) -> None:
        """Add ``change`` last, superseding the previous change of its instance if it repeats it."""
        previous = self._newest.get(change.instance_id)
        if previous is not None and repeats(change, previous):
            self._superseded.add(previous.id)
            if len(self._superseded) * 2 > len(self._entries):
                self._compact()
        if len(self._entries) >= self.capacity:
            self._drop_oldest()
        self._entries.append(change)
        key = change.app.upper()
        kept = self._by_app.get(key)
        if kept is None:
            kept = self._by_app[key] = deque()
        kept.append(change)
        self._newest[change.instance_id] = change
        self._trim_front()

    def _trim_front(self) -> None:
        """Superseded entries at the front go at once (in a loop the oldest entry is often the one a
        repeat superseded): the oldest entry kept is always one a reader reads (``oldest_id``)."""
        entries, superseded = self._entries, self._superseded
        while entries and entries[0].id in superseded:
            self._drop_oldest()

    def _drop_oldest(self) -> Change:
        """Take the oldest entry out of the log (retention, capacity)."""
        oldest = self._entries.popleft()
        key = oldest.app.upper()
        kept = self._by_app[key]
        kept.popleft()  # the oldest entry of the log is the oldest of its app
        if not kept:
            del self._by_app[key]
        if oldest.id in self._superseded:
            # A later entry says the same: nothing a reader could miss.
            self._superseded.discard(oldest.id)
        else:
            self._dropped_through = oldest.id
            if self._newest.get(oldest.instance_id) is oldest:
                del self._newest[oldest.instance_id]
        return oldest

    def _compact(self) -> None:
        """The deques without their superseded entries (a pass over each: as many appends came
        since the last one, so it costs each append a constant)."""
        superseded = self._superseded
        self._entries = deque(change for change in self._entries if change.id not in superseded)
        for key, kept in list(self._by_app.items()):
            remaining = deque(change for change in kept if change.id not in superseded)
            if remaining:
                self._by_app[key] = remaining
            else:
                del self._by_app[key]
        superseded.clear()

    def prune(self, now: int) -> int:
        """Drop entries past the retention window; returns how many."""
        dropped = 0
        entries = self._entries
        while entries and now - entries[0].timestamp > self.retention_ms:
            self._drop_oldest()
            dropped += 1
        self._trim_front()
        return dropped

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(change)`` for each new change (under the registry lock: no I/O, no waiting).
        Returns the function that unsubscribes it."""
        self._listeners = [*self._listeners, listener]

        def unsubscribe() -> None:
            self._listeners = [entry for entry in self._listeners if entry is not listener]

        return unsubscribe

    # ----------------------------------------------------------------------------- reading

    def since(
        self,
        after_id: int,
        limit: int,
        apps: Iterable[str] | None = None,
        actions: Iterable[str] | None = None,
    ) -> list[Change]:
        """Up to ``limit`` changes with ids above ``after_id``, oldest first, filtered by app and action.
        Raises TooOld when changes after ``after_id`` have already left the log."""
        if after_id < self._dropped_through:
            raise TooOld(after_id, self.oldest_id(), self.last_id)
        wanted_actions = set(actions) if actions else None
        if apps:
            # Each wanted app's own changes, merged back into id order: the cost follows the apps
            # asked for, not the whole log.
            wanted_apps = {app.upper() for app in apps}
            tails = [self._tail_after(after_id, self._by_app.get(app, ())) for app in wanted_apps]
            candidates = heapq.merge(*tails, key=_change_id) if len(tails) > 1 else tails[0]
        else:
            candidates = self._tail_after(after_id, self._entries)
        superseded = self._superseded
        found: list[Change] = []
        for change in candidates:
            if change.id in superseded:
                continue
            if wanted_actions is not None and change.action not in wanted_actions:
                continue
            found.append(change)
            if len(found) >= limit:
                break
        return found

    @staticmethod
    def _tail_after(after_id: int, entries: deque[Change] | tuple) -> Iterable[Change]:
        if not entries or after_id >= entries[-1].id:
            return ()
        # Ids grow along the log (with one gap after a warm restart): a binary search finds the first.
        low, high = 0, len(entries)
        while low < high:
            middle = (low + high) // 2
            if entries[middle].id <= after_id:
                low = middle + 1
            else:
                high = middle
        return itertools.islice(entries, low, None)

    def oldest_id(self) -> int | None:
        # Never a superseded entry (``_trim_front``).
        return self._entries[0].id if self._entries else None

    def __len__(self) -> int:
        return len(self._entries) - len(self._superseded)

    # ----------------------------------------------------------------- warm restart

    def copy(self) -> tuple[int, list[Change]]:
        """The newest id and the kept entries: a list of references (entries are immutable), cheap
        enough to take under the registry lock; ``exported`` turns it into saved form afterwards."""
        superseded = self._superseded
        return self.last_id, [change for change in self._entries if change.id not in superseded]

    def export(self) -> dict:
        return exported(*self.copy())

    def restore(self, state: dict) -> None:
        """Take the log of a previous run of this node (warm restart): its entries, and ids going on
        from its last one when that is above this log's own start."""
        entries = [Change(**entry) for entry in state.get("entries", ())]
        last_id = int(state.get("last_id", 0))
        if entries and last_id >= entries[-1].id:
            self._entries.clear()
            self._by_app.clear()
            self._newest.clear()
            self._superseded.clear()
            self._dropped_through = entries[0].id - 1
            for change in entries:
                self._keep(change)
        if last_id > self.last_id:
            self.last_id = last_id
            self._ids = itertools.count(last_id + 1)
            if not entries:
                self._dropped_through = last_id


def _change_id(change: Change) -> int:
    return change.id


def repeats(change: Change, previous: Change) -> bool:
    """Whether ``change`` tells a reader what ``previous``, its instance's previous change, told."""
    return (
        change.action == previous.action
        and change.old_status == previous.old_status
        and change.new_status == previous.new_status
        and change.overridden_status == previous.overridden_status
        and change.replicated == previous.replicated
        and change.app == previous.app
    )


def exported(last_id: int, entries: Iterable[Change]) -> dict:
    """A log as a snapshot saves it (``ChangeLog.restore`` reads it back)."""
    return {"last_id": last_id, "entries": [change.as_dict() for change in entries]}
