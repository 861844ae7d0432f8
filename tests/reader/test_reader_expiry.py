"""Live, production mode: the node drops the Redis payloads nobody reads for the response cache's expiry
time, and keeps those that only readers read (the node never sees those reads). A stack of its own,
with a 3 s expiry instead of 180 s."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis

from tests.factories import instance_body
from tests.interop.conftest import wait_until
from tests.reader.conftest import ReaderStack, start_stack
from tests.reader.test_reader_live import VIA, node_operation_count

pytestmark = pytest.mark.integration

EXPIRY_S = 3
LONG_LEASE = {"renewalIntervalInSecs": 30, "durationInSecs": 3600}
HEADERS = {"Accept": "application/json", "Accept-Encoding": "gzip"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[ReaderStack]:
    started = start_stack(
        tmp_path_factory.mktemp("reader-expiry"),
        EUREKA_RESPONSE_CACHE_AUTO_EXPIRATION_SECONDS=str(EXPIRY_S),
        workers=1,
    )
    try:
        yield started
    finally:
        started.stop_all()


def test_a_key_only_readers_read_stays_in_redis_and_one_nobody_reads_leaves_it(stack):
    for app, host in (("KEPT", "10.8.0.1"), ("GONE", "10.8.0.2")):
        body = instance_body(app=app, host=host, leaseInfo=LONG_LEASE)
        assert httpx.post(f"{stack.url}/eureka/apps/{app}", json=body, timeout=10).status_code == 204
    redis = Redis.from_url(stack.redis_url)
    kept, gone = "eureka:ro:app:json:0:KEPT", "eureka:ro:app:json:0:GONE"
    with httpx.Client(timeout=10) as client:
        # Each read once at the node, which publishes it for the readers.
        for app in ("KEPT", "GONE"):
            assert client.get(f"{stack.url}/eureka/apps/{app}", headers=HEADERS).status_code == 200
        assert redis.exists(kept) and redis.exists(gone)
        wait_until(
            lambda: (
                client.get(f"{stack.reader_url}/eureka/apps/KEPT", headers=HEADERS).headers.get("Via") is None
            ),
            10,
            "the reader never served KEPT from Redis",
        )
        asked = node_operation_count(stack, "app")
        # Three expiry times of reads at the reader only; the node sees none of them.
        deadline = time.monotonic() + 3 * EXPIRY_S
        reads = 0
        while time.monotonic() < deadline:
            response = client.get(f"{stack.reader_url}/eureka/apps/KEPT", headers=HEADERS)
            assert response.status_code == 200 and response.headers.get("Via") != VIA, (
                f"after {reads} reads KEPT was no longer in Redis: the node dropped a key its readers read"
            )
            reads += 1
            time.sleep(0.2)
        assert node_operation_count(stack, "app") == asked, "every read was the reader's own"
        assert redis.exists(kept)
        # GONE, read by nobody since: out of Redis within the expiry time and a sync or two.
        wait_until(lambda: not redis.exists(gone), 2 * EXPIRY_S, "GONE was never taken out of Redis")
        marks = {member.decode() for member in redis.zrange("eureka:ro:_read", 0, -1)}
        assert kept in marks and gone not in marks
        # Its next read goes to the node, which publishes it again.
        response = client.get(f"{stack.reader_url}/eureka/apps/GONE", headers=HEADERS)
        assert response.status_code == 200 and response.headers.get("Via") == VIA
        assert redis.exists(gone)
