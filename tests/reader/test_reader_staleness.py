"""A reader serves nothing older than EUREKA_READER_MAX_STALENESS_MS: when the node stops confirming
its payloads (cache sync stopped, Redis gone, node down) reads go to the node, and with the node down
they are a 503 that says so, never an old registry."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.factories import instance_body
from tests.interop.conftest import wait_until
from tests.reader.conftest import MAX_STALENESS_MS, ReaderStack

pytestmark = pytest.mark.integration

VIA = "1.1 eureka-reader"
APPS_JSON = {"Accept": "application/json", "Accept-Encoding": "identity"}
LONG_LEASE = {"renewalIntervalInSecs": 30, "durationInSecs": 3600}


def register(base: str, host: str) -> None:
    body = instance_body(app="STALE", host=host, leaseInfo=LONG_LEASE)
    assert httpx.post(f"{base}/eureka/apps/STALE", json=body, timeout=10).status_code == 204


def instance_id(host: str) -> str:
    return f"{host}:stale:8080"


def reader_apps(stack: ReaderStack) -> httpx.Response:
    return httpx.get(f"{stack.reader_url}/eureka/apps", headers=APPS_JSON, timeout=10)


def served_from_redis(stack: ReaderStack) -> httpx.Response:
    """Wait until the reader answers GET apps itself (no Via), and return that answer."""

    def served() -> httpx.Response | None:
        response = reader_apps(stack)
        return response if response.status_code == 200 and "Via" not in response.headers else None

    return wait_until(served, 15, "the reader did not serve GET apps from Redis")


def test_a_registration_is_visible_at_the_reader_within_the_bound(stack):
    served_from_redis(stack)  # the key is published and the reader serves it
    register(stack.url, "10.7.0.1")
    registered_at = time.monotonic()

    def visible() -> bool:
        response = reader_apps(stack)
        return instance_id("10.7.0.1") in response.text and "Via" not in response.headers

    wait_until(visible, 10, "the registration never showed at the reader")
    # Typically one cache sync (1 s) after the write. The reader serves nothing the node has not
    # confirmed within the bound (3 s); beat -> worker -> control endpoint on a loaded machine may add
    # a little to when the node publishes the change, hence the slack (as tests/integration allows).
    assert time.monotonic() - registered_at <= MAX_STALENESS_MS / 1000 + 2.0


def test_when_the_cache_sync_stops_reads_go_to_the_node_and_come_back_when_it_resumes(stack):
    before = served_from_redis(stack)
    assert before.status_code == 200
    stack.stop_celery()  # the only thing running the cache sync here (no watchdog in the node)
    try:
        register(stack.url, "10.7.0.2")  # changes the map; no sync will publish it
        # Once the bound has passed since the last sync, the reader no longer answers from Redis.
        forwarded = wait_until(
            lambda: (r := reader_apps(stack)).headers.get("Via") == VIA and r,
            MAX_STALENESS_MS / 1000 + 5,
            "the reader kept serving a payload older than the bound",
        )
        # What the node answered (here its own read-only tier, which nothing refreshes either).
        direct = httpx.get(f"{stack.url}/eureka/apps", headers=APPS_JSON, timeout=10)
        assert (forwarded.status_code, forwarded.content) == (direct.status_code, direct.content)
        ready = stack.reader_ready()
        assert ready["status"] == "degraded" and ready["redis"]["healthy"] is True
        assert ready["redis"]["last_sync_ms_ago"] > MAX_STALENESS_MS
        for _ in range(5):
            assert reader_apps(stack).headers.get("Via") == VIA, "never the old payload from Redis"
    finally:
        stack.start_celery()
    after = wait_until(
        lambda: (
            (r := reader_apps(stack)).headers.get("Via") is None and instance_id("10.7.0.2") in r.text and r
        ),
        20,
        "the reader did not serve from Redis again once the sync resumed",
    )
    assert after.status_code == 200
    wait_until(lambda: stack.reader_ready()["status"] == "ok", 10, "readyz did not say ok again")


def test_while_redis_is_down_reads_go_to_the_node(stack):
    served_from_redis(stack)
    stack.stop_redis()
    try:
        # A worker may still answer from the copy it checked against Redis within the last
        # EUREKA_READER_REVALIDATE_MS (fresh by the staleness bound); after that, the node answers.
        during = wait_until(
            lambda: (r := reader_apps(stack)).headers.get("Via") == VIA and r,
            5,
            "the reader did not send reads to the node while Redis was down",
        )
        assert during.status_code == 200
        assert instance_id("10.7.0.1") in during.text
        ready = httpx.get(f"{stack.reader_url}/readyz", timeout=5)
        assert ready.status_code == 503 and ready.json()["redis"]["healthy"] is False
    finally:
        stack.start_redis()
    # The node publishes everything again at its next sync after Redis is back.
    served_from_redis(stack)


def test_with_the_node_down_a_stale_payload_is_a_503_not_an_old_registry(stack):
    served_from_redis(stack)
    stack.stop_celery()
    stack.stop_node()
    down = wait_until(
        lambda: (r := reader_apps(stack)).status_code == 503 and r,
        MAX_STALENESS_MS / 1000 + 5,
        "the reader kept answering from Redis with the node down past the bound",
    )
    assert down.headers["Content-Type"].startswith("text/plain")
    assert f"registry node at http://127.0.0.1:{stack.port}" in down.text and "unreachable" in down.text
    # Writes and misses too: nothing can answer them.
    body = instance_body(app="STALE", host="10.7.0.3")
    write = httpx.post(f"{stack.reader_url}/eureka/apps/STALE", json=body, timeout=10)
    assert write.status_code == 503
    assert httpx.get(f"{stack.reader_url}/eureka/apps/NEVER-READ", timeout=10).status_code == 503
    # /readyz counts are per worker process, and any worker may answer it: ask until one that forwarded
    # (each of the requests above went to one worker or the other) does.
    ready = wait_until(
        lambda: (r := stack.reader_ready())["node"]["failures"] >= 1 and r,
        10,
        "no reader worker reported the node's failures",
    )
    assert "ConnectError" in ready["node"]["last_error"]
    assert ready["node"]["answering"] is False
