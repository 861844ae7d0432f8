"""Embedded mode's driver: a loop in the registry process that hands due probes to a bounded pool.

Every ``dispatch_ms`` it takes in the registry's changes, claims the probes that are due (as many as
the pool has free slots) and starts them; each result is applied as it comes back. Instances fall at
their own offsets in their interval (``HealthChecker._phase``), so a round of the fleet is spread
over the interval instead of a burst. Nothing here runs on a request's path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from registry.domain.outbound_tls import OutboundTls
from registry.health.addresses import AddressPolicy
from registry.health.checker import HealthChecker, ProbeResult
from registry.health.probes import ProbePool

logger = logging.getLogger(__name__)

# Probes claimed per pass, in pools' worth: enough to keep the pool busy until the next pass, few
# enough that a claim does not wait long in line behind slow probes.
CLAIM_POOLS = 4
START_SLICE_MS = 20


class HealthCheckLoop:
    def __init__(
        self,
        checker: HealthChecker,
        clock: Callable[[], int],
        policy: AddressPolicy,
        concurrency: int = 50,
        dispatch_ms: int = 250,
        tls: OutboundTls | None = None,
    ):
        self.checker = checker
        self._clock = clock
        self._dispatch_ms = dispatch_ms
        self.pool = ProbePool(concurrency, policy, tls)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="eureka-health-checks", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.pool.shutdown()

    def dispatch(self, now: int) -> int:
        """One pass: refresh, claim what is due (a few pools' worth at most) and start it, waiting for
        free slots as it goes, so the pool refills as soon as a probe ends. Returns how many."""
        self.checker.refresh(now)
        # Probes due before the next pass too, each started at its own time: starts stay as evenly
        # spread as the instances' offsets, not bunched at each pass.
        targets = self.checker.claim_due(now, self.pool.concurrency * CLAIM_POOLS, ahead_ms=self._dispatch_ms)
        for target in sorted(targets, key=lambda target: target.due):
            wait_ms = target.due - self._clock()
            # Probes due within a few ms of each other start together: one wait per slice of the
            # pass, not one per probe (each wait is a timer and two switches of the event loop).
            if wait_ms > START_SLICE_MS:
                self._stop.wait(wait_ms / 1000)
            # Claimed targets are always started (a claim left unused would hold its instance back
            # until the claim expires); the wait ends when a probe ends or on stop.
            while not self.pool.wait_free(0.5) and not self._stop.is_set():
                pass
            self.pool.submit(target, self._apply)
        return len(targets)

    def _apply(self, result: ProbeResult) -> None:
        try:
            self.checker.apply(result, self._clock())
        except Exception:
            logger.exception("health check result for %s/%s not applied", result.app, result.instance_id)

    def _loop(self) -> None:
        limit = self.pool.concurrency * CLAIM_POOLS
        while not self._stop.is_set():
            now = self._clock()
            started = 0
            try:
                started = self.dispatch(now)
            except Exception:
                logger.exception("health check dispatch failed")
            if started < limit:
                # A pass waits for its last probe's time: the next one starts a period after this one.
                self._stop.wait(max(0, now + self._dispatch_ms - self._clock()) / 1000)
