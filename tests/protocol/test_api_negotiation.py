"""Content negotiation (protocol §1.2, §1.3, §3.7): substring JSON/XML choice, response Content-Type,
the compact codec and gzip in both directions."""

from __future__ import annotations

import gzip
import json
from xml.etree import ElementTree as ET

import pytest

from tests.factories import instance_body

from .api_support import (
    AMAZON_DC_CLASS,
    REPLICATION,
    body_bytes,
    enc,
    get_json,
    headers,
    instance_ids,
    json_instances,
    parse,
    register,
    xml_instances,
)

ORDERS_ID = "10.0.0.1:orders:8080"

READ_PATHS = [
    "/eureka/apps/",
    "/eureka/apps/delta",
    "/eureka/apps/ORDERS",
    f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}",
    f"/eureka/instances/{enc(ORDERS_ID)}",
    "/eureka/vips/orders",
    "/eureka/svips/orders",
]

ACCEPT_CASES = [
    ("application/json", "application/json"),
    ("application/json;charset=UTF-8", "application/json"),
    # Spring RestTemplate with jackson-dataformat-xml: XML first, JSON with a low q. Still JSON.
    ("application/xml, application/json;q=0.1", "application/json"),
    ("application/xml,text/xml;q=0.9,application/*+json;q=0.8", "application/json"),
    ("application/xml", "application/xml"),
    ("text/xml", "application/xml"),
    ("*/*", "application/xml"),
    ("text/html", "application/xml"),
    (None, "application/xml"),
]


@pytest.fixture
def orders(api):
    assert register(api, instance_body(last_dirty=1_700_000_000_000)).status_code == 204


@pytest.mark.parametrize("path", READ_PATHS)
@pytest.mark.parametrize("accept,expected", ACCEPT_CASES, ids=lambda v: str(v))
def test_json_only_when_accept_contains_json_otherwise_xml(api, orders, path, accept, expected):
    extra = {} if accept is None else {"HTTP_ACCEPT": accept}

    response = api.get(path, **extra)

    assert response.status_code == 200
    assert response["Content-Type"].split(";")[0].strip() == expected
    charset = response["Content-Type"].partition("charset=")[2].lower()
    assert charset in ("", "utf-8", "iso-8859-1")
    if expected == "application/json":
        json.loads(response.content)
    else:
        ET.fromstring(response.content)
    assert instance_ids(response) == [ORDERS_ID]


@pytest.mark.parametrize("accept,expected", ACCEPT_CASES, ids=lambda v: str(v))
def test_the_409_instance_body_follows_the_same_negotiation(api, orders, accept, expected):
    extra = dict(REPLICATION)
    if accept is not None:
        extra["HTTP_ACCEPT"] = accept

    response = api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}?lastDirtyTimestamp=1", **extra)

    assert response.status_code == 409
    assert response["Content-Type"].split(";")[0].strip() == expected
    assert instance_ids(response) == [ORDERS_ID]


@pytest.mark.parametrize("accept", ["application/json", "application/xml", None])
def test_bodiless_answers_carry_no_content_type_claiming_a_payload(api, orders, accept):
    extra = {} if accept is None else {"HTTP_ACCEPT": accept}

    responses = [
        api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}", **extra),
        api.put("/eureka/apps/ORDERS/unknown", **extra),
        api.get("/eureka/apps/NOPE", **extra),
        register(api, instance_body(app="BILLING"), **extra),
    ]

    for response in responses:
        assert response.content == b""
        assert response.get("Content-Type", "").split(";")[0] not in ("application/json", "application/xml")


# ------------------------------------------------------------------------------------------ compact

COMPACT_DROPPED = {
    "sid",
    "countryId",
    "homePageUrl",
    "statusPageUrl",
    "healthCheckUrl",
    "secureHealthCheckUrl",
    "isCoordinatingDiscoveryServer",
    "lastDirtyTimestamp",
    "leaseInfo",
    "metadata",
}
AMAZON_META = {
    "instance-id": "i-0abc",
    "ami-id": "ami-1",
    "instance-type": "m5.large",
    "local-ipv4": "10.0.0.9",
    "local-hostname": "ip-10-0-0-9",
    "availability-zone": "us-east-1a",
    "public-hostname": "ec2-1.compute.amazonaws.com",
    "public-ipv4": "54.0.0.1",
    "vpc-id": "vpc-1",
}
COMPACT_AMAZON_KEYS = {"instance-id", "public-ipv4", "public-hostname", "local-ipv4", "availability-zone"}


@pytest.fixture
def rich(api):
    """One instance with every droppable field set, and one on Amazon."""
    register(
        api,
        instance_body(
            last_dirty=1_700_000_000_000,
            sid="sid-7",
            countryId=2,
            statusPageUrl="http://10.0.0.1:8080/info",
            healthCheckUrl="http://10.0.0.1:8080/health",
            secureHealthCheckUrl="https://10.0.0.1:8443/health",
            metadata={"zone": "a"},
        ),
    )
    register(
        api,
        instance_body(
            host="10.0.0.9",
            instanceId="",
            dataCenterInfo={"@class": AMAZON_DC_CLASS, "name": "Amazon", "metadata": AMAZON_META},
        ),
    )


@pytest.mark.parametrize(
    "path", ["/eureka/apps/", "/eureka/apps/delta", "/eureka/apps/ORDERS", "/eureka/vips/orders"]
)
@pytest.mark.parametrize("value", ["compact", "COMPACT", "Compact"])
def test_compact_header_drops_the_compact_fields_in_json(api, rich, path, value):
    doc = get_json(api, path, HTTP_X_EUREKA_ACCEPT=value)

    instances = json_instances(doc)
    assert len(instances) == 2
    for inst in instances:
        assert not COMPACT_DROPPED & set(inst), inst
        assert {"instanceId", "hostName", "app", "ipAddr", "status", "port", "dataCenterInfo"} <= set(inst)
    amazon = next(i for i in instances if i["dataCenterInfo"]["name"] == "Amazon")
    assert set(amazon["dataCenterInfo"]["metadata"]) == COMPACT_AMAZON_KEYS
    assert amazon["dataCenterInfo"]["metadata"]["instance-id"] == "i-0abc"


def test_compact_header_drops_the_compact_fields_in_xml(api, rich):
    response = api.get("/eureka/apps/", HTTP_ACCEPT="application/xml", HTTP_X_EUREKA_ACCEPT="compact")

    for inst in xml_instances(parse(response)):
        assert not COMPACT_DROPPED & {child.tag for child in inst}
        assert inst.find("port").get("enabled") == "true"


def test_compact_applies_to_single_instance_reads(api, rich):
    doc = get_json(api, f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}", HTTP_X_EUREKA_ACCEPT="compact")

    assert not COMPACT_DROPPED & set(doc["instance"])


@pytest.mark.parametrize("value", [None, "full", "FULL", "bogus", ""])
def test_anything_but_compact_means_full(api, rich, value):
    extra = {} if value is None else {"HTTP_X_EUREKA_ACCEPT": value}

    doc = get_json(api, "/eureka/apps/", **extra)

    ours = next(i for i in json_instances(doc) if i["instanceId"] == ORDERS_ID)
    assert {"sid", "countryId", "leaseInfo", "metadata", "lastDirtyTimestamp", "healthCheckUrl"} <= set(ours)
    amazon = next(i for i in json_instances(doc) if i["dataCenterInfo"]["name"] == "Amazon")
    assert amazon["dataCenterInfo"]["metadata"]["vpc-id"] == "vpc-1"


def test_compact_and_full_payloads_are_cached_separately(api, rich):
    compact = get_json(api, "/eureka/apps/", HTTP_X_EUREKA_ACCEPT="compact")
    full = get_json(api, "/eureka/apps/")
    compact_again = get_json(api, "/eureka/apps/", HTTP_X_EUREKA_ACCEPT="compact")

    assert all("leaseInfo" in inst for inst in json_instances(full))
    assert compact == compact_again
    assert all("leaseInfo" not in inst for inst in json_instances(compact_again))


# --------------------------------------------------------------------------------- gzip responses


def without_delta_version(data: bytes, fmt: str):
    if fmt == "json":
        doc = json.loads(data)
        doc["applications"].pop("versions__delta")
        return doc
    root = ET.fromstring(data)
    root.remove(root.find("versions__delta"))
    return ET.tostring(root)


@pytest.mark.parametrize("fmt", ["json", "xml"])
@pytest.mark.parametrize("path", READ_PATHS)
@pytest.mark.parametrize("accept_encoding", ["gzip", "gzip, deflate", "deflate, gzip;q=1.0", "br, gzip"])
def test_responses_are_gzipped_when_accept_encoding_contains_gzip(api, orders, fmt, path, accept_encoding):
    plain = api.get(path, **headers(fmt))

    zipped = api.get(path, HTTP_ACCEPT_ENCODING=accept_encoding, **headers(fmt))

    assert zipped.status_code == 200
    assert zipped["Content-Encoding"] == "gzip"
    assert zipped["Content-Type"] == plain["Content-Type"]
    assert zipped.content[:2] == b"\x1f\x8b"
    if path.endswith("delta"):
        # A regenerated delta may carry another version number; everything else must match.
        assert without_delta_version(gzip.decompress(zipped.content), fmt) == without_delta_version(
            plain.content, fmt
        )
    else:
        assert gzip.decompress(zipped.content) == plain.content


@pytest.mark.parametrize("accept_encoding", [None, "", "deflate", "identity", "br"])
def test_responses_are_not_gzipped_unless_asked(api, orders, accept_encoding):
    extra = {} if accept_encoding is None else {"HTTP_ACCEPT_ENCODING": accept_encoding}

    response = api.get("/eureka/apps/", HTTP_ACCEPT="application/json", **extra)

    assert "Content-Encoding" not in response
    assert json.loads(response.content)["applications"]["application"][0]["name"] == "ORDERS"


def test_gzipped_409_body_decompresses_to_the_instance(api, orders):
    response = api.put(
        f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}?lastDirtyTimestamp=1",
        HTTP_ACCEPT="application/json",
        HTTP_ACCEPT_ENCODING="gzip",
        **REPLICATION,
    )

    assert response.status_code == 409
    assert response.get("Content-Encoding") == "gzip"
    assert json.loads(body_bytes(response))["instance"]["instanceId"] == ORDERS_ID


def test_empty_answers_are_not_turned_into_gzip_garbage(api, orders):
    for response in (
        api.put(f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}", HTTP_ACCEPT_ENCODING="gzip"),
        api.get("/eureka/apps/NOPE", HTTP_ACCEPT_ENCODING="gzip"),
    ):
        if response.get("Content-Encoding") == "gzip":
            assert gzip.decompress(response.content) == b""
        else:
            assert response.content == b""


# ------------------------------------------------------------------------------ gzip request bodies


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_gzipped_registration_bodies_are_accepted(api, fmt):
    body = instance_body(metadata={"zone": "b"})

    response = register(api, body, fmt=fmt, gzipped=True)

    assert response.status_code == 204
    stored = get_json(api, f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}")["instance"]
    assert stored["metadata"] == {"zone": "b"}
    assert stored["port"] == {"$": 8080, "@enabled": "true"}


def test_content_encoding_gzip_is_matched_case_insensitively(api):
    data = gzip.compress(json.dumps(instance_body()).encode())

    response = api.post(
        "/eureka/apps/ORDERS", data=data, content_type="application/json", HTTP_CONTENT_ENCODING="GZIP"
    )

    assert response.status_code == 204
    assert instance_ids(api.get("/eureka/apps/", HTTP_ACCEPT="application/json")) == [ORDERS_ID]


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=UTF-8", "text/json"],
)
def test_any_json_content_type_selects_the_json_decoder(api, content_type):
    response = api.post("/eureka/apps/ORDERS", data=json.dumps(instance_body()), content_type=content_type)

    assert response.status_code == 204


@pytest.mark.parametrize("content_type", ["application/xml", "text/xml", "application/xml; charset=UTF-8"])
def test_any_xml_content_type_selects_the_xml_decoder(api, content_type):
    response = register(api, instance_body(), fmt="xml", content_type=content_type)

    assert response.status_code == 204
    assert get_json(api, f"/eureka/apps/ORDERS/{enc(ORDERS_ID)}")["instance"]["port"]["$"] == 8080
