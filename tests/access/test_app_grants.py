"""App grants (issue 46): a client account granted some apps writes only those, by every write path."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from registry.access import accounts
from registry.access.grants import BadGrant, allows, parse_grants
from registry.access.models import ApiAccess
from tests.access.test_api_auth import account, basic, listed, register
from tests.factories import instance_body

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("auth_on")]


def granted(name: str, apps: str, role: str = "client"):
    user = account(name, role)
    ApiAccess.objects.create(user=user, apps=",".join(parse_grants(apps)))
    return user


def snapshot(node) -> tuple:
    """Everything a write could change: each lease (instance, timestamps) and the overrides."""
    leases = {key: node.registry.reads.lease(*key) for key in sorted(listed(node))}
    return leases, dict(node.registry.reads.overrides())


@pytest.fixture
def fleet(api, node, clock):
    """ORDERS and PAYMENTS instances registered by an unscoped account, PAYMENTS with an override;
    then the clock moves on, so that a renewal would show."""
    account("ops", "client")
    ops = basic("ops", "pw")
    assert register(api, ops, app="ORDERS", instance_id="o-1").status_code == 204
    assert register(api, ops, app="PAYMENTS", instance_id="p-1").status_code == 204
    assert register(api, ops, app="PAYMENTS", instance_id="p-2").status_code == 204
    assert api.put("/eureka/apps/PAYMENTS/p-2/status?value=OUT_OF_SERVICE", **ops).status_code == 200
    clock.advance(10_000)
    return ops


WRITES = {
    "register": lambda api, creds: register(api, creds, app="PAYMENTS", instance_id="p-3"),
    "register, lower-case path": lambda api, creds: register(api, creds, app="payments", instance_id="p-3"),
    "renew": lambda api, creds: api.put("/eureka/apps/PAYMENTS/p-1", **creds),
    "cancel": lambda api, creds: api.delete("/eureka/apps/PAYMENTS/p-1", **creds),
    "status override": lambda api, creds: api.put("/eureka/apps/PAYMENTS/p-1/status?value=DOWN", **creds),
    "status override removed": lambda api, creds: api.delete("/eureka/apps/PAYMENTS/p-2/status", **creds),
    "metadata": lambda api, creds: api.put("/eureka/apps/PAYMENTS/p-1/metadata?zone=evil", **creds),
    "v2 prefix": lambda api, creds: api.delete("/eureka/v2/apps/PAYMENTS/p-1", **creds),
}


@pytest.mark.parametrize("path", list(WRITES))
def test_a_client_granted_orders_cannot_change_another_apps_instance(api, node, fleet, path, caplog):
    granted("orders", "ORDERS")
    before = snapshot(node)
    refusals = accounts.REFUSALS["forbidden"]
    accounts.reset_refusal_lines()
    with caplog.at_level("WARNING", logger="registry.access"):
        response = WRITES[path](api, basic("orders", "pw"))
    assert response.status_code == 403
    assert snapshot(node) == before
    assert accounts.REFUSALS["forbidden"] == refusals + 1
    assert "'orders' may not write app 'PAYMENTS'" in caplog.text
    if path == "renew":
        # Java clients decode a heartbeat's answer as an instance: no body there.
        assert response.content == b""
    else:
        assert response["Content-Type"].startswith("text/plain")
        assert "may not write app 'PAYMENTS'" in response.content.decode()
        assert "ORDERS" in response.content.decode()


def test_the_same_account_writes_its_own_app_by_every_path(api, node, fleet):
    granted("orders", "orders")  # any case
    creds = basic("orders", "pw")
    assert register(api, creds, app="ORDERS", instance_id="o-2").status_code == 204
    assert api.put("/eureka/apps/ORDERS/o-1", **creds).status_code == 200
    assert api.put("/eureka/apps/orders/o-1/status?value=OUT_OF_SERVICE", **creds).status_code == 200
    assert api.delete("/eureka/apps/ORDERS/o-1/status", **creds).status_code == 200
    assert api.put("/eureka/apps/ORDERS/o-1/metadata?zone=a", **creds).status_code == 200
    assert api.delete("/eureka/apps/ORDERS/o-2", **creds).status_code == 200
    assert ("ORDERS", "o-2") not in listed(node)


def test_reads_stay_fleet_wide(api, node, fleet):
    granted("orders", "ORDERS")
    creds = basic("orders", "pw")
    assert api.get("/eureka/apps/PAYMENTS", HTTP_ACCEPT="application/json", **creds).status_code == 200
    assert api.get("/eureka/apps/PAYMENTS/p-1", HTTP_ACCEPT="application/json", **creds).status_code == 200
    assert api.get("/eureka/apps", HTTP_ACCEPT="application/json", **creds).status_code == 200


def test_a_client_granted_a_pattern_writes_the_apps_it_matches_only(api, node, fleet):
    granted("payments", "PAYMENTS-*")
    creds = basic("payments", "pw")
    assert register(api, creds, app="PAYMENTS-EU", instance_id="pe-1").status_code == 204
    assert register(api, creds, app="payments-us", instance_id="pu-1").status_code == 204
    assert api.put("/eureka/apps/PAYMENTS-EU/pe-1", **creds).status_code == 200
    # "PAYMENTS-*" does not match PAYMENTS itself.
    assert api.delete("/eureka/apps/PAYMENTS/p-1", **creds).status_code == 403
    assert {("PAYMENTS-EU", "pe-1"), ("PAYMENTS-US", "pu-1"), ("PAYMENTS", "p-1")} <= listed(node)


def test_a_scoped_client_still_sends_no_replication_batch_or_replicated_write(api, node, fleet):
    """Batches and writes marked as replicated need REPLICATE, which the client role lacks: a scoped
    client cannot slip a write to another app through them."""
    granted("orders", "ORDERS")
    creds = basic("orders", "pw")
    before = snapshot(node)
    batch = {
        "replicationList": [
            {"appName": "PAYMENTS", "id": "p-1", "action": "Cancel"},
            {"appName": "ORDERS", "id": "o-1", "action": "Cancel"},
        ]
    }
    answer = api.post(
        "/eureka/peerreplication/batch/", data=json.dumps(batch), content_type="application/json", **creds
    )
    assert answer.status_code == 403
    marked = api.delete("/eureka/apps/PAYMENTS/p-1", HTTP_X_NETFLIX_DISCOVERY_REPLICATION="true", **creds)
    assert marked.status_code == 403
    assert snapshot(node) == before


def test_peers_and_superusers_are_not_scoped(api, node, fleet):
    granted("node-b", "ORDERS", role="peer")
    get_user_model().objects.create_superuser("root", password="pw")
    assert api.delete("/eureka/apps/PAYMENTS/p-1", **basic("node-b", "pw")).status_code == 200
    assert api.delete("/eureka/apps/PAYMENTS/p-2", **basic("root", "pw")).status_code == 200


def test_an_account_without_grants_writes_every_app_as_before(api, node, fleet):
    user = account("legacy", "client")
    ApiAccess.objects.create(user=user, certificate_names="legacy.example")  # names, no grants
    assert api.delete("/eureka/apps/PAYMENTS/p-1", **basic("legacy", "pw")).status_code == 200


def test_a_grant_change_applies_to_the_next_request(api, node, fleet):
    user = granted("orders", "ORDERS")
    creds = basic("orders", "pw")
    assert api.put("/eureka/apps/PAYMENTS/p-1", **creds).status_code == 403
    access = user.api_access
    access.apps = "ORDERS,PAYMENTS"
    access.save()
    assert api.put("/eureka/apps/PAYMENTS/p-1", **creds).status_code == 200
    access.delete()
    assert api.delete("/eureka/apps/PAYMENTS/p-2", **creds).status_code == 200
    Group.objects.get(name="eureka-client")  # the role is untouched


def test_a_grant_changed_elsewhere_applies_after_the_recheck(api, node, fleet, auth_on):
    user = granted("orders", "ORDERS,PAYMENTS")
    creds = basic("orders", "pw")
    assert api.put("/eureka/apps/PAYMENTS/p-1", **creds).status_code == 200
    # Another process's change: no signal here.
    ApiAccess.objects.filter(user=user).update(apps="ORDERS")
    assert api.put("/eureka/apps/PAYMENTS/p-1", **creds).status_code == 200
    auth_on.clock.advance(5_000)
    assert api.put("/eureka/apps/PAYMENTS/p-1", **creds).status_code == 403


def test_register_with_a_body_naming_another_app_than_the_path_changes_nothing(api, node, fleet):
    granted("orders", "ORDERS")
    body = json.dumps(instance_body(app="PAYMENTS", instance_id="p-9")).encode()
    response = api.post(
        "/eureka/apps/ORDERS", data=body, content_type="application/json", **basic("orders", "pw")
    )
    assert response.status_code == 400
    assert ("PAYMENTS", "p-9") not in listed(node)


@pytest.mark.parametrize(
    "text, message",
    [
        ("ORDERS,,PAYMENTS", "empty"),
        ("ORDERS,", "empty"),
        ("*", "matches every app"),
        ("?*", "matches every app"),
        ("ORD ERS", "whitespace"),
        ("ORDERS/x", "'/'"),
        ("PAY[MENTS", "never closes"),
        ("X" * 201, "longer than"),
    ],
)
def test_an_empty_or_odd_pattern_is_refused_with_a_reason(text, message):
    with pytest.raises(BadGrant, match=message):
        parse_grants(text)


def test_patterns_match_without_regard_to_case():
    assert parse_grants(" orders , Payments-* ,ORDERS") == ("ORDERS", "PAYMENTS-*")
    assert allows(("PAYMENTS-*",), "payments-eu")
    assert allows(("EDGE-[AB]",), "edge-b") and not allows(("EDGE-[AB]",), "EDGE-C")
    assert not allows(("ORDERS",), "ORDERS-EU")
    assert allows((), "ANYTHING")
