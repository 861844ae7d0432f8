"""Helpers shared by the ``test_api_*`` modules: talking to the views like a Eureka client does.

Everything here is written from the protocol reference, not from the server code, so the tests do not
inherit the server's mistakes: the XML bodies are built by hand, the reconcile hashcode is recomputed
from what the server returned, and responses are parsed with the standard library only.
"""

from __future__ import annotations

import gzip
import io
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape, quoteattr

import pytest
from django.conf import settings
from django.http import HttpResponse
from rest_framework.test import APIClient

from registry.wire.request_bodies import BodyRefused, buffer_body

PREFIXES = ("/eureka/", "/eureka/v2/")
SLASHES = ("", "/")
FORMATS = ("json", "xml")

ACCEPT = {"json": "application/json", "xml": "application/xml"}
STATUSES = ("UP", "DOWN", "STARTING", "OUT_OF_SERVICE", "UNKNOWN")
DEFAULT_DC_CLASS = "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"
AMAZON_DC_CLASS = "com.netflix.appinfo.AmazonInfo"
EMPTY_MAP_CLASS = "java.util.Collections$EmptyMap"
REPLICATION = {"HTTP_X_NETFLIX_DISCOVERY_REPLICATION": "true"}


def headers(fmt: str | None = None, **extra: str) -> dict[str, str]:
    """Django test-client header kwargs: ``Accept`` for ``fmt`` (None sends no Accept at all)."""
    out = dict(extra)
    if fmt is not None:
        out["HTTP_ACCEPT"] = ACCEPT[fmt]
    return out


def enc(instance_id: str) -> str:
    """An instance id as a client puts it in a path: every reserved character percent-encoded."""
    return quote(instance_id, safe="")


# ------------------------------------------------------------------------------------ framing


class ChunkedAPIClient(APIClient):
    """A client that sends every body as Jersey 1 clients and Spring's replication do: chunked.

    gunicorn decodes the chunk framing and hands the application the bare body with no
    ``Content-Length``; this client builds that same WSGI environ and lets the registry's WSGI layer
    (``buffer_body``, what the routing application runs first) read it. Framing errors of the
    wire itself are the live tests' business (tests/deploy/test_http_framing.py).
    """

    def request(self, **request):
        length = request.pop("CONTENT_LENGTH", None)
        if length is None or request.get("REQUEST_METHOD") in ("GET", "HEAD"):
            if length is not None:
                request["CONTENT_LENGTH"] = length
            return super().request(**request)
        request["wsgi.input"] = io.BytesIO(request["wsgi.input"].read(int(length)))
        request["HTTP_TRANSFER_ENCODING"] = "chunked"
        try:
            buffer_body(request, settings.EUREKA.connections.max_body_bytes)
        except BodyRefused as refusal:
            return HttpResponse(
                refusal.message + "\n", status=refusal.status, content_type="text/plain; charset=utf-8"
            )
        return super().request(**request)


@pytest.fixture(params=["content-length", "chunked"])
def api_both_framings(request, node) -> APIClient:
    """The ``api`` client, once sending bodies with a ``Content-Length`` and once chunked."""
    return ChunkedAPIClient() if request.param == "chunked" else APIClient()


# ---------------------------------------------------------------------------------- request bodies


def xml_name(key: str) -> str:
    """XStream's XmlFriendlyNameCoder for element names: ``_`` → ``__``, then ``$`` → ``_-``."""
    return key.replace("_", "__").replace("$", "_-")


def to_xml_body(body: Mapping[str, Any]) -> bytes:
    """The ``<instance>`` document a Java/fargo XML client would send for a ``{"instance": ...}`` body."""
    inst = body["instance"]
    parts = ["<instance>"]
    for key, value in inst.items():
        if value is None:
            continue
        if key in ("port", "securePort"):
            if isinstance(value, Mapping):
                attr = f" enabled={quoteattr(str(value['@enabled']).lower())}" if "@enabled" in value else ""
                parts.append(f"<{key}{attr}>{value['$']}</{key}>")
            else:
                parts.append(f"<{key}>{value}</{key}>")
        elif key == "dataCenterInfo":
            attr = f" class={quoteattr(value['@class'])}" if "@class" in value else ""
            parts.append(f"<dataCenterInfo{attr}>")
            if "name" in value:
                parts.append(f"<name>{escape(value['name'])}</name>")
            if value.get("metadata"):
                parts.append(_xml_map("metadata", value["metadata"]))
            parts.append("</dataCenterInfo>")
        elif key == "leaseInfo":
            parts.append("<leaseInfo>")
            parts.extend(f"<{k}>{v}</{k}>" for k, v in value.items())
            parts.append("</leaseInfo>")
        elif key == "metadata":
            if set(value) == {"@class"}:
                parts.append(f'<metadata class="{EMPTY_MAP_CLASS}"/>')
            else:
                parts.append(_xml_map("metadata", {k: v for k, v in value.items() if k != "@class"}))
        else:
            tag = "overriddenstatus" if key == "overriddenStatus" else key
            parts.append(f"<{tag}>{escape(str(value))}</{tag}>")
    parts.append("</instance>")
    return "".join(parts).encode()


def _xml_map(tag: str, mapping: Mapping[str, str]) -> str:
    inner = "".join(f"<{xml_name(k)}>{escape(str(v))}</{xml_name(k)}>" for k, v in mapping.items())
    return f"<{tag}>{inner}</{tag}>"


def encode_body(body: Mapping[str, Any] | bytes | str, fmt: str) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode() if fmt == "json" else to_xml_body(body)


def register(
    api,
    body: Mapping[str, Any] | bytes | str,
    app: str | None = None,
    fmt: str = "json",
    prefix: str = "/eureka/",
    slash: str = "",
    gzipped: bool = False,
    content_type: str | None = None,
    **extra: str,
):
    """``POST {prefix}apps/{app}`` with the body in ``fmt`` (app defaults to the body's own)."""
    if app is None:
        app = body["instance"]["app"]  # type: ignore[index]
    data = encode_body(body, fmt)
    if gzipped:
        data = gzip.compress(data)
        extra["HTTP_CONTENT_ENCODING"] = "gzip"
    return api.post(
        f"{prefix}apps/{app}{slash}",
        data=data,
        content_type=content_type or ACCEPT[fmt],
        **extra,
    )


# ------------------------------------------------------------------------------------- responses


def is_json(response) -> bool:
    return response["Content-Type"].split(";")[0].strip() == "application/json"


def is_xml(response) -> bool:
    return response["Content-Type"].split(";")[0].strip() == "application/xml"


def body_bytes(response) -> bytes:
    data = response.content
    if response.get("Content-Encoding") == "gzip":
        data = gzip.decompress(data)
    return data


def parse(response) -> Any:
    """A JSON document (dict) or an XML root element, by the response's own Content-Type."""
    data = body_bytes(response)
    if is_json(response):
        return json.loads(data)
    assert is_xml(response), f"unexpected Content-Type {response.get('Content-Type')!r}"
    return ET.fromstring(data)


def get_json(api, path: str, **extra: str) -> Any:
    response = api.get(path, HTTP_ACCEPT="application/json", **extra)
    assert response.status_code == 200, (path, response.status_code, response.content[:200])
    return json.loads(body_bytes(response))


def json_instances(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every instance object in a JSON applications / application / instance document."""
    ((root, value),) = doc.items()
    if root == "instance":
        return [value]
    if root == "application":
        return list(value["instance"])
    assert root == "applications", root
    return [inst for app in value["application"] for inst in app["instance"]]


def xml_instances(root: ET.Element) -> list[ET.Element]:
    if root.tag == "instance":
        return [root]
    if root.tag == "application":
        return root.findall("instance")
    assert root.tag == "applications", root.tag
    return [inst for app in root.findall("application") for inst in app.findall("instance")]


def instance_ids(response) -> list[str]:
    """The instance ids of any registry payload, sorted, in either format."""
    doc = parse(response)
    if isinstance(doc, ET.Element):
        return sorted(inst.findtext("instanceId") or "" for inst in xml_instances(doc))
    return sorted(inst["instanceId"] for inst in json_instances(doc))


def by_id(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {inst["instanceId"]: inst for inst in json_instances(doc)}


def reconcile_hashcode(statuses: Iterable[str]) -> str:
    """``Applications.getReconcileHashCode`` from the protocol text: ``STATUS_count_``, sorted by name."""
    counts = Counter(statuses)
    return "".join(f"{status}_{counts[status]}_" for status in sorted(counts))


def registry_state(api, node) -> tuple:
    """Everything a client could observe about the registry, read fresh (the response cache is dropped).

    Used around refused requests: the state must be byte-for-byte the same before and after.
    """
    node.cache.clear()
    full = api.get("/eureka/apps/", HTTP_ACCEPT="application/json")
    assert full.status_code == 200
    overrides = api.get("/eureka/serverinfo/statusoverrides")
    stats = node.registry.reads.stats(node.now())
    return (
        full.content,
        overrides.content,
        stats["instances"],
        stats["delta_queue_length"],
        stats["expected_clients"],
        stats["overrides"],
    )
