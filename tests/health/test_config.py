"""Reading an instance's health check from its metadata (registry/health/config.py)."""

from __future__ import annotations

import pytest

from registry.domain.instances import InstanceInfo, freeze
from registry.health.config import (
    HTTP,
    KEY_INTERVAL,
    KEY_KIND,
    KEY_RECOVER,
    KEY_THRESHOLD,
    KEY_TIMEOUT,
    TCP,
    CheckDefaults,
    parse_check,
)

DEFAULTS = CheckDefaults(interval_ms=10_000, timeout_ms=2_000, threshold=3, recover=2)


def instance(metadata=None, **fields) -> InstanceInfo:
    base = {
        "instance_id": "i-1",
        "app": "ORDERS",
        "host_name": "orders-1",
        "ip_addr": "10.0.0.7",
        "port": 8080,
        "health_check_url": "http://10.0.0.7:8080/actuator/health",
    }
    base.update(fields)
    return InstanceInfo(metadata=freeze(metadata or {}), **base)


def test_an_instance_without_the_key_is_not_checked_and_shows_nothing():
    parsed = parse_check(instance({"zone": "a"}), DEFAULTS)
    assert parsed.config is None and not parsed.requested


def test_http_check_uses_the_health_check_url_and_the_defaults():
    parsed = parse_check(instance({KEY_KIND: "http"}), DEFAULTS)
    assert parsed.errors == ()
    config = parsed.config
    assert config.kind == HTTP and config.url == "http://10.0.0.7:8080/actuator/health"
    assert (config.interval_ms, config.timeout_ms, config.threshold, config.recover) == (10_000, 2_000, 3, 2)


def test_the_kind_is_case_insensitive_and_numbers_come_from_the_metadata():
    metadata = {
        KEY_KIND: " TCP ",
        KEY_INTERVAL: "1.5",
        KEY_TIMEOUT: "0.25",
        KEY_THRESHOLD: "5",
        KEY_RECOVER: "1",
    }
    config = parse_check(instance(metadata), DEFAULTS).config
    assert config.kind == TCP and (config.host, config.port) == ("10.0.0.7", 8080)
    assert (config.interval_ms, config.timeout_ms, config.threshold, config.recover) == (1_500, 250, 5, 1)


def test_an_unknown_kind_means_no_check_and_a_configuration_error():
    parsed = parse_check(instance({KEY_KIND: "grpc"}), DEFAULTS)
    assert parsed.config is None and parsed.requested
    assert "'grpc' is not one of http, tcp" in parsed.errors[0]


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (KEY_INTERVAL, "0.5", "from 1 to 3600: using 10"),
        (KEY_INTERVAL, "often", "is not a number of seconds"),
        (KEY_INTERVAL, "nan", "is not a number of seconds"),
        (KEY_TIMEOUT, "-1", "using 2"),
        (KEY_TIMEOUT, "inf", "using 2"),
        (KEY_THRESHOLD, "0", "from 1 to 100: using 3"),
        (KEY_THRESHOLD, "2.5", "whole number"),
        (KEY_RECOVER, "many", "using 2"),
    ],
)
def test_a_bad_number_falls_back_to_the_default_with_the_reason(key, value, reason):
    parsed = parse_check(instance({KEY_KIND: "tcp", key: value}), DEFAULTS)
    assert parsed.config is not None
    assert (parsed.config.interval_ms, parsed.config.timeout_ms) == (10_000, 2_000)
    assert (parsed.config.threshold, parsed.config.recover) == (3, 2)
    assert len(parsed.errors) == 1 and key in parsed.errors[0] and reason in parsed.errors[0]


def test_http_without_any_health_check_url_is_not_guessed():
    parsed = parse_check(instance({KEY_KIND: "http"}, health_check_url=None), DEFAULTS)
    assert parsed.config is None
    assert "no healthCheckUrl" in parsed.errors[0]


def test_http_falls_back_to_the_secure_health_check_url():
    parsed = parse_check(
        instance(
            {KEY_KIND: "http"}, health_check_url="", secure_health_check_url="https://orders-1:8443/health"
        ),
        DEFAULTS,
    )
    assert parsed.config.url == "https://orders-1:8443/health"


@pytest.mark.parametrize(
    "url", ["ftp://orders-1/health", "orders-1:8080/health", "http://:80/", "http://h:99999/"]
)
def test_http_with_an_unusable_url_is_a_configuration_error(url):
    parsed = parse_check(instance({KEY_KIND: "http"}, health_check_url=url), DEFAULTS)
    assert parsed.config is None and "not checked" in parsed.errors[0]


def test_tcp_uses_the_secure_port_when_only_it_is_enabled():
    config = parse_check(
        instance({KEY_KIND: "tcp"}, port_enabled=False, secure_port=8443, secure_port_enabled=True), DEFAULTS
    ).config
    assert config.port == 8443


def test_tcp_without_an_enabled_port_is_a_configuration_error():
    parsed = parse_check(instance({KEY_KIND: "tcp"}, port_enabled=False, secure_port_enabled=False), DEFAULTS)
    assert parsed.config is None and "neither port nor securePort" in parsed.errors[0]


@pytest.mark.parametrize(
    ("asked", "got_ms"), [("600", 10_000), ("10.5", 10_000), ("10", 10_000), ("9.5", 9_500)]
)
def test_an_instance_may_not_ask_for_a_timeout_above_the_nodes_cap(asked, got_ms):
    parsed = parse_check(instance({KEY_KIND: "tcp", KEY_TIMEOUT: asked}), DEFAULTS)
    assert DEFAULTS.max_timeout_ms == 10_000
    assert parsed.config.timeout_ms == got_ms
    if got_ms < int(float(asked) * 1000):
        assert "above the node's cap of 10 s: using 10" in parsed.errors[0]
    else:
        assert parsed.errors == ()


def test_the_cap_is_the_nodes_setting_and_bounds_its_default_too():
    defaults = CheckDefaults(timeout_ms=2_000, max_timeout_ms=1_000)
    assert parse_check(instance({KEY_KIND: "tcp"}), defaults).config.timeout_ms == 1_000
    parsed = parse_check(instance({KEY_KIND: "tcp", KEY_TIMEOUT: "3"}), defaults)
    assert parsed.config.timeout_ms == 1_000 and "cap of 1 s" in parsed.errors[0]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/health",  # the node's loopback, while the instance says it is 10.0.0.7
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.8:8080/health",  # a neighbour
        "http://orders-2:8080/health",
        "http://orders-1.evil.example:8080/health",
        "http://10.0.0.7.nip.io:8080/health",
    ],
)
def test_an_http_url_on_another_host_than_the_instances_own_is_not_checked(url):
    parsed = parse_check(instance({KEY_KIND: "http"}, health_check_url=url), DEFAULTS)
    assert parsed.config is None
    assert "is neither the instance's ipAddr ('10.0.0.7') nor its hostName ('orders-1')" in parsed.errors[0]


@pytest.mark.parametrize(
    ("url", "fields"),
    [
        ("http://10.0.0.7:8080/health", {}),
        ("http://ORDERS-1:8080/health", {}),  # names without case
        ("https://orders-1:8443/health", {"ip_addr": ""}),
        ("http://[::1]:8080/health", {"ip_addr": "0:0:0:0:0:0:0:1"}),  # addresses as addresses
    ],
)
def test_an_http_url_on_the_instances_ip_addr_or_host_name_is_checked(url, fields):
    parsed = parse_check(instance({KEY_KIND: "http"}, health_check_url=url, **fields), DEFAULTS)
    assert parsed.errors == () and parsed.config.url == url
