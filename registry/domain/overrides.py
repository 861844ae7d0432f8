"""The status override map: the status an operator, a peer or a registration set for an instance id,
kept apart from the lease (Eureka's ``overriddenInstanceStatusMap``). Plain Python, no Django; time
is passed in (ms).

An entry outlives its lease's records (a re-registration finds it and keeps the status) until the
id is cancelled or evicted, or until no write has read it for ``idle_expiry_ms`` (Eureka's map
expires entries after an idle hour): a write that reads it (``use``) keeps it alive, and the prune
job drops idle ones.

Not thread-safe: the registry calls it under its own lock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Override:
    """One id's entry. ``actor`` says who set it through a status call ("" for a client, a peer, or
    a registration carrying it): kept across a warm restart, so the health checker knows its own DOWN
    from an operator's."""

    status: str
    last_access: int
    actor: str = ""


class OverrideMap:
    """``instance id -> Override``."""

    def __init__(self, idle_expiry_ms: int):
        self.idle_expiry_ms = idle_expiry_ms
        self._entries: dict[str, Override] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, instance_id: str) -> bool:
        return instance_id in self._entries

    def use(self, instance_id: str, now: int) -> str | None:
        """The id's override as a write applies it: an entry idle too long is dropped instead (as
        Eureka's expiring map would have), any other one is kept alive."""
        entry = self._entries.get(instance_id)
        if entry is None:
            return None
        if now - entry.last_access > self.idle_expiry_ms:
            del self._entries[instance_id]
            return None
        entry.last_access = now
        return entry.status

    def status(self, instance_id: str) -> str | None:
        """The id's override, for a report: neither kept alive nor dropped by the look."""
        entry = self._entries.get(instance_id)
        return entry.status if entry is not None else None

    def actor(self, instance_id: str) -> str | None:
        """Who set the id's override (see ``Override.actor``); None when there is none."""
        entry = self._entries.get(instance_id)
        return entry.actor if entry is not None else None

    def set(self, instance_id: str, status: str, now: int, actor: str = "") -> None:
        self._entries[instance_id] = Override(status, now, actor)

    def set_default(self, instance_id: str, status: str, last_access: int, actor: str = "") -> None:
        """Record the override unless the id has one already (what is here is newer)."""
        self._entries.setdefault(instance_id, Override(status, last_access, actor))

    def remove(self, instance_id: str) -> str | None:
        """Drop the id's override; returns its status (None when there was none)."""
        entry = self._entries.pop(instance_id, None)
        return entry.status if entry is not None else None

    def statuses(self) -> dict[str, str]:
        return {instance_id: entry.status for instance_id, entry in self._entries.items()}

    def prune(self, now: int) -> int:
        """Drop the entries idle longer than ``idle_expiry_ms``; returns how many."""
        idle = [i for i, entry in self._entries.items() if now - entry.last_access > self.idle_expiry_ms]
        for instance_id in idle:
            del self._entries[instance_id]
        return len(idle)

    def rows(self) -> list[list]:
        """``[instance id, status, last access, actor]`` per entry, as a snapshot saves them."""
        return [
            [instance_id, entry.status, entry.last_access, entry.actor]
            for instance_id, entry in self._entries.items()
        ]
