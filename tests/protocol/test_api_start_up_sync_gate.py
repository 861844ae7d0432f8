"""No registry read before the start-up sync (issue 35, point 4): a restarted node answered ``GET apps``
from its warm-restart snapshot ~1 s after launch, before its sync from peers landed. Until the sync is
done or has given up (``Registry.await_start_up_sync``, set by the node in post_worker_init when it
has peers) every registry read answers 503 with Retry-After, /readyz says not ready, writes are
accepted, and the cache sync publishes nothing for readers."""

from __future__ import annotations

import pytest

from registry.runtime import jobs
from tests.factories import instance_body
from tests.protocol.api_support import register

PREFIXES = ["/eureka/", "/eureka/v2/", "/eureka/v1/", "/eureka//"]
READS = [
    "apps",
    "apps/",
    "apps/delta",
    "apps/ORDERS",
    "apps/ORDERS/10.0.0.1:orders:8080",
    "instances/10.0.0.1:orders:8080",
    "vips/orders",
    "svips/orders",
]


@pytest.fixture
def starting(api, node):
    assert register(api, instance_body()).status_code == 204
    node.registry.await_start_up_sync()
    return node


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("path", READS)
def test_every_registry_read_answers_503_with_retry_after_until_the_sync_is_done(api, starting, prefix, path):
    for accept in ("application/json", "application/xml"):
        response = api.get(prefix + path, HTTP_ACCEPT=accept)
        assert response.status_code == 503, (prefix, path, accept)
        assert response["Retry-After"] == "1" and response.content == b""
    starting.registry.start_up_sync_done()
    assert api.get(prefix + path, HTTP_ACCEPT="application/json").status_code == 200


def test_writes_are_accepted_and_readyz_says_not_ready_while_the_sync_runs(api, starting, clock):
    assert register(api, instance_body(host="10.0.0.2")).status_code == 204
    assert api.put("/eureka/apps/ORDERS/10.0.0.2:orders:8080").status_code == 200
    assert api.put("/eureka/apps/ORDERS/10.0.0.2:orders:8080/status?value=OUT_OF_SERVICE").status_code == 200
    assert api.delete("/eureka/apps/ORDERS/10.0.0.2:orders:8080").status_code == 200
    ready = api.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["open_for_traffic"] is False and ready.json()["start_up_sync_pending"] is True
    starting.registry.open_for_traffic(1, clock())
    ready = api.get("/readyz")
    assert ready.status_code == 200 and ready.json()["start_up_sync_pending"] is False


def test_the_cache_sync_publishes_nothing_before_the_sync_is_done(starting, clock):
    assert jobs.sync_response_cache(starting, clock()) == 0
    starting.registry.start_up_sync_done()
    jobs.sync_response_cache(starting, clock())  # runs as before (nothing read yet: no key to keep)


@pytest.fixture
def waits_when_sync_empty(edit_config):
    """Eureka's own gate after a start-up sync that found no instances; request this before ``api``."""
    edit_config(registry__wait_time_in_ms_when_sync_empty=60_000, registry__default_open_for_traffic_count=0)


def test_eurekas_own_empty_sync_gate_still_answers_403(waits_when_sync_empty, api, node, clock):
    node.registry.open_for_traffic(0, clock())
    assert api.get("/eureka/apps/").status_code == 403
