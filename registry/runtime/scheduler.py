"""The embedded scheduler: one daemon thread that runs the periodic jobs in-process.

It only decides *when* a job runs; what a job does lives in ``jobs.py``. A job that raises is logged
and runs again at its next slot, so one bad run never stops the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass
class ScheduledJob:
    name: str
    interval_ms: int
    run: Callable[[int], object]
    next_due: int = 0
    runs: int = 0
    failures: int = 0


class EmbeddedScheduler:
    def __init__(self, jobs: list[ScheduledJob], clock: Callable[[], int], tick_ms: int = 100):
        self.jobs = jobs
        self._clock = clock
        self._tick_s = tick_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        now = self._clock()
        for job in self.jobs:
            job.next_due = now + job.interval_ms
        self._thread = threading.Thread(target=self._loop, name="eureka-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def run_due(self, now: int) -> None:
        for job in self.jobs:
            if now < job.next_due:
                continue
            # The next slot is on the job's own grid (no drift) and missed slots are skipped, not replayed.
            job.next_due += job.interval_ms * ((now - job.next_due) // job.interval_ms + 1)
            try:
                job.run(now)
                job.runs += 1
            except Exception:
                job.failures += 1
                logger.exception("periodic job %s failed", job.name)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_due(self._clock())
            time.sleep(self._tick_s)
