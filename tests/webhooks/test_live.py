"""A live node (gunicorn, embedded mode) and a real receiver: changes made through the Eureka API arrive
signed and in order, 500s are retried until delivered, and a receiver that hangs does not slow the
heartbeats."""

from __future__ import annotations

import statistics
import time

import httpx
import pytest

from tests.factories import instance_body
from tests.interop.conftest import running_server, server_env, wait_until

from .live import deliveries, prepare_database, signed_correctly
from .receiver import Receiver

pytestmark = pytest.mark.live

WEBHOOK_ENV = {
    "EUREKA_WEBHOOK_TIMEOUT_MS": "1500",
    "EUREKA_WEBHOOK_RETRY_BASE_MS": "200",
    "EUREKA_WEBHOOK_RETRY_MAX_MS": "1000",
    "EUREKA_WEBHOOK_MAX_ATTEMPTS": "8",
}


@pytest.fixture(scope="module")
def receiver():
    with Receiver() as running:
        yield running


@pytest.fixture(scope="module")
def node(tmp_path_factory, receiver):
    workdir = tmp_path_factory.mktemp("webhooks-live")
    prepare_database(server_env(workdir, WEBHOOK_ENV), receiver.url, apps="ORDERS")
    with running_server(workdir, WEBHOOK_ENV) as server:
        server.database = workdir / "db.sqlite3"
        yield server


def register(base: str, host: str, app: str = "ORDERS") -> str:
    body = instance_body(app=app, host=host)
    assert httpx.post(f"{base}/eureka/apps/{app}", json=body, timeout=5).status_code == 204
    return body["instance"]["instanceId"]


def delivered_payloads(receiver: Receiver, instance_id: str) -> list[dict]:
    return [r.json() for r in receiver.received() if r.json()["instanceId"] == instance_id]


def test_register_override_and_cancel_arrive_signed_and_in_order(node, receiver):
    base = node.base_url
    instance_id = register(base, "10.1.0.1")
    register(base, "10.1.0.2", app="BILLING")  # not subscribed
    url = f"{base}/eureka/apps/ORDERS/{instance_id}"
    assert httpx.put(f"{url}/status", params={"value": "OUT_OF_SERVICE"}, timeout=5).status_code == 200
    assert httpx.delete(url, timeout=5).status_code == 200
    wait_until(lambda: len(delivered_payloads(receiver, instance_id)) >= 3, 15, lambda: receiver.received())
    requests = [r for r in receiver.received() if r.json()["instanceId"] == instance_id]
    assert [r.json()["action"] for r in requests] == ["REGISTERED", "STATUS_CHANGED", "CANCELLED"]
    assert [r.headers["x-eureka-event"] for r in requests] == ["REGISTERED", "STATUS_CHANGED", "CANCELLED"]
    assert all(signed_correctly(r) for r in requests)
    override = requests[1].json()
    assert (override["oldStatus"], override["newStatus"], override["subscription"]) == (
        "UP",
        "OUT_OF_SERVICE",
        "live",
    )
    ids = [r.json()["id"] for r in requests]
    assert ids == sorted(ids)
    assert not [r for r in receiver.received() if r.json()["app"] == "BILLING"]

    def outcomes() -> list[tuple[str, int]]:
        rows = deliveries(node.database)
        return [(row["status"], row["attempts"]) for row in rows if row["change_id"] in ids]

    # The sender records each outcome once the receiver has answered: a moment after the POST arrived.
    wait_until(lambda: outcomes() == [("delivered", 1)] * 3, 10, lambda: outcomes())


def test_server_errors_are_retried_until_delivered_and_the_log_counts_the_attempts(node, receiver):
    receiver.answer(500, 502)
    instance_id = register(node.base_url, "10.1.0.3")
    wait_until(lambda: len(delivered_payloads(receiver, instance_id)) >= 3, 15, lambda: receiver.received())
    bodies = [r.body for r in receiver.received() if r.json()["instanceId"] == instance_id]
    assert len(set(bodies)) == 1, "each retry sends the same payload"
    change_id = delivered_payloads(receiver, instance_id)[0]["id"]
    wait_until(
        lambda: (
            [r for r in deliveries(node.database) if r["change_id"] == change_id][0]["status"] == "delivered"
        ),
        10,
        "the delivery was not recorded as delivered",
    )
    [row] = [r for r in deliveries(node.database) if r["change_id"] == change_id]
    assert (row["attempts"], row["last_status_code"], row["last_error"]) == (3, 200, "")


def time_renews(base: str, app: str, instance_id: str, count: int) -> list[float]:
    took = []
    with httpx.Client(base_url=base, timeout=10) as client:
        for _ in range(count):
            started = time.perf_counter()
            assert client.put(f"/eureka/apps/{app}/{instance_id}").status_code == 200
            took.append(time.perf_counter() - started)
    return took


def test_a_receiver_that_hangs_does_not_slow_heartbeats(node, receiver):
    base = node.base_url
    instance_id = register(base, "10.1.0.4", app="HEARTBEATS")
    before = time_renews(base, "HEARTBEATS", instance_id, 200)
    receiver.hang(60)
    try:
        # Changes the receiver will not answer: the node's delivery thread waits on it, retrying.
        hung_ids = [register(base, f"10.1.1.{n}") for n in range(1, 4)]
        wait_until(
            lambda: any(r.json()["instanceId"] in hung_ids for r in receiver.received()), 10, "no POST"
        )
        during = time_renews(base, "HEARTBEATS", instance_id, 200)
        wait_until(
            lambda: any(r["last_error"].startswith("no answer within") for r in deliveries(node.database)),
            10,
            lambda: f"no timeout recorded: {deliveries(node.database)}",
        )
    finally:
        receiver.release()
    report = (
        f"200 renews before: {sum(before):.2f} s (median {statistics.median(before) * 1000:.1f} ms); "
        f"while the receiver hangs: {sum(during):.2f} s (median {statistics.median(during) * 1000:.1f} ms, "
        f"max {max(during) * 1000:.0f} ms)"
    )
    print(report)  # noqa: T201 (the measured numbers, shown with -s)
    # Generous bounds on a shared machine: the hang (1.5 s timeouts, back to back) must not show up.
    assert sum(during) < max(5.0, 3 * sum(before)), report
    assert max(during) < 1.0, report
    # Once the receiver answers again, what it missed is delivered.
    wait_until(
        lambda: all(
            any(p["action"] == "REGISTERED" for p in delivered_payloads(receiver, i)) for i in hung_ids
        ),
        20,
        "the hung deliveries were not retried",
    )
    hung = [r for r in deliveries(node.database) if r["app"] == "ORDERS" and r["attempts"] > 1]
    assert hung, "the log shows the retried deliveries"
