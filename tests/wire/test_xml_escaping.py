"""XML text is escaped as the Java server's XStream escapes it (registry/wire/codecs.py: ``xml_text``,
``xml_attribute``), so a CR in a value reaches XML readers as a CR, not as the LF a raw one becomes.

The expected bytes are what a stock Spring Cloud Eureka Server (eureka-core 2.0.6, XStream 1.4.21 on
Java 17) wrote for each character; tests/interop/test_sce_xml_escaping.py compares the two servers live.
"""

from __future__ import annotations

import copy
import json
from xml.etree import ElementTree as ET

import pytest

from registry.cache.response_cache import APP, APPS, DELTA, CacheKey
from registry.domain import constants as c
from registry.domain.core import Registry, RegistryRules
from registry.wire.codecs import (
    JSON,
    XML,
    build_instance,
    decode_instance,
    instance_dict,
    render,
    xml_attribute,
    xml_text,
)
from registry.wire.payloads import PayloadBuilder, build_payload
from tests.conftest import FakeClock
from tests.factories import instance_body

# Character, then how XStream wrote it in element text and in an attribute value.
XSTREAM_ESCAPES = [
    ("\r", "&#xd;", "&#xd;"),
    ("\n", "\n", "&#xa;"),
    ("\t", "\t", "&#x9;"),
    ('"', "&quot;", "&quot;"),
    ("'", "&apos;", "&apos;"),
    ("&", "&amp;", "&amp;"),
    ("<", "&lt;", "&lt;"),
    (">", "&gt;", "&gt;"),
    ("\x00", "&#x0;", "&#x0;"),
    ("\x01", "&#x1;", "&#x1;"),
    ("\x1f", "&#x1f;", "&#x1f;"),
    ("\x7f", "&#x7f;", "&#x7f;"),
    ("\x85", "&#x85;", "&#x85;"),
    ("\x9f", "&#x9f;", "&#x9f;"),
    ("\u0378", "&#x378;", "&#x378;"),
    ("\ufffe", "&#xfffe;", "&#xfffe;"),
    ("\xa0", "\xa0", "\xa0"),
    ("\xe9", "\xe9", "\xe9"),
    ("\u4e2d", "\u4e2d", "\u4e2d"),
    ("\u2028", "\u2028", "\u2028"),
    ("\ue000", "\ue000", "\ue000"),
    ("\U0001f600", "\U0001f600", "\U0001f600"),
    (" ", " ", " "),
    ("]]>", "]]&gt;", "]]&gt;"),
]

# A value of every character a registration may carry that XML writers treat specially.
AWKWARD = "a\rb\r\nc\nd\"e'f&g<h>i\tj\xe9k\u4e2dl\U0001f600m\x7fn\x85o]]>p "
AWKWARD_XML = (
    "a&#xd;b&#xd;\nc\nd&quot;e&apos;f&amp;g&lt;h&gt;i\tj\xe9k\u4e2dl\U0001f600m&#x7f;n&#x85;o]]&gt;p "
).encode()


@pytest.mark.parametrize(("char", "text", "attribute"), XSTREAM_ESCAPES)
def test_each_character_is_escaped_as_xstream_escapes_it(char, text, attribute):
    assert xml_text(f"x{char}y") == f"x{text}y"
    assert xml_attribute(f"x{char}y") == f"x{attribute}y"


def test_a_value_with_nothing_to_escape_comes_back_as_it_is():
    value = "http://ip-10-0-0-12.ec2.internal:8080/actuator/health"
    assert xml_text(value) is value


def awkward_registration() -> dict:
    body = instance_body(
        metadata={"note": AWKWARD, "plain": "v"},
        homePageUrl=AWKWARD,
        statusPageUrl=f"http://h/{AWKWARD}",
        vipAddress=f"vip{AWKWARD}",
        asgName=f"asg{AWKWARD}",
    )
    return copy.deepcopy(body)["instance"]


def wired(clock: FakeClock) -> tuple[Registry, PayloadBuilder]:
    holder: list[PayloadBuilder] = []
    registry = Registry(RegistryRules(), clock(), on_change=lambda app, vips: holder[0].invalidate(app))
    builder = PayloadBuilder(registry, clock, expire_ms=180_000)
    holder.append(builder)
    return registry, builder


@pytest.fixture
def registry_and_builder():
    clock = FakeClock()
    registry, builder = wired(clock)
    registry.register(build_instance(awkward_registration(), clock()), clock.advance(1))
    amazon = awkward_registration()
    amazon["instanceId"] = "i-1"
    amazon["dataCenterInfo"] = {
        "@class": c.AMAZON_DATA_CENTER_CLASS,
        "name": "Amazon",
        "metadata": {"instance-id": "i-1", "availability-zone": AWKWARD},
    }
    registry.register(build_instance(amazon, clock()), clock.advance(1))
    return registry, builder, clock


XML_KEYS = [
    CacheKey(kind, "ORDERS" if kind == APP else "", XML, compact)
    for kind in (APPS, APP, DELTA)
    for compact in (False, True)
]


@pytest.mark.parametrize(
    "key", XML_KEYS, ids=lambda key: f"{key.entity}-{'compact' if key.compact else 'full'}"
)
def test_every_xml_payload_escapes_cr_and_quotes_and_gives_them_back_to_an_xml_reader(
    registry_and_builder, key
):
    registry, builder, _ = registry_and_builder
    for payload in (builder.build(key), build_payload(registry, key)):
        assert b"\r" not in payload
        assert f"<vipAddress>vip{AWKWARD_XML.decode()}</vipAddress>".encode() in payload
        if not key.compact:
            assert f"<note>{AWKWARD_XML.decode()}</note>".encode() in payload
            assert f"<availability-zone>{AWKWARD_XML.decode()}</availability-zone>".encode() in payload
        root = ET.fromstring(payload)
        instances = root.iter("instance")
        assert {i.findtext("vipAddress") for i in instances} == {f"vip{AWKWARD}"}
        if not key.compact:
            assert {e.text for e in root.iter("note")} == {AWKWARD}
            assert {e.text for e in root.iter("availability-zone")} == {AWKWARD}


def test_a_single_instance_in_xml_round_trips_through_element_tree(registry_and_builder):
    registry, _, clock = registry_and_builder
    view = registry.reads.get_instance("ORDERS", "10.0.0.1:orders:8080", clock())
    assert view is not None
    payload = render("instance", instance_dict(view), XML)
    root = ET.fromstring(payload)
    assert root.findtext("homePageUrl") == AWKWARD
    assert root.findtext("statusPageUrl") == f"http://h/{AWKWARD}"
    assert root.findtext("asgName") == f"asg{AWKWARD}"
    assert root.find("metadata").findtext("note") == AWKWARD
    # Attributes are unchanged: plain values in double quotes.
    assert b'<port enabled="true">8080</port>' in payload
    assert f'<dataCenterInfo class="{c.DEFAULT_DATA_CENTER_CLASS}">'.encode() in payload


def test_json_output_is_unaffected(registry_and_builder):
    registry, _, clock = registry_and_builder
    view = registry.reads.get_instance("ORDERS", "10.0.0.1:orders:8080", clock())
    assert view is not None
    payload = render("instance", instance_dict(view), JSON)
    assert b"&#x" not in payload and b"&quot;" not in payload
    assert json.loads(payload)["instance"]["homePageUrl"] == AWKWARD


def test_an_xml_registration_with_character_references_reads_back_the_characters():
    body = (
        b"<instance><instanceId>a:1</instanceId><hostName>h</hostName><app>ORDERS</app>"
        b"<ipAddr>10.0.0.1</ipAddr><status>UP</status>"
        b'<dataCenterInfo class="com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo">'
        b"<name>MyOwn</name></dataCenterInfo>"
        b"<homePageUrl>" + AWKWARD_XML.strip() + b"</homePageUrl>"
        b"<metadata><note>" + AWKWARD_XML + b"</note><raw>a\r\nb\rc</raw></metadata></instance>"
    )
    instance = decode_instance(body, XML, now=0)
    # Text fields are stripped (as the Java server trims them); metadata values are kept as sent.
    assert instance.home_page_url == AWKWARD.strip()
    assert instance.metadata["note"] == AWKWARD
    # A raw CR is an XML line end: any parser hands it on as LF, which is why it is written escaped.
    assert instance.metadata["raw"] == "a\nb\nc"


def test_our_xml_of_an_xml_registration_is_what_was_sent(api):
    """Register in XML with ``&#xd;``, read it back in XML and in JSON: the CR survives both ways."""
    body = (
        b"<instance><instanceId>10.0.0.1:orders:8080</instanceId><hostName>10.0.0.1</hostName>"
        b"<app>ORDERS</app><ipAddr>10.0.0.1</ipAddr><status>UP</status>"
        b'<dataCenterInfo class="com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo">'
        b"<name>MyOwn</name></dataCenterInfo>"
        b"<metadata><note>" + AWKWARD_XML + b"</note></metadata></instance>"
    )
    response = api.post("/eureka/apps/ORDERS", data=body, content_type="application/xml")
    assert response.status_code == 204, response.content

    path = "/eureka/apps/ORDERS/10.0.0.1%3Aorders%3A8080"
    as_xml = api.get(path, HTTP_ACCEPT="application/xml").content
    as_json = json.loads(api.get(path, HTTP_ACCEPT="application/json").content)

    assert b"<note>" + AWKWARD_XML + b"</note>" in as_xml
    assert as_json["instance"]["metadata"]["note"] == AWKWARD
