"""The settings parser (registry/config/eureka.py): defaults, the timing profiles, and bad values refused with
an error naming the variable. Plain dicts stand in for the environment."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from registry.config.docs import config_variables
from registry.config.eureka import SECTIONS, EurekaConfig, parse_config
from registry.config.site import MetricsConfig
from registry.domain.config import PROFILES, BadSetting, ClusterConfig, declared_default, variable_of


def test_defaults_are_the_fast_profile():
    config = parse_config({})
    assert config.timings == "fast"
    assert config.registry.eviction_interval_ms == 2_000
    assert config.registry.lease_expiry == "exact"
    assert config.registry.expected_number_of_clients_sending_renews == 0
    assert config.registry.expected_clients_move_only_above_zero is False
    assert config.response_cache.update_interval_ms == 500
    assert config.response_cache.auto_expiration_ms == 180_000
    assert config.cluster.peers == ()
    assert config.cluster.sync_retry_wait_ms == 5_000
    assert config.redis.jobs_driver == "embedded"
    assert config.health_checks.enabled is False
    assert config.remote_regions.urls == {}


def test_the_eureka_profile_switches_to_the_java_servers_timings():
    config = parse_config({"EUREKA_TIMINGS": "eureka"})
    assert config.registry.eviction_interval_ms == 60_000
    assert config.registry.lease_expiry == "eureka"
    assert config.registry.expected_number_of_clients_sending_renews == 1
    assert config.registry.default_open_for_traffic_count == 1
    assert config.registry.expected_clients_move_only_above_zero is True
    assert config.response_cache.update_interval_ms == 30_000
    assert config.cluster.sync_retry_wait_ms == 30_000


def test_a_variable_set_wins_over_its_profiles_default():
    config = parse_config({"EUREKA_TIMINGS": "eureka", "EUREKA_EVICTION_INTERVAL_MS": "5000"})
    assert config.registry.eviction_interval_ms == 5_000


def test_start_up_sync_retries_default_to_five_whichever_the_profile():
    assert parse_config({}).cluster.sync_retries == 5
    assert parse_config({"EUREKA_TIMINGS": "eureka"}).cluster.sync_retries == 5
    assert parse_config({"EUREKA_REGISTRY_SYNC_RETRIES": "0"}).cluster.sync_retries == 0
    # A config made in code (tests, benchmarks) has the same default as the parser's.
    assert ClusterConfig().sync_retries == 5


def test_reader_defaults_follow_the_cache_sync_interval():
    config = parse_config({"EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": "2000"})
    assert config.reader.max_staleness_ms == 6_000
    assert config.reader.revalidate_ms == 100
    assert parse_config({"EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": "300"}).reader.revalidate_ms == 30
    assert parse_config({"EUREKA_CONTROL_URL": "http://node:8761/"}).reader.node_url == "http://node:8761"


def test_peer_urls_are_parsed_once_into_peers_with_credentials_kept():
    config = parse_config(
        {"EUREKA_PEER_URLS": " http://a:8761/eureka , http://user:pw@b:8762/eureka/,,http://a:8761/eureka/"}
    )
    assert config.cluster.peer_urls == ("http://a:8761/eureka/", "http://user:pw@b:8762/eureka/")
    assert config.cluster.peers[1].auth == ("user", "pw")
    assert config.cluster.peers[1].display_url == "http://b:8762/eureka/"


def test_remote_regions_and_their_whitelist():
    config = parse_config(
        {
            "EUREKA_REMOTE_REGION_URLS": "US-West=http://w1:8761/eureka,eu=http://e1:8761/eureka/",
            "EUREKA_REMOTE_REGION_APP_WHITELIST": "billing,eu:orders",
            "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": "7",
        }
    )
    regions = config.remote_regions
    assert regions.urls == {"us-west": "http://w1:8761/eureka/", "eu": "http://e1:8761/eureka/"}
    assert regions.fetch_interval_ms == 7_000
    assert regions.whitelist.allows("us-west", "BILLING")
    assert not regions.whitelist.allows("eu", "BILLING")
    assert regions.whitelist.allows("eu", "ORDERS")


def test_each_job_interval_comes_from_one_setting():
    config = parse_config(
        {
            "EUREKA_EVICTION_INTERVAL_MS": "1234",
            "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": "777",
            "EUREKA_DELTA_RETENTION_TIMER_INTERVAL_MS": "4321",
            "EUREKA_RENEWAL_THRESHOLD_UPDATE_INTERVAL_MS": "99999",
            "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": "9",
            "EUREKA_DASHBOARD_HISTORY_INTERVAL_MS": "5000",
        }
    )
    assert config.job_intervals_ms() == {
        "evict": 1234,
        "sync_response_cache": 777,
        "prune_delta_queue": 4321,
        "recount_expected_clients": 99999,
        "prune_webhook_deliveries": 3_600_000,
        "fetch_remote_regions": 9_000,
        "sample_history": 5_000,
    }


@pytest.mark.parametrize(
    ("spelling", "value"),
    [
        ("true", True),
        ("YES", True),
        ("on", True),
        ("1", True),
        ("false", False),
        ("Off", False),
        ("0", False),
    ],
)
def test_booleans_in_their_usual_spellings(spelling, value):
    assert parse_config({"EUREKA_HEALTH_CHECKS": spelling}).health_checks.enabled is value


def test_redis_url_selects_celery_and_a_namespace():
    config = parse_config({"REDIS_URL": "redis://r:6379/0", "EUREKA_REDIS_NAMESPACE": "blue"})
    assert config.redis.jobs_driver == "celery"
    assert config.redis.namespace == "blue"


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("EUREKA_EVICTION_INTERVAL_MS", "soon", "whole number"),
        ("EUREKA_EVICTION_INTERVAL_MS", "1.5", "whole number"),
        ("EUREKA_EVICTION_INTERVAL_MS", "0", ">= 1"),
        ("EUREKA_MAX_LEASE_DURATION_SECONDS", "30", ">= 90"),
        ("EUREKA_REPLICATION_QUEUE_SIZE", "-1", ">= 250"),
        ("EUREKA_RENEWAL_PERCENT_THRESHOLD", "most", "a number"),
        ("EUREKA_ENABLE_SELF_PRESERVATION", "maybe", "true or false"),
        ("EUREKA_TIMINGS", "slow", "fast, eureka"),
        ("EUREKA_LEASE_EXPIRY", "never", "exact, eureka"),
        ("EUREKA_PEER_URLS", "ftp://a/eureka/", "http"),
        ("EUREKA_PEER_URLS", "http://a:99999/eureka/", "Port out of range"),
        ("EUREKA_REMOTE_REGION_URLS", "http://w1:8761/eureka/", "region=http"),
        ("EUREKA_REMOTE_REGION_APP_WHITELIST", "mars:BILLING", "mars"),
        ("EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS", "10.0.0.0/8,the-lan", "the-lan"),
        ("EUREKA_HEALTH_CHECK_TIMEOUT_SECONDS", "30", "MAX_TIMEOUT"),
        ("EUREKA_TRUSTED_PROXIES", "127.0.0.1,proxy.local", "not an IP address"),
        ("EUREKA_DASHBOARD_PAGE_SIZE", "5", ">= 10"),
        ("EUREKA_MAX_BODY_BYTES", "100", ">= 1024"),
        ("EUREKA_API_AUTH", "maybe", "true or false"),
        ("EUREKA_DNS_NAMESERVERS", "not-an-ip", "not-an-ip"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(variable, value, problem):
    with pytest.raises(BadSetting) as raised:
        parse_config({variable: value})
    assert raised.value.variable == variable
    assert variable in str(raised.value)
    assert problem in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_the_config_is_frozen():
    config = parse_config({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.cluster.sync_retries = 1  # type: ignore[misc]
    edited = dataclasses.replace(config, cluster=dataclasses.replace(config.cluster, sync_retries=1))
    assert isinstance(edited, EurekaConfig) and edited.cluster.sync_retries == 1
    assert config.cluster.sync_retries == 5


def test_with_changes_replaces_fields_of_sections_and_keeps_the_rest():
    config = parse_config({})
    edited = config.with_changes(registry__disable_delta=True, cluster__sync_retries=2, timings="eureka")
    assert edited.registry.disable_delta is True
    assert edited.cluster.sync_retries == 2
    assert edited.timings == "eureka"
    assert edited.registry.eviction_interval_ms == config.registry.eviction_interval_ms
    assert config.registry.disable_delta is False
    with pytest.raises(TypeError):
        config.with_changes(registry__no_such_setting=1)


def test_parsing_loads_neither_django_nor_a_network_client():
    """Celery workers, readers and benchmarks parse the same settings; the parser must stay light."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import sys\n"
        "from registry.config.eureka import parse_config\n"
        "parse_config({'EUREKA_PEER_URLS': 'http://a:8761/eureka/', 'REDIS_URL': 'redis://r:6379/0'})\n"
        "heavy = {'django', 'rest_framework', 'httpx', 'redis', 'celery', 'kombu'}\n"
        "print(sorted({name.split('.')[0] for name in sys.modules} & heavy))\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_profile_changes_only_fields_that_are_settings():
    """PROFILES is data: each entry names a field read from a variable, with a value of its type."""
    for profile, sections in PROFILES.items():
        parsed = parse_config({"EUREKA_TIMINGS": profile})
        for section, changes in sections.items():
            declared = {part.name: part for part in dataclasses.fields(SECTIONS[section])}
            for name, value in changes.items():
                assert variable_of(declared[name]) is not None, (section, name)
                assert type(value) is type(declared_default(declared[name]))
                assert getattr(getattr(parsed, section), name) == value


def test_every_variable_belongs_to_exactly_one_field():
    names = [variable.name for _, _, variable in config_variables()]
    assert len(names) == len(set(names)) > 100
    assert all(name == "REDIS_URL" or name.startswith("EUREKA_") for name in names)


def test_the_sites_own_settings_are_sections_too():
    config = parse_config({})
    assert config.access.api_auth is False
    assert config.access.trusted_proxies == ("127.0.0.1", "::1")
    assert config.dashboard.prefix == ""
    assert config.dashboard.login_required is False
    assert config.metrics == MetricsConfig(enabled=True, token="")
    assert config.connections.max_body_bytes == 1024 * 1024
    assert config.security.hsts_seconds == 31_536_000
    assert config.control_secret == ""


def test_the_console_follows_api_accounts_unless_told():
    assert parse_config({"EUREKA_API_AUTH": "true"}).dashboard.login_required is True
    both = {"EUREKA_API_AUTH": "true", "EUREKA_DASHBOARD_LOGIN_REQUIRED": "false"}
    assert parse_config(both).dashboard.login_required is False
    assert parse_config({"EUREKA_DASHBOARD_LOGIN_REQUIRED": "on"}).dashboard.login_required is True


def test_the_console_path_becomes_a_url_prefix():
    assert parse_config({"EUREKA_DASHBOARD_PATH": "/ops/console/"}).dashboard.prefix == "ops/console/"
    with pytest.raises(BadSetting, match="collides with /admin/") as raised:
        parse_config({"EUREKA_DASHBOARD_PATH": "/admin"})
    assert raised.value.variable == "EUREKA_DASHBOARD_PATH"
    assert str(raised.value).count("EUREKA_DASHBOARD_PATH") == 1


def test_secrets_come_from_a_file_when_name_file_is_set(tmp_path):
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    # A value no field's name contains (the TLS section has a plain_port).
    config = parse_config({"EUREKA_METRICS_TOKEN_FILE": str(secret), "EUREKA_CONTROL_SECRET": "pl41n-s3cret"})
    assert config.metrics.token == "s3cret"
    assert config.control_secret == "pl41n-s3cret"
    assert "s3cret" not in repr(config) and "pl41n" not in repr(config)


def test_a_relative_data_dir_is_under_the_base_dir():
    assert parse_config({}).warm_restart.data_dir == "var"
    assert parse_config({}, base_dir="/srv/eureka").warm_restart.data_dir == "/srv/eureka/var"
    assert parse_config({"EUREKA_DATA_DIR": "/data"}, base_dir="/srv/eureka").warm_restart.data_dir == "/data"
