"""Bad input: a 4xx with a short plain-text reason, never a 500, and the registry left exactly as it was.

Messages of protocol §2.7 are checked word for word; for the others the test only asks that the
message names the problem (a keyword), since the wording is the server's own choice.
"""

from __future__ import annotations

import copy
import gzip
import json
from xml.etree import ElementTree as ET

import pytest
from django.conf import settings

from tests.factories import instance_body

from .api_support import (
    REPLICATION,
    api_both_framings,
    enc,
    get_json,
    headers,
    registry_state,
    to_xml_body,
)

ORDERS_ID = "10.0.0.1:orders:8080"

# Every test here runs twice: bodies sent with a Content-Length, and the same bodies sent chunked (as
# the Netflix eureka-client 1.x does); both must be accepted or refused alike.
api = api_both_framings


@pytest.fixture
def populated(api, clock):
    """Two instances, one override, so that 'unchanged' has something to compare."""
    assert (
        api.post(
            "/eureka/apps/ORDERS", data=json.dumps(instance_body()), content_type="application/json"
        ).status_code
        == 204
    )
    body = instance_body(app="BILLING", host="10.0.0.2")
    assert (
        api.post("/eureka/apps/BILLING", data=json.dumps(body), content_type="application/json").status_code
        == 204
    )
    api.put("/eureka/apps/BILLING/10.0.0.2%3Abilling%3A8080/status?value=OUT_OF_SERVICE")
    clock.advance(5_000)


def assert_refused(response, status: int, *keywords: str, exact: str | None = None) -> str:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("text/plain")
    message = response.content.decode().strip()
    assert message, "a refusal must say why"
    assert len(message) < 300 and "\n" not in message, message
    assert "Traceback" not in message
    if exact is not None:
        assert message == exact
    for keyword in keywords:
        assert keyword.lower() in message.lower(), (keyword, message)
    return message


def without(field: str, body=None) -> dict:
    body = copy.deepcopy(body or instance_body())
    body["instance"].pop(field)
    return body


def with_fields(**changes) -> dict:
    body = instance_body()
    body["instance"].update(changes)
    return body


# ---------------------------------------------------------------------------- §2.7 validation


VALIDATION_CASES = [
    ("no-id-no-host", with_fields(instanceId=None, hostName=None), "Missing instanceId"),
    ("empty-id-empty-host", with_fields(instanceId="", hostName=""), "Missing instanceId"),
    ("no-hostname", without("hostName"), "Missing hostname"),
    ("empty-hostname", with_fields(hostName=""), "Missing hostname"),
    ("blank-hostname", with_fields(hostName="   "), "Missing hostname"),
    ("no-ip", without("ipAddr"), "Missing ip address"),
    ("empty-ip", with_fields(ipAddr=""), "Missing ip address"),
    ("blank-ip", with_fields(ipAddr="  "), "Missing ip address"),
    ("no-app", without("app"), "Missing appName"),
    ("empty-app", with_fields(app=""), "Missing appName"),
    ("other-app", with_fields(app="BILLING"), "Mismatched appName, expecting ORDERS but was BILLING"),
    ("other-app-lower", with_fields(app="billing"), "Mismatched appName, expecting ORDERS but was BILLING"),
    ("no-dc", without("dataCenterInfo"), "Missing dataCenterInfo"),
    ("null-dc", with_fields(dataCenterInfo=None), "Missing dataCenterInfo"),
    (
        "dc-no-name",
        with_fields(dataCenterInfo={"@class": "com.netflix.appinfo.MyDataCenterInfo"}),
        "Missing dataCenterInfo Name",
    ),
    # Order of the checks: the first failing one is reported.
    ("no-host-no-ip", with_fields(hostName=None, ipAddr=None), "Missing hostname"),
    ("no-ip-no-app", with_fields(ipAddr=None, app=None), "Missing ip address"),
    ("no-app-no-dc", with_fields(app=None, dataCenterInfo=None), "Missing appName"),
    (
        "mismatch-no-dc",
        with_fields(app="BILLING", dataCenterInfo=None),
        "Mismatched appName, expecting ORDERS but was BILLING",
    ),
]


@pytest.mark.parametrize("fmt", ["json", "xml"])
@pytest.mark.parametrize(
    "body,message", [c[1:] for c in VALIDATION_CASES], ids=[c[0] for c in VALIDATION_CASES]
)
def test_registration_validation_failures_are_400_with_the_eureka_message(
    api, node, populated, fmt, body, message
):
    body = {"instance": {k: v for k, v in body["instance"].items() if v is not None}}
    if fmt == "xml" and body["instance"].get("dataCenterInfo") == {
        "@class": "com.netflix.appinfo.MyDataCenterInfo"
    }:
        data = to_xml_body(body).replace(
            b'<dataCenterInfo class="com.netflix.appinfo.MyDataCenterInfo"></dataCenterInfo>',
            b"<dataCenterInfo/>",
        )
    else:
        data = json.dumps(body).encode() if fmt == "json" else to_xml_body(body)
    before = registry_state(api, node)

    response = api.post("/eureka/apps/ORDERS", data=data, content_type=f"application/{fmt}")

    assert_refused(response, 400, exact=message)
    assert registry_state(api, node) == before


# ----------------------------------------------------------------------------- unreadable bodies

GOOD_XML = to_xml_body(instance_body())

BODY_CASES = [
    ("json-truncated", "application/json", b'{"instance": {"hostName": "h"', ("json",)),
    ("json-garbage", "application/json", b"not json at all", ("json",)),
    ("json-trailing-comma", "application/json", b'{"instance": {"hostName": "h",}}', ("json",)),
    ("json-array", "application/json", b"[1, 2]", ()),
    ("json-string", "application/json", b'"instance"', ()),
    ("json-null", "application/json", b"null", ()),
    ("json-instance-not-object", "application/json", b'{"instance": "x"}', ("instance",)),
    (
        "json-wrong-root",
        "application/json",
        json.dumps({"application": instance_body()["instance"]}).encode(),
        ("instance",),
    ),
    ("xml-truncated", "application/xml", GOOD_XML[:-20], ("xml",)),
    ("xml-garbage", "application/xml", b"<instance><hostName>h</instance>", ("xml",)),
    ("xml-wrong-root", "application/xml", GOOD_XML.replace(b"instance>", b"application>"), ("instance",)),
    ("xml-json-body", "application/xml", json.dumps(instance_body()).encode(), ("xml",)),
    ("json-xml-body", "application/json", GOOD_XML, ("json",)),
    ("empty-body", "application/json", b"", ("body",)),
    ("blank-body", "application/xml", b"   \n ", ("body",)),
]


@pytest.mark.parametrize(
    "content_type,data,keywords", [c[1:] for c in BODY_CASES], ids=[c[0] for c in BODY_CASES]
)
def test_unreadable_registration_bodies_are_400(api, node, populated, content_type, data, keywords):
    before = registry_state(api, node)

    response = api.post("/eureka/apps/ORDERS", data=data, content_type=content_type)

    assert_refused(response, 400, *keywords)
    assert registry_state(api, node) == before


FIELD_CASES = [
    ("status-bogus", {"status": "BOGUS"}, "status"),
    ("status-number", {"status": 3}, "status"),
    ("overridden-bogus", {"overriddenStatus": "SOMETIMES"}, "status"),
    ("overridden-lower-key-bogus", {"overriddenStatus": None, "overriddenstatus": "nope"}, "status"),
    ("port-word", {"port": {"$": "abc", "@enabled": "true"}}, "port"),
    ("port-bare-word", {"port": "eighty"}, "port"),
    ("port-fraction", {"port": {"$": 80.5, "@enabled": "true"}}, "port"),
    ("port-list", {"port": [8080]}, "port"),
    ("secure-port-word", {"securePort": {"$": "x443", "@enabled": "false"}}, "securePort"),
    ("country-word", {"countryId": "one"}, "countryId"),
    ("dirty-word", {"lastDirtyTimestamp": "yesterday"}, "lastDirtyTimestamp"),
    (
        "duration-word",
        {"leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": "long"}},
        "durationInSecs",
    ),
    ("lease-list", {"leaseInfo": [30, 90]}, "leaseInfo"),
    ("metadata-string", {"metadata": "zone=a"}, "metadata"),
    ("metadata-nested", {"metadata": {"zone": {"a": 1}}}, "metadata"),
    ("dc-string", {"dataCenterInfo": "MyOwn"}, "dataCenterInfo"),
    ("hostname-object", {"hostName": {"name": "h"}}, "hostName"),
    ("coordinating-word", {"isCoordinatingDiscoveryServer": "perhaps"}, "isCoordinatingDiscoveryServer"),
]


@pytest.mark.parametrize("changes,keyword", [c[1:] for c in FIELD_CASES], ids=[c[0] for c in FIELD_CASES])
def test_invalid_field_values_are_400_naming_the_field(api, node, populated, changes, keyword):
    body = with_fields(**changes)
    body["instance"] = {k: v for k, v in body["instance"].items() if v is not None}
    before = registry_state(api, node)

    response = api.post("/eureka/apps/ORDERS", data=json.dumps(body), content_type="application/json")

    assert_refused(response, 400, keyword)
    assert registry_state(api, node) == before


@pytest.mark.parametrize(
    "element,value,keyword",
    [
        ("port", "abc", "port"),
        ("status", "SLEEPING", "status"),
        ("countryId", "x", "countryId"),
        ("lastDirtyTimestamp", "soon", "lastDirtyTimestamp"),
    ],
)
def test_invalid_xml_field_values_are_400_naming_the_field(api, node, populated, element, value, keyword):
    body = instance_body(last_dirty=1)
    data = to_xml_body(body)
    start = data.index(f"<{element}".encode())
    end = data.index(f"</{element}>".encode())
    data = data[:start] + f"<{element}>{value}".encode() + data[end:]
    before = registry_state(api, node)

    response = api.post("/eureka/apps/ORDERS", data=data, content_type="application/xml")

    assert_refused(response, 400, keyword)
    assert registry_state(api, node) == before


# Values Java's decoder cannot hold (int / long): storing them would break every Java, Spring and Go
# reader of the registry, not just this client.
OUT_OF_RANGE_CASES = [
    ("dirty-over-long", {"lastDirtyTimestamp": str(2**70)}, "lastDirtyTimestamp"),
    ("dirty-float-huge", {"lastDirtyTimestamp": 1e300}, "lastDirtyTimestamp"),
    ("country-over-int", {"countryId": 2**40}, "countryId"),
    (
        "duration-over-int",
        {"leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 2**40}},
        "durationInSecs",
    ),
    (
        "renewal-over-int",
        {"leaseInfo": {"renewalIntervalInSecs": 2**40, "durationInSecs": 90}},
        "renewalIntervalInSecs",
    ),
]


@pytest.mark.parametrize(
    "changes,keyword", [c[1:] for c in OUT_OF_RANGE_CASES], ids=[c[0] for c in OUT_OF_RANGE_CASES]
)
def test_numbers_out_of_the_java_range_are_400(api, node, populated, changes, keyword):
    before = registry_state(api, node)

    response = api.post(
        "/eureka/apps/ORDERS", data=json.dumps(with_fields(**changes)), content_type="application/json"
    )

    assert_refused(response, 400, keyword)
    assert registry_state(api, node) == before


# -------------------------------------------------------------------------- status / renew params


@pytest.mark.parametrize(
    "query,keyword",
    [
        ("", "value"),
        ("?value=", "value"),
        ("?value=up", "up"),
        ("?value=Out_Of_Service", "Out_Of_Service"),
        ("?value=SLEEPING", "SLEEPING"),
        ("?value=DOWN&lastDirtyTimestamp=abc", "lastDirtyTimestamp"),
        ("?value=DOWN&lastDirtyTimestamp=1.5", "lastDirtyTimestamp"),
    ],
)
def test_status_put_with_bad_or_missing_value_is_400_not_500(api, node, populated, query, keyword):
    before = registry_state(api, node)

    response = api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status{query}")

    assert_refused(response, 400, keyword)
    assert registry_state(api, node) == before


@pytest.mark.parametrize(
    "query,keyword",
    [("?value=bogus", "bogus"), ("?value=UP&lastDirtyTimestamp=x1", "lastDirtyTimestamp")],
)
def test_status_delete_with_bad_params_is_400_and_keeps_the_override(api, node, populated, query, keyword):
    before = registry_state(api, node)

    response = api.delete(f"/eureka/apps/BILLING/10.0.0.2%3Abilling%3A8080/status{query}")

    assert_refused(response, 400, keyword)
    assert registry_state(api, node) == before


@pytest.mark.parametrize(
    "query,keyword",
    [
        ("?lastDirtyTimestamp=abc", "lastDirtyTimestamp"),
        ("?lastDirtyTimestamp=12ab", "lastDirtyTimestamp"),
        ("?status=UP&lastDirtyTimestamp=%20", "lastDirtyTimestamp"),
        ("?overriddenstatus=SOMETIMES", "SOMETIMES"),
    ],
)
def test_renew_with_bad_params_is_400_and_does_not_renew(api, node, clock, populated, query, keyword):
    before = get_json(api, f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}")["instance"]["leaseInfo"]
    clock.advance(10_000)

    response = api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}{query}")

    assert_refused(response, 400, keyword)
    after = get_json(api, f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}")["instance"]["leaseInfo"]
    assert after["lastRenewalTimestamp"] == before["lastRenewalTimestamp"]


# ---------------------------------------------------------------------------------- size limits


def test_body_over_the_size_limit_is_413(api, node, populated):
    limit = settings.EUREKA.connections.max_body_bytes
    data = json.dumps(instance_body()).encode()
    data = data[:-1] + b" " * (limit + 1 - len(data)) + b"}"
    assert len(data) == limit + 1
    before = registry_state(api, node)

    response = api.post("/eureka/apps/ORDERS", data=data, content_type="application/json")

    assert_refused(response, 413, "larger")
    assert registry_state(api, node) == before


def test_body_at_the_size_limit_is_accepted(api, node):
    limit = settings.EUREKA.connections.max_body_bytes
    data = json.dumps(instance_body()).encode()
    data = data[:-1] + b" " * (limit - len(data)) + b"}"

    response = api.post("/eureka/apps/ORDERS", data=data, content_type="application/json")

    assert response.status_code == 204


def test_gzip_bomb_over_the_limit_once_decompressed_is_413(api, node, populated):
    limit = settings.EUREKA.connections.max_body_bytes
    data = json.dumps(instance_body()).encode()
    bomb = gzip.compress(data[:-1] + b" " * (20 * limit) + b"}")
    assert len(bomb) < limit // 10
    before = registry_state(api, node)

    response = api.post(
        "/eureka/apps/ORDERS", data=bomb, content_type="application/json", HTTP_CONTENT_ENCODING="gzip"
    )

    assert_refused(response, 413, "larger")
    assert registry_state(api, node) == before


def test_gzip_body_just_under_the_limit_once_decompressed_is_accepted(api, node):
    limit = settings.EUREKA.connections.max_body_bytes
    data = json.dumps(instance_body()).encode()
    data = data[:-1] + b" " * (limit - len(data)) + b"}"

    response = api.post(
        "/eureka/apps/ORDERS",
        data=gzip.compress(data),
        content_type="application/json",
        HTTP_CONTENT_ENCODING="gzip",
    )

    assert response.status_code == 204


@pytest.mark.parametrize(
    "data", [b"definitely not gzip", gzip.compress(b'{"instance": {}}')[:-12]], ids=["plain", "cut"]
)
def test_malformed_gzip_body_is_400(api, node, populated, data):
    before = registry_state(api, node)

    response = api.post(
        "/eureka/apps/ORDERS", data=data, content_type="application/json", HTTP_CONTENT_ENCODING="gzip"
    )

    assert 400 <= response.status_code < 500
    assert response["Content-Type"].startswith("text/plain")
    assert b"gzip" in response.content.lower() or b"body" in response.content.lower()
    assert registry_state(api, node) == before


# ----------------------------------------------------------------------------------- XML attacks

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<instance><instanceId>bomb</instanceId><hostName>&lol9;</hostName><app>ORDERS</app><ipAddr>1.2.3.4</ipAddr>
<dataCenterInfo><name>MyOwn</name></dataCenterInfo></instance>"""

EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE instance [<!ENTITY secret SYSTEM "file:///etc/hostname">]>
<instance><instanceId>xxe</instanceId><hostName>&secret;</hostName><app>ORDERS</app><ipAddr>1.2.3.4</ipAddr>
<dataCenterInfo><name>MyOwn</name></dataCenterInfo></instance>"""

EXTERNAL_DTD = b"""<?xml version="1.0"?>
<!DOCTYPE instance SYSTEM "http://attacker.invalid/evil.dtd">
<instance><instanceId>dtd</instanceId><hostName>h</hostName><app>ORDERS</app><ipAddr>1.2.3.4</ipAddr>
<dataCenterInfo><name>MyOwn</name></dataCenterInfo></instance>"""


@pytest.mark.parametrize(
    "data", [BILLION_LAUGHS, EXTERNAL_ENTITY, EXTERNAL_DTD], ids=["laughs", "xxe", "dtd"]
)
def test_xml_entity_and_dtd_tricks_are_400(api, node, populated, data):
    before = registry_state(api, node)

    response = api.post("/eureka/apps/ORDERS", data=data, content_type="application/xml")

    assert_refused(response, 400, "xml")
    assert registry_state(api, node) == before


# ------------------------------------------------------------------------------ content types


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/octet-stream", "application/yaml"],
)
def test_unsupported_content_type_is_415(api, node, populated, content_type):
    before = registry_state(api, node)

    response = api.post("/eureka/apps/ORDERS", data=json.dumps(instance_body()), content_type=content_type)

    assert_refused(response, 415, "content-type")
    assert registry_state(api, node) == before


# What a web page can make a browser send cross-site without asking first (a CORS "simple request":
# text/plain, form types, parameters allowed), and a body with no type at all (a Blob or an
# ArrayBuffer). A JSON or XML body under any of them is still not one.
BROWSER_SENDABLE_TYPES = [
    "text/plain; a=json",
    "text/plain;charset=UTF-8; x=application/json",
    "application/x-www-form-urlencoded; json",
    "multipart/form-data; boundary=json",
    "text/plain; a=xml",
    "",
]


@pytest.mark.parametrize("content_type", BROWSER_SENDABLE_TYPES)
@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_a_body_a_browser_could_send_cross_site_is_415(api, node, populated, content_type, fmt):
    before = registry_state(api, node)
    body = json.dumps(instance_body()) if fmt == "json" else to_xml_body(instance_body())

    # generic(): post() would encode a body sent with no type as a form.
    response = api.generic("POST", "/eureka/apps/ORDERS", body, content_type=content_type)

    assert_refused(response, 415, "content-type")
    assert registry_state(api, node) == before


@pytest.mark.parametrize("content_type", BROWSER_SENDABLE_TYPES)
def test_a_replication_batch_a_browser_could_send_cross_site_is_415(api, node, populated, content_type):
    before = registry_state(api, node)
    item = {
        "appName": "INTRUDER",
        "id": "10.9.9.9:intruder:80",
        "action": "Register",
        "instanceInfo": instance_body(app="INTRUDER", host="10.9.9.9", port=80)["instance"],
    }

    response = api.generic(
        "POST",
        "/eureka/peerreplication/batch/",
        json.dumps({"replicationList": [item]}),
        content_type=content_type,
        **REPLICATION,
    )

    assert_refused(response, 415, "content-type")
    assert registry_state(api, node) == before


@pytest.mark.parametrize(
    "content_type,fmt",
    [
        ("application/json", "json"),
        ("Application/JSON ; charset=UTF-8", "json"),
        ("application/vnd.eureka+json", "json"),
        ("text/xml; charset=utf-8", "xml"),
        ("application/atom+xml", "xml"),
    ],
)
def test_json_and_xml_media_types_are_read_by_their_essence(api, node, content_type, fmt):
    body = json.dumps(instance_body()) if fmt == "json" else to_xml_body(instance_body())

    response = api.post("/eureka/apps/ORDERS", data=body, content_type=content_type)

    assert response.status_code == 204, response.content
    assert node.registry.reads.get_instance("ORDERS", ORDERS_ID, node.now()) is not None


# -------------------------------------------------------------------------------------- odd ids


def test_very_long_ids_are_handled_without_a_server_error(api):
    long_id = "i-" + "x" * 8_000

    response = api.post(
        "/eureka/apps/ORDERS",
        data=json.dumps(instance_body(instance_id=long_id)),
        content_type="application/json",
    )

    assert response.status_code in (204, 400, 413, 414)
    if response.status_code == 204:
        assert api.put(f"/eureka/apps/ORDERS/{long_id}").status_code == 200
        assert get_json(api, f"/eureka/instances/{long_id}")["instance"]["instanceId"] == long_id
        assert api.delete(f"/eureka/apps/ORDERS/{long_id}").status_code == 200
    assert api.get(f"/eureka/apps/ORDERS/{'y' * 8_000}").status_code == 404


# Ids with whitespace or "/" are refused: test_api_hostile_writes.py.
@pytest.mark.parametrize("odd_id", ["ünïcødé:svc:1", "☃-snowman", "日本語のID", "emoji-🚀", "pct%20and+plus"])
def test_unicode_ids_work_through_percent_encoded_paths(api, odd_id):
    register = api.post(
        "/eureka/apps/ORDERS",
        data=json.dumps(instance_body(instance_id=odd_id)),
        content_type="application/json",
    )
    path = f"/eureka/apps/ORDERS/{enc(odd_id)}"

    assert register.status_code == 204
    assert get_json(api, path)["instance"]["instanceId"] == odd_id
    xml_root = ET.fromstring(api.get(path, **headers("xml")).content)
    assert xml_root.findtext("instanceId") == odd_id
    assert api.put(path).status_code == 200
    assert api.put(f"{path}/status?value=DOWN").status_code == 200
    assert get_json(api, "/eureka/serverinfo/statusoverrides") == {odd_id: "DOWN"}
    assert api.delete(path).status_code == 200


def test_unknown_unicode_id_is_a_plain_404(api):
    response = api.get(f"/eureka/apps/ORDERS/{enc('nö-such-☃')}")

    assert response.status_code == 404
    assert response.content == b""


def test_undecodable_percent_escapes_in_ids_are_not_a_server_error(api, node, populated):
    for method in ("get", "put", "delete"):
        response = getattr(api, method)("/eureka/apps/ORDERS/%FF%FE%80")
        assert response.status_code in (400, 404), (method, response.status_code)


ODD_TEXT_CASES = [
    ("control-char-id", {"instanceId": "a\u0001b"}),
    ("nul-in-hostname", {"hostName": "host\u0000name"}),
    ("escape-in-metadata-value", {"metadata": {"zone": "a\u001bb"}}),
    ("metadata-key-with-space", {"metadata": {"bad key": "v"}}),
    ("metadata-key-starting-with-digit", {"metadata": {"1zone": "v"}}),
    ("metadata-key-with-markup", {"metadata": {"a<b": "v"}}),
    ("metadata-key-at", {"metadata": {"@weight": "5"}}),
    ("metadata-key-empty", {"metadata": {"": "v"}}),
]


@pytest.mark.parametrize("changes", [c[1] for c in ODD_TEXT_CASES], ids=[c[0] for c in ODD_TEXT_CASES])
def test_text_that_xml_cannot_carry_never_breaks_the_xml_registry(api, node, populated, changes):
    """Either the registration is refused, or every XML reader can still parse the full registry.

    One instance whose text is not representable in XML 1.0 must not make ``GET apps`` unparseable for
    every py-eureka-client and fargo reader.
    """
    before = registry_state(api, node)

    response = api.post(
        "/eureka/apps/ORDERS", data=json.dumps(with_fields(**changes)), content_type="application/json"
    )

    assert response.status_code < 500
    if 400 <= response.status_code < 500:
        assert response["Content-Type"].startswith("text/plain")
        assert registry_state(api, node) == before
        return
    assert response.status_code == 204
    for path in ("/eureka/apps/", "/eureka/apps/delta", "/eureka/apps/ORDERS", "/eureka/vips/orders"):
        xml = api.get(path, **headers("xml")).content
        ET.fromstring(xml)  # raises ParseError when the payload is not well-formed


@pytest.mark.parametrize(
    "query",
    ["bad%20key=v", "1zone=v", "a%3Cb=v", "%40weight=5", "zone=a%01b", "zone=%00"],
    ids=["space", "digit-first", "markup", "at", "control-value", "nul-value"],
)
def test_metadata_put_that_xml_cannot_carry_never_breaks_the_xml_registry(api, node, populated, query):
    before = registry_state(api, node)

    response = api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/metadata?{query}")

    assert response.status_code < 500
    if 400 <= response.status_code < 500:
        assert response["Content-Type"].startswith("text/plain")
        assert registry_state(api, node) == before
        return
    assert response.status_code == 200
    for path in ("/eureka/apps/", "/eureka/apps/delta", f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"):
        ET.fromstring(api.get(path, **headers("xml")).content)


# ------------------------------------------------------------------------------------ methods

METHOD_CASES = [
    ("PATCH", "/eureka/apps/ORDERS/some-id"),
    ("POST", "/eureka/apps/"),
    ("DELETE", "/eureka/apps/"),
    ("PUT", "/eureka/apps/delta"),
    ("DELETE", "/eureka/apps/ORDERS"),
    ("POST", f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}"),
    ("GET", f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/status"),
    ("GET", f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}/metadata"),
    ("POST", "/eureka/vips/orders"),
    ("GET", "/eureka/asg/my-asg/status"),
    ("DELETE", "/eureka/status"),
    ("BREW", "/eureka/apps/"),
    ("FOO", "/eureka/v2/apps/ORDERS"),
    ("PROPFIND", f"/eureka/v2/instances/{enc(ORDERS_ID)}"),
    ("TRACE", "/eureka/v2/apps/"),
]


@pytest.mark.parametrize("method,path", METHOD_CASES)
def test_methods_a_route_does_not_serve_are_405_plain_text(api, node, populated, method, path):
    before = registry_state(api, node)

    response = api.generic(method, path)

    assert_refused(response, 405, method)
    assert "Allow" in response
    assert registry_state(api, node) == before


@pytest.mark.parametrize(
    "path", ["/eureka/apps/", f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}", "/eureka/v2/apps/ORDERS"]
)
def test_options_answers_with_allow_and_no_garbage_body(api, node, populated, path):
    response = api.options(path)

    assert response.status_code in (200, 204, 405)
    assert "GET" in response["Allow"]
    if response.status_code == 405:
        assert response["Content-Type"].startswith("text/plain")
    else:
        assert response.content == b"", response.content
