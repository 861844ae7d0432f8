"""What the console computes from the node (registry/console_data/console.py, registry/runtime/status.py,
registry/cluster/peers.py), on a fake clock."""

from __future__ import annotations

import dataclasses
from datetime import UTC, timedelta, timezone

import orjson
import pytest

from registry.cluster.peers import AVAILABILITY_WINDOW_MS, PeerSet
from registry.console_data import console
from registry.domain import constants as c
from registry.domain.endpoints import parse_peer_urls
from registry.domain.instances import InstanceInfo
from registry.domain.preservation import SelfPreservation
from registry.domain.redact import scrub_credentials
from registry.runtime import status as node_status
from registry.runtime.composition import build_node
from registry.wire.codecs import decode_instance
from tests.factories import instance_body

MIN = 60_000
# The General Info rows as screenshots of Eureka's page show them (shared/reference/status-console.md A3).
GENERAL_INFO_ORDER = [
    "total-avail-memory",
    "environment",
    "num-of-cpus",
    "current-memory-usage",
    "server-uptime",
    "registered-replicas",
    "unavailable-replicas",
    "available-replicas",
]


def sp(enabled: bool, below: bool) -> SelfPreservation:
    return SelfPreservation(
        enabled=enabled,
        renews_last_minute=0,
        renews_threshold=1,
        expected_clients=1,
        renewal_interval_secs=30,
        renewal_percent_threshold=0.85,
        below_threshold=below,
        lease_expiration_enabled=not enabled or not below,
        in_startup_wait=False,
        start_ts=0,
        startup_wait_ms=0,
    )


@pytest.mark.parametrize(
    ("enabled", "below", "banner"),
    [
        (
            True,
            True,
            "EMERGENCY! EUREKA MAY BE INCORRECTLY CLAIMING INSTANCES ARE UP WHEN THEY'RE NOT. RENEWALS ARE "
            "LESSER THAN THRESHOLD AND HENCE THE INSTANCES ARE NOT BEING EXPIRED JUST TO BE SAFE.",
        ),
        (
            False,
            True,
            "RENEWALS ARE LESSER THAN THE THRESHOLD. THE SELF PRESERVATION MODE IS TURNED OFF. THIS MAY NOT "
            "PROTECT INSTANCE EXPIRY IN CASE OF NETWORK/OTHER PROBLEMS.",
        ),
        (
            False,
            False,
            "THE SELF PRESERVATION MODE IS TURNED OFF. THIS MAY NOT PROTECT INSTANCE EXPIRY IN CASE OF "
            "NETWORK/OTHER PROBLEMS.",
        ),
        (True, False, None),
    ],
)
def test_banner_is_one_of_eurekas_three_sentences(enabled, below, banner):
    assert console.banner(sp(enabled, below)) == banner


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "00:00"),
        (7 * MIN + 59_999, "00:07"),
        (25 * 60 * MIN + 12 * MIN, "1 day 01:12"),
        (12 * 24 * 60 * MIN + MIN, "12 days 00:01"),
        (-5, "00:00"),
    ],
)
def test_uptime_format_matches_eurekas(ms, text):
    assert node_status.format_uptime(ms) == text


def test_current_time_format_matches_eurekas():
    ms = 1_787_338_707_000  # 2026-08-21T18:58:27Z
    assert console.format_time(ms, UTC) == "2026-08-21T18:58:27 +0000"
    assert console.format_time(ms, timezone(timedelta(hours=1))) == "2026-08-21T19:58:27 +0100"


def test_scrub_credentials_removes_user_and_password_only():
    assert scrub_credentials("http://u:p@peer2:8762/eureka/?x=1") == "http://peer2:8762/eureka/?x=1"
    assert scrub_credentials("https://token@peer3/eureka/") == "https://peer3/eureka/"
    assert scrub_credentials("http://peer4:8761/eureka/") == "http://peer4:8761/eureka/"


def test_peer_availability_comes_from_replication_results():
    peers = PeerSet(["http://u:secret@peer2:8762/eureka/", "http://peer3:8763/eureka/"])
    now = 1_000_000
    assert [p.url for p in peers.states()] == ["http://peer2:8762/eureka/", "http://peer3:8763/eureka/"]
    peer2 = peers.states()[0]
    assert not peer2.available(now) and peer2.unavailable_reason(now) == "no successful replication yet"
    peers.record_success("http://u:secret@peer2:8762/eureka/", now)
    peers.set_queued("http://peer2:8762/eureka/", 7)
    peer2 = peers.states()[0]
    assert peer2.available(now) and peer2.queued_events == 7 and peer2.unavailable_reason(now) is None
    assert not peer2.available(now + AVAILABILITY_WINDOW_MS + 1)
    peers.record_failure("http://peer2:8762/eureka/", now + 1, "connect timeout")
    peer2 = peers.states()[0]
    assert not peer2.available(now + 2)
    assert peer2.unavailable_reason(now + 2) == "last replication failed: connect timeout"
    assert peer2.failures == 1
    stats = node_status.application_stats(peers.states(), now + 2)
    assert stats == {
        "registered-replicas": "http://peer2:8762/eureka/, http://peer3:8763/eureka/",
        "unavailable-replicas": "http://peer2:8762/eureka/,http://peer3:8763/eureka/,",
        "available-replicas": "",
    }


@pytest.fixture
def console_node(eureka_options, clock):
    config = eureka_options.with_changes(
        identity__environment="prod",
        identity__datacenter="dc1",
        identity__instance_ip_address="192.0.2.10",
        cluster__peers=tuple(parse_peer_urls(["http://admin:pw@peer2:8762/eureka/"])),
    )
    return build_node(config, clock=clock)


def test_general_info_rows_come_in_the_familiar_order(console_node, clock):
    clock.advance(90 * MIN)
    rows = console.general_info(console_node, clock())
    assert [name for name, _ in rows] == GENERAL_INFO_ORDER
    values = dict(rows)
    assert values["environment"] == "prod"
    assert values["server-uptime"] == "01:30"
    assert values["total-avail-memory"].endswith("mb") and int(values["total-avail-memory"][:-2]) > 0
    used, pct = values["current-memory-usage"].split(" ")
    assert used.endswith("mb") and pct.startswith("(") and pct.endswith("%)")
    assert int(values["num-of-cpus"]) >= 1
    assert values["registered-replicas"] == "http://peer2:8762/eureka/"
    assert values["unavailable-replicas"] == "http://peer2:8762/eureka/,"


def test_instance_info_is_this_nodes_address_and_status(console_node, clock):
    assert console.instance_info(console_node, clock()) == [("ipAddr", "192.0.2.10"), ("status", c.UP)]


def test_system_status_reads_the_settings_and_the_registry(console_node, clock):
    status = console.system_status(console_node, clock(), UTC)
    assert (status.environment, status.datacenter, status.uptime) == ("prod", "dc1", "00:00")
    assert status.self_preservation.renews_threshold == 0 and status.self_preservation.renews_last_minute == 0


def test_recount_schedule_follows_the_last_run(console_node, clock):
    interval = console_node.registry.config.renewal_threshold_update_interval_ms
    assert console.recount_schedule(console_node).next_run == console_node.started_at + interval
    clock.advance(5 * MIN)
    console_node.run_job("recount_expected_clients", clock(), "test")
    schedule = console.recount_schedule(console_node)
    assert (schedule.last_run, schedule.next_run) == (clock(), clock() + interval)


def test_instance_fields_cover_every_instance_field(console_node, clock):
    body = instance_body(homePageUrl="http://user:pw@10.0.0.1:8080/", asgName="asg-1")
    instance = decode_instance(orjson.dumps(body), "json", clock())
    console_node.registry.register(instance, clock())
    detail = console.lease_detail(console_node, "ORDERS", instance.instance_id, clock())
    assert detail is not None
    fields = {field.name: field for field in console.instance_fields(detail.view)}
    expected = {f.name for f in dataclasses.fields(InstanceInfo)} - {"metadata", "data_center_info"}
    assert len(fields) == len(expected) + 1  # + dataCenterInfo.name
    assert fields["instanceId"].value == "10.0.0.1:orders:8080"
    assert fields["homePageUrl"].value == "http://10.0.0.1:8080/" and fields["homePageUrl"].kind == "url"
    assert fields["lastDirtyTimestamp"].kind == "time"
    assert fields["port @enabled"].value == "true"
    assert fields["leaseInfo.durationInSecs"].value == "90"
    assert fields["asgName"].value == "asg-1"
    assert fields["dataCenterInfo.name"].value == "MyOwn"


@pytest.mark.parametrize(("expiry", "extra"), [("exact", 0), ("eureka", 90_000)])
def test_eviction_deadline_follows_the_lease_expiry_rule(eureka_options, clock, expiry, extra):
    node = build_node(eureka_options.with_changes(registry__lease_expiry=expiry), clock=clock)
    node.registry.register(
        InstanceInfo(instance_id="i-1", app="ORDERS", host_name="h", ip_addr="10.0.0.1"), clock()
    )
    clock.advance(10_000)
    node.registry.renew("ORDERS", "i-1", clock())
    detail = console.lease_detail(node, "ORDERS", "i-1", clock())
    assert detail is not None
    assert detail.eviction_deadline == clock() + 90_000 + extra
    assert not detail.expired
    assert console.lease_detail(node, "ORDERS", "i-1", detail.eviction_deadline + 1).expired
