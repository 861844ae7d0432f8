"""Registration bodies in the shape each real client sends (protocol §3.6, §4.1, clients §0.7, G30),
and what the server then stores and serves for them."""

from __future__ import annotations

import json

import pytest

from tests.factories import instance_body

from .api_support import (
    AMAZON_DC_CLASS,
    DEFAULT_DC_CLASS,
    EMPTY_MAP_CLASS,
    api_both_framings,
    enc,
    get_json,
    headers,
    parse,
    register,
    to_xml_body,
)
from .test_api_wire_shape import check_json_instance, check_xml_instance

# Every test here runs twice: bodies sent with a Content-Length, and the same bodies sent chunked (as
# the Netflix eureka-client 1.x does); both must be accepted or refused alike.
api = api_both_framings


def served(api, app: str, instance_id: str) -> dict:
    inst = get_json(api, f"/eureka/apps/{app}/{enc(instance_id)}")["instance"]
    check_json_instance(inst)
    return inst


def no_nulls(value) -> bool:
    if isinstance(value, dict):
        return all(v is not None and no_nulls(v) for v in value.values())
    if isinstance(value, list):
        return all(no_nulls(v) for v in value)
    return value is not None


# --------------------------------------------------------------------------------- Java legacy


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_java_legacy_body_is_stored_and_served_as_sent(api, clock, fmt):
    body = instance_body(
        last_dirty=1_700_000_000_000,
        metadata={"management.port": "8080", "zone": "a"},
        statusPageUrl="http://10.0.0.1:8080/Status",
        healthCheckUrl="http://10.0.0.1:8080/healthcheck",
        lastUpdatedTimestamp="1600000000000",
        actionType="ADDED",
    )

    assert register(api, body, fmt=fmt).status_code == 204

    inst = served(api, "ORDERS", "10.0.0.1:orders:8080")
    assert inst["hostName"] == "10.0.0.1"
    assert inst["ipAddr"] == "10.0.0.1"
    assert inst["port"] == {"$": 8080, "@enabled": "true"}
    assert inst["securePort"] == {"$": 443, "@enabled": "false"}
    assert inst["dataCenterInfo"] == {"@class": DEFAULT_DC_CLASS, "name": "MyOwn"}
    assert inst["leaseInfo"]["renewalIntervalInSecs"] == 30
    assert inst["leaseInfo"]["durationInSecs"] == 90
    assert inst["metadata"] == {"management.port": "8080", "zone": "a"}
    assert inst["homePageUrl"] == "http://10.0.0.1:8080/"
    assert inst["statusPageUrl"] == "http://10.0.0.1:8080/Status"
    assert inst["healthCheckUrl"] == "http://10.0.0.1:8080/healthcheck"
    assert (inst["vipAddress"], inst["secureVipAddress"]) == ("orders", "orders")
    assert inst["lastDirtyTimestamp"] == "1700000000000"
    # Server-side fields are the server's, whatever the client claimed.
    assert inst["lastUpdatedTimestamp"] == str(clock.now)
    assert inst["actionType"] == "ADDED"


def test_java_empty_metadata_marker_is_not_stored_as_a_key(api):
    register(api, instance_body(metadata={"@class": EMPTY_MAP_CLASS}))

    assert served(api, "ORDERS", "10.0.0.1:orders:8080")["metadata"] == {"@class": EMPTY_MAP_CLASS}
    root = parse(api.get(f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}", **headers("xml")))
    assert len(root.find("metadata")) == 0


def test_class_marker_inside_a_non_empty_metadata_map_is_dropped(api):
    register(api, instance_body(metadata={"@class": "java.util.HashMap", "zone": "a"}))

    assert served(api, "ORDERS", "10.0.0.1:orders:8080")["metadata"] == {"zone": "a"}


# --------------------------------------------------------------------------------------- Spring

SPRING_ID = "host-s:spring-app:8081"


def spring_body(**changes) -> dict:
    inst = {
        "instanceId": SPRING_ID,
        "app": "SPRING-APP",
        "appGroupName": None,
        "ipAddr": "10.0.0.7",
        "sid": "na",
        "homePageUrl": "http://host-s:8081/",
        "statusPageUrl": "http://host-s:8081/actuator/info",
        "healthCheckUrl": "http://host-s:8081/actuator/health",
        "secureHealthCheckUrl": None,
        "vipAddress": "spring-app",
        "secureVipAddress": "spring-app",
        "countryId": 1,
        "dataCenterInfo": {"@class": DEFAULT_DC_CLASS, "name": "MyOwn"},
        "hostName": "host-s",
        "status": "UP",
        "overriddenStatus": "UNKNOWN",
        "leaseInfo": {
            "renewalIntervalInSecs": 30,
            "durationInSecs": 90,
            "registrationTimestamp": 0,
            "lastRenewalTimestamp": 0,
            "evictionTimestamp": 0,
            "serviceUpTimestamp": 0,
        },
        "isCoordinatingDiscoveryServer": False,
        "metadata": {"management.port": "8081"},
        "lastUpdatedTimestamp": 1716999999000,
        "lastDirtyTimestamp": 1716999999000,
        "actionType": None,
        "asgName": None,
        "port": {"$": 8081, "@enabled": "true"},
        "securePort": {"$": 443, "@enabled": "false"},
    }
    inst.update(changes)
    return {"instance": inst}


def test_spring_body_with_numbers_booleans_and_explicit_nulls_is_accepted(api, clock):
    assert register(api, spring_body()).status_code == 204

    inst = served(api, "SPRING-APP", SPRING_ID)
    assert no_nulls(inst)
    assert {"appGroupName", "secureHealthCheckUrl", "asgName", "sid"}.isdisjoint(inst)
    assert inst["isCoordinatingDiscoveryServer"] == "false"
    assert inst["lastDirtyTimestamp"] == "1716999999000"
    assert inst["lastUpdatedTimestamp"] == str(clock.now)
    assert inst["actionType"] == "ADDED"
    assert inst["overriddenStatus"] == "UNKNOWN"
    assert inst["port"] == {"$": 8081, "@enabled": "true"}
    # The client's zeroed lease timestamps are not the server's.
    assert inst["leaseInfo"]["registrationTimestamp"] == clock.now
    assert inst["metadata"] == {"management.port": "8081"}


def test_spring_explicit_null_overridden_status_means_unknown(api):
    register(api, spring_body(overriddenStatus=None, overriddenstatus=None))

    assert served(api, "SPRING-APP", SPRING_ID)["overriddenStatus"] == "UNKNOWN"
    assert get_json(api, "/eureka/serverinfo/statusoverrides") == {}


def test_explicit_null_in_one_spelling_does_not_hide_the_other_spelling(api):
    # §3.6: "Accept overriddenStatus or overriddenstatus [...] Explicit nulls count as absent."
    register(api, spring_body(overriddenStatus=None, overriddenstatus="OUT_OF_SERVICE"))

    assert served(api, "SPRING-APP", SPRING_ID)["overriddenStatus"] == "OUT_OF_SERVICE"


def test_spring_full_registry_has_no_null_anywhere(api):
    register(api, spring_body())

    assert no_nulls(get_json(api, "/eureka/apps/"))


def test_spring_legacy_metadata_instance_id_rule(api):
    register(api, spring_body(instanceId=None, metadata={"instanceId": "abc123"}))

    assert served(api, "SPRING-APP", "host-s:abc123")["instanceId"] == "host-s:abc123"


def test_spring_renew_with_json_content_type_and_empty_body_is_200(api):
    register(api, spring_body())

    response = api.put(
        f"/eureka/apps/SPRING-APP/{enc(SPRING_ID)}?status=UP&lastDirtyTimestamp=1716999999000",
        data=b"",
        content_type="application/json",
        HTTP_ACCEPT="application/json",
    )

    assert response.status_code == 200
    assert response.content == b""


# --------------------------------------------------------------------------------------- Python

PY_BODY = {
    "instance": {
        "instanceId": "127.0.0.5:pyapp:9090",
        "hostName": "pyhost",
        "app": "PYAPP",
        "ipAddr": "127.0.0.5",
        "port": {"$": 9090, "@enabled": "true"},
        "securePort": {"$": 9443, "@enabled": "false"},
        "countryId": 1,
        "dataCenterInfo": {"@class": DEFAULT_DC_CLASS, "name": "MyOwn"},
        "leaseInfo": {
            "renewalIntervalInSecs": 2,
            "durationInSecs": 90,
            "registrationTimestamp": 0,
            "lastRenewalTimestamp": 0,
            "evictionTimestamp": 0,
            "serviceUpTimestamp": 0,
        },
        "metadata": {"management.port": "9090", "zone": "default"},
        "homePageUrl": "http://pyhost:9090/",
        "statusPageUrl": "http://pyhost:9090/info",
        "healthCheckUrl": "http://pyhost:9090/health",
        "secureHealthCheckUrl": "",
        "vipAddress": "pyapp",
        "secureVipAddress": "pyapp",
        "isCoordinatingDiscoveryServer": "false",
        "status": "UP",
        "overriddenstatus": "UNKNOWN",
        "lastUpdatedTimestamp": "1796221493367",
        "lastDirtyTimestamp": "1796221493367",
    }
}


def test_python_client_body_is_accepted_and_served(api, clock):
    # The node's clock as when the body was captured: a timestamp far ahead of it would be lowered.
    clock.now = int(PY_BODY["instance"]["lastDirtyTimestamp"]) + 1_000
    # py sends no Accept header: it must get XML back, and parse every numeric element with int().
    assert (
        api.post("/eureka/apps/PYAPP", data=json.dumps(PY_BODY), content_type="application/json").status_code
        == 204
    )

    inst = served(api, "PYAPP", "127.0.0.5:pyapp:9090")
    assert inst["leaseInfo"]["renewalIntervalInSecs"] == 2
    assert inst["securePort"] == {"$": 9443, "@enabled": "false"}
    assert inst["lastDirtyTimestamp"] == "1796221493367"
    root = parse(api.get("/eureka/apps/"))
    assert root.tag == "applications"
    xml_inst = root.find("application/instance")
    check_xml_instance(xml_inst)
    for numeric in ("countryId", "lastUpdatedTimestamp", "lastDirtyTimestamp"):
        int(xml_inst.findtext(numeric))
    for child in xml_inst.find("leaseInfo"):
        int(child.text)


def test_python_lower_case_overriddenstatus_key_is_read(api):
    body = json.loads(json.dumps(PY_BODY))
    body["instance"]["overriddenstatus"] = "OUT_OF_SERVICE"

    register(api, body)

    inst = served(api, "PYAPP", "127.0.0.5:pyapp:9090")
    assert (inst["status"], inst["overriddenStatus"]) == ("OUT_OF_SERVICE", "OUT_OF_SERVICE")
    assert get_json(api, "/eureka/serverinfo/statusoverrides") == {"127.0.0.5:pyapp:9090": "OUT_OF_SERVICE"}


def test_python_shutdown_sequence_re_registers_down_then_cancels(api):
    register(api, PY_BODY)
    down = json.loads(json.dumps(PY_BODY))
    down["instance"].update(status="DOWN", lastDirtyTimestamp="1796221499999")

    assert register(api, down).status_code == 204
    assert served(api, "PYAPP", "127.0.0.5:pyapp:9090")["status"] == "DOWN"
    assert api.delete("/eureka/apps/PYAPP/127.0.0.5%3Apyapp%3A9090").status_code == 200


# ------------------------------------------------------------------------------------------- JS

JS_BODY = {
    "instance": {
        "app": "jqservice",
        "hostName": "localhost",
        "ipAddr": "127.0.0.1",
        "port": 8080,
        "vipAddress": "jq.test.something.com",
        "dataCenterInfo": {"name": "MyOwn"},
        "status": "UP",
    }
}


def test_js_minimal_body_with_bare_port_and_no_class_gets_the_java_defaults(api, clock):
    response = api.post(
        "/eureka/v2/apps/jqservice", data=json.dumps(JS_BODY), content_type="application/json"
    )

    assert response.status_code == 204
    inst = served(api, "JQSERVICE", "localhost")
    assert inst["instanceId"] == "localhost"
    assert inst["app"] == "JQSERVICE"
    assert inst["port"] == {"$": 8080, "@enabled": "true"}
    assert inst["securePort"] == {"$": 7002, "@enabled": "false"}
    assert inst["countryId"] == 1
    assert inst["dataCenterInfo"] == {"@class": DEFAULT_DC_CLASS, "name": "MyOwn"}
    assert (inst["leaseInfo"]["renewalIntervalInSecs"], inst["leaseInfo"]["durationInSecs"]) == (30, 90)
    assert inst["lastDirtyTimestamp"] == str(clock.now)
    assert inst["overriddenStatus"] == "UNKNOWN"
    assert inst["metadata"] == {"@class": EMPTY_MAP_CLASS}
    vip = get_json(api, "/eureka/v2/vips/jq.test.something.com")
    assert [i["instanceId"] for a in vip["applications"]["application"] for i in a["instance"]] == [
        "localhost"
    ]


def test_js_readme_body_with_boolean_enabled_is_served_with_string_enabled(api):
    body = json.loads(json.dumps(JS_BODY))
    body["instance"]["port"] = {"$": 8080, "@enabled": True}
    body["instance"]["securePort"] = {"$": 8443, "@enabled": False}
    body["instance"]["dataCenterInfo"] = {"@class": DEFAULT_DC_CLASS, "name": "MyOwn"}

    register(api, body)

    inst = served(api, "JQSERVICE", "localhost")
    assert inst["port"] == {"$": 8080, "@enabled": "true"}
    assert inst["securePort"] == {"$": 8443, "@enabled": "false"}


def test_js_heartbeat_without_query_or_headers_is_200(api):
    register(api, JS_BODY)

    response = api.generic("PUT", "/eureka/v2/apps/jqservice/localhost")

    assert response.status_code == 200 and response.content == b""


# ------------------------------------------------------------------------------------ fargo JSON


def fargo_json(**changes) -> dict:
    inst = {
        "instanceId": "",
        "hostName": "i-123456",
        "app": "TESTAPP",
        "ipAddr": "127.0.0.10",
        "vipAddress": "app",
        "secureVipAddress": "app",
        "status": "UP",
        "overriddenstatus": "",
        "port": {"$": "9090", "@enabled": "true"},
        "securePort": {"$": "0", "@enabled": "false"},
        "homePageUrl": "",
        "statusPageUrl": "",
        "healthCheckUrl": "",
        "countryId": 0,
        "dataCenterInfo": {"@class": "com.netflix.appinfo.MyDataCenterInfo", "name": "MyOwn"},
        "leaseInfo": {"renewalIntervalInSecs": 0, "durationInSecs": 0},
        "metadata": {},
    }
    inst.update(changes)
    return {"instance": inst}


AMAZON_KEYS = [
    "ami-launch-index",
    "local-hostname",
    "availability-zone",
    "instance-id",
    "public-ipv4",
    "public-hostname",
    "ami-manifest-path",
    "local-ipv4",
    "hostname",
    "ami-id",
    "instance-type",
]


def test_fargo_json_body_with_string_port_and_my_data_center_info_class(api):
    assert register(api, fargo_json()).status_code == 204

    inst = served(api, "TESTAPP", "i-123456")
    assert inst["instanceId"] == "i-123456"
    assert inst["port"] == {"$": 9090, "@enabled": "true"}
    assert inst["dataCenterInfo"] == {"@class": DEFAULT_DC_CLASS, "name": "MyOwn"}
    assert inst["overriddenStatus"] == "UNKNOWN"
    assert (inst["leaseInfo"]["renewalIntervalInSecs"], inst["leaseInfo"]["durationInSecs"]) == (30, 90)
    assert inst["metadata"] == {"@class": EMPTY_MAP_CLASS}


def test_fargo_json_amazon_with_empty_instance_id_falls_back_to_host_name(api):
    meta = dict.fromkeys(AMAZON_KEYS, "")
    meta.update({"availability-zone": "us-east-1c", "local-ipv4": "10.1.1.1"})
    body = fargo_json(dataCenterInfo={"@class": AMAZON_DC_CLASS, "name": "Amazon", "metadata": meta})

    assert register(api, body).status_code == 204

    inst = served(api, "TESTAPP", "i-123456")
    dc_meta = inst["dataCenterInfo"]["metadata"]
    assert dc_meta["availability-zone"] == "us-east-1c"
    assert dc_meta["local-ipv4"] == "10.1.1.1"
    # An empty instance-id is blank: the server fills it with the effective id, as Eureka does.
    assert dc_meta["instance-id"] == "i-123456"


def test_fargo_json_amazon_instance_id_is_the_effective_id(api):
    meta = dict.fromkeys(AMAZON_KEYS, "")
    meta.update({"instance-id": "i-0feed", "availability-zone": "us-east-1c"})
    body = fargo_json(
        hostName="ip-10-1-1-1", dataCenterInfo={"@class": AMAZON_DC_CLASS, "name": "Amazon", "metadata": meta}
    )

    register(api, body)

    inst = served(api, "TESTAPP", "i-0feed")
    assert inst["hostName"] == "ip-10-1-1-1"
    assert get_json(api, "/eureka/instances/i-0feed")["instance"]["instanceId"] == "i-0feed"
    assert api.put("/eureka/v2/apps/TESTAPP/i-0feed").status_code == 200


# ------------------------------------------------------------------------------------- fargo XML

FARGO_XML = (
    b"<instance><instanceId></instanceId><hostName>i-123456</hostName><app>testapp</app>"
    b"<ipAddr>127.0.0.10</ipAddr><vipAddress>app</vipAddress><secureVipAddress>app</secureVipAddress>"
    b"<status>UP</status><overriddenstatus></overriddenstatus><homePageUrl></homePageUrl>"
    b"<statusPageUrl></statusPageUrl><healthCheckUrl></healthCheckUrl><countryId>0</countryId>"
    b"<dataCenterInfo><name>MyOwn</name><metadata></metadata></dataCenterInfo>"
    b"<leaseInfo><renewalIntervalInSecs>0</renewalIntervalInSecs><durationInSecs>0</durationInSecs>"
    b"<registrationTimestamp>0</registrationTimestamp><lastRenewalTimestamp>0</lastRenewalTimestamp>"
    b"<evictionTimestamp>0</evictionTimestamp><serviceUpTimestamp>0</serviceUpTimestamp></leaseInfo>"
    b"<metadata></metadata><port>9090</port><securePort>0</securePort></instance>"
)


@pytest.fixture
def fargo_xml_registered(api):
    response = api.post("/eureka/v2/apps/TESTAPP", data=FARGO_XML, content_type="application/xml")
    assert response.status_code == 204


def test_fargo_xml_without_class_and_with_zero_lease_gets_defaults(api, fargo_xml_registered):
    inst = served(api, "TESTAPP", "i-123456")

    assert inst["app"] == "TESTAPP"
    assert inst["dataCenterInfo"] == {"@class": DEFAULT_DC_CLASS, "name": "MyOwn"}
    assert (inst["leaseInfo"]["renewalIntervalInSecs"], inst["leaseInfo"]["durationInSecs"]) == (30, 90)
    # XStream: a missing enabled attribute means enabled for port, disabled for securePort.
    assert inst["port"] == {"$": 9090, "@enabled": "true"}
    assert inst["securePort"] == {"$": 0, "@enabled": "false"}
    assert inst["overriddenStatus"] == "UNKNOWN"
    assert inst["metadata"] == {"@class": EMPTY_MAP_CLASS}


@pytest.fixture
def no_self_preservation(edit_config):
    """Leases only expire outside self-preservation; request this before ``api``."""
    edit_config(registry__enable_self_preservation=False)


def test_fargo_xml_zero_duration_means_a_90_second_lease(no_self_preservation, api, clock):
    api.post("/eureka/v2/apps/TESTAPP", data=FARGO_XML, content_type="application/xml")

    clock.advance(89_000)
    assert api.get("/eureka/v2/apps/TESTAPP/i-123456").status_code == 200
    clock.advance(2_000)
    assert api.get("/eureka/v2/apps/TESTAPP/i-123456").status_code == 404


def test_fargo_xml_explicit_disabled_port_is_kept(api):
    body = FARGO_XML.replace(b"<port>9090</port>", b'<port enabled="false">9090</port>')

    api.post("/eureka/v2/apps/TESTAPP", data=body, content_type="application/xml")

    assert served(api, "TESTAPP", "i-123456")["port"] == {"$": 9090, "@enabled": "false"}


def test_fargo_lookup_before_register_then_register_then_heartbeat(api):
    assert api.get("/eureka/v2/apps/TESTAPP/i-123456", **headers("xml")).status_code == 404
    assert api.put("/eureka/v2/apps/TESTAPP/i-6543").status_code == 404

    assert (
        api.post("/eureka/v2/apps/TESTAPP", data=FARGO_XML, content_type="application/xml").status_code == 204
    )
    assert api.get("/eureka/v2/apps/TESTAPP/i-123456", **headers("xml")).status_code == 200
    assert api.put("/eureka/v2/apps/TESTAPP/i-123456").status_code == 200
    assert (
        api.post("/eureka/v2/apps/TESTAPP", data=FARGO_XML, content_type="application/xml").status_code == 204
    )
    assert api.put("/eureka/v2/apps/TESTAPP/i-123456/status?value=OUT_OF_SERVICE").status_code == 200
    assert api.put("/eureka/v2/apps/TESTAPP/i-123456/metadata?SomeProp=AValue").status_code == 200
    assert served(api, "TESTAPP", "i-123456")["metadata"] == {"SomeProp": "AValue"}


# ------------------------------------------------------------------------------ XML name coding


def test_xml_metadata_names_are_decoded_on_input(api):
    body = FARGO_XML.replace(
        b"<metadata></metadata><port>",
        b"<metadata><my__key>1</my__key><cost_-usd>2</cost_-usd><plain.key>3</plain.key></metadata><port>",
    )

    api.post("/eureka/v2/apps/TESTAPP", data=body, content_type="application/xml")

    assert served(api, "TESTAPP", "i-123456")["metadata"] == {
        "my_key": "1",
        "cost$usd": "2",
        "plain.key": "3",
    }


@pytest.mark.parametrize("key", ["my_key", "cost$usd", "a__b", "odd_-key", "x_$y", "trail_"])
def test_xml_metadata_names_round_trip_through_a_client_that_echoes_the_xml(api, key):
    """A client that reads its instance as XML and posts it back must not see its keys change."""
    register(api, instance_body(last_dirty=1_700_000_000_000, metadata={key: "v"}))
    path = f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}"
    xml_copy = api.get(path, **headers("xml")).content
    api.delete(path)

    response = api.post("/eureka/apps/ORDERS", data=xml_copy, content_type="application/xml")

    assert response.status_code == 204
    assert served(api, "ORDERS", "10.0.0.1:orders:8080")["metadata"] == {key: "v"}


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_overridden_status_is_accepted_in_either_spelling_in_both_formats(api, fmt):
    for spelling, host in (("overriddenStatus", "10.0.0.1"), ("overriddenstatus", "10.0.0.2")):
        inst = instance_body(host=host)["instance"]
        inst.pop("overriddenStatus")
        inst[spelling] = "DOWN"
        data = json.dumps({"instance": inst}) if fmt == "json" else to_xml_body({"instance": inst})
        if fmt == "xml" and spelling == "overriddenStatus":
            data = data.replace(b"overriddenstatus>", b"overriddenStatus>")

        assert register(api, data, app="ORDERS", fmt=fmt).status_code == 204

    overrides = get_json(api, "/eureka/serverinfo/statusoverrides")
    assert overrides == {"10.0.0.1:orders:8080": "DOWN", "10.0.0.2:orders:8080": "DOWN"}
