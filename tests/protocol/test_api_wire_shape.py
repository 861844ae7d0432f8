"""Golden shape of every payload (protocol §3.1–§3.5, §4.1, gotchas G4–G9, G28).

Strict readers (Spring's plain Jackson mapper, fargo, py-eureka-client) fail on one unknown key, one
wrong value type or one missing attribute, so the checks here are exhaustive: exact key sets, exact
key order, exact JSON types, and the XML attributes py reads without a default.
"""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree as ET

import pytest

from tests.factories import instance_body

from .api_support import (
    AMAZON_DC_CLASS,
    DEFAULT_DC_CLASS,
    EMPTY_MAP_CLASS,
    STATUSES,
    enc,
    get_json,
    headers,
    parse,
    register,
)

# §3.1, in the order the Java serializer writes them.
INSTANCE_KEYS = [
    "instanceId",
    "hostName",
    "app",
    "ipAddr",
    "sid",
    "status",
    "overriddenStatus",
    "port",
    "securePort",
    "countryId",
    "dataCenterInfo",
    "leaseInfo",
    "metadata",
    "appGroupName",
    "homePageUrl",
    "statusPageUrl",
    "healthCheckUrl",
    "secureHealthCheckUrl",
    "vipAddress",
    "secureVipAddress",
    "isCoordinatingDiscoveryServer",
    "lastUpdatedTimestamp",
    "lastDirtyTimestamp",
    "actionType",
    "asgName",
]
OPTIONAL_KEYS = {
    "sid",
    "appGroupName",
    "homePageUrl",
    "statusPageUrl",
    "healthCheckUrl",
    "secureHealthCheckUrl",
    "vipAddress",
    "secureVipAddress",
    "asgName",
}
OBJECT_KEYS = {"port", "securePort", "countryId", "dataCenterInfo", "leaseInfo", "metadata"}
LEASE_KEYS = [
    "renewalIntervalInSecs",
    "durationInSecs",
    "registrationTimestamp",
    "lastRenewalTimestamp",
    "evictionTimestamp",
    "serviceUpTimestamp",
]
XML_INSTANCE_TAGS = ["overriddenstatus" if k == "overriddenStatus" else k for k in INSTANCE_KEYS]
DC_NAMES = {"MyOwn", "Netflix", "Amazon"}


def is_int(value: Any) -> bool:
    return type(value) is int


def is_numeric_text(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip("-").isdigit()


# -------------------------------------------------------------------------------- JSON checkers


def check_json_instance(inst: dict[str, Any], compact: bool = False) -> None:
    keys = list(inst)
    assert set(keys) <= set(INSTANCE_KEYS), set(keys) - set(INSTANCE_KEYS)
    assert keys == [k for k in INSTANCE_KEYS if k in inst], keys
    required = set(INSTANCE_KEYS) - OPTIONAL_KEYS
    if compact:
        required -= {
            "countryId",
            "leaseInfo",
            "metadata",
            "isCoordinatingDiscoveryServer",
            "lastDirtyTimestamp",
        }
    assert required <= set(keys), required - set(keys)

    for key in set(keys) - OBJECT_KEYS:
        assert isinstance(inst[key], str), (key, inst[key])
    assert inst["status"] in STATUSES
    assert inst["overriddenStatus"] in STATUSES
    assert inst["app"] == inst["app"].upper()
    if "appGroupName" in inst:
        assert inst["appGroupName"] == inst["appGroupName"].upper()
    if "sid" in inst:
        assert inst["sid"] not in ("na", "unknown")
    assert inst["actionType"] in ("ADDED", "MODIFIED", "DELETED")
    assert is_numeric_text(inst["lastUpdatedTimestamp"])
    if "lastDirtyTimestamp" in inst:
        assert is_numeric_text(inst["lastDirtyTimestamp"])
    if "isCoordinatingDiscoveryServer" in inst:
        assert inst["isCoordinatingDiscoveryServer"] in ("true", "false")

    for port_key in ("port", "securePort"):
        port = inst[port_key]
        assert list(port) == ["$", "@enabled"], port
        assert is_int(port["$"])
        assert port["@enabled"] in ("true", "false")
    if "countryId" in inst:
        assert is_int(inst["countryId"])

    dc = inst["dataCenterInfo"]
    assert dc["name"] in DC_NAMES
    if dc["name"] == "Amazon":
        assert list(dc) == ["@class", "name", "metadata"]
        assert dc["@class"] == AMAZON_DC_CLASS
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in dc["metadata"].items())
    else:
        assert list(dc) == ["@class", "name"], dc
        assert dc["@class"] == DEFAULT_DC_CLASS

    if "leaseInfo" in inst:
        assert list(inst["leaseInfo"]) == LEASE_KEYS
        assert all(is_int(v) for v in inst["leaseInfo"].values()), inst["leaseInfo"]
    if "metadata" in inst:
        meta = inst["metadata"]
        assert isinstance(meta, dict)
        assert meta != {}, "empty metadata is written as the EmptyMap marker"
        if "@class" in meta:
            assert meta == {"@class": EMPTY_MAP_CLASS}
        assert all(isinstance(v, str) for v in meta.values())


def check_json_application(app: dict[str, Any], compact: bool = False) -> None:
    assert list(app) == ["name", "instance"]
    assert isinstance(app["name"], str) and app["name"] == app["name"].upper()
    assert isinstance(app["instance"], list) and app["instance"]
    for inst in app["instance"]:
        check_json_instance(inst, compact)
        assert inst["app"] == app["name"]


def check_json_applications(doc: dict[str, Any], compact: bool = False) -> None:
    assert list(doc) == ["applications"]
    apps = doc["applications"]
    assert list(apps) == ["versions__delta", "apps__hashcode", "application"]
    assert isinstance(apps["versions__delta"], str) and int(apps["versions__delta"]) != 0
    assert isinstance(apps["apps__hashcode"], str)
    assert isinstance(apps["application"], list)
    for app in apps["application"]:
        check_json_application(app, compact)


# --------------------------------------------------------------------------------- XML checkers


def check_xml_instance(inst: ET.Element, compact: bool = False) -> None:
    tags = [child.tag for child in inst]
    assert set(tags) <= set(XML_INSTANCE_TAGS), set(tags) - set(XML_INSTANCE_TAGS)
    assert tags == [t for t in XML_INSTANCE_TAGS if t in tags], tags
    assert "overriddenStatus" not in tags
    required = {"instanceId", "hostName", "app", "ipAddr", "status", "overriddenstatus", "port", "securePort"}
    required |= {"dataCenterInfo", "lastUpdatedTimestamp", "actionType"}
    if not compact:
        required |= {
            "countryId",
            "leaseInfo",
            "metadata",
            "isCoordinatingDiscoveryServer",
            "lastDirtyTimestamp",
        }
    assert required <= set(tags), required - set(tags)
    assert inst.attrib == {}

    assert inst.findtext("status") in STATUSES
    assert inst.findtext("overriddenstatus") in STATUSES
    for port_tag in ("port", "securePort"):
        port = inst.find(port_tag)
        assert set(port.attrib) == {"enabled"}
        assert port.get("enabled") in ("true", "false")
        assert (port.text or "").isdigit()
        assert len(port) == 0
    for numeric in ("countryId", "lastUpdatedTimestamp", "lastDirtyTimestamp"):
        if inst.find(numeric) is not None:
            assert is_numeric_text(inst.findtext(numeric)), numeric

    dc = inst.find("dataCenterInfo")
    assert set(dc.attrib) == {"class"}
    name = dc.findtext("name")
    assert name in DC_NAMES
    if name == "Amazon":
        assert dc.get("class") == AMAZON_DC_CLASS
        assert [c.tag for c in dc] == ["name", "metadata"]
    else:
        assert dc.get("class") == DEFAULT_DC_CLASS
        assert [c.tag for c in dc] == ["name"]

    lease = inst.find("leaseInfo")
    if lease is not None:
        assert [c.tag for c in lease] == LEASE_KEYS
        assert all(is_numeric_text(c.text) for c in lease)
    meta = inst.find("metadata")
    if meta is not None:
        if len(meta) == 0:
            assert meta.attrib == {"class": EMPTY_MAP_CLASS}
        else:
            assert meta.attrib == {}
            assert all(len(entry) == 0 and not entry.attrib for entry in meta)


def check_xml_application(app: ET.Element, compact: bool = False) -> None:
    tags = [child.tag for child in app]
    assert tags[0] == "name" and set(tags[1:]) == {"instance"}, tags
    for inst in app.findall("instance"):
        check_xml_instance(inst, compact)
        assert inst.findtext("app") == app.findtext("name")


def check_xml_applications(root: ET.Element, compact: bool = False) -> None:
    assert root.tag == "applications"
    tags = [child.tag for child in root]
    assert tags[:2] == ["versions__delta", "apps__hashcode"]
    assert set(tags[2:]) <= {"application"}
    assert is_numeric_text(root.findtext("versions__delta"))
    for app in root.findall("application"):
        check_xml_application(app, compact)


def check_payload(response, root: str, compact: bool = False) -> None:
    assert response.status_code == 200
    doc = parse(response)
    if isinstance(doc, ET.Element):
        assert doc.tag == root
        {
            "applications": check_xml_applications,
            "application": check_xml_application,
            "instance": check_xml_instance,
        }[root](doc, compact)
    else:
        assert list(doc) == [root]
        if root == "applications":
            check_json_applications(doc, compact)
        elif root == "application":
            check_json_application(doc["application"], compact)
        else:
            check_json_instance(doc["instance"], compact)


# ------------------------------------------------------------------------------------- registry


@pytest.fixture
def varied(api, clock):
    """A registry holding every shape the codecs must render."""
    bodies = [
        instance_body(host="10.0.0.1", metadata={"management.port": "8080", "my_key": "v", "cost$usd": "3"}),
        instance_body(host="10.0.0.2", sid="sid-2", appGroupName="shop", asgName="orders-asg"),
        instance_body(
            app="BILLING",
            host="ip-10-0-0-3.ec2.internal",
            instanceId="",
            dataCenterInfo={
                "@class": AMAZON_DC_CLASS,
                "name": "Amazon",
                "metadata": {
                    "instance-id": "i-03",
                    "availability-zone": "us-east-1a",
                    "local-ipv4": "10.0.0.3",
                },
            },
        ),
        instance_body(app="NETFLIXDC", host="10.0.0.4", dataCenterInfo={"name": "Netflix"}),
        instance_body(app="GONE", host="10.0.0.5"),
    ]
    for body in bodies:
        assert register(api, body).status_code == 204
    clock.advance(1_000)
    api.put(f"/eureka/apps/ORDERS/{enc('10.0.0.2:orders:8080')}/status?value=OUT_OF_SERVICE")
    api.delete(f"/eureka/apps/GONE/{enc('10.0.0.5:gone:8080')}")
    api.put(f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}")


PATHS = [
    ("/eureka/apps/", "applications"),
    ("/eureka/apps/delta", "applications"),
    ("/eureka/apps/ORDERS", "application"),
    ("/eureka/apps/BILLING", "application"),
    ("/eureka/apps/NETFLIXDC", "application"),
    (f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}", "instance"),
    (f"/eureka/apps/ORDERS/{enc('10.0.0.2:orders:8080')}", "instance"),
    (f"/eureka/instances/{enc('i-03')}", "instance"),
    ("/eureka/vips/orders", "applications"),
    ("/eureka/svips/billing", "applications"),
]


@pytest.mark.parametrize("compact", [False, True], ids=["full", "compact"])
@pytest.mark.parametrize("fmt", ["json", "xml"])
@pytest.mark.parametrize("path,root", PATHS)
def test_every_payload_has_the_golden_shape(api, varied, path, root, fmt, compact):
    extra = {"HTTP_X_EUREKA_ACCEPT": "compact"} if compact else {}

    check_payload(api.get(path, **headers(fmt), **extra), root, compact)


def test_the_delta_holds_added_modified_and_deleted_entries_in_golden_shape(api, varied):
    doc = get_json(api, "/eureka/apps/delta")

    check_json_applications(doc)
    actions = {
        inst["instanceId"]: inst["actionType"]
        for app in doc["applications"]["application"]
        for inst in app["instance"]
    }
    assert actions["10.0.0.5:gone:8080"] == "DELETED"
    assert actions["10.0.0.2:orders:8080"] == "MODIFIED"
    assert actions["10.0.0.1:orders:8080"] == "ADDED"


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_empty_registry_has_an_empty_application_array_and_empty_hashcode(api, fmt):
    response = api.get("/eureka/apps/", **headers(fmt))

    doc = parse(response)
    if fmt == "json":
        assert doc == {"applications": {"versions__delta": "1", "apps__hashcode": "", "application": []}}
    else:
        assert [child.tag for child in doc] == ["versions__delta", "apps__hashcode"]
        assert doc.findtext("versions__delta") == "1"
        assert (doc.findtext("apps__hashcode") or "") == ""


def test_single_application_with_single_instance_is_still_written_as_arrays(api):
    register(api, instance_body())

    full = get_json(api, "/eureka/apps/")
    app = get_json(api, "/eureka/apps/ORDERS")

    assert isinstance(full["applications"]["application"], list)
    assert len(full["applications"]["application"]) == 1
    assert isinstance(full["applications"]["application"][0]["instance"], list)
    assert isinstance(app["application"]["instance"], list) and len(app["application"]["instance"]) == 1


def test_values_have_the_java_codec_types(api, clock):
    register(api, instance_body(last_dirty=1_700_000_000_000, countryId=3))

    inst = get_json(api, f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}")["instance"]

    assert inst["port"] == {"$": 8080, "@enabled": "true"}
    assert inst["securePort"] == {"$": 443, "@enabled": "false"}
    assert inst["countryId"] == 3
    assert inst["isCoordinatingDiscoveryServer"] == "false"
    assert inst["lastDirtyTimestamp"] == "1700000000000"
    assert inst["lastUpdatedTimestamp"] == str(clock.now)
    assert inst["leaseInfo"]["registrationTimestamp"] == clock.now
    assert inst["leaseInfo"]["evictionTimestamp"] == 0
    assert inst["leaseInfo"]["serviceUpTimestamp"] == clock.now
    assert inst["metadata"] == {"@class": EMPTY_MAP_CLASS}


def test_xml_writes_the_empty_metadata_marker_and_the_attributes_python_reads(api):
    register(api, instance_body())

    root = parse(api.get(f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}", **headers("xml")))

    meta = root.find("metadata")
    assert meta.attrib == {"class": EMPTY_MAP_CLASS} and len(meta) == 0
    assert root.find("dataCenterInfo").get("class") == DEFAULT_DC_CLASS
    assert root.find("port").get("enabled") == "true"
    assert root.find("securePort").get("enabled") == "false"
    assert root.findtext("overriddenstatus") == "UNKNOWN"
    assert root.find("overriddenStatus") is None


def test_xml_encodes_underscore_and_dollar_in_metadata_names_but_json_does_not(api):
    register(api, instance_body(metadata={"my_key": "1", "cost$usd": "2", "plain.key": "3"}))
    path = f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}"

    xml_meta = parse(api.get(path, **headers("xml"))).find("metadata")
    json_meta = get_json(api, path)["instance"]["metadata"]

    assert {child.tag: child.text for child in xml_meta} == {
        "my__key": "1",
        "cost_-usd": "2",
        "plain.key": "3",
    }
    assert json_meta == {"my_key": "1", "cost$usd": "2", "plain.key": "3"}


def test_xml_escapes_markup_in_values(api):
    register(api, instance_body(metadata={"note": "a<b & c>\"d'"}, homePageUrl="http://h/?a=1&b=<2>"))

    root = parse(api.get(f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}", **headers("xml")))

    assert root.find("metadata").findtext("note") == "a<b & c>\"d'"
    assert root.findtext("homePageUrl") == "http://h/?a=1&b=<2>"


def test_non_amazon_data_center_never_carries_metadata(api):
    body = instance_body(
        dataCenterInfo={"@class": DEFAULT_DC_CLASS, "name": "MyOwn", "metadata": {"zone": "x"}}
    )
    register(api, body)

    inst = get_json(api, f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}")["instance"]

    assert inst["dataCenterInfo"] == {"@class": DEFAULT_DC_CLASS, "name": "MyOwn"}


@pytest.mark.parametrize("made_up", ["my-service", "myown", "AWS"])
def test_made_up_data_center_names_are_served_as_a_name_readers_accept(api, made_up):
    register(api, instance_body(dataCenterInfo={"name": made_up}))

    inst = get_json(api, f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}")["instance"]

    check_json_instance(inst)
    assert inst["dataCenterInfo"]["name"] in DC_NAMES


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_the_409_conflict_body_has_the_golden_instance_shape(api, fmt):
    register(api, instance_body(last_dirty=1_700_000_000_000, metadata={"zone": "a"}))

    response = api.put(
        f"/eureka/apps/ORDERS/{enc('10.0.0.1:orders:8080')}?lastDirtyTimestamp=1",
        HTTP_X_NETFLIX_DISCOVERY_REPLICATION="true",
        **headers(fmt),
    )

    assert response.status_code == 409
    doc = parse(response)
    if fmt == "json":
        assert list(doc) == ["instance"]
        check_json_instance(doc["instance"])
    else:
        assert doc.tag == "instance"
        check_xml_instance(doc)
