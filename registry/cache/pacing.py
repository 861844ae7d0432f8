"""Long payload builds give the event loop a turn. Plain Python, no Django.

Under gevent every greenlet shares one thread, and nothing preempts a greenlet that computes: a build
that serializes a whole fleet (the first time after it registers or after its bytes expire) would
hold every heartbeat that arrives meanwhile. So builders
call ``PACER.tick()`` as they go (after each application, after each instance they serialize); once a
slice of ``slice_ms`` has passed since the loop last had a turn, the tick calls ``pause`` (under gevent,
``gevent_pause``: the loop polls its sockets and runs the greenlets that are ready, then the build goes
on). A build then costs the same
CPU, in slices, and heartbeats wait one slice at most instead of the whole build.

Without a pause (threads, tests, management commands) a tick only reads the clock: threads are
preempted by the interpreter anyway.

What the pauses let others run is not the build's own cost: ``paused_cpu()`` is the CPU time this
thread spent inside pauses, which the response cache subtracts when it times a build.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# A slice of a few milliseconds, several heartbeats' worth of CPU: a turn of the loop between slices
# serves those that arrived meanwhile, and a long build is paused only so often, each pause a greenlet
# switch there and back.
SLICE_MS = 5.0


class Pacer:
    def __init__(self, slice_ms: float = SLICE_MS, clock: Callable[[], float] = time.perf_counter):
        self.pause: Callable[[], None] | None = None
        self.slice_s = slice_ms / 1000
        self._clock = clock
        self._turn_at = clock()
        self._paused_cpu = 0.0
        self.pauses = 0

    def tick(self) -> None:
        """Called by a build between two pieces of work: pause if the current slice is used up."""
        if self.pause is None:
            return
        if self._clock() - self._turn_at < self.slice_s:
            return
        started = time.thread_time()
        self.pause()
        self._paused_cpu += time.thread_time() - started
        self.pauses += 1
        # Whoever resumes starts a new slice: the loop has just had its turn.
        self._turn_at = self._clock()

    def give_way(self) -> None:
        """Pause now, whatever is left of the slice: work that should come after everything ready to
        run (a console view, after heartbeats) calls it before it starts."""
        if self.pause is None:
            return
        self.pause()
        self._turn_at = self._clock()

    def paused_cpu(self) -> float:
        """CPU seconds this process's serving thread spent in pauses (other greenlets' work)."""
        return self._paused_cpu


PACER = Pacer()


def set_pause(pause: Callable[[], None] | None) -> None:
    """What a build does when its slice is used up (None: never pauses)."""
    PACER.pause = pause
    PACER._turn_at = PACER._clock()


# ``gevent.sleep(0)`` is not enough: it only queues the greenlet behind the loop's callbacks, and the
# loop runs up to 50 callbacks before it polls its sockets again, so a build that pauses every 5 ms
# would run for a long time between two polls. One turn of the loop (a short timer, which expires only
# after a poll) is not enough either: the node's worker serves each connection one request per turn
# (registry/serving/gunicorn_worker.py, connections take turns), so with a slice of 5 ms in every
# turn the connections get one request each, fewer than the heartbeats arriving, which queue behind
# a long build. So a paused build resumes once a turn of the loop finds nothing ready (libev's idle
# watcher: every request that came meanwhile has been served), and after PAUSE_MAX_S at the latest, so
# that under more load than the node can serve builds still move.
PAUSE_MAX_S = 0.05


def gevent_pause(max_wait_s: float = PAUSE_MAX_S) -> Callable[[], None]:
    """The pause for a gevent server: wait for an idle turn of the event loop (or ``max_wait_s``), in
    the serving thread only (a build in a native thread is preempted by the interpreter and must not
    touch the loop)."""
    import gevent
    from gevent.hub import Waiter
    from gevent.monkey import get_original

    thread_ident = get_original("_thread", "get_ident")
    serving_thread = thread_ident()
    loop = gevent.get_hub().loop

    def pause() -> None:
        if thread_ident() != serving_thread:
            return
        waiter = Waiter()
        idle = loop.idle()
        timer = loop.timer(max_wait_s)
        idle.start(waiter.switch, None)
        timer.start(waiter.switch, None)
        try:
            waiter.get()
        finally:
            idle.stop()
            timer.stop()
            idle.close()
            timer.close()

    return pause
