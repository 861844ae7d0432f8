"""Control endpoint (used by Celery tasks), health probes and the overdue-job watchdog."""

from __future__ import annotations

import pytest

from registry.runtime.watchdog import OVERDUE_INTERVALS
from tests.factories import instance_body

SECRET = "s3cret-for-tests"


@pytest.fixture
def with_secret(settings):
    settings.EUREKA = settings.EUREKA.with_changes(control_secret=SECRET)


def test_control_endpoint_refuses_requests_without_the_secret(api, with_secret):
    assert api.post("/control/jobs/evict").status_code == 403
    assert api.post("/control/jobs/evict", HTTP_X_EUREKA_CONTROL_SECRET="wrong").status_code == 403


def test_control_endpoint_is_closed_when_no_secret_is_configured(api, settings):
    settings.EUREKA = settings.EUREKA.with_changes(control_secret="")
    assert api.post("/control/jobs/evict", HTTP_X_EUREKA_CONTROL_SECRET="").status_code == 403


def test_control_endpoint_runs_a_job_and_records_its_source(api, node, clock, with_secret, eureka_options):
    api.post("/eureka/apps/ORDERS", instance_body(), format="json")
    clock.advance(1000)
    response = api.post("/control/jobs/prune_delta_queue", HTTP_X_EUREKA_CONTROL_SECRET=SECRET)
    assert response.status_code == 200
    assert response.json() == {"job": "prune_delta_queue", "result": 0}
    record = node.job_records["prune_delta_queue"]
    assert (record.last_run, record.last_source, record.runs) == (clock.now, "celery", 1)


def test_control_endpoint_answers_404_for_unknown_jobs_and_405_for_get(api, with_secret):
    response = api.post("/control/jobs/format_disk", HTTP_X_EUREKA_CONTROL_SECRET=SECRET)
    assert response.status_code == 404 and b"Unknown job" in response.content
    assert api.get("/control/jobs/evict", HTTP_X_EUREKA_CONTROL_SECRET=SECRET).status_code == 405


def test_healthz_and_readyz_report_job_freshness(api, node, clock):
    assert api.get("/healthz").json() == {"status": "ok"}
    ready = api.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ok"
    clock.advance(OVERDUE_INTERVALS * node.job_intervals()["evict"] + 1)
    body = api.get("/readyz").json()
    assert body["status"] == "degraded"
    assert body["jobs"]["evict"]["overdue"] is True
    node.run_job("evict", clock.now, "scheduler")
    assert api.get("/readyz").json()["jobs"]["evict"]["overdue"] is False


def test_watchdog_runs_only_overdue_jobs(node, clock):
    interval = node.job_intervals()["evict"]
    clock.advance(interval)
    node.watchdog.run_if_overdue(node, "evict", clock.now)
    assert node.job_records["evict"].runs == 0, "on time: Celery is expected to run it"
    clock.advance(OVERDUE_INTERVALS * interval)
    node.watchdog.run_if_overdue(node, "evict", clock.now)
    record = node.job_records["evict"]
    assert (record.runs, record.last_source) == (1, "watchdog")
    node.watchdog.run_if_overdue(node, "evict", clock.now + 1)
    assert record.runs == 1, "just ran: no longer overdue"


def test_with_celery_driving_the_jobs_the_node_still_runs_its_own_gc_policy(node, clock):
    """The GC policy is about the serving process: its own scheduler runs it every second in both
    modes, while the registry's jobs wait for Celery beat (the watchdog runs them only when overdue)."""
    scheduler = node.start_scheduler(watchdog=True)
    try:
        scheduler.stop()  # driven by hand below, on the fake clock
        clock.advance(node.job_intervals()["freeze_gc"])
        scheduler.run_due(clock.now)
    finally:
        node.stop_scheduler()
    assert (node.job_records["freeze_gc"].runs, node.job_records["freeze_gc"].last_source) == (1, "scheduler")
    assert node.job_records["evict"].runs == 0, "on time: Celery beat is expected to run it"


def test_beat_schedule_covers_every_job_and_expires_before_the_next_run(settings):
    from registry.runtime.jobs import JOBS, LOCAL_JOBS

    schedule = settings.CELERY_BEAT_SCHEDULE
    # A node without remote regions has no fetch job, and beat does not ask for one.
    absent = set() if settings.EUREKA.remote_regions.urls else {"fetch_remote_regions"}
    assert {entry["args"][0] for entry in schedule.values()} == set(JOBS) - LOCAL_JOBS - absent
    for entry in schedule.values():
        assert entry["task"] == "registry.tasks.run_node_job"
        assert 0 < entry["options"]["expires"] < entry["schedule"]
