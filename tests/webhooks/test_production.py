"""Production mode: the node queues deliveries, the Celery worker sends them (kicked by the node, and
by beat as the safety net). Real redis-server, gunicorn node, Celery worker and beat; skipped without
redis-server (a failure under EUREKA_REQUIRE_ALL_SUITES=1)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.factories import instance_body
from tests.integration.conftest import production_topology
from tests.interop.conftest import wait_until

from .live import deliveries, prepare_database, signed_correctly
from .receiver import Receiver

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def receiver():
    with Receiver() as running:
        yield running


@pytest.fixture(scope="module")
def production(tmp_path_factory, receiver):
    extra_env = {
        "EUREKA_WEBHOOK_TIMEOUT_MS": "1500",
        "EUREKA_WEBHOOK_RETRY_BASE_MS": "300",
        "EUREKA_WEBHOOK_POLL_MS": "500",
    }
    with production_topology(
        tmp_path_factory.mktemp("webhooks-production"),
        extra_env,
        prepare=lambda env: prepare_database(env, receiver.url),
    ) as processes:
        yield processes


def register(base: str, host: str) -> str:
    body = instance_body(app="ORDERS", host=host)
    assert httpx.post(f"{base}/eureka/apps/ORDERS", json=body, timeout=5).status_code == 204
    return body["instance"]["instanceId"]


def received_for(receiver: Receiver, instance_id: str):
    return [r for r in receiver.received() if r.json()["instanceId"] == instance_id]


def test_the_celery_worker_delivers_signed_changes(production, receiver):
    instance_id = register(production.url, "10.2.0.1")
    assert httpx.delete(f"{production.url}/eureka/apps/ORDERS/{instance_id}", timeout=5).status_code == 200
    wait_until(lambda: len(received_for(receiver, instance_id)) >= 2, 20, lambda: receiver.received())
    requests = received_for(receiver, instance_id)
    assert [r.json()["action"] for r in requests] == ["REGISTERED", "CANCELLED"]
    assert all(signed_correctly(r) for r in requests)
    delivered_ids = {r.json()["id"] for r in requests}

    def statuses() -> list[str]:
        return [row["status"] for row in deliveries(production.database) if row["change_id"] in delivered_ids]

    # The worker records the outcome once the receiver has answered: a moment after the POST arrived.
    wait_until(lambda: statuses() == ["delivered", "delivered"], 10, lambda: statuses())


def test_without_celery_nothing_is_sent_and_the_worker_catches_up_when_back(production, receiver):
    production.stop_celery()
    try:
        instance_id = register(production.url, "10.2.0.2")
        # The node queues the delivery but does not send it itself in production mode.
        wait_until(
            lambda: any(row["status"] == "pending" for row in deliveries(production.database)),
            10,
            "the node did not queue the delivery",
        )
        time.sleep(2)
        assert received_for(receiver, instance_id) == []
        receiver.answer(503)
    finally:
        production.start_celery()
    # Beat's run (or a later kick) sends it; the 503 is retried by the worker.
    wait_until(lambda: len(received_for(receiver, instance_id)) >= 2, 30, lambda: receiver.received())
    change_id = received_for(receiver, instance_id)[0].json()["id"]
    wait_until(
        lambda: (
            [r for r in deliveries(production.database) if r["change_id"] == change_id][0]["status"]
            == "delivered"
        ),
        10,
        "not recorded as delivered",
    )
    [row] = [r for r in deliveries(production.database) if r["change_id"] == change_id]
    assert (row["attempts"], row["last_status_code"]) == (2, 200)
