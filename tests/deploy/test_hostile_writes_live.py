"""Issue 30, items 1 and 7 on a live gunicorn node configured through its environment, as an operator
does: a far-future lastDirtyTimestamp is lowered, lease times are capped, ids that are no path segment
are refused, and EUREKA_MAX_INSTANCES / EUREKA_MAX_METADATA_KEYS hold; issue 34, item 5: so does
EUREKA_MAX_INSTANCE_BYTES, for clients and peers. The rules themselves, with time moved past the 5
minutes, are tests/protocol/test_api_hostile_writes.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.factories import instance_body
from tests.interop.conftest import LiveServer, running_server

pytestmark = pytest.mark.live

FIVE_MINUTES = 5 * 60_000
JSON = {"Content-Type": "application/json", "Accept": "application/json"}


@pytest.fixture(scope="module")
def node_server(tmp_path_factory) -> Iterator[LiveServer]:
    limits = {
        "EUREKA_MAX_INSTANCES": "2",
        "EUREKA_MAX_METADATA_KEYS": "4",
        "EUREKA_MAX_LEASE_DURATION_SECONDS": "600",
        "EUREKA_MAX_INSTANCE_BYTES": "4096",
    }
    with running_server(tmp_path_factory.mktemp("hostile_writes"), limits) as server:
        yield server


@pytest.fixture
def registry(node_server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{node_server.base_url}/eureka/", timeout=10, headers=JSON) as client:
        yield client
        apps = client.get("apps").json()["applications"]["application"]
        for app in apps:
            for instance in app["instance"]:
                client.delete(f"apps/{app['name']}/{instance['instanceId']}")


def register(client: httpx.Client, body: dict) -> httpx.Response:
    return client.post(f"apps/{body['instance']['app']}", content=json.dumps(body))


def test_a_far_future_dirty_timestamp_is_lowered_and_a_week_long_lease_capped(registry):
    body = instance_body(
        app="PAY",
        host="10.6.6.6",
        instance_id="pay-1",
        last_dirty=2**63 - 1,
        leaseInfo={"renewalIntervalInSecs": 86_400, "durationInSecs": 7 * 86_400},
    )
    sent_at = int(time.time() * 1000)

    assert register(registry, body).status_code == 204

    served = registry.get("apps/PAY/pay-1").json()["instance"]
    # The node's clock and the test's are the same machine's; 10 s of slack for a slow start.
    assert sent_at + FIVE_MINUTES <= int(served["lastDirtyTimestamp"]) <= sent_at + FIVE_MINUTES + 10_000
    assert (served["leaseInfo"]["renewalIntervalInSecs"], served["leaseInfo"]["durationInSecs"]) == (600, 600)


def test_an_id_with_a_slash_is_refused_with_a_reason(registry):
    response = register(registry, instance_body(app="PAY", instance_id="pay/1"))

    assert response.status_code == 400
    assert "Invalid instanceId 'pay/1'" in response.text
    assert registry.get("apps/PAY").status_code == 404


def test_the_instance_and_metadata_limits_from_the_environment_hold(registry):
    for host in ("10.0.0.1", "10.0.0.2"):
        assert register(registry, instance_body(app="PAY", host=host)).status_code == 204

    third = register(registry, instance_body(app="PAY", host="10.0.0.3"))
    assert third.status_code == 503 and "maximum of 2 instances" in third.text
    assert registry.put("apps/PAY/10.0.0.1:pay:8080").status_code == 200

    metadata = "apps/PAY/10.0.0.1:pay:8080/metadata"
    assert registry.put(metadata, params={"a": "1", "b": "2", "c": "3", "d": "4"}).status_code == 200
    refused = registry.put(metadata, params={"e": "5"})
    assert refused.status_code == 400 and "5 keys" in refused.text
    assert registry.get("apps/PAY/10.0.0.1:pay:8080").json()["instance"]["metadata"] == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4",
    }


def test_the_record_size_limit_from_the_environment_holds_for_clients_and_peers(registry):
    # A 913 KB record in the issue; every field here alone is over the node's 4096 bytes.
    for field in ("homePageUrl", "vipAddress", "appGroupName"):
        refused = register(registry, instance_body(app="BIG", host="10.0.0.9", **{field: "x" * 5_000}))
        assert refused.status_code == 400, (field, refused.status_code)
        assert "Instance record too large" in refused.text and "at most 4096" in refused.text
    replicated = registry.post(
        "apps/BIG",
        content=json.dumps(instance_body(app="BIG", host="10.0.0.9", vipAddress="x" * 5_000)),
        headers={"x-netflix-discovery-replication": "true"},
    )
    assert replicated.status_code == 400 and "Instance record too large" in replicated.text
    assert registry.get("apps/BIG/10.0.0.9:big:8080").status_code == 404

    # Registered as a peer's copy, which EUREKA_MAX_INSTANCES never refuses (earlier tests filled it).
    home = "h" * 3_000
    copy = registry.post(
        "apps/BIG",
        content=json.dumps(instance_body(app="BIG", host="10.0.0.1", homePageUrl=home)),
        headers={"x-netflix-discovery-replication": "true"},
    )
    assert copy.status_code == 204
    grown = registry.put("apps/BIG/10.0.0.1:big:8080/metadata", params={"note": "n" * 1_200})
    assert grown.status_code == 400 and "Instance record too large" in grown.text
    assert "note" not in registry.get("apps/BIG/10.0.0.1:big:8080").json()["instance"]["metadata"]
    metrics = httpx.get(str(registry.base_url.join("/metrics")), timeout=10).text
    assert 'eureka_records_too_large_total{origin="client"} 4.0' in metrics
    assert 'eureka_records_too_large_total{origin="peer"} 1.0' in metrics
