"""Long payload builds pause for the event loop (registry/cache/pacing.py): when, what a pause may see
happen, and what it costs the build's measured time. Fake clocks; three tests run a real gevent hub."""

from __future__ import annotations

import random
import time

import pytest

from registry.cache import pacing
from registry.cache.pacing import PACER, Pacer, gevent_pause, set_pause
from registry.cache.response_cache import APPS, DELTA, CacheKey, ResponseCache
from tests.wire.test_payload_fragments import KEYS, populated, register


class Ticks:
    """A perf_counter that moves only when told to."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pause_every_tick(monkeypatch):
    """The process's pacer pausing at every tick (a zero slice), recording the pauses; restored after."""
    pauses: list[int] = []
    monkeypatch.setattr(PACER, "slice_s", 0.0)
    set_pause(lambda: pauses.append(1))
    yield pauses
    set_pause(None)


def test_a_tick_pauses_only_once_its_slice_is_used_up_and_then_starts_a_new_one():
    clock = Ticks()
    pacer = Pacer(slice_ms=5, clock=clock)
    pauses = []
    pacer.pause = lambda: pauses.append(clock.now)
    pacer._turn_at = clock.now
    clock.now += 0.004
    pacer.tick()
    assert pauses == []
    clock.now += 0.002
    pacer.tick()
    assert pauses == [100.006]
    clock.now += 0.004  # 4 ms since that pause: the new slice is not used up
    pacer.tick()
    assert pauses == [100.006] and pacer.pauses == 1


def test_without_a_pause_a_tick_does_nothing_however_long_the_build():
    clock = Ticks()
    pacer = Pacer(slice_ms=5, clock=clock)
    clock.now += 10
    pacer.tick()
    assert pacer.pauses == 0 and pacer.paused_cpu() == 0


def test_giving_way_pauses_at_once_and_starts_a_new_slice():
    clock = Ticks()
    pacer = Pacer(slice_ms=5, clock=clock)
    pacer.give_way()  # no pause set (threads, tests): nothing
    pauses = []
    pacer.pause = lambda: pauses.append(clock.now)
    pacer._turn_at = clock.now
    clock.now += 0.001  # a slice barely begun: a tick would not pause, giving way does
    pacer.give_way()
    assert pauses == [100.001]
    clock.now += 0.004
    pacer.tick()
    assert pauses == [100.001]


def test_a_build_pauses_between_instances_and_applications_and_gives_the_same_bytes(pause_every_tick):
    clock, registry, builder = populated(seed=3, instances=120)
    paced = {key: builder.build(key) for key in KEYS}
    assert len(pause_every_tick) >= 120, "at least a pause per instance serialized, plus one per app"

    set_pause(None)
    builder.clear()
    assert {key: builder.build(key) for key in KEYS} == paced


def test_writes_made_while_a_build_pauses_are_in_the_next_payload_never_lost(monkeypatch):
    """Other greenlets run during a pause, writes included: the payload built across them is served
    once, not kept, and the next one has every write."""
    clock, registry, builder = populated(seed=5, instances=60)
    cache = ResponseCache(builder.build, expire_ms=180_000, use_read_only=False)
    monkeypatch.setattr(registry, "_on_change", _both(registry._on_change, cache.invalidate))
    rng = random.Random(9)
    written = []

    def pause_that_writes():
        if len(written) < 5:
            n = 1_000 + len(written)
            register(registry, clock, rng, n)
            written.append(n)

    monkeypatch.setattr(PACER, "slice_s", 0.0)
    set_pause(pause_that_writes)
    try:
        cache.get(CacheKey(APPS, "", "json"), clock())
    finally:
        set_pause(None)
    assert len(written) == 5
    after = cache.get(CacheKey(APPS, "", "json"), clock()).body
    for n in written:
        assert f"-{n}".encode() in after
    delta = cache.get(CacheKey(DELTA, "", "json"), clock()).body
    for n in written:
        assert f"-{n}".encode() in delta


def _both(first, second):
    def call(app, vips):
        first(app, vips)
        second(app, vips)

    return call


def test_what_others_ran_during_pauses_is_not_counted_as_the_builds_cost(monkeypatch):
    """The sync budget compares a key's own build time; CPU that heartbeats used while the build
    paused must not make a cheap build look costly."""
    cpu = [0.0]
    monkeypatch.setattr(pacing.time, "thread_time", lambda: cpu[0])
    key = CacheKey(APPS, "", "json")

    def build(_key):
        for _ in range(10):
            cpu[0] += 0.001  # the build's own 10 ms
            PACER.tick()
        return b"{}"

    def others_run():
        cpu[0] += 0.050  # 50 ms of other greenlets' work in each pause

    monkeypatch.setattr(PACER, "slice_s", 0.0)
    set_pause(others_run)
    try:
        cache = ResponseCache(build, expire_ms=180_000)
        cache.get(key, 0)
    finally:
        set_pause(None)
    assert cache.build_cost_ms(key) == pytest.approx(10.0)


def test_under_gevent_a_paused_build_lets_ready_greenlets_run_before_it_finishes():
    gevent = pytest.importorskip("gevent")
    clock, registry, builder = populated(seed=7, instances=200)
    order: list[str] = []

    def heartbeat():
        order.append("heartbeat")

    def build():
        builder.build(CacheKey(APPS, "", "xml"))
        order.append("build done")

    PACER.slice_s = 0.0
    set_pause(gevent_pause())
    try:
        builder_greenlet = gevent.spawn(build)
        gevent.sleep(0)  # the build starts and pauses at its first tick
        gevent.spawn(heartbeat)
        builder_greenlet.join(10)
    finally:
        PACER.slice_s = pacing.SLICE_MS / 1000
        set_pause(None)
    assert order == ["heartbeat", "build done"]


def test_under_gevent_a_pause_lasts_until_every_ready_greenlet_has_run_its_course():
    """Not one turn of the loop: the worker serves a connection once per turn, so a build resuming
    after every turn would take a slice of each and leave heartbeats queueing."""
    gevent = pytest.importorskip("gevent")
    finished: list[int] = []

    def connection(number: int) -> None:
        for _ in range(10):  # ten requests, one per turn of the loop
            gevent.sleep(0)
        finished.append(number)

    pause = gevent_pause()
    connections = [gevent.spawn(connection, number) for number in range(20)]
    build = gevent.spawn(lambda: (pause(), len(finished))[1])
    assert build.get(timeout=5) == 20, "the build resumed while connections still had requests"
    gevent.joinall(connections)


def test_under_gevent_a_pause_ends_after_its_longest_wait_however_busy_the_loop():
    gevent = pytest.importorskip("gevent")
    busy = [True]

    def spinner() -> None:
        while busy[0]:
            gevent.sleep(0)  # always something ready: the loop is never idle

    spinning = gevent.spawn(spinner)
    pause = gevent_pause(max_wait_s=0.02)
    started = time.perf_counter()
    try:
        gevent.spawn(pause).get(timeout=5)
    finally:
        busy[0] = False
        spinning.join()
    assert 0.015 <= time.perf_counter() - started < 1.0
