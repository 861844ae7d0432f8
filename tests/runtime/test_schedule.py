"""The periodic work as a function of the config (registry/runtime/schedule.py): which entries Celery
beat gets, how often, and that the embedded scheduler's table has the same jobs at the same intervals."""

from __future__ import annotations

import pytest

from registry.config.eureka import parse_config
from registry.runtime.jobs import JOBS
from registry.runtime.schedule import (
    LOCAL_JOBS,
    RUN_NODE_JOB,
    beat_schedule,
    node_job_intervals_ms,
    periodic_work,
)

PRODUCTION = {"REDIS_URL": "redis://127.0.0.1:6379/0"}
REGIONS = {"EUREKA_REMOTE_REGION_URLS": "us-west=http://w1:8761/eureka/"}
PEERS = {"EUREKA_PEER_URLS": "http://a:8761/eureka/"}
NODE_JOBS_WITHOUT_REGIONS = {
    "evict",
    "sync_response_cache",
    "prune_delta_queue",
    "recount_expected_clients",
    "prune_webhook_deliveries",
}


def test_the_embedded_schedulers_table_has_every_job():
    assert set(node_job_intervals_ms(parse_config({}))) == set(JOBS)


def test_a_standalone_embedded_node_gives_beat_only_the_registry_jobs():
    assert set(periodic_work(parse_config({}))) == NODE_JOBS_WITHOUT_REGIONS


def test_the_process_own_jobs_never_go_to_beat():
    for env in ({}, PRODUCTION, {**PRODUCTION, **PEERS, **REGIONS}):
        assert not set(periodic_work(parse_config(env))) & LOCAL_JOBS


def test_the_remote_regions_fetch_is_scheduled_only_with_regions():
    assert "fetch_remote_regions" not in periodic_work(parse_config({}))
    entry = periodic_work(parse_config({**REGIONS, "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": "7"}))[
        "fetch_remote_regions"
    ]
    assert (entry.task, entry.job, entry.interval_ms) == (RUN_NODE_JOB, "fetch_remote_regions", 7_000)


def test_each_node_job_runs_at_its_settings_interval():
    config = parse_config(
        {
            "EUREKA_EVICTION_INTERVAL_MS": "1234",
            "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": "777",
            "EUREKA_DELTA_RETENTION_TIMER_INTERVAL_MS": "4321",
            "EUREKA_RENEWAL_THRESHOLD_UPDATE_INTERVAL_MS": "99999",
        }
    )
    work = periodic_work(config)
    assert {name: entry.interval_ms for name, entry in work.items()} == {
        "evict": 1234,
        "sync_response_cache": 777,
        "prune_delta_queue": 4321,
        "recount_expected_clients": 99999,
        "prune_webhook_deliveries": 3_600_000,
    }
    assert all(entry.task == RUN_NODE_JOB and entry.job == name for name, entry in work.items())
    intervals = node_job_intervals_ms(config)
    assert all(intervals[name] == entry.interval_ms for name, entry in work.items())


def test_the_timing_profile_sets_the_intervals():
    work = periodic_work(parse_config({"EUREKA_TIMINGS": "eureka"}))
    assert work["evict"].interval_ms == 60_000
    assert work["sync_response_cache"].interval_ms == 30_000


def test_peers_add_the_outbox_drain_every_second():
    assert "replication-drain" not in periodic_work(parse_config({}))
    for env in (PEERS, {"EUREKA_PEER_DNS": "peers:8761"}):
        entry = periodic_work(parse_config(env))["replication-drain"]
        assert (entry.task, entry.interval_ms) == ("registry.tasks.drain_replication_outboxes", 1_000)


@pytest.mark.parametrize(
    ("env", "present"),
    [
        ({}, False),
        (PRODUCTION, True),
        ({**PRODUCTION, "EUREKA_WEBHOOKS_ENABLED": "false"}, False),
    ],
)
def test_webhook_deliveries_are_polled_by_beat_in_production_mode_only(env, present):
    work = periodic_work(parse_config({**env, "EUREKA_WEBHOOK_POLL_MS": "1500"}))
    assert ("webhook-delivery" in work) is present
    if present:
        assert (work["webhook-delivery"].task, work["webhook-delivery"].interval_ms) == (
            "registry.tasks.deliver_webhooks",
            1_500,
        )


@pytest.mark.parametrize(
    ("env", "present"),
    [
        ({"EUREKA_HEALTH_CHECKS": "true"}, False),
        (PRODUCTION, False),
        ({**PRODUCTION, "EUREKA_HEALTH_CHECKS": "true"}, True),
    ],
)
def test_health_check_rounds_go_to_beat_in_production_mode_when_on(env, present):
    work = periodic_work(parse_config({**env, "EUREKA_HEALTH_CHECK_DISPATCH_MS": "400"}))
    assert ("health-checks" in work) is present
    if present:
        assert work["health-checks"].interval_ms == 400


def test_beat_entries_are_named_carry_their_job_and_expire_before_the_next_run():
    config = parse_config({**PRODUCTION, **PEERS, **REGIONS, "EUREKA_HEALTH_CHECKS": "true"})
    schedule = beat_schedule(config)
    assert set(schedule) == {f"eureka-{name}" for name in periodic_work(config)}
    assert schedule["eureka-evict"] == {
        "task": RUN_NODE_JOB,
        "schedule": 2.0,
        "args": ("evict",),
        "options": {"expires": 1.8},
    }
    assert "args" not in schedule["eureka-replication-drain"]
    for entry in schedule.values():
        assert 0 < entry["options"]["expires"] < entry["schedule"]


def test_the_settings_schedule_is_the_functions(settings):
    assert beat_schedule(settings.EUREKA) == settings.CELERY_BEAT_SCHEDULE
