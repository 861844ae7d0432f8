"""XML text as a stock Spring Cloud Netflix Eureka Server (SCE) writes it, byte for byte.

The same two registrations (JSON, one with Amazon data-center metadata) go to SCE and to our node, their
text fields and metadata values holding CR, CRLF, LF, quotes, markup, a tab, DEL, a C1 control and
non-ASCII. Each server's XML (``GET apps/{APP}/{id}``, ``apps/{APP}``, ``apps/`` and ``apps/delta``) is then
compared field by field: the bytes between a field's tags, and the start tags that carry attributes
(``<port enabled="true">``, ``<dataCenterInfo class="...">``). SCE's XStream writes ``&#xd;`` for a CR,
which an XML reader gives back as a CR; a raw one would reach it as LF. SCE indents its XML and ours is
compact, so only the fields are compared, not the documents.

SCE is the jar of ``test_sce_cluster.py`` (``maven.build_sce``), run alone on 127.0.0.2 (its own peer, so
it has none); the node runs on 127.0.0.1. The suite skips, like the others, when Java 17+, Maven or the
loopback alias is missing (a failure under ``EUREKA_REQUIRE_ALL_SUITES=1``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

import httpx
import pytest

from tests.interop import maven
from tests.interop.conftest import LiveServer, require_toolchain, running_server, wait_until
from tests.interop.test_sce_cluster import SCE_HOST, SceServer
from tests.ports import free_port

pytestmark = [pytest.mark.interop]

APP = "SCE-XML-ESCAPING"
# Every character XML writers may treat specially, each between letters; a leading and a trailing
# space too (neither server trims values read from JSON).
AWKWARD = " a\rb\r\nc\nd\"e'f&g<h>i\tj\xe9k\u4e2dl\U0001f600m\x7fn\x85o\u2028p]]>q "
# What each server's read cache and delta need to show a registration (both refresh every second).
LISTED_WITHIN_S = 15.0
# The node's delta keeps changes for 4 s in the other interop suites: long enough here for one read.
NODE_ENV = {"EUREKA_RETENTION_TIME_IN_DELTA_QUEUE_MS": "120000"}

TEXT_FIELDS = (
    "hostName",
    "appGroupName",
    "homePageUrl",
    "statusPageUrl",
    "healthCheckUrl",
    "secureHealthCheckUrl",
    "vipAddress",
    "secureVipAddress",
    "asgName",
)
ATTRIBUTE_TAGS = ("port", "securePort", "dataCenterInfo", "metadata")
PATHS = (f"apps/{APP}/{{id}}", f"apps/{APP}", "apps/", "apps/delta")

INSTANCE_ELEMENT = re.compile(rb"<instance>(.*?)</instance>", re.DOTALL)
START_TAG = re.compile(rb"<(port|securePort|dataCenterInfo|metadata)\b[^>]*>")


def registration(instance_id: str, amazon: bool) -> dict:
    """A Java client's JSON registration, with ``AWKWARD`` in every free-text field and metadata value."""
    now = int(time.time() * 1000)
    if amazon:
        data_center = {
            "@class": "com.netflix.appinfo.AmazonInfo",
            "name": "Amazon",
            "metadata": {"instance-id": instance_id, "availability-zone": f"zone{AWKWARD}"},
        }
    else:
        data_center = {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"}
    return {
        "instance": {
            "instanceId": instance_id,
            "hostName": f"host{AWKWARD}",
            "app": APP,
            "ipAddr": "127.0.0.1",
            "status": "UP",
            "overriddenStatus": "UNKNOWN",
            "port": {"$": 8080, "@enabled": "true"},
            "securePort": {"$": 443, "@enabled": "false"},
            "countryId": 1,
            "dataCenterInfo": data_center,
            "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
            "metadata": {"note": AWKWARD, "crlf": "line1\r\nline2", "plain": "v"},
            "appGroupName": f"group{AWKWARD}",
            "homePageUrl": AWKWARD,
            "statusPageUrl": f"http://127.0.0.1:8080/info?q={AWKWARD}",
            "healthCheckUrl": f"http://127.0.0.1:8080/health#{AWKWARD}",
            "secureHealthCheckUrl": f"https://127.0.0.1/{AWKWARD}",
            "vipAddress": f"vip{AWKWARD}",
            "secureVipAddress": f"svip{AWKWARD}",
            "asgName": f"asg{AWKWARD}",
            "isCoordinatingDiscoveryServer": "false",
            "lastUpdatedTimestamp": str(now),
            "lastDirtyTimestamp": str(now),
        }
    }


REGISTRATIONS = [registration("xml-escaping-1", amazon=False), registration("xml-escaping-2", amazon=True)]
INSTANCE_IDS = {r["instance"]["instanceId"] for r in REGISTRATIONS}


def element_text(chunk: bytes, tag: str) -> bytes | None:
    """The raw bytes between ``<tag ...>`` and ``</tag>`` (the first such element), None if absent."""
    name = re.escape(tag.encode())
    match = re.search(rb"<" + name + rb"(?:\s[^>]*)?>([^<]*)</" + name + rb">", chunk)
    return match.group(1) if match else None


def fields(payload: bytes) -> dict[str, dict[str, bytes | None]]:
    """For each of the test's instances in an XML payload (by id): its text fields', metadata values'
    and availability zone's raw bytes, and its attribute-carrying start tags."""
    out = {}
    for chunk in INSTANCE_ELEMENT.findall(payload):
        instance_id = element_text(chunk, "instanceId")
        if instance_id is None or instance_id.decode() not in INSTANCE_IDS:
            continue
        found: dict[str, bytes | None] = {tag: element_text(chunk, tag) for tag in TEXT_FIELDS}
        found |= {f"metadata.{key}": element_text(chunk, key) for key in ("note", "crlf", "plain")}
        found["availability-zone"] = element_text(chunk, "availability-zone")
        for match in START_TAG.finditer(chunk):
            found.setdefault(f"<{match.group(1).decode()}>", match.group())
        out[instance_id.decode()] = found
    return out


@dataclass
class Servers:
    sce: SceServer
    node: LiveServer

    def urls(self) -> dict[str, str]:
        return {"SCE": self.sce.url, "node": self.node.url}


@pytest.fixture(scope="module")
def servers(http_server, tmp_path_factory) -> Iterator[Servers]:
    """SCE alone on 127.0.0.2 and a node on 127.0.0.1, for the module; SCE is stopped at the end."""
    java = maven.require_java()
    jar: Path = maven.build_sce()
    try:
        sce_port = free_port(SCE_HOST)
    except OSError:
        sce_port = 0
    require_toolchain(
        f"loopback address {SCE_HOST}", sce_port != 0, "Linux routes all of 127/8 to lo; this host does not"
    )
    workdir = tmp_path_factory.mktemp("sce_xml_escaping")
    (workdir / "node").mkdir()
    sce = SceServer(java, jar, sce_port, [f"http://{SCE_HOST}:{sce_port}/eureka/"], workdir)
    sce.start()
    try:
        with running_server(workdir / "node", NODE_ENV, server=http_server) as node:
            sce.wait_ready()
            yield Servers(sce, node)
    finally:
        sce.stop()


@pytest.fixture(scope="module")
def registered(servers) -> Iterator[Servers]:
    """The two registrations, made at both servers (each its own copy: neither is the other's peer)."""
    for name, url in servers.urls().items():
        for body in REGISTRATIONS:
            response = httpx.post(f"{url}apps/{APP}", json=body, timeout=10)
            assert response.status_code == 204, f"register at {name}: {response.status_code} {response.text}"
    yield servers
    for url in servers.urls().values():
        for instance_id in INSTANCE_IDS:
            try:
                httpx.delete(f"{url}apps/{APP}/{instance_id}", timeout=10)
            except httpx.HTTPError:
                pass


def read_xml(url: str, path: str, ids: set[str] = INSTANCE_IDS) -> bytes:
    """The path's XML once it lists the registrations ``ids`` (cached reads refresh every second)."""

    def listing() -> bytes | None:
        response = httpx.get(f"{url}{path}", headers={"Accept": "application/xml"}, timeout=10)
        if response.status_code == 200 and fields(response.content).keys() == ids:
            return response.content
        return None

    return wait_until(listing, LISTED_WITHIN_S, f"{url}{path} to list {sorted(ids)} in XML", 0.5)


@pytest.mark.parametrize("path", PATHS)
def test_our_xml_text_is_sces_byte_for_byte(registered, path):
    # One read of a listing holds both instances; a single-instance read, one.
    reads = (
        [(path.format(id=i), {i}) for i in sorted(INSTANCE_IDS)] if "{id}" in path else [(path, INSTANCE_IDS)]
    )
    for target, ids in reads:
        at_sce = fields(read_xml(registered.sce.url, target, ids))
        at_node = fields(read_xml(registered.node.url, target, ids))

        assert at_node == at_sce, target
        for instance_id in ids:
            # Not both wrong the same way: the CR is escaped, the tab kept.
            assert b"&#xd;" in at_node[instance_id]["homePageUrl"]
            assert b"\t" in at_node[instance_id]["homePageUrl"]


def test_an_xml_reader_gets_the_cr_back_from_our_node_as_from_sce(registered):
    for url in registered.urls().values():
        root = ET.fromstring(read_xml(url, f"apps/{APP}/xml-escaping-1", {"xml-escaping-1"}))
        assert root.findtext("homePageUrl") == AWKWARD
        assert root.find("metadata").findtext("crlf") == "line1\r\nline2"


def test_json_values_are_the_same_at_both(registered):
    def values(url: str) -> dict:
        response = httpx.get(
            f"{url}apps/{APP}/xml-escaping-2", headers={"Accept": "application/json"}, timeout=10
        )
        assert response.status_code == 200, response.text
        instance = response.json()["instance"]
        return {
            **{key: instance.get(key) for key in TEXT_FIELDS},
            "metadata": instance["metadata"],
            "dataCenterInfo": instance["dataCenterInfo"]["metadata"]["availability-zone"],
        }

    assert values(registered.node.url) == values(registered.sce.url)
