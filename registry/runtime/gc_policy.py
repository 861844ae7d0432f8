"""Keeps Python's cyclic garbage collector from walking the lease map. Plain Python, no Django.

A full (generation 2) collection visits every object the collector tracks, several per lease, with the
event loop held, and churn (registrations, payload rebuilds) sets one off every few seconds. Leases live
for hours, so walking them finds nothing. So: collect the young generations (cheap; frees short-lived
cycles), then ``gc.freeze()`` what survived — the collector ignores frozen objects from then on, and
automatic full collections only walk what was created since. Frozen objects are still freed by reference
counting when dropped; only garbage *cycles* frozen meanwhile (our records hold none) wait for the full
collection this policy runs once per ``full_every_ms`` (default an hour).

When to freeze: at least every ``freeze_every_ms`` (60 s), and also as soon as the collector's old
generation holds more than ``bulk_objects`` unfrozen objects (checked at each run, every second): a
fleet registering or a first payload build adds hundreds of thousands at once, and left unfrozen
until the next minute, each automatic full collection meanwhile walks them all, and those come
often while a fleet registers.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

# Unfrozen objects in the old generation that make a freeze due at once: a full collection walks this
# many quickly, and counting them (one list of references) costs far less.
BULK_OBJECTS = 20_000
# How often the node runs the policy (its freeze_gc job): each run costs that count, or a freeze.
CHECK_INTERVAL_MS = 1_000


class GcPolicy:
    def __init__(
        self,
        full_every_ms: int,
        now: int,
        freeze_every_ms: int = 60_000,
        bulk_objects: int = BULK_OBJECTS,
        trim: Callable[[], bool] | None = None,
    ):
        self.full_every_ms = full_every_ms
        self.freeze_every_ms = freeze_every_ms
        self.bulk_objects = bulk_objects
        # After a collection, what it freed may go back to the system (registry/runtime/memory.py).
        self.trim = trim
        self._last_full = now
        self._last_freeze = now

    def run(self, now: int) -> dict:
        # (No gc.get_freeze_count() in the result: it walks every frozen object with the event loop
        # held.)
        if now - self._last_full >= self.full_every_ms:
            gc.unfreeze()
            collected = gc.collect()
            self._last_full = now
            kind = "full"
        elif now - self._last_freeze >= self.freeze_every_ms or self.unfrozen_old() > self.bulk_objects:
            collected = gc.collect(1)
            kind = "young"
        else:
            return {"collection": None, "collected": 0}
        gc.freeze()
        self._last_freeze = now
        result = {"collection": kind, "collected": collected}
        if self.trim is not None:
            started = time.perf_counter()
            result["trimmed"] = self.trim()
            result["trim_ms"] = round((time.perf_counter() - started) * 1000, 2)
        return result

    def run_at_start(self) -> None:
        """Once the application is loaded, before it serves: everything there is now stays."""
        gc.collect()
        gc.freeze()

    @staticmethod
    def unfrozen_old() -> int:
        """Objects in the collector's old generation that a full collection would walk now."""
        return len(gc.get_objects(generation=2))
