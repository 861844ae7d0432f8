"""The embedded scheduler decides when jobs run; the jobs run registry functions on the node."""

from __future__ import annotations

from registry.runtime.scheduler import EmbeddedScheduler, ScheduledJob
from tests.factories import instance_body

T0 = 1_796_000_000_000


def test_jobs_run_when_due_and_not_before():
    runs: list[int] = []
    job = ScheduledJob("tick", 1000, runs.append, next_due=T0 + 1000)
    scheduler = EmbeddedScheduler([job], clock=lambda: T0)
    scheduler.run_due(T0 + 999)
    assert runs == []
    scheduler.run_due(T0 + 1000)
    scheduler.run_due(T0 + 1500)
    scheduler.run_due(T0 + 2000)
    assert runs == [T0 + 1000, T0 + 2000]


def test_a_failing_job_is_counted_and_does_not_stop_the_others():
    runs: list[int] = []

    def boom(now):
        raise RuntimeError("bad run")

    bad = ScheduledJob("bad", 10, boom, next_due=T0)
    good = ScheduledJob("good", 10, runs.append, next_due=T0)
    scheduler = EmbeddedScheduler([bad, good], clock=lambda: T0)
    scheduler.run_due(T0)
    scheduler.run_due(T0 + 10)
    assert bad.failures == 2 and runs == [T0, T0 + 10]


def test_a_late_scheduler_runs_a_job_once_not_once_per_missed_slot():
    runs: list[int] = []
    job = ScheduledJob("tick", 1000, runs.append, next_due=T0)
    scheduler = EmbeddedScheduler([job], clock=lambda: T0)
    scheduler.run_due(T0 + 10_500)
    scheduler.run_due(T0 + 10_600)
    assert runs == [T0 + 10_500]


def test_node_jobs_evict_expired_leases_and_refresh_the_read_only_cache(eureka_options, clock, api):
    from registry.runtime.composition import build_node
    from registry.runtime.process import reset_node

    eureka_options = eureka_options.with_changes(
        response_cache__use_read_only=True, registry__enable_self_preservation=False
    )
    node = build_node(eureka_options, clock=clock)
    reset_node(node)
    try:
        assert api.post("/eureka/apps/ORDERS", instance_body(), format="json").status_code == 204
        first = api.get("/eureka/apps", HTTP_ACCEPT="application/json").json()
        assert first["applications"]["apps__hashcode"] == "UP_1_"
        clock.advance(200_000)
        scheduler = EmbeddedScheduler(
            [ScheduledJob(name, 1, lambda now, fn=fn: fn(node, now)) for name, fn in _jobs().items()], clock
        )
        scheduler.run_due(clock.now)
        assert node.registry.reads.size() == 0
        # sync ran after evict in the same pass: readers now see the empty registry
        later = api.get("/eureka/apps", HTTP_ACCEPT="application/json").json()
        assert later["applications"]["apps__hashcode"] == ""
    finally:
        reset_node(None)


def _jobs():
    from registry.runtime.jobs import JOBS

    return JOBS
