"""The read-only response cache lives in Redis; a Redis outage degrades the node but never stops it."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest
from redis import Redis

from tests.factories import instance_body
from tests.interop.conftest import wait_until

pytestmark = pytest.mark.integration

JSON = {"Accept": "application/json"}
FULL_JSON_KEY = "eureka:ro:apps:json:0:"


def apps_hashcode(base: str) -> str:
    return httpx.get(f"{base}/eureka/apps", headers=JSON, timeout=5).json()["applications"]["apps__hashcode"]


def register(base: str, host: str) -> None:
    body = instance_body(app="TIER", host=host)
    assert httpx.post(f"{base}/eureka/apps/TIER", json=body, timeout=5).status_code == 204


def test_full_registry_is_published_to_redis_with_its_gzip_copy_and_build_time(topology):
    register(topology.url, "10.8.0.1")
    wait_until(lambda: "UP_" in apps_hashcode(topology.url), 10, "registration never became visible")
    served = httpx.get(f"{topology.url}/eureka/apps", headers=JSON, timeout=5).content
    stored = Redis.from_url(topology.redis_url).hgetall(FULL_JSON_KEY)
    assert stored[b"body"] == served
    assert int(stored[b"built_at"]) > 0

    assert gzip.decompress(stored[b"gzip"]) == served
    assert topology.ready()["read_only_cache"] == "redis"


def test_registration_is_visible_after_a_few_cache_syncs_not_after_thirty_seconds(topology):
    # The sync runs every second here (beat -> broker -> solo worker -> control endpoint); on a quiet
    # machine a write shows in 0.2-0.7 s, with the odd 1.7 s when a tick queues behind the other jobs.
    # The bound leaves room for a loaded CI machine yet stays far from Eureka's 30 s read-only cache.
    register(topology.url, "10.8.0.2")
    wait_until(
        lambda: (
            "10.8.0.2:tier:8080" in httpx.get(f"{topology.url}/eureka/apps", headers=JSON, timeout=5).text
        ),
        5.0,
        "not visible in GET /eureka/apps within 5 s (five cache-sync intervals)",
    )


def test_redis_outage_degrades_the_node_which_keeps_serving_then_recovers(topology):
    topology.stop_redis()
    try:
        # Reads are answered from the in-process tiers, writes are accepted.
        assert httpx.get(f"{topology.url}/eureka/apps", headers=JSON, timeout=5).status_code == 200
        register(topology.url, "10.8.0.3")
        wait_until(
            lambda: (
                "10.8.0.3:tier:8080"
                in httpx.get(f"{topology.url}/eureka/apps/TIER", headers=JSON, timeout=5).text
            ),
            5,
            "a write during the outage never became visible",
        )
        wait_until(lambda: topology.ready()["status"] == "degraded", 5, "readyz did not report the outage")
        ready = httpx.get(f"{topology.url}/readyz", timeout=5)
        assert ready.status_code == 200, "degraded is still ready: the node serves"
        assert json.loads(ready.content)["redis"]["healthy"] is False
    finally:
        topology.start_redis()
    wait_until(lambda: topology.ready()["redis"]["healthy"], 15, "the node did not go back to Redis")
    wait_until(
        lambda: Redis.from_url(topology.redis_url).hget(FULL_JSON_KEY, "body") is not None,
        10,
        "the tier was not republished after Redis came back",
    )
    stored = Redis.from_url(topology.redis_url).hget(FULL_JSON_KEY, "body")
    assert b"10.8.0.3:tier:8080" in stored
