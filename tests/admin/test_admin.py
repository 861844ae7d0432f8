"""Status overrides from the Django admin: each action, its audit record, permissions and bad input."""

from __future__ import annotations

from unittest import mock

import pytest
from bs4 import BeautifulSoup
from django.contrib.auth.models import Permission, User
from django.db import DatabaseError
from django.test import Client

from registry.domain import constants as c
from registry.models import StatusOverrideRecord
from tests.factories import instance_body

pytestmark = pytest.mark.django_db

Action = StatusOverrideRecord.Action
Outcome = StatusOverrideRecord.Outcome
LIST_URL = "/admin/registry/instances/"


def page_url(instance_id: str, app: str = "ORDERS") -> str:
    return f"/admin/registry/instances/{app}/{instance_id}/"


def register(client, host: str, app: str = "ORDERS") -> str:
    body = instance_body(app=app, host=host)
    assert client.post(f"/eureka/apps/{app}", body, content_type="application/json").status_code == 204
    return body["instance"]["instanceId"]


def wire(client, instance_id: str, app: str = "ORDERS") -> dict:
    response = client.get(f"/eureka/apps/{app}/{instance_id}", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()["instance"]


def messages_of(response) -> list[str]:
    return [m.message for m in response.context["messages"]] if response.context else []


@pytest.fixture
def fleet(node, admin_client):
    return [register(admin_client, f"10.0.0.{n}") for n in (1, 2, 3)]


@pytest.fixture
def operator(db) -> User:
    """Staff who may view instances but not change them."""
    return User.objects.create_user("viewer", password="x", is_staff=True)


# ----------------------------------------------------------------------------- access


def test_anonymous_users_are_sent_to_the_login_page(node):
    for url in (LIST_URL, page_url("10.0.0.1:orders:8080")):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_admin_index_lists_registered_instances_and_records(admin_client):
    page = BeautifulSoup(admin_client.get("/admin/").content, "html.parser")
    links = {a.get_text(strip=True): a["href"] for a in page.select("#content-main a")}
    assert links["Registered instances"] == LIST_URL
    assert links["Status override records"] == "/admin/registry/statusoverriderecord/"


def test_staff_without_the_permission_may_look_but_not_change(node, fleet, operator):
    client = Client()
    client.force_login(operator)
    response = client.get(LIST_URL)
    assert response.status_code == 200
    assert b"Apply to selected" not in response.content
    assert b"Take out of service" not in client.get(page_url(fleet[0])).content
    response = client.post(page_url(fleet[0]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x"})
    assert response.status_code == 403
    response = client.post(LIST_URL, {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x", "selected": "a/b"})
    assert response.status_code == 403
    assert node.registry.reads.overrides() == {} and StatusOverrideRecord.objects.count() == 0


def test_the_permission_alone_lets_staff_override(node, fleet, operator):
    operator.user_permissions.add(Permission.objects.get(codename="override_instance_status"))
    client = Client()
    client.force_login(operator)
    response = client.post(
        page_url(fleet[0]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "maintenance"}
    )
    assert response.status_code == 302
    assert node.registry.reads.overrides() == {fleet[0]: c.OUT_OF_SERVICE}
    assert StatusOverrideRecord.objects.get().username == "viewer"


# ---------------------------------------------------------------------------- actions


def test_take_out_of_service_is_applied_and_recorded(node, fleet, admin_client, admin_user):
    response = admin_client.post(
        page_url(fleet[0]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "  draining for deploy  "}
    )
    assert response.status_code == 302 and response["Location"] == page_url(fleet[0])
    instance = wire(admin_client, fleet[0])
    assert (instance["status"], instance["overriddenStatus"]) == (c.OUT_OF_SERVICE, c.OUT_OF_SERVICE)
    record = StatusOverrideRecord.objects.get()
    assert (record.user, record.username, record.app, record.instance_id) == (
        admin_user,
        "admin",
        "ORDERS",
        fleet[0],
    )
    assert (record.action, record.old_status, record.new_status) == (
        Action.TAKE_OUT_OF_SERVICE,
        c.UP,
        c.OUT_OF_SERVICE,
    )
    assert (record.old_override, record.new_override, record.outcome) == (
        "",
        c.OUT_OF_SERVICE,
        Outcome.APPLIED,
    )
    assert record.reason == "draining for deploy"
    followed = admin_client.get(response["Location"])
    assert "Take out of service: UP → OUT_OF_SERVICE (applied)." in messages_of(followed)


def test_put_back_in_service_removes_the_override(node, fleet, admin_client):
    admin_client.post(page_url(fleet[0]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "a"})
    admin_client.post(page_url(fleet[0]), {"action": Action.PUT_BACK_IN_SERVICE, "reason": "b"})
    instance = wire(admin_client, fleet[0])
    assert (instance["status"], instance["overriddenStatus"]) == (c.UP, c.UNKNOWN)
    assert node.registry.reads.overrides() == {}
    back = StatusOverrideRecord.objects.first()
    assert (back.action, back.old_status, back.new_status) == (
        Action.PUT_BACK_IN_SERVICE,
        c.OUT_OF_SERVICE,
        c.UP,
    )
    assert (back.old_override, back.new_override, back.outcome) == (c.OUT_OF_SERVICE, "", Outcome.APPLIED)


@pytest.mark.parametrize("status", [c.DOWN, c.STARTING, c.UNKNOWN, c.OUT_OF_SERVICE])
def test_set_another_status(node, fleet, admin_client, status):
    response = admin_client.post(
        page_url(fleet[1]), {"action": Action.SET_STATUS, "status": status, "reason": "testing"}
    )
    assert response.status_code == 302
    assert wire(admin_client, fleet[1])["status"] == status
    record = StatusOverrideRecord.objects.get()
    assert (record.action, record.new_status, record.new_override, record.outcome) == (
        Action.SET_STATUS,
        status,
        status,
        Outcome.APPLIED,
    )


def test_a_repeated_action_is_recorded_as_unchanged(node, fleet, admin_client):
    for _ in range(2):
        admin_client.post(page_url(fleet[0]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x"})
    assert [r.outcome for r in StatusOverrideRecord.objects.all()] == [Outcome.UNCHANGED, Outcome.APPLIED]


def test_an_instance_gone_before_the_submit_is_recorded_as_not_found(node, fleet, admin_client):
    admin_client.delete(f"/eureka/apps/ORDERS/{fleet[0]}")
    response = admin_client.post(
        page_url(fleet[0]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x"}, follow=True
    )
    assert f"ORDERS / {fleet[0]} is not registered: nothing changed." in messages_of(response)
    record = StatusOverrideRecord.objects.get()
    assert (record.outcome, record.old_status) == (Outcome.NOT_FOUND, "")
    assert node.registry.reads.overrides() == {}


def test_admin_and_protocol_overrides_take_the_same_path(node, fleet, admin_client, clock):
    """An override from the admin leaves the same wire record and delta entry as PUT .../status."""
    admin_client.put(f"/eureka/apps/ORDERS/{fleet[0]}/status?value=OUT_OF_SERVICE")
    admin_client.post(page_url(fleet[1]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x"})
    by_api, by_admin = wire(admin_client, fleet[0]), wire(admin_client, fleet[1])
    different = {"instanceId", "hostName", "ipAddr", "homePageUrl"}
    assert {k: v for k, v in by_api.items() if k not in different} == {
        k: v for k, v in by_admin.items() if k not in different
    }
    delta = admin_client.get("/eureka/apps/delta", HTTP_ACCEPT="application/json").json()["applications"]
    changed = {i["instanceId"]: i["actionType"] for a in delta["application"] for i in a["instance"]}
    assert changed[fleet[0]] == changed[fleet[1]] == c.MODIFIED
    assert admin_client.get("/eureka/serverinfo/statusoverrides").json() == {
        fleet[0]: c.OUT_OF_SERVICE,
        fleet[1]: c.OUT_OF_SERVICE,
    }


# ------------------------------------------------------------------------- bulk actions


def test_bulk_action_applies_to_the_selection_only(node, fleet, admin_client):
    response = admin_client.post(
        LIST_URL + "?app=orders",
        {
            "action": Action.TAKE_OUT_OF_SERVICE,
            "reason": "zone a maintenance",
            "selected": [f"ORDERS/{fleet[0].replace(':', '%3A')}", f"ORDERS/{fleet[2]}"],
        },
    )
    assert response.status_code == 302 and response["Location"] == LIST_URL + "?app=orders"
    assert node.registry.reads.overrides() == {fleet[0]: c.OUT_OF_SERVICE, fleet[2]: c.OUT_OF_SERVICE}
    records = StatusOverrideRecord.objects.order_by("id")
    assert [(r.instance_id, r.outcome, r.reason) for r in records] == [
        (fleet[0], Outcome.APPLIED, "zone a maintenance"),
        (fleet[2], Outcome.APPLIED, "zone a maintenance"),
    ]
    assert "Take out of service on 2 instance(s) — Applied: 2." in messages_of(admin_client.get(LIST_URL))


def test_bulk_put_back_and_set_status(node, fleet, admin_client):
    selected = [f"ORDERS/{i}" for i in fleet]
    admin_client.post(
        LIST_URL, {"action": Action.SET_STATUS, "status": c.DOWN, "reason": "x", "selected": selected}
    )
    assert {wire(admin_client, i)["status"] for i in fleet} == {c.DOWN}
    admin_client.post(LIST_URL, {"action": Action.PUT_BACK_IN_SERVICE, "reason": "y", "selected": selected})
    assert {wire(admin_client, i)["status"] for i in fleet} == {c.UP}
    assert StatusOverrideRecord.objects.filter(outcome=Outcome.APPLIED).count() == 6


def test_the_list_shows_checkboxes_that_name_each_instance(node, fleet, admin_client):
    page = BeautifulSoup(admin_client.get(LIST_URL + "?instance=10.0.0.2").content, "html.parser")
    boxes = [box["value"] for box in page.select("input[name=selected]")]
    assert boxes == ["ORDERS/10.0.0.2%3Aorders%3A8080"]
    rows = page.select("#result_list tbody tr")
    assert len(rows) == 1 and "UP" in rows[0].get_text()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x"}, "Select at least one instance."),
        ({"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x", "selected": "no-slash"}, "did not send"),
        (
            {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "   ", "selected": "ORDERS/a"},
            "This field is required",
        ),
        ({"action": Action.SET_STATUS, "reason": "x", "selected": "ORDERS/a"}, "Choose the status to set."),
        ({"action": "reboot", "reason": "x", "selected": "ORDERS/a"}, "Select a valid choice"),
        (
            {"action": Action.SET_STATUS, "status": "SLEEPING", "reason": "x", "selected": "ORDERS/a"},
            "valid choice",
        ),
        ({"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x" * 501, "selected": "ORDERS/a"}, "at most 500"),
    ],
)
def test_bad_bulk_input_is_a_400_and_changes_nothing(node, fleet, admin_client, data, message):
    response = admin_client.post(LIST_URL, data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert node.registry.reads.overrides() == {} and StatusOverrideRecord.objects.count() == 0


@pytest.mark.parametrize(
    "data",
    [
        {"action": Action.TAKE_OUT_OF_SERVICE},
        {"action": Action.SET_STATUS, "reason": "x"},
        {"action": "", "reason": "x"},
    ],
)
def test_bad_single_input_is_a_400_and_changes_nothing(node, fleet, admin_client, data):
    response = admin_client.post(page_url(fleet[0]), data)
    assert response.status_code == 400
    assert node.registry.reads.overrides() == {} and StatusOverrideRecord.objects.count() == 0


def test_nothing_changes_when_the_audit_record_cannot_be_written(node, fleet, admin_client):
    with mock.patch.object(StatusOverrideRecord.objects, "create", side_effect=DatabaseError("disk full")):
        response = admin_client.post(
            page_url(fleet[0]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x"}
        )
        assert response.status_code == 503
        assert "the change was not made" in response.content.decode()
        response = admin_client.post(
            LIST_URL, {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x", "selected": f"ORDERS/{fleet[0]}"}
        )
        assert response.status_code == 503
    assert node.registry.reads.overrides() == {}
    assert wire(admin_client, fleet[0])["status"] == c.UP


# ------------------------------------------------------------------------------ records


def test_records_are_browsable_filterable_and_read_only(node, fleet, admin_client):
    admin_client.post(page_url(fleet[0]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "deploy 42"})
    admin_client.post(page_url(fleet[1]), {"action": Action.SET_STATUS, "status": c.DOWN, "reason": "broken"})
    url = "/admin/registry/statusoverriderecord/"
    listing = admin_client.get(url)
    assert listing.status_code == 200 and b"deploy 42" in listing.content and b"broken" in listing.content
    filtered = admin_client.get(url + f"?action__exact={Action.SET_STATUS}").content.decode()
    assert "broken" in filtered and "deploy 42" not in filtered
    assert "deploy 42" in admin_client.get(url + "?q=deploy").content.decode()
    by_instance = admin_client.get(url + f"?instance_id={fleet[0]}").content.decode()
    assert "deploy 42" in by_instance and "broken" not in by_instance
    record = StatusOverrideRecord.objects.get(reason="broken")
    assert admin_client.get(url + "add/").status_code == 403
    assert admin_client.get(url + f"{record.pk}/delete/").status_code == 403
    detail = admin_client.get(url + f"{record.pk}/change/")
    assert detail.status_code == 200 and b'name="_save"' not in detail.content


def test_records_keep_the_name_when_the_account_is_deleted(node, fleet, admin_client, admin_user):
    admin_client.post(page_url(fleet[0]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "x"})
    admin_user.delete()
    record = StatusOverrideRecord.objects.get()
    assert (record.user, record.username) == (None, "admin")


def test_instance_admin_page_shows_state_and_history(node, fleet, admin_client):
    admin_client.post(page_url(fleet[0]), {"action": Action.TAKE_OUT_OF_SERVICE, "reason": "history"})
    page = BeautifulSoup(admin_client.get(page_url(fleet[0])).content, "html.parser")
    summary = {
        row.th.get_text(strip=True): row.td.get_text(strip=True)
        for row in page.select(".instance-summary tr")
    }
    assert summary["Status"] == c.OUT_OF_SERVICE and summary["Override"] == c.OUT_OF_SERVICE
    assert "history" in page.select_one("table.records").get_text()
    buttons = [b.get_text(strip=True) for b in page.select(".override-buttons button")]
    assert buttons == ["Take out of service", "Put back in service (remove override)", "Set status"]
    response = admin_client.get(page_url("gone:orders:1"))
    assert response.status_code == 404 and b"is not registered with this node" in response.content


def test_list_filters_are_validated(node, fleet, admin_client):
    assert admin_client.get(LIST_URL + "?status=BAD").status_code == 400
    page = BeautifulSoup(admin_client.get(LIST_URL + "?status=UP&app=ord").content, "html.parser")
    assert len(page.select("input[name=selected]")) == 3
