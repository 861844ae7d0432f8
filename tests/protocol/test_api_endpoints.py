"""Every client-facing endpoint of protocol §2.1, under both prefixes, with and without a trailing slash,
in JSON and in XML (peer replication is covered elsewhere)."""

from __future__ import annotations

import json

import pytest

from registry.runtime.jobs import evict
from tests.factories import instance_body

from .api_support import (
    ACCEPT,
    FORMATS,
    PREFIXES,
    REPLICATION,
    SLASHES,
    by_id,
    enc,
    get_json,
    headers,
    instance_ids,
    parse,
    register,
)

ORDERS_ID = "10.0.0.1:orders:8080"
BILLING_ID = "10.0.0.2:billing:8080"

VARIANTS = pytest.mark.parametrize(
    "prefix,slash,fmt",
    [(p, s, f) for p in PREFIXES for s in SLASHES for f in FORMATS],
    ids=lambda v: {"": "noslash", "/": "slash"}.get(v, v.strip("/").replace("/", "-") or v),
)
ROUTES = pytest.mark.parametrize(
    "prefix,slash",
    [(p, s) for p in PREFIXES for s in SLASHES],
    ids=lambda v: {"": "noslash", "/": "slash"}.get(v, v.strip("/").replace("/", "-")),
)


@pytest.fixture
def orders(api):
    response = register(api, instance_body(last_dirty=1_700_000_000_000))
    assert response.status_code == 204
    return ORDERS_ID


def instance(api, app: str, instance_id: str) -> dict:
    return get_json(api, f"/eureka/apps/{app}/{enc(instance_id)}")["instance"]


def assert_empty(response, status: int) -> None:
    assert response.status_code == status
    assert response.content == b""


def assert_payload(response, fmt: str, root: str):
    assert response.status_code == 200
    assert response["Content-Type"].split(";")[0] == ACCEPT[fmt]
    doc = parse(response)
    if fmt == "json":
        assert list(doc) == [root]
    else:
        assert doc.tag == root
    return doc


# ------------------------------------------------------------------------------------------ reads


@VARIANTS
def test_get_apps_lists_every_registered_instance(api, orders, prefix, slash, fmt):
    register(api, instance_body(app="BILLING", host="10.0.0.2"))

    response = api.get(f"{prefix}apps{slash}", **headers(fmt))

    doc = assert_payload(response, fmt, "applications")
    assert instance_ids(response) == sorted([ORDERS_ID, BILLING_ID])
    version = doc["applications"]["versions__delta"] if fmt == "json" else doc.findtext("versions__delta")
    assert version == "1"


@pytest.fixture
def with_read_only_tier(edit_config):
    edit_config(response_cache__use_read_only=True)


def test_a_peer_servers_read_is_answered_without_enlisting_the_key_for_the_cache_sync(
    with_read_only_tier, api, orders, node
):
    """A peer's start-up sync reads ``GET apps`` once; enlisting it would have this node rebuild and
    gzip its whole registry at every cache sync from then on."""
    as_peer = {"HTTP_ACCEPT": "application/json", "HTTP_DISCOVERYIDENTITY_NAME": "DefaultServer"}
    from_peer = api.get("/eureka/apps/", **as_peer)
    assert from_peer.status_code == 200
    assert [app["name"] for app in json.loads(from_peer.content)["applications"]["application"]] == ["ORDERS"]
    assert node.cache.read_only.keys() == []
    from_client = api.get(
        "/eureka/apps/", HTTP_ACCEPT="application/json", HTTP_DISCOVERYIDENTITY_NAME="DefaultClient"
    )
    assert from_client.content == from_peer.content
    enlisted = node.cache.read_only.keys()
    assert [key.entity for key in enlisted] == ["apps"]


@VARIANTS
def test_get_delta_lists_the_recent_registrations(api, orders, prefix, slash, fmt):
    response = api.get(f"{prefix}apps/delta{slash}", **headers(fmt))

    doc = assert_payload(response, fmt, "applications")
    assert instance_ids(response) == [ORDERS_ID]
    if fmt == "json":
        assert doc["applications"]["application"][0]["instance"][0]["actionType"] == "ADDED"
    else:
        assert doc.find("application/instance/actionType").text == "ADDED"


@VARIANTS
def test_get_app_returns_the_application_whatever_the_case_of_its_name(api, orders, prefix, slash, fmt):
    response = api.get(f"{prefix}apps/orders{slash}", **headers(fmt))

    doc = assert_payload(response, fmt, "application")
    name = doc["application"]["name"] if fmt == "json" else doc.findtext("name")
    assert name == "ORDERS"
    assert instance_ids(response) == [ORDERS_ID]


@VARIANTS
def test_get_unknown_app_is_404_with_an_empty_body(api, orders, prefix, slash, fmt):
    assert_empty(api.get(f"{prefix}apps/NOSUCHAPP{slash}", **headers(fmt)), 404)


def test_get_app_is_404_again_once_its_last_instance_is_cancelled(api, orders):
    assert api.delete(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}").status_code == 200

    assert_empty(api.get("/eureka/apps/ORDERS", **headers("json")), 404)


@VARIANTS
def test_get_instance_by_app_and_id_returns_the_instance(api, orders, prefix, slash, fmt):
    response = api.get(f"{prefix}apps/Orders/{enc(ORDERS_ID)}{slash}", **headers(fmt))

    doc = assert_payload(response, fmt, "instance")
    assert instance_ids(response) == [ORDERS_ID]
    app = doc["instance"]["app"] if fmt == "json" else doc.findtext("app")
    assert app == "ORDERS"


@VARIANTS
def test_get_unknown_instance_is_404_with_an_empty_body(api, orders, prefix, slash, fmt):
    assert_empty(api.get(f"{prefix}apps/ORDERS/nope{slash}", **headers(fmt)), 404)
    assert_empty(api.get(f"{prefix}apps/NOSUCHAPP/{enc(ORDERS_ID)}{slash}", **headers(fmt)), 404)


def test_instance_ids_are_case_sensitive(api):
    register(api, instance_body(instance_id="Host-A:orders:8080"))

    assert api.get(f"/eureka/apps/ORDERS/{enc('Host-A:orders:8080')}").status_code == 200
    assert_empty(api.get(f"/eureka/apps/ORDERS/{enc('host-a:orders:8080')}"), 404)


@VARIANTS
def test_get_instances_by_id_finds_the_instance_in_any_app(api, orders, prefix, slash, fmt):
    register(api, instance_body(app="BILLING", host="10.0.0.2"))

    response = api.get(f"{prefix}instances/{enc(BILLING_ID)}{slash}", **headers(fmt))

    doc = assert_payload(response, fmt, "instance")
    app = doc["instance"]["app"] if fmt == "json" else doc.findtext("app")
    assert app == "BILLING"
    assert instance_ids(response) == [BILLING_ID]


@VARIANTS
def test_get_instances_by_unknown_id_is_404_with_an_empty_body(api, orders, prefix, slash, fmt):
    assert_empty(api.get(f"{prefix}instances/unknown-id{slash}", **headers(fmt)), 404)


@pytest.mark.parametrize("kind", ["vips", "svips"])
@VARIANTS
def test_vip_reads_list_only_the_instances_carrying_that_vip(api, prefix, slash, fmt, kind):
    register(api, instance_body(host="10.0.0.1", vip="orders-vip", secureVipAddress="orders-svip"))
    register(api, instance_body(host="10.0.0.3", vip="orders-vip,shared", secureVipAddress="x,orders-svip"))
    register(api, instance_body(app="BILLING", host="10.0.0.2", vip="billing-vip"))
    name = "orders-vip" if kind == "vips" else "orders-svip"

    response = api.get(f"{prefix}{kind}/{name}{slash}", **headers(fmt))

    doc = assert_payload(response, fmt, "applications")
    assert instance_ids(response) == ["10.0.0.1:orders:8080", "10.0.0.3:orders:8080"]
    version = doc["applications"]["versions__delta"] if fmt == "json" else doc.findtext("versions__delta")
    assert version == "-1"


@pytest.mark.parametrize("kind", ["vips", "svips"])
@VARIANTS
def test_vip_reads_with_no_match_are_200_with_an_empty_list(api, orders, prefix, slash, fmt, kind):
    response = api.get(f"{prefix}{kind}/no-such-vip{slash}", **headers(fmt))

    doc = assert_payload(response, fmt, "applications")
    if fmt == "json":
        assert doc == {"applications": {"versions__delta": "-1", "apps__hashcode": "", "application": []}}
    else:
        assert [child.tag for child in doc] == ["versions__delta", "apps__hashcode"]
        assert doc.findtext("versions__delta") == "-1"
        assert (doc.findtext("apps__hashcode") or "") == ""


def test_vip_matching_is_exact_and_case_sensitive(api):
    register(api, instance_body(vip="orders-vip"))

    assert instance_ids(api.get("/eureka/vips/orders-vip", **headers("json"))) == [ORDERS_ID]
    assert instance_ids(api.get("/eureka/vips/ORDERS-VIP", **headers("json"))) == []
    assert instance_ids(api.get("/eureka/vips/orders", **headers("json"))) == []


# ------------------------------------------------------------------------------------------ writes


@VARIANTS
def test_register_returns_204_with_empty_body(api, prefix, slash, fmt):
    response = register(api, instance_body(), prefix=prefix, slash=slash, fmt=fmt)

    assert_empty(response, 204)
    assert instance(api, "ORDERS", ORDERS_ID)["status"] == "UP"


def test_register_with_lower_case_app_in_path_and_body_stores_it_upper_case(api):
    body = {
        "instance": {
            "hostName": "localhost",
            "app": "jqservice",
            "ipAddr": "127.0.0.1",
            "vipAddress": "jqservice",
            "port": {"$": 8080, "@enabled": True},
            "dataCenterInfo": {
                "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
                "name": "MyOwn",
            },
        }
    }

    assert_empty(register(api, body, app="jqservice", prefix="/eureka/v2/"), 204)

    assert instance(api, "JQSERVICE", "localhost")["app"] == "JQSERVICE"
    assert_empty(api.put("/eureka/v2/apps/jqservice/localhost"), 200)
    assert_empty(api.delete("/eureka/v2/apps/JqService/localhost"), 200)


@VARIANTS
def test_renew_returns_200_with_empty_body(api, orders, prefix, slash, fmt):
    response = api.put(
        f"{prefix}apps/ORDERS/{enc(ORDERS_ID)}{slash}?status=UP&lastDirtyTimestamp=1700000000000",
        **headers(fmt),
    )

    assert_empty(response, 200)


def test_renew_moves_the_lease_renewal_timestamp(api, orders, clock):
    before = instance(api, "ORDERS", ORDERS_ID)["leaseInfo"]["lastRenewalTimestamp"]
    clock.advance(30_000)

    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 200)

    after = instance(api, "ORDERS", ORDERS_ID)["leaseInfo"]["lastRenewalTimestamp"]
    assert after >= before + 30_000


@VARIANTS
def test_renew_of_unknown_instance_is_404_with_an_empty_body(api, orders, prefix, slash, fmt):
    # Spring sends a JSON Content-Type (and Accept) even on bodiless heartbeats.
    response = api.put(
        f"{prefix}apps/ORDERS/unknown-instance{slash}",
        content_type="application/json",
        **headers(fmt),
    )

    assert_empty(response, 404)
    assert_empty(api.put(f"{prefix}apps/NOSUCHAPP/{enc(ORDERS_ID)}{slash}", **headers(fmt)), 404)


def test_renew_with_newer_last_dirty_timestamp_than_stored_is_404_so_the_client_re_registers(api, orders):
    response = api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}?lastDirtyTimestamp=1700000000001")

    assert_empty(response, 404)


def test_renew_with_equal_last_dirty_timestamp_is_200(api, orders):
    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}?lastDirtyTimestamp=1700000000000"), 200)


def test_renew_with_older_last_dirty_timestamp_from_a_client_is_200(api, orders):
    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}?lastDirtyTimestamp=1600000000000"), 200)


@pytest.mark.parametrize("fmt", FORMATS)
def test_replicated_renew_with_older_last_dirty_timestamp_is_409_with_the_stored_instance(api, orders, fmt):
    response = api.put(
        f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}?lastDirtyTimestamp=1600000000000&status=UP",
        **headers(fmt, **REPLICATION),
    )

    assert response.status_code == 409
    assert response["Content-Type"].split(";")[0] == ACCEPT[fmt]
    doc = parse(response)
    if fmt == "json":
        assert list(doc) == ["instance"]
        assert doc["instance"]["instanceId"] == ORDERS_ID
        assert doc["instance"]["lastDirtyTimestamp"] == "1700000000000"
    else:
        assert doc.tag == "instance"
        assert doc.findtext("instanceId") == ORDERS_ID
        assert doc.findtext("lastDirtyTimestamp") == "1700000000000"


def test_replication_header_must_be_exactly_true(api, orders):
    response = api.put(
        f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}?lastDirtyTimestamp=1600000000000",
        HTTP_X_NETFLIX_DISCOVERY_REPLICATION="True",
    )

    assert_empty(response, 200)


def test_replicated_renew_with_newer_timestamp_is_404_and_adopts_the_senders_override(api, orders):
    # Newer than the stored 1700000000000, not ahead of the node's clock (that one is not compared).
    response = api.put(
        f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}?lastDirtyTimestamp=1750000000000&overriddenstatus=OUT_OF_SERVICE",
        **REPLICATION,
    )

    assert_empty(response, 404)
    assert get_json(api, "/eureka/serverinfo/statusoverrides") == {ORDERS_ID: "OUT_OF_SERVICE"}


@VARIANTS
def test_cancel_returns_200_and_removes_the_instance(api, orders, prefix, slash, fmt):
    assert_empty(api.delete(f"{prefix}apps/ORDERS/{enc(ORDERS_ID)}{slash}", **headers(fmt)), 200)

    assert_empty(api.get(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 404)
    assert instance_ids(api.get("/eureka/apps/", **headers("json"))) == []
    assert_empty(api.delete(f"{prefix}apps/ORDERS/{enc(ORDERS_ID)}{slash}", **headers(fmt)), 404)


@VARIANTS
def test_cancel_of_unknown_instance_is_404_with_an_empty_body(api, orders, prefix, slash, fmt):
    assert_empty(api.delete(f"{prefix}apps/ORDERS/unknown{slash}", **headers(fmt)), 404)
    assert instance_ids(api.get("/eureka/apps/", **headers("json"))) == [ORDERS_ID]


def test_heartbeat_after_cancel_is_404(api, orders):
    api.delete(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}")

    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 404)


# --------------------------------------------------------------------------------- status override


@VARIANTS
def test_status_override_put_sets_status_and_overridden_status(api, orders, prefix, slash, fmt):
    response = api.put(
        f"{prefix}apps/ORDERS/{enc(ORDERS_ID)}/status{slash}?value=OUT_OF_SERVICE", **headers(fmt)
    )

    assert_empty(response, 200)
    stored = instance(api, "ORDERS", ORDERS_ID)
    assert (stored["status"], stored["overriddenStatus"]) == ("OUT_OF_SERVICE", "OUT_OF_SERVICE")
    assert stored["actionType"] == "MODIFIED"
    assert get_json(api, "/eureka/serverinfo/statusoverrides") == {ORDERS_ID: "OUT_OF_SERVICE"}


@VARIANTS
def test_status_override_on_unknown_instance_is_404_with_an_empty_body(api, orders, prefix, slash, fmt):
    response = api.put(f"{prefix}apps/ORDERS/unknown/status{slash}?value=OUT_OF_SERVICE", **headers(fmt))

    assert_empty(response, 404)
    assert_empty(api.delete(f"{prefix}apps/ORDERS/unknown/status{slash}", **headers(fmt)), 404)
    assert get_json(api, "/eureka/serverinfo/statusoverrides") == {}


def test_status_override_survives_the_clients_re_registration_as_up(api, orders):
    api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=OUT_OF_SERVICE")

    assert_empty(register(api, instance_body(last_dirty=1_700_000_000_500)), 204)

    assert instance(api, "ORDERS", ORDERS_ID)["status"] == "OUT_OF_SERVICE"
    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 200)
    assert instance(api, "ORDERS", ORDERS_ID)["status"] == "OUT_OF_SERVICE"


def test_a_client_registering_down_beats_the_override_until_it_is_up_again(api, orders):
    api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=OUT_OF_SERVICE")

    register(api, instance_body(status="DOWN", last_dirty=1_700_000_000_500))
    assert instance(api, "ORDERS", ORDERS_ID)["status"] == "DOWN"

    register(api, instance_body(status="UP", last_dirty=1_700_000_000_600))
    assert instance(api, "ORDERS", ORDERS_ID)["status"] == "OUT_OF_SERVICE"


def test_status_put_equal_to_the_current_status_records_no_override(api, orders):
    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=UP"), 200)

    assert get_json(api, "/eureka/serverinfo/statusoverrides") == {}
    assert instance(api, "ORDERS", ORDERS_ID)["overriddenStatus"] == "UNKNOWN"


def test_status_put_adopts_a_newer_last_dirty_timestamp(api, orders):
    api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=DOWN&lastDirtyTimestamp=1700000000900")

    assert instance(api, "ORDERS", ORDERS_ID)["lastDirtyTimestamp"] == "1700000000900"


def test_status_put_keeps_the_stored_last_dirty_timestamp_when_the_param_is_older(api, orders):
    api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=DOWN&lastDirtyTimestamp=1600000000000")

    assert instance(api, "ORDERS", ORDERS_ID)["lastDirtyTimestamp"] == "1700000000000"


@VARIANTS
def test_status_override_delete_with_value_restores_that_status(api, orders, prefix, slash, fmt):
    api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=OUT_OF_SERVICE")

    response = api.delete(f"{prefix}apps/ORDERS/{enc(ORDERS_ID)}/status{slash}?value=UP", **headers(fmt))

    assert_empty(response, 200)
    stored = instance(api, "ORDERS", ORDERS_ID)
    assert (stored["status"], stored["overriddenStatus"]) == ("UP", "UNKNOWN")
    assert get_json(api, "/eureka/serverinfo/statusoverrides") == {}
    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 200)


def test_status_override_delete_without_value_sets_unknown_and_next_heartbeat_is_404(api, orders):
    api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=OUT_OF_SERVICE")

    assert_empty(
        api.delete(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?lastDirtyTimestamp=1700000000000"), 200
    )

    stored = instance(api, "ORDERS", ORDERS_ID)
    assert (stored["status"], stored["overriddenStatus"]) == ("UNKNOWN", "UNKNOWN")
    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 404)
    # The client reacts to the 404 by re-registering, which brings its real status back.
    assert_empty(register(api, instance_body(last_dirty=1_700_000_000_000)), 204)
    assert instance(api, "ORDERS", ORDERS_ID)["status"] == "UP"
    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 200)


def test_status_override_delete_without_an_override_is_200_and_changes_nothing(api, orders):
    assert_empty(api.delete(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status"), 200)

    assert instance(api, "ORDERS", ORDERS_ID)["status"] == "UP"
    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 200)


def test_cancel_clears_the_status_override(api, orders):
    api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=OUT_OF_SERVICE")

    api.delete(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}")
    register(api, instance_body(last_dirty=1_700_000_000_000))

    assert get_json(api, "/eureka/serverinfo/statusoverrides") == {}
    assert instance(api, "ORDERS", ORDERS_ID)["status"] == "UP"


def test_a_client_cannot_flip_its_own_up_lease_to_out_of_service_by_re_registering(api, orders):
    register(api, instance_body(status="OUT_OF_SERVICE", last_dirty=1_700_000_000_500))

    assert instance(api, "ORDERS", ORDERS_ID)["status"] == "UP"


# ---------------------------------------------------------------------------------------- metadata


@VARIANTS
def test_metadata_put_merges_the_query_parameters(api, prefix, slash, fmt):
    register(api, instance_body(metadata={"zone": "a", "keep": "me"}))

    response = api.put(
        f"{prefix}apps/ORDERS/{enc(ORDERS_ID)}/metadata{slash}?zone=b&weight=5", **headers(fmt)
    )

    assert_empty(response, 200)
    assert instance(api, "ORDERS", ORDERS_ID)["metadata"] == {"zone": "b", "keep": "me", "weight": "5"}


def test_metadata_put_takes_the_first_of_repeated_keys(api, orders):
    api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/metadata?k=first&k=second")

    assert instance(api, "ORDERS", ORDERS_ID)["metadata"] == {"k": "first"}


@ROUTES
def test_metadata_put_on_unknown_instance_is_404_with_an_empty_body(api, orders, prefix, slash):
    assert_empty(api.put(f"{prefix}apps/ORDERS/unknown/metadata{slash}?k=v"), 404)


# ----------------------------------------------------------------------------- server information


@VARIANTS
def test_status_endpoint_answers_in_the_negotiated_format(api, orders, prefix, slash, fmt):
    response = api.get(f"{prefix}status{slash}", **headers(fmt))

    assert response.status_code == 200
    assert response["Content-Type"].split(";")[0] == ACCEPT[fmt]
    doc = parse(response)
    assert (list(doc) if fmt == "json" else [doc.tag]) == ["status"]


@ROUTES
def test_serverinfo_statusoverrides_is_a_json_map_of_id_to_status(api, orders, prefix, slash):
    register(api, instance_body(app="BILLING", host="10.0.0.2"))
    api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=OUT_OF_SERVICE")
    api.put(f"/eureka/apps/BILLING/{enc(BILLING_ID)}/status?value=DOWN")

    response = api.get(f"{prefix}serverinfo/statusoverrides{slash}")

    assert response.status_code == 200
    assert response["Content-Type"].split(";")[0] == "application/json"
    assert json.loads(response.content) == {ORDERS_ID: "OUT_OF_SERVICE", BILLING_ID: "DOWN"}


@ROUTES
def test_asg_status_put_is_400_with_a_plain_text_reason(api, prefix, slash):
    response = api.put(f"{prefix}asg/my-asg/status{slash}?value=ENABLED")

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert b"asg" in response.content.lower()


# ------------------------------------------------------------------------------- ids and routing

PY_ID = "127.0.0.5:pyapp:9090"
SPRING_ID = "test#1.[3.?]!"


def test_python_client_percent_encoded_ids_are_decoded(api):
    register(api, instance_body(app="PYAPP", host="127.0.0.5", port=9090, instance_id=PY_ID))
    path = "/eureka/apps/PYAPP/127.0.0.5%3Apyapp%3A9090"

    assert_empty(api.put(f"{path}?status=UP&lastDirtyTimestamp=1"), 200)
    assert parse(api.get(path, **headers("json")))["instance"]["instanceId"] == PY_ID
    assert_empty(api.put(f"{path}/status?value=OUT_OF_SERVICE"), 200)
    assert_empty(api.put(f"{path}/metadata?a=b"), 200)
    assert_empty(api.delete(f"{path}/status?value=UP"), 200)
    assert_empty(api.delete(path), 200)
    assert instance_ids(api.get("/eureka/apps/", **headers("json"))) == []


def test_spring_style_ids_with_reserved_characters_are_decoded(api):
    register(api, instance_body(instance_id=SPRING_ID))
    path = f"/eureka/apps/ORDERS/{enc(SPRING_ID)}"
    assert enc(SPRING_ID) == "test%231.%5B3.%3F%5D%21"

    assert parse(api.get(path, **headers("json")))["instance"]["instanceId"] == SPRING_ID
    assert (
        parse(api.get(f"/eureka/instances/{enc(SPRING_ID)}", **headers("json")))["instance"]["app"]
        == "ORDERS"
    )
    assert_empty(api.put(path), 200)
    assert_empty(api.put(f"{path}/status?value=DOWN"), 200)
    assert instance(api, "ORDERS", SPRING_ID)["status"] == "DOWN"
    assert_empty(api.delete(path), 200)


def test_doubled_slash_before_apps_is_tolerated(api):
    assert_empty(register(api, instance_body(), prefix="/eureka//"), 204)

    assert instance_ids(api.get("/eureka//apps", **headers("json"))) == [ORDERS_ID]
    assert instance_ids(api.get("/eureka/v2//apps/", **headers("xml"))) == [ORDERS_ID]
    assert_empty(api.put(f"/eureka/v2//apps/ORDERS/{enc(ORDERS_ID)}"), 200)
    assert_empty(api.delete(f"/eureka//apps/ORDERS/{enc(ORDERS_ID)}"), 200)


REDIRECT_PROBES = [
    ("get", "apps/"),
    ("get", "apps/delta/"),
    ("get", "apps/ORDERS/"),
    ("get", f"apps/ORDERS/{enc(ORDERS_ID)}/"),
    ("get", f"instances/{enc(ORDERS_ID)}/"),
    ("get", "vips/orders/"),
    ("get", "svips/orders/"),
    ("get", "status/"),
    ("get", "serverinfo/statusoverrides/"),
    ("post", "apps/ORDERS"),
    ("put", f"apps/ORDERS/{enc(ORDERS_ID)}"),
    ("put", f"apps/ORDERS/{enc(ORDERS_ID)}/status?value=DOWN"),
    ("delete", f"apps/ORDERS/{enc(ORDERS_ID)}/status"),
    ("put", f"apps/ORDERS/{enc(ORDERS_ID)}/metadata?a=b"),
    ("put", "asg/asg1/status?value=ENABLED"),
    ("delete", f"apps/ORDERS/{enc(ORDERS_ID)}"),
    ("delete", "apps/ORDERS/unknown"),
    ("put", "apps/ORDERS/unknown"),
    ("post", "apps/ORDERS/"),
    ("put", f"apps/ORDERS/{enc(ORDERS_ID)}/"),
    ("delete", f"apps/ORDERS/{enc(ORDERS_ID)}/"),
]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("method,path", REDIRECT_PROBES)
def test_no_route_ever_answers_with_a_redirect(api, orders, prefix, method, path):
    kwargs = {}
    if method == "post":
        kwargs = {"data": json.dumps(instance_body()), "content_type": "application/json"}

    response = getattr(api, method)(f"{prefix}{path}", **kwargs)

    assert not 300 <= response.status_code < 400, (response.status_code, response.get("Location"))
    assert "Location" not in response
    assert response.status_code < 500


def test_unknown_paths_under_the_prefix_are_404_with_an_empty_body(api):
    assert_empty(api.get("/eureka/v2/nothing-here", **headers("json")), 404)
    assert_empty(api.get("/eureka/apps/ORDERS/some-id/unknown-sub-resource"), 404)


def test_instance_status_is_reported_consistently_by_every_read(api, orders):
    api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=DOWN")

    reads = [
        get_json(api, "/eureka/apps/"),
        get_json(api, "/eureka/apps/ORDERS"),
        get_json(api, "/eureka/apps/delta"),
        get_json(api, "/eureka/vips/orders"),
        get_json(api, f"/eureka/instances/{enc(ORDERS_ID)}"),
    ]

    assert {by_id(doc)[ORDERS_ID]["status"] for doc in reads} == {"DOWN"}


def test_full_fetch_accepts_a_regions_parameter(api, orders):
    response = api.get("/eureka/apps/?regions=us-west-2,eu-west-1", **headers("json"))

    assert response.status_code == 200
    assert instance_ids(response) == [ORDERS_ID]


# ------------------------------------------------------------------------ re-registration rules


def test_re_registration_with_an_older_last_dirty_timestamp_keeps_the_stored_copy(api):
    register(api, instance_body(last_dirty=2_000, metadata={"rev": "2"}))

    assert_empty(register(api, instance_body(last_dirty=1_000, metadata={"rev": "1"})), 204)

    stored = instance(api, "ORDERS", ORDERS_ID)
    assert stored["metadata"] == {"rev": "2"}
    assert stored["lastDirtyTimestamp"] == "2000"


def test_re_registration_with_an_equal_last_dirty_timestamp_takes_the_new_payload(api):
    register(api, instance_body(last_dirty=2_000, metadata={"rev": "2"}))

    register(api, instance_body(last_dirty=2_000, metadata={"rev": "3"}))

    assert instance(api, "ORDERS", ORDERS_ID)["metadata"] == {"rev": "3"}


def test_re_registration_resets_registration_time_but_keeps_service_up_time(api, clock):
    register(api, instance_body(last_dirty=1))
    first = instance(api, "ORDERS", ORDERS_ID)["leaseInfo"]
    clock.advance(60_000)

    register(api, instance_body(last_dirty=2))

    lease = instance(api, "ORDERS", ORDERS_ID)["leaseInfo"]
    assert lease["registrationTimestamp"] == first["registrationTimestamp"] + 60_000
    assert lease["serviceUpTimestamp"] == first["serviceUpTimestamp"]


def test_re_registration_with_another_vip_moves_it_between_vip_reads(api):
    register(api, instance_body(vip="old-vip", last_dirty=1))
    assert instance_ids(api.get("/eureka/vips/old-vip", **headers("json"))) == [ORDERS_ID]

    register(api, instance_body(vip="new-vip", last_dirty=2))

    assert instance_ids(api.get("/eureka/vips/old-vip", **headers("json"))) == []
    assert instance_ids(api.get("/eureka/vips/new-vip", **headers("json"))) == [ORDERS_ID]


# --------------------------------------------------------------------------- expiry and eviction


@pytest.fixture
def no_self_preservation(edit_config):
    """Lease expiry is only enforced outside self-preservation; request this before ``api``."""
    edit_config(registry__enable_self_preservation=False)


def test_expired_lease_is_hidden_from_instance_reads_but_listed_until_evicted(
    no_self_preservation, api, clock
):
    register(api, instance_body())
    clock.advance(91_000)

    assert_empty(api.get(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 404)
    assert_empty(api.get(f"/eureka/instances/{enc(ORDERS_ID)}"), 404)
    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status?value=DOWN"), 404)
    assert instance_ids(api.get("/eureka/apps/", **headers("json"))) == [ORDERS_ID]


def test_a_heartbeat_revives_an_expired_lease_that_was_not_evicted_yet(no_self_preservation, api, clock):
    register(api, instance_body())
    clock.advance(91_000)

    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 200)

    assert api.get(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}").status_code == 200


def test_eviction_removes_the_instance_and_reports_it_deleted(no_self_preservation, api, node, clock):
    register(api, instance_body())
    clock.advance(91_000)

    evict(node, clock.now)

    assert instance_ids(api.get("/eureka/apps/", **headers("json"))) == []
    delta = get_json(api, "/eureka/apps/delta")
    assert by_id(delta)[ORDERS_ID]["actionType"] == "DELETED"
    assert_empty(api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"), 404)


def test_ids_with_an_encoded_slash_do_not_break_anything(api):
    response = register(api, instance_body(instance_id="a/b"))

    assert response.status_code in (204, 400)
    assert api.get("/eureka/apps/ORDERS/a%2Fb").status_code in (200, 404)
    assert api.get("/eureka/apps/", **headers("json")).status_code == 200
    assert api.get("/eureka/apps/", **headers("xml")).status_code == 200
