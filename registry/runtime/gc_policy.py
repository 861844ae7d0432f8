"""Keeps Python's cyclic garbage collector from walking the lease map. Plain Python, no Django.

A full (generation 2) collection visits every object the collector tracks: with 10,000 leases some
100,000 of them, 20-30 ms with the event loop held, ten times that at 100,000 instances; and churn
(registrations, payload rebuilds) sets one off every few seconds. Leases live for hours, so walking
them finds nothing. So, every interval: collect the young generations (cheap; frees short-lived
cycles), then ``gc.freeze()`` what survived — the collector ignores frozen objects from then on, and
automatic full collections only walk what was created since. Frozen objects are still freed by
reference counting when dropped; only garbage *cycles* frozen meanwhile (our records hold none) wait
for the full collection this policy runs once per ``full_every_ms`` (default an hour).
"""

from __future__ import annotations

import gc


class GcPolicy:
    def __init__(self, full_every_ms: int, now: int):
        self.full_every_ms = full_every_ms
        self._last_full = now

    def run(self, now: int) -> dict:
        if now - self._last_full >= self.full_every_ms:
            gc.unfreeze()
            collected = gc.collect()
            self._last_full = now
            kind = "full"
        else:
            collected = gc.collect(1)
            kind = "young"
        gc.freeze()
        return {"collection": kind, "collected": collected, "frozen": gc.get_freeze_count()}
