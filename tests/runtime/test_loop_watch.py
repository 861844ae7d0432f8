"""The event loop's watch: a stall is noticed, sampled while it lasts, and reported once it ends.

Subject: registry/runtime/loop_watch.py. The bookkeeping runs on an injected clock and resource
usage; one test holds a real gevent loop (unpatched, in this process) to check the wiring.
"""

from __future__ import annotations

import sys
import time

import gevent
import pytest

from registry.runtime.loop_watch import LoopWatch, Stall, Usage, frame_stack, start_gevent_watch


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeUsage:
    def __init__(self) -> None:
        self.current = Usage(
            cpu_s=5.0, system_cpu_s=1.0, minor_faults=500, major_faults=10, involuntary_switches=100
        )

    def __call__(self) -> Usage:
        return self.current


def make_watch(max_samples: int = 50) -> tuple[LoopWatch, FakeClock, FakeUsage]:
    clock, usage = FakeClock(), FakeUsage()
    return LoopWatch(0.1, clock=clock, usage=usage, max_samples=max_samples), clock, usage


def stack_of(name: str):
    return lambda: (f"registry/jobs.py:10 {name}", "gevent/hub.py:5 run")


def unexpected_sample():
    raise AssertionError("the loop's stack was sampled while it beat on time")


def test_a_loop_that_beats_on_time_reports_nothing_and_is_never_sampled():
    watch, clock, _ = make_watch()
    for _ in range(20):
        clock.now += watch.interval_s
        watch.look(unexpected_sample)
        clock.now += 0.05  # late, but well under the threshold
        watch.look(unexpected_sample)
        assert watch.beat() is None
    assert (watch.stalls, watch.held_s_total, watch.longest_s) == (0, 0.0, 0.0)


def test_a_stall_is_sampled_while_it_lasts_and_reported_by_the_next_beat():
    watch, clock, usage = make_watch()
    # The loop is held: the watcher looks every interval; samples start once the beat is 100 ms late.
    looks = 0
    while clock.now - 1000.0 < watch.interval_s + 0.5:
        clock.now += watch.interval_s
        watch.look(stack_of("evict") if looks % 3 else stack_of("rebuild"))
        looks += 1
    usage.current = Usage(
        5.45, system_cpu_s=1.25, minor_faults=900, major_faults=12, involuntary_switches=103
    )
    clock.now = 1000.0 + watch.interval_s + 0.5

    stall = watch.beat()

    assert isinstance(stall, Stall)
    assert abs(stall.held_s - 0.5) < 1e-9
    assert abs(stall.cpu_s - 0.45) < 1e-9 and abs(stall.system_cpu_s - 0.25) < 1e-9
    assert stall.minor_faults == 400
    assert (stall.major_faults, stall.involuntary_switches) == (2, 3)
    assert abs(stall.watcher_gap_s - watch.interval_s) < 1e-9
    # Looks at 100 ms late and after: samples from the first look past the threshold to the last.
    assert 14 <= len(stall.samples) <= 17
    stack, count = stall.commonest_stack()
    assert stack[0] == "registry/jobs.py:10 evict"
    assert count == sum(1 for sample in stall.samples if sample == stack)
    assert (watch.stalls, watch.longest_s) == (1, stall.held_s)
    # The stall is over: the next beat on time reports nothing, and its samples were handed over.
    clock.now += watch.interval_s
    assert watch.beat() is None


def test_the_totals_add_up_over_stalls_and_keep_the_longest():
    watch, clock, _ = make_watch()
    for late in (0.2, 0.7, 0.3):
        clock.now += watch.interval_s + late
        assert watch.beat() is not None
    assert watch.stalls == 3
    assert abs(watch.held_s_total - 1.2) < 1e-9
    assert abs(watch.longest_s - 0.7) < 1e-9


def test_samples_per_stall_are_bounded():
    watch, clock, _ = make_watch(max_samples=5)
    for _ in range(200):
        clock.now += watch.interval_s
        watch.look(stack_of("encode"))
    stall = watch.beat()
    assert stall is not None and len(stall.samples) == 5


def test_a_watcher_that_could_not_run_either_shows_in_its_gap():
    """A stopped process (or C code holding the GIL) stops the watcher too: few samples, a long gap."""
    watch, clock, _ = make_watch()
    clock.now += watch.interval_s
    watch.look(unexpected_sample)
    clock.now += 0.9
    watch.look(stack_of("resume"))
    stall = watch.beat()
    assert stall is not None
    assert abs(stall.watcher_gap_s - 0.9) < 1e-9
    assert len(stall.samples) == 1


def test_the_description_names_the_numbers_and_the_commonest_stack():
    stall = Stall(
        held_s=0.812,
        cpu_s=0.79,
        system_cpu_s=0.31,
        minor_faults=24_000,
        major_faults=0,
        involuntary_switches=4,
        watcher_gap_s=0.03,
        samples=[("a.py:1 build", "b.py:2 sync"), ("a.py:1 build", "b.py:2 sync"), ("c.py:3 other",)],
    )
    line = stall.describe()
    assert "812 ms late" in line and "process CPU 790 ms (system 310 ms)" in line
    assert "24000 minor and 0 major page faults" in line
    assert "2 of 3 samples in: a.py:1 build <- b.py:2 sync" in line
    assert "no sample" in Stall(0.2, 0.0, 0.0, 0, 0, 0, 0.2).describe()


def test_a_frame_stack_is_innermost_first_and_bounded():
    def inner():
        return frame_stack(sys._getframe(), depth=2)

    def outer():
        return inner()

    stack = outer()
    assert len(stack) == 2
    assert stack[0].endswith(" inner") and stack[1].endswith(" outer")
    assert stack[0].startswith("tests/runtime/test_loop_watch.py:"), stack[0]


def _hold_the_loop(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


@pytest.mark.serial  # the CPU time it measures is the share of a core its process gets
def test_a_real_gevent_loop_held_by_a_greenlet_is_reported_with_that_greenlets_code():
    watch = LoopWatch(0.05)
    reported: list[Stall] = []
    stop = start_gevent_watch(watch, reported.append)
    try:
        gevent.sleep(0.2)
        assert reported == [], "no stall while the loop is free"
        gevent.spawn(_hold_the_loop, 0.4).join()
        gevent.sleep(0.2)
    finally:
        stop()
    assert len(reported) == 1, [stall.describe() for stall in reported]
    stall = reported[0]
    assert 0.3 <= stall.held_s < 1.0
    assert stall.cpu_s >= 0.3, "the loop was held by computing"
    stack, count = stall.commonest_stack()
    assert count >= 3 and stack[0].split(" ")[-1] == "_hold_the_loop", stall.describe()


def test_a_beat_that_resumes_before_the_watcher_counts_the_watchers_gap_up_to_the_beat():
    watch, clock, _ = make_watch()
    clock.now += watch.interval_s
    watch.look(unexpected_sample)
    clock.now += 0.6  # the whole process stopped; the loop resumes first
    stall = watch.beat()
    assert stall is not None and stall.samples == []
    assert abs(stall.watcher_gap_s - 0.6) < 1e-9
