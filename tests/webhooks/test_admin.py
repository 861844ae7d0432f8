"""The admin pages of webhooks: subscriptions with a write-only secret and validated fields, and the
read-only delivery log with its filters and "retry now" action."""

from __future__ import annotations

from datetime import timedelta

import pytest
from bs4 import BeautifulSoup
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from registry.webhooks.models import WebhookDelivery, WebhookSubscription

from .conftest import subscribe

pytestmark = pytest.mark.django_db
Status = WebhookDelivery.Status
ADD_URL = "/admin/registry/webhooksubscription/add/"
DELIVERIES = "/admin/registry/webhookdelivery/"


def form(**fields):
    return {
        "name": "ops",
        "url": "https://hooks.example.com/eureka",
        "enabled": "on",
        "apps": "",
        "actions": "",
        "secret": "s3cret-value",
        **fields,
    }


def errors(response) -> str:
    page = BeautifulSoup(response.content, "html.parser")
    return " ".join(node.get_text(" ", strip=True) for node in page.select(".errorlist"))


def delivery(subscription, change_id, status=Status.PENDING, **fields) -> WebhookDelivery:
    return WebhookDelivery.objects.create(
        subscription=subscription,
        change_id=change_id,
        action="REGISTERED",
        app="ORDERS",
        instance_id=f"i-{change_id}",
        payload={"id": change_id},
        status=status,
        **fields,
    )


def test_a_valid_subscription_is_added_with_its_filters_normalised(admin_client):
    response = admin_client.post(ADD_URL, form(apps="orders, billing", actions="cancelled,registered"))
    assert response.status_code == 302, errors(response)
    saved = WebhookSubscription.objects.get()
    assert (saved.apps, saved.actions, saved.secret) == (
        "BILLING,ORDERS",
        "REGISTERED,CANCELLED",
        "s3cret-value",
    )


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"url": "ftp://hooks.example.com/x"}, "http:// or https://"),
        ({"url": "http://user:pw@hooks.example.com/"}, "credentials"),
        ({"actions": "REGISTERED,DELETED"}, "unknown action(s) DELETED"),
        ({"secret": ""}, "A secret is required"),
    ],
)
def test_an_invalid_subscription_is_refused_with_the_reason_and_nothing_saved(admin_client, fields, message):
    response = admin_client.post(ADD_URL, form(**fields))
    assert response.status_code == 200
    assert message in errors(response)
    assert WebhookSubscription.objects.count() == 0


def test_the_secret_is_never_shown_and_an_empty_field_keeps_it(admin_client):
    subscription = subscribe("https://hooks.example.com/eureka", secret="very-secret-value")
    listing = admin_client.get("/admin/registry/webhooksubscription/")
    assert listing.status_code == 200 and b"ops" in listing.content
    assert b"very-secret-value" not in listing.content
    url = f"/admin/registry/webhooksubscription/{subscription.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200 and b"very-secret-value" not in page.content
    response = admin_client.post(url, form(url="https://other.example.com/hook", secret=""))
    assert response.status_code == 302, errors(response)
    subscription.refresh_from_db()
    assert (subscription.url, subscription.secret) == ("https://other.example.com/hook", "very-secret-value")
    admin_client.post(url, form(secret="rotated"))
    subscription.refresh_from_db()
    assert subscription.secret == "rotated"


def test_the_delivery_log_lists_attempts_and_errors_and_filters_by_status_and_subscription(admin_client):
    ops = subscribe("https://hooks.example.com/a")
    audit = subscribe("https://hooks.example.com/b", name="audit")
    delivery(
        ops, 1, Status.FAILED, attempts=8, last_status_code=503, last_error="HTTP 503 Service Unavailable"
    )
    delivery(ops, 2, Status.DELIVERED, attempts=1, last_status_code=200)
    delivery(audit, 3)
    page = admin_client.get(DELIVERIES)
    assert page.status_code == 200
    text = BeautifulSoup(page.content, "html.parser").get_text(" ")
    assert "HTTP 503 Service Unavailable" in text and "i-1" in text and "i-3" in text
    failed = admin_client.get(DELIVERIES, {"status__exact": "failed"})
    rows = BeautifulSoup(failed.content, "html.parser").select("#result_list tbody tr")
    assert len(rows) == 1 and "i-1" in rows[0].get_text()
    of_audit = admin_client.get(DELIVERIES, {"subscription__id__exact": audit.pk})
    rows = BeautifulSoup(of_audit.content, "html.parser").select("#result_list tbody tr")
    assert len(rows) == 1 and "i-3" in rows[0].get_text()


def test_the_delivery_log_is_read_only(admin_client):
    row = delivery(subscribe("https://hooks.example.com/a"), 1)
    assert admin_client.get(f"{DELIVERIES}add/").status_code == 403
    detail = admin_client.get(f"{DELIVERIES}{row.pk}/change/")
    assert detail.status_code == 200 and b'name="_save"' not in detail.content
    assert b"&quot;id&quot;: 1" in detail.content or b'"id": 1' in detail.content


def test_retry_now_makes_the_chosen_deliveries_due_again(admin_client):
    ops = subscribe("https://hooks.example.com/a")
    later = timezone.now() + timedelta(hours=1)
    failed = delivery(ops, 1, Status.FAILED, attempts=8, next_attempt_at=later)
    done = delivery(ops, 2, Status.DELIVERED, attempts=1)
    untouched = delivery(ops, 3, Status.FAILED, attempts=8, next_attempt_at=later)
    response = admin_client.post(
        DELIVERIES, {"action": "retry_now", "_selected_action": [failed.pk, done.pk]}, follow=True
    )
    assert response.status_code == 200
    assert "1 delivery will be sent again now. 1 already delivered left alone." in response.content.decode()
    failed.refresh_from_db(), done.refresh_from_db(), untouched.refresh_from_db()
    assert failed.status == Status.PENDING and failed.next_attempt_at <= timezone.now()
    assert failed.attempts == 8, "the log keeps the attempts made so far"
    assert done.status == Status.DELIVERED
    assert untouched.status == Status.FAILED


def test_staff_without_the_change_permission_may_look_but_not_retry(client):
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_webhookdelivery"))
    client.force_login(viewer)
    row = delivery(subscribe("https://hooks.example.com/a"), 1, Status.FAILED)
    page = client.get(DELIVERIES)
    assert page.status_code == 200 and b"retry_now" not in page.content
    client.post(DELIVERIES, {"action": "retry_now", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.status == Status.FAILED
