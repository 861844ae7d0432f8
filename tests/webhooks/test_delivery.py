"""From the change log to the receiver: the relay queues matching changes, the sender posts them signed,
retries what may succeed later, and the log says how each went. Real database, real HTTP receiver."""

from __future__ import annotations

import hashlib
import hmac
import logging
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from registry.domain.changes import CANCELLED, REGISTERED, STATUS_CHANGED
from registry.webhooks import store
from registry.webhooks.models import WebhookDelivery
from registry.webhooks.relay import ChangeBuffer
from registry.webhooks.sender import deliver_due
from tests.factories import instance_body

from .conftest import subscribe

pytestmark = pytest.mark.django_db
Status = WebhookDelivery.Status


def register(api, app="ORDERS", host="10.0.0.1"):
    body = instance_body(app=app, host=host)
    assert api.post(f"/eureka/apps/{app}", body, format="json").status_code == 204
    return body["instance"]["instanceId"]


def verify(secret: str, request) -> bool:
    """The receiver's side of the scheme, written from docs/webhooks.md, not from the sender's code."""
    signed = request.headers["x-eureka-timestamp"].encode() + b"." + request.body
    expected = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, request.headers["x-eureka-signature"])


def test_matching_changes_become_pending_deliveries_in_change_order(api, relay):
    subscribe("http://127.0.0.1:9/hook", apps="orders")
    relay.reload()
    first = register(api)
    register(api, app="BILLING", host="10.0.0.2")
    assert api.put(f"/eureka/apps/ORDERS/{first}/status?value=OUT_OF_SERVICE").status_code == 200
    assert api.delete(f"/eureka/apps/ORDERS/{first}").status_code == 200
    assert relay.flush() == 3
    rows = list(WebhookDelivery.objects.order_by("id"))
    assert [row.action for row in rows] == [REGISTERED, STATUS_CHANGED, CANCELLED]
    assert {row.app for row in rows} == {"ORDERS"}
    assert all(row.status == Status.PENDING and row.attempts == 0 for row in rows)
    assert [row.change_id for row in rows] == sorted(row.change_id for row in rows)
    assert rows[1].payload["newStatus"] == "OUT_OF_SERVICE" and rows[1].payload["subscription"] == "ops"


def test_with_no_enabled_subscription_changes_are_not_even_buffered(api, relay):
    subscribe("http://127.0.0.1:9/hook", enabled=False)
    relay.reload()
    register(api)
    assert len(relay.buffer) == 0
    assert relay.flush() == 0 and WebhookDelivery.objects.count() == 0


def test_a_subscription_saved_in_this_process_applies_to_the_next_change(
    api, relay, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        subscribe("http://127.0.0.1:9/hook")
    register(api)
    assert relay.flush() == 1


def test_flushing_the_same_change_twice_queues_it_once(api, relay):
    subscribe("http://127.0.0.1:9/hook")
    relay.reload()
    register(api)
    change = relay.buffer.drain()[0]
    for _ in range(2):
        relay.buffer.append(change)
        relay.flush()
    assert WebhookDelivery.objects.count() == 1


def test_a_full_buffer_drops_the_oldest_and_says_so_once_per_burst(relay, caplog):
    buffer = ChangeBuffer(3)
    for n in range(5):
        buffer.append(n)
    assert buffer.drain() == [2, 3, 4] and buffer.dropped == 2
    relay.buffer = buffer
    with caplog.at_level(logging.WARNING, logger="registry.webhooks.relay"):
        relay.flush()
        for n in range(5, 9):
            buffer.append(n)
        relay.flush()  # the same burst goes on: no new line
        relay.flush()  # nothing dropped since: the burst is over
    lines = [record.getMessage() for record in caplog.records]
    assert len([line for line in lines if "buffer full" in line]) == 1, lines
    assert any("3 changes dropped in all" in line for line in lines), lines


def test_a_database_that_keeps_failing_is_logged_once_and_its_recovery_once(relay, caplog, monkeypatch):
    """Steps in between that do not ask the database (no change, reload not due) are not a recovery."""
    answers = {"up": False}

    def enabled_targets():
        if not answers["up"]:
            raise OperationalError("no such table: registry_webhooksubscription")
        return []

    monkeypatch.setattr(store, "enabled_targets", enabled_targets)
    with caplog.at_level(logging.WARNING, logger="registry.webhooks.relay"):
        for _ in range(3):
            relay._reload_soon()  # a reload due: it fails
            relay._flush_step()
            relay._flush_step()  # nothing due, nothing to queue: not a recovery
        answers["up"] = True
        relay._reload_soon()
        relay._flush_step()
        relay._flush_step()
    lines = [record.getMessage() for record in caplog.records]
    assert len([line for line in lines if "could not queue" in line]) == 1, lines
    assert len([line for line in lines if "queued again" in line]) == 1, lines
    assert "queued again" in lines[-1], lines


def test_a_delivery_is_posted_signed_with_the_documented_headers(api, relay, receiver, http, config):
    subscribe(receiver.url, secret="topsecret")
    relay.reload()
    instance_id = register(api)
    relay.flush()
    assert deliver_due(http, config) == 1
    [request] = receiver.received()
    row = WebhookDelivery.objects.get()
    assert verify("topsecret", request)
    assert not verify("wrong", request)
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-eureka-event"] == REGISTERED
    assert request.headers["x-eureka-delivery"] == str(row.id)
    assert request.json() == {**row.payload, "instanceId": instance_id, "app": "ORDERS"}
    assert set(request.json()) == {
        "id", "timestamp", "app", "instanceId", "action", "oldStatus", "newStatus",
        "overriddenStatus", "replicated", "subscription",
    }  # fmt: skip
    assert (row.status, row.attempts, row.last_status_code, row.last_error) == (Status.DELIVERED, 1, 200, "")
    assert row.delivered_at is not None


def test_a_server_error_is_retried_after_the_backoff_then_delivered(api, relay, receiver, http, config):
    subscribe(receiver.url)
    relay.reload()
    register(api)
    relay.flush()
    receiver.answer(500)
    started = timezone.now()
    deliver_due(http, config)
    row = WebhookDelivery.objects.get()
    assert (row.status, row.attempts, row.last_status_code) == (Status.PENDING, 1, 500)
    assert row.last_error == "HTTP 500 Internal Server Error"
    assert row.next_attempt_at >= started + timedelta(seconds=1)
    assert deliver_due(http, config) == 0, "not due before its backoff"
    later = row.next_attempt_at + timedelta(milliseconds=1)
    assert deliver_due(http, config, now=lambda: later) == 1
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_status_code) == (Status.DELIVERED, 2, 200)
    assert len(receiver.received()) == 2
    assert receiver.received()[0].body == receiver.received()[1].body


def test_a_client_error_fails_at_once_and_retryable_ones_fail_when_attempts_run_out(
    api, relay, receiver, http, config
):
    subscribe(receiver.url)
    relay.reload()
    register(api)
    register(api, host="10.0.0.2")
    relay.flush()
    receiver.answer(404, 429)
    deliver_due(http, config)
    refused, throttled = WebhookDelivery.objects.order_by("id")
    assert (refused.status, refused.attempts, refused.last_status_code) == (Status.FAILED, 1, 404)
    assert (throttled.status, throttled.attempts) == (Status.PENDING, 1)
    receiver.answer(503, 503)
    at = timezone.now()
    for _ in range(2):
        at += timedelta(minutes=5)
        deliver_due(http, config, now=lambda at=at: at)
    throttled.refresh_from_db()
    assert (throttled.status, throttled.attempts, throttled.last_status_code) == (Status.FAILED, 3, 503)
    assert len(receiver.received()) == 4


def test_a_receiver_that_does_not_answer_holds_up_only_its_own_deliveries(api, relay, receiver, http, config):
    from .receiver import Receiver

    with Receiver() as healthy:
        subscribe(receiver.url, name="slow")
        subscribe(healthy.url, name="healthy")
        relay.reload()
        register(api)
        register(api, host="10.0.0.2")
        relay.flush()
        receiver.hang(10)
        deliver_due(http, config)
        receiver.release()
        assert len(healthy.received()) == 2
    slow = list(WebhookDelivery.objects.filter(subscription__name="slow").order_by("id"))
    assert (slow[0].status, slow[0].attempts, slow[0].last_status_code) == (Status.PENDING, 1, None)
    assert slow[0].last_error == "no answer within 1 s"
    # Its next delivery was not tried behind the first one's timeout, and is due again at once.
    assert (slow[1].attempts, slow[1].claim) == (0, "") and slow[1].next_attempt_at <= timezone.now()
    assert len(receiver.received()) == 1


def test_a_claimed_delivery_goes_to_one_sender_until_its_claim_runs_out(api, relay):
    subscribe("http://127.0.0.1:9/hook")
    relay.reload()
    for n in range(4):
        register(api, host=f"10.0.0.{n + 1}")
    relay.flush()
    now = timezone.now()
    hold = timedelta(seconds=60)
    first_token, first = store.claim_due(now, 3, hold)
    second_token, second = store.claim_due(now, 3, hold)
    assert len(first) == 3 and len(second) == 1 and first_token != second_token
    assert not {d.id for d in first} & {d.id for d in second}
    assert store.claim_due(now, 10, hold) == ("", [])
    # A sender that died: its deliveries are due again once the hold is over, and it may no longer
    # record an outcome for them.
    token, again = store.claim_due(now + hold + timedelta(seconds=1), 10, hold)
    assert len(again) == 4
    from registry.webhooks.policy import Verdict

    assert not store.record(first[0], first_token, Verdict.DELIVERED, 200, "", now, None)
    assert store.record(again[0], token, Verdict.DELIVERED, 200, "", now, None)


def test_deliveries_of_a_disabled_subscription_wait(api, relay):
    subscription = subscribe("http://127.0.0.1:9/hook")
    relay.reload()
    register(api)
    relay.flush()
    subscription.enabled = False
    subscription.save()
    assert store.claim_due(timezone.now(), 10, timedelta(seconds=60)) == ("", [])


def test_retry_now_makes_failed_and_pending_deliveries_due_and_leaves_delivered_ones(api, relay):
    subscribe("http://127.0.0.1:9/hook")
    relay.reload()
    for n in range(3):
        register(api, host=f"10.0.0.{n + 1}")
    relay.flush()
    later = timezone.now() + timedelta(hours=1)
    failed, waiting, delivered = WebhookDelivery.objects.order_by("id")
    WebhookDelivery.objects.filter(id=failed.id).update(status=Status.FAILED, attempts=3)
    WebhookDelivery.objects.filter(id=waiting.id).update(next_attempt_at=later)
    WebhookDelivery.objects.filter(id=delivered.id).update(status=Status.DELIVERED)
    now = timezone.now()
    assert store.retry_now(WebhookDelivery.objects.all(), now) == 2
    failed.refresh_from_db(), waiting.refresh_from_db(), delivered.refresh_from_db()
    assert (failed.status, failed.attempts, failed.next_attempt_at) == (Status.PENDING, 3, now)
    assert waiting.next_attempt_at == now
    assert delivered.status == Status.DELIVERED


def test_the_prune_job_deletes_finished_deliveries_past_retention_only(api, relay, node, clock):
    subscribe("http://127.0.0.1:9/hook")
    relay.reload()
    for n in range(4):
        register(api, host=f"10.0.0.{n + 1}")
    relay.flush()
    old = timezone.now() - timedelta(days=relay.webhooks_config.retention_days, minutes=1)
    rows = list(WebhookDelivery.objects.order_by("id"))
    for row, status in zip(rows, (Status.DELIVERED, Status.FAILED, Status.PENDING), strict=False):
        WebhookDelivery.objects.filter(id=row.id).update(status=status, created_at=old)
    assert node.run_job("prune_webhook_deliveries", clock.now, "scheduler") == 2
    assert sorted(WebhookDelivery.objects.values_list("id", flat=True)) == [rows[2].id, rows[3].id]
