"""The job watchdog: the node runs a periodic job itself when Celery beat has left it overdue.

In production mode Celery beat says when each of the node's jobs runs. A job with no run for
``OVERDUE_INTERVALS`` of its intervals (counted from the node's start before its first run) is
overdue: beat or its worker is down, or cannot reach the node. The embedded scheduler then runs as
the watchdog (``Node.start_scheduler(watchdog=True)``): at each job's interval it runs the job only if
it is overdue, until beat runs it again. Each change is logged once, when the node takes a job over
and when beat has it back. ``/readyz`` and ``/metrics`` report the overdue jobs in either mode.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from registry.runtime.jobs import JobRecord

logger = logging.getLogger(__name__)

# A job that has not run for this many intervals is overdue: the node runs it itself.
OVERDUE_INTERVALS = 3


class WatchedNode(Protocol):
    """What the watchdog reads of a node (``registry/runtime/node.py``), and how it runs a job there."""

    started_at: int
    job_records: Mapping[str, JobRecord]

    def job_intervals(self) -> Mapping[str, int]: ...

    def run_job(self, name: str, now: int, source: str) -> object: ...


def overdue_jobs(node: WatchedNode, now: int) -> list[str]:
    """The node's jobs with no run for ``OVERDUE_INTERVALS`` of their intervals."""
    intervals = node.job_intervals()
    overdue = []
    for name, record in node.job_records.items():
        since = record.last_run if record.last_run is not None else node.started_at
        if now - since > OVERDUE_INTERVALS * intervals[name]:
            overdue.append(name)
    return overdue


class JobWatchdog:
    """The jobs a node runs itself because Celery beat left them overdue."""

    def __init__(self) -> None:
        self.running: set[str] = set()

    def run_if_overdue(self, node: WatchedNode, name: str, now: int) -> None:
        """The watchdog's turn for job ``name``: run it on the node if beat has left it overdue."""
        if name not in overdue_jobs(node, now):
            return
        if name not in self.running:
            self.running.add(name)
            logger.warning(
                "periodic job %s is overdue (is Celery beat running?): running it here until beat does",
                name,
                extra={"event": "job_overdue", "job": name},
            )
        node.run_job(name, now, "watchdog")

    def beat_ran(self, name: str) -> None:
        """Celery beat ran job ``name``: a job the node had taken over is beat's again."""
        if name in self.running:
            self.running.discard(name)
            logger.warning(
                "periodic job %s runs from Celery beat again", name, extra={"event": "job_back", "job": name}
            )
