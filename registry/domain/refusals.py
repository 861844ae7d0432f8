"""Refusals as log lines: at most one line per kind in each interval, saying how many there were.
Plain Python, no Django.

A client can make the node refuse something as often as it likes: a connection over a cap, a request
without credentials, a Host not in ``ALLOWED_HOSTS``, a request that is not HTTP. A line for each would
let it fill the disk and spend the node's CPU on writing them, so every such refusal is noted here and
only the first of each kind in an interval is written, with the number of refusals since that kind's
last line; the rest are counted for that next line (and for ``/metrics``, where each caller counts
them too). The kinds are the callers' own fixed names, never a value a client sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# The default interval: a flood of refusals becomes one line a minute per kind.
REFUSAL_LOG_INTERVAL_S = 60.0


class RefusalLines:
    """Which refusals get a log line: the first of each kind, then the first once ``interval_s`` has
    passed since that kind's last line."""

    def __init__(
        self, interval_s: float = REFUSAL_LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ):
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def note(self, kind: str) -> int:
        """Count one refusal of ``kind``. Returns 0 when no line is due, or how many refusals the line
        to write now stands for: this one and those held back since the kind's last line."""
        now = self.clock()
        with self._lock:
            count = self._held.get(kind, 0) + 1
            last = self._last.get(kind)
            if last is not None and now - last < self.interval_s:
                self._held[kind] = count
                return 0
            self._held[kind] = 0
            self._last[kind] = now
        return count


def since_last_line(count: int) -> str:
    """The words a line adds for the refusals it stands for beyond its own (``RefusalLines.note``)."""
    more = count - 1
    return f" ({more} more since the last such line)" if more > 0 else ""


def refusal_fields(kind: str, count: int) -> dict[str, object]:
    """A refusal line's ``extra`` (JSON logs' fields): its kind and how many refusals it stands for.
    ``registry.runtime.logs.RefusalLinesFilter`` lets a line carrying them pass: it was counted."""
    return {"event": "refusals", "kind": kind, "refusals": count}
