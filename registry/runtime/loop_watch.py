"""Notices when the serving event loop is held, and says what held it. Plain Python, no Django.

Under gevent one thread serves every request, and nothing preempts a greenlet that computes: while
one does, every heartbeat waits. Request latencies show that a stall happened, not what caused it, and
a profiler attached for the purpose rarely catches a stall that comes once in a few runs. So the node
watches itself:

- a greenlet on the loop *beats* every ``interval_s`` (a quarter of the threshold);
- a native thread (not a greenlet: it has to run while the loop is held) *looks* as often, and while
  the next beat is more than ``threshold_s`` late it samples the serving thread's stack — the code
  that holds the loop;
- the first beat after a stall reports it (``Stall``): how late it came, the process's CPU and
  system time, minor and major page faults and involuntary context switches over that time (CPU
  close to the duration: the process computed, in our code or in the kernel for it; CPU far below
  it: the process was not running or waited, e.g. the machine was busy or memory was paged in), the
  watcher's longest gap, and the stacks sampled.

A stack sample costs the watcher little, and nothing is sampled while the loop beats.
"""

from __future__ import annotations

import resource
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

# Heartbeats are short and a paced payload build gives the loop a turn every 5 ms
# (registry/cache/pacing.py): a loop not turning for 100 ms is held by something that should not.
THRESHOLD_MS = 100
# Samples kept per stall: at one per interval, a one-second stall fills this.
MAX_SAMPLES = 50
# Frames kept per sample, innermost first: enough to name the job or view and what it called.
STACK_DEPTH = 14


@dataclass(frozen=True)
class Usage:
    """The process's resource use at one moment (``resource.getrusage``)."""

    cpu_s: float
    system_cpu_s: float
    minor_faults: int
    major_faults: int
    involuntary_switches: int


def process_usage() -> Usage:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return Usage(
        cpu_s=usage.ru_utime + usage.ru_stime,
        system_cpu_s=usage.ru_stime,
        minor_faults=usage.ru_minflt,
        major_faults=usage.ru_majflt,
        involuntary_switches=usage.ru_nivcsw,
    )


@dataclass
class Stall:
    """One time the loop's beat came more than the threshold late."""

    # How late the beat came: how long the loop was held beyond the beat's own sleep.
    held_s: float
    # Over the time from the beat before to this one (the beat's own sleep included). System time and
    # minor faults high: the kernel's work for us (fresh memory zeroed and mapped, pages compacted).
    cpu_s: float
    system_cpu_s: float
    minor_faults: int
    major_faults: int
    involuntary_switches: int
    # The watcher's longest gap between two looks during the stall: close to the stall itself when the
    # watcher could not run either (the whole process stopped, or C code held the GIL).
    watcher_gap_s: float
    samples: list[tuple[str, ...]] = field(default_factory=list)

    def commonest_stack(self) -> tuple[tuple[str, ...], int]:
        """The stack sampled most often and how many times (``((), 0)`` with no sample)."""
        if not self.samples:
            return (), 0
        return Counter(self.samples).most_common(1)[0]

    def describe(self) -> str:
        """One log line: the numbers, then the commonest stack, innermost frame first."""
        stack, count = self.commonest_stack()
        where = " <- ".join(stack) if stack else "no sample (the watcher did not run during the stall)"
        return (
            f"event loop held: its beat came {self.held_s * 1000:.0f} ms late; "
            f"process CPU {self.cpu_s * 1000:.0f} ms (system {self.system_cpu_s * 1000:.0f} ms), "
            f"{self.minor_faults} minor and {self.major_faults} major page faults, "
            f"{self.involuntary_switches} involuntary context "
            f"switches, watcher's longest gap {self.watcher_gap_s * 1000:.0f} ms; "
            f"{count} of {len(self.samples)} samples in: {where}"
        )


def frame_stack(frame, depth: int = STACK_DEPTH) -> tuple[str, ...]:
    """``file:line function`` for ``frame`` and its callers, innermost first, paths shortened."""
    stack = []
    while frame is not None and len(stack) < depth:
        code = frame.f_code
        stack.append(f"{_short_path(code.co_filename)}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    return tuple(stack)


def _short_path(path: str) -> str:
    # Installed packages by their package path, the project's files relative to where it runs.
    marker = "site-packages/"
    at = path.rfind(marker)
    if at >= 0:
        return path[at + len(marker) :]
    for prefix in sys.path:
        if prefix and path.startswith(prefix + "/"):
            return path[len(prefix) + 1 :]
    return path


class LoopWatch:
    """The bookkeeping of the watch: ``beat`` runs on the loop every ``interval_s``, ``look`` in the
    watcher thread as often.

    Both run under the GIL and exchange plain attributes; a sample that lands as a stall is being
    reported goes with that stall or is dropped, either of which is fine.
    """

    def __init__(
        self,
        threshold_s: float = THRESHOLD_MS / 1000,
        clock: Callable[[], float] = time.monotonic,
        usage: Callable[[], Usage] = process_usage,
        max_samples: int = MAX_SAMPLES,
    ):
        self.threshold_s = threshold_s
        self.interval_s = threshold_s / 4
        self._clock = clock
        self._usage = usage
        self._max_samples = max_samples
        self._last_beat = clock()
        self._usage_at_beat = usage()
        self._last_look: float | None = None
        self._watcher_gap = 0.0
        self._samples: list[tuple[str, ...]] = []
        # Totals, for the metrics.
        self.stalls = 0
        self.held_s_total = 0.0
        self.longest_s = 0.0

    def beat(self) -> Stall | None:
        """The loop had a turn; returns the stall that this turn ends, if there was one."""
        now = self._clock()
        held = now - self._last_beat - self.interval_s
        usage = self._usage()
        stall = None
        if held >= self.threshold_s:
            before = self._usage_at_beat
            samples, self._samples = self._samples, []
            stall = Stall(
                held_s=held,
                cpu_s=usage.cpu_s - before.cpu_s,
                system_cpu_s=usage.system_cpu_s - before.system_cpu_s,
                minor_faults=usage.minor_faults - before.minor_faults,
                major_faults=usage.major_faults - before.major_faults,
                involuntary_switches=usage.involuntary_switches - before.involuntary_switches,
                # Up to now: a watcher stopped with the loop has not looked since, whichever runs first.
                watcher_gap_s=max(self._watcher_gap, now - (self._last_look or now)),
                samples=samples,
            )
            self.stalls += 1
            self.held_s_total += held
            self.longest_s = max(self.longest_s, held)
        elif self._samples:
            # Samples from a look that raced a beat just under the threshold.
            self._samples = []
        self._watcher_gap = 0.0
        self._last_beat = now
        self._usage_at_beat = usage
        return stall

    def look(self, loop_stack: Callable[[], tuple[str, ...] | None]) -> None:
        """The watcher's turn: sample the loop's stack if the loop has not beaten for too long."""
        now = self._clock()
        if self._last_look is not None:
            self._watcher_gap = max(self._watcher_gap, now - self._last_look)
        self._last_look = now
        if (
            now - self._last_beat - self.interval_s < self.threshold_s
            or len(self._samples) >= self._max_samples
        ):
            return
        stack = loop_stack()
        if stack:
            self._samples.append(stack)


def start_gevent_watch(watch: LoopWatch, report: Callable[[Stall], None]) -> Callable[[], None]:
    """Run ``watch`` for the gevent loop of the calling thread: a beating greenlet there, a native
    watcher thread sampling this thread's stack. ``report`` is called on the loop with each stall.
    Returns a function that stops both."""
    import gevent
    from gevent.monkey import get_original

    start_thread, get_ident = get_original("_thread", ["start_new_thread", "get_ident"])
    native_sleep = get_original("time", "sleep")
    loop_thread = get_ident()
    running = [True]

    def loop_stack() -> tuple[str, ...] | None:
        frame = sys._current_frames().get(loop_thread)
        return frame_stack(frame) if frame is not None else None

    def watcher() -> None:
        while running[0]:
            native_sleep(watch.interval_s)
            watch.look(loop_stack)

    def beater() -> None:
        while running[0]:
            stall = watch.beat()
            if stall is not None:
                report(stall)
            gevent.sleep(watch.interval_s)

    watch.beat()
    greenlet = gevent.spawn(beater)
    start_thread(watcher, ())

    def stop() -> None:
        running[0] = False
        greenlet.kill(block=False)

    return stop
