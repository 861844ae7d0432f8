"""Eureka's JSON and XML wire formats: decoding registration bodies, encoding registry payloads.

Output follows the Java server's legacy codecs key for key (protocol reference 3 and 4): strict
Spring Cloud readers reject unknown keys, and Python / Go readers need the odd value types.
Input is lenient, because every real client sends a slightly different shape (reference 3.6).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any
from xml.etree.ElementTree import Element, TreeBuilder
from xml.parsers import expat

import orjson
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser, ParseError

from registry.domain import constants as c
from registry.domain.instances import DataCenterInfo, InstanceInfo, data_center_info, freeze, shared
from registry.domain.leases import LeaseView
from registry.domain.map_reads import Snapshot

JSON = "json"
XML = "xml"

# Fields the compact codec (X-Eureka-Accept: compact) leaves out, and the Amazon keys it keeps.
_COMPACT_DROPPED = frozenset(
    {
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
)
_COMPACT_AMAZON_KEYS = ("instance-id", "public-ipv4", "public-hostname", "local-ipv4", "availability-zone")

_EMPTY_METADATA = {"@class": c.EMPTY_MAP_CLASS}

# Metadata keys become XML element names; one key that is not a valid name would make the whole
# registry unreadable for every XML client (py-eureka-client, fargo), so such keys are refused.
# ``$`` is allowed: XStream writes it as ``_-``.
_NOT_XML_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_XML_NAME = re.compile(r"(?:[^\W\d]|\$)[\w.\-$]*\Z")

# App names and instance ids are path segments of every later call (apps/{app}/{id}): one holding a
# "/" could never be renewed or cancelled, whitespace and control characters are never in a real
# client's id (Spring's is host:app:port), and "." or ".." are dot-segments HTTP clients remove.
_NOT_IN_PATH_SEGMENT = re.compile(r"[/\s\x00-\x1f\x7f-\x9f]")

# How deep a registration body may nest: JSON's parser (orjson) refuses documents deeper than 1024,
# and XML bodies get the same limit (an instance is four levels deep: instance, dataCenterInfo,
# metadata, key). Without it a body of a million nested elements would be parsed into a tree.
MAX_DEPTH = 1024


class BadInput(ValueError):
    """A request body or parameter the server refuses; the message goes back as a plain-text 400."""


# ------------------------------------------------------------------------------------------ output


def instance_dict(view: LeaseView, compact: bool = False) -> dict[str, Any]:
    """One instance in the key order and value types of ``EurekaJacksonCodec.InstanceInfoSerializer``."""
    inst = view.instance
    out: dict[str, Any] = {
        "instanceId": inst.instance_id,
        "hostName": inst.host_name,
        "app": inst.app,
        "ipAddr": inst.ip_addr,
    }
    if inst.sid not in ("na", "unknown"):
        out["sid"] = inst.sid
    out["status"] = inst.status
    out["overriddenStatus"] = inst.overridden_status
    out["port"] = {"$": inst.port, "@enabled": "true" if inst.port_enabled else "false"}
    out["securePort"] = {"$": inst.secure_port, "@enabled": "true" if inst.secure_port_enabled else "false"}
    out["countryId"] = inst.country_id
    dc = inst.data_center_info
    if dc.is_amazon:
        meta = dc.metadata
        if compact:
            meta = {k: meta[k] for k in _COMPACT_AMAZON_KEYS if k in meta}
        out["dataCenterInfo"] = {
            "@class": c.AMAZON_DATA_CENTER_CLASS,
            "name": "Amazon",
            "metadata": dict(meta),
        }
    else:
        out["dataCenterInfo"] = {"@class": c.DEFAULT_DATA_CENTER_CLASS, "name": dc.name}
    out["leaseInfo"] = {
        "renewalIntervalInSecs": inst.renewal_interval_secs,
        "durationInSecs": inst.duration_secs,
        "registrationTimestamp": view.registration_ts,
        "lastRenewalTimestamp": view.last_renewal_ts,
        "evictionTimestamp": view.eviction_ts,
        "serviceUpTimestamp": view.service_up_ts,
    }
    out["metadata"] = dict(inst.metadata) if inst.metadata else _EMPTY_METADATA
    for key, value in (
        ("appGroupName", inst.app_group_name),
        ("homePageUrl", inst.home_page_url),
        ("statusPageUrl", inst.status_page_url),
        ("healthCheckUrl", inst.health_check_url),
        ("secureHealthCheckUrl", inst.secure_health_check_url),
        ("vipAddress", inst.vip_address),
        ("secureVipAddress", inst.secure_vip_address),
        ("isCoordinatingDiscoveryServer", "true" if inst.is_coordinating_discovery_server else "false"),
        ("lastUpdatedTimestamp", str(inst.last_updated_timestamp)),
        ("lastDirtyTimestamp", str(inst.last_dirty_timestamp)),
        ("actionType", inst.action_type),
        ("asgName", inst.asg_name),
    ):
        if value is not None:
            out[key] = value
    if compact:
        for key in _COMPACT_DROPPED:
            out.pop(key, None)
    return out


def application_dict(name: str, views: Iterable[LeaseView], compact: bool = False) -> dict[str, Any]:
    return {"name": name, "instance": [instance_dict(v, compact) for v in views]}


def applications_dict(snapshot: Snapshot, compact: bool = False) -> dict[str, Any]:
    return {
        "versions__delta": str(snapshot.version),
        "apps__hashcode": snapshot.hashcode,
        "application": [application_dict(name, views, compact) for name, views in snapshot.apps],
    }


def render(root: str, body: dict[str, Any], fmt: str) -> bytes:
    """Wrap ``body`` in its root (``applications``, ``application`` or ``instance``) and serialize it."""
    if fmt == JSON:
        return orjson.dumps({root: body})
    parts: list[str] = []
    _xml_element(root, body, parts)
    return "".join(parts).encode()


def _unassigned_bmp_ranges() -> str:
    """The code points below U+10000 that Unicode leaves unassigned, as ranges of a regex class."""
    ranges: list[list[int]] = []
    for point in range(0xA0, 0x10000):
        if unicodedata.category(chr(point)) == "Cn":
            if ranges and ranges[-1][1] == point - 1:
                ranges[-1][1] = point
            else:
                ranges.append([point, point])
    return "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in ranges)


# XML text is written as the Java server's XStream writes it (PrettyPrintWriter in its default, quirks
# mode): the five predefined entities, and a character reference ``&#x<lowercase hex>;`` for CR, for the
# C0 and C1 controls and DEL, and for a UTF-16 unit Java's Character.isDefined says is unassigned (the
# JVM's Unicode version decides which; Python's is used here, and the two agree on all but the code
# points added in between). A raw CR would reach every XML reader as LF (XML's end-of-line handling),
# which is why it is escaped at all. Attribute values also escape LF and TAB, which a parser would
# otherwise turn into spaces (attribute-value normalization); element text keeps them raw.
_XML_ESCAPED = f"&<>\"'\r\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_unassigned_bmp_ranges()}"
_XML_TEXT_SPECIAL = re.compile(f"[{_XML_ESCAPED}]")
_XML_ATTRIBUTE_SPECIAL = re.compile(f"[\t\n{_XML_ESCAPED}]")
_XML_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&apos;"}


def _xml_reference(match: re.Match) -> str:
    char = match.group()
    return _XML_ENTITIES.get(char) or f"&#x{ord(char):x};"


def xml_text(text: str, _search=_XML_TEXT_SPECIAL.search, _sub=_XML_TEXT_SPECIAL.sub) -> str:
    """``text`` escaped for an element's content, byte for byte as XStream escapes it."""
    # Most values (hosts, URLs, ids, timestamps) need nothing: one scan, and the string itself back.
    return text if _search(text) is None else _sub(_xml_reference, text)


def xml_attribute(text: str, _sub=_XML_ATTRIBUTE_SPECIAL.sub) -> str:
    """``text`` escaped for an attribute value in double quotes, as XStream escapes it."""
    return _sub(_xml_reference, text)


def _xml_name(key: str) -> str:
    """XStream's XmlFriendlyNameCoder, applied to map keys that become element names."""
    return key.replace("_", "__").replace("$", "_-")


def _xml_element(name: str, value: Any, parts: list[str], is_map: bool = False) -> None:
    if isinstance(value, list):
        for item in value:
            _xml_element(name, item, parts)
        return
    if not isinstance(value, dict):
        parts.append(f"<{name}>{xml_text(str(value))}</{name}>")
        return
    if value is _EMPTY_METADATA:
        parts.append(f'<{name} class="{c.EMPTY_MAP_CLASS}"/>')
        return
    attrs = "".join(
        f' {"class" if key == "@class" else key[1:]}="{xml_attribute(str(v))}"'
        for key, v in value.items()
        if key.startswith("@") and not is_map
    )
    if "$" in value and not is_map:
        parts.append(f"<{name}{attrs}>{xml_text(str(value['$']))}</{name}>")
        return
    parts.append(f"<{name}{attrs}>")
    for key, child in value.items():
        if is_map:
            parts.append(f"<{_xml_name(key)}>{xml_text(str(child))}</{_xml_name(key)}>")
        elif not key.startswith("@"):
            # JSON writes overriddenStatus, XStream writes overriddenstatus.
            tag = "overriddenstatus" if key == "overriddenStatus" else key
            _xml_element(tag, child, parts, is_map=key == "metadata")
    parts.append(f"</{name}>")


# ------------------------------------------------------------------------------------------- input


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def decode_instance(body: bytes, fmt: str, now: int, path_app: str | None = None) -> InstanceInfo:
    """Parse a registration body (``{"instance":{...}}`` or ``<instance>``) into a validated record."""
    raw = _parse_json_instance(body) if fmt == JSON else _parse_xml_instance(body)
    return build_instance(raw, now, path_app)


def _parse_json_instance(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadInput(f"Malformed JSON body: {exc}") from None
    if not isinstance(doc, dict):
        raise BadInput("Malformed JSON body: expected an object with an 'instance' member")
    if "instance" in doc:
        doc = doc["instance"]
        if not isinstance(doc, dict):
            raise BadInput("Malformed JSON body: 'instance' must be an object")
    return doc


class _DepthLimitedTreeBuilder(TreeBuilder):
    """An ElementTree builder that stops the parse as soon as elements nest deeper than ``MAX_DEPTH``."""

    def __init__(self):
        super().__init__()
        self._depth = 0

    def start(self, tag, attrs):
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise BadInput(f"Malformed XML body: elements nested deeper than {MAX_DEPTH} levels")
        return super().start(tag, attrs)

    def end(self, tag):
        self._depth -= 1
        return super().end(tag)


def _parse_xml(body: bytes) -> Element:
    """defusedxml's ``fromstring`` with no DTD at all (so no entities, external or not) and a depth limit."""
    parser = DefusedXMLParser(target=_DepthLimitedTreeBuilder(), forbid_dtd=True)
    try:
        parser.feed(body)
        return parser.close()
    except Exception as exc:
        # ElementTree raises its ParseError from a frame that holds it, with expat's error (held by
        # another frame) as its context: reference cycles through every frame up to the view's, and
        # so its request and body, that only the cyclic collector would free (see EurekaView._let_go).
        # Without the tracebacks, what is left for that collector is the parser and its elements.
        error: BaseException | None = exc
        while error is not None:
            error.__traceback__ = None
            error = error.__context__
        raise


def _parse_xml_instance(body: bytes) -> dict[str, Any]:
    try:
        root = _parse_xml(body)
    except (ParseError, DefusedXmlException) as exc:
        raise BadInput(f"Malformed XML body: {exc}") from None
    except BadInput:
        raise
    except (ValueError, LookupError) as exc:
        # expat asks Python for the codec an XML declaration names: a multi-byte one (big5), one that is
        # no text encoding (rot13) or one that always fails (undefined, idna) raises these, not ParseError.
        raise BadInput(f"Malformed XML body: cannot decode it: {str(exc)[:120]}") from None
    if root.tag != "instance":
        raise BadInput(f"Malformed XML body: root element must be <instance>, not <{root.tag}>")
    return _xml_instance_to_raw(root)


def _xml_text(element: Element) -> str:
    return (element.text or "").strip()


def _xml_instance_to_raw(root: Element) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for child in root:
        tag = child.tag
        if tag in ("port", "securePort"):
            port: dict[str, Any] = {"$": _xml_text(child)}
            if "enabled" in child.attrib:
                port["@enabled"] = child.attrib["enabled"]
            raw[tag] = port
        elif tag == "dataCenterInfo":
            dc: dict[str, Any] = {}
            for part in child:
                if part.tag == "name":
                    dc["name"] = _xml_text(part)
                elif part.tag == "metadata":
                    dc["metadata"] = _xml_map(part)
            raw[tag] = dc
        elif tag == "leaseInfo":
            raw[tag] = {part.tag: _xml_text(part) for part in child}
        elif tag == "metadata":
            raw[tag] = _xml_map(child)
        else:
            raw[tag] = _xml_text(child)
    return raw


def _xml_map(element: Element) -> dict[str, str]:
    return {_XML_ESCAPE.sub(_unescape_xml_name, part.tag): (part.text or "") for part in element}


_XML_ESCAPE = re.compile(r"__|_-")


def _unescape_xml_name(match: re.Match) -> str:
    # Left to right, so "odd_-key" written as "odd__-key" reads back as "odd_-key".
    return "_" if match.group() == "__" else "$"


def _present(value: Any) -> bool:
    return value is not None and value != ""


def _blank(value: str | None) -> bool:
    """Java's ``isBlank``: missing, empty or only whitespace."""
    return value is None or not value.strip()


def xml_safe(text: str, what: str) -> str:
    """Refuse characters XML 1.0 cannot carry: one would make the registry unreadable to XML clients."""
    bad = _NOT_XML_CHAR.search(text)
    if bad:
        raise BadInput(f"Invalid {what}: character U+{ord(bad.group()):04X} is not allowed")
    return text


def _text(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        raise BadInput(f"Invalid {key}: expected a string")
    if isinstance(value, bool):
        return "true" if value else "false"
    return xml_safe(str(value), key)


INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def _int(value: Any, what: str, bounds: tuple[int, int] = INT32) -> int:
    """A Java int (or long, with ``bounds=INT64``) given as a number or a numeric string."""
    if isinstance(value, (bool, dict, list)):
        raise BadInput(f"Invalid {what}: expected a number")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        text = str(value).strip()
        try:
            number = int(text)
        except ValueError:
            raise BadInput(f"Invalid {what}: {text[:40]!r} is not a number") from None
    if not bounds[0] <= number <= bounds[1]:
        raise BadInput(f"Invalid {what}: {str(number)[:40]} is out of range")
    return number


def parse_long(value: Any, what: str) -> int:
    return _int(value, what, INT64)


def _bool(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise BadInput(f"Invalid {what}: {str(value)[:40]!r} is not true or false")


def parse_status(value: Any, what: str, default: str) -> str:
    """Body statuses are matched case-insensitively (Java ``InstanceStatus.toEnum``); empty means UNKNOWN."""
    if value is None:
        return default
    text = str(value).strip().upper()
    if text == "":
        return c.UNKNOWN
    if text not in c.STATUSES:
        raise BadInput(f"Unknown {what} {str(value)[:40]!r}: expected one of {', '.join(sorted(c.STATUSES))}")
    return shared(text)


def _port(raw: Mapping[str, Any], key: str, default: int, default_enabled: bool) -> tuple[int, bool]:
    value = raw.get(key)
    if value is None:
        return default, default_enabled
    enabled = default_enabled
    if isinstance(value, dict):
        if "@enabled" in value and value["@enabled"] is not None:
            enabled = _bool(value["@enabled"], f"{key}.@enabled")
        number = value.get("$")
        if not _present(number):
            return default, enabled
    else:
        number = value
    port = _int(number, key)
    if not 0 <= port <= 65535:
        raise BadInput(f"Invalid {key}: {port} is outside 0-65535")
    return port, enabled


def _metadata(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadInput(f"Invalid {what}: expected an object of strings")
    out: dict[str, str] = {}
    for key, item in value.items():
        if key == "@class" or item is None:
            continue
        if isinstance(item, (dict, list)):
            raise BadInput(f"Invalid {what} value for {key!r}: expected a string")
        text = "true" if item is True else "false" if item is False else str(item)
        out[metadata_key(key, what)] = xml_safe(text, f"{what} value for {key!r}")
    return out


def metadata_key(key: str, what: str = "metadata") -> str:
    if not _XML_NAME.match(key) or not _readable_xml_name(key):
        raise BadInput(f"Invalid {what} key {key[:40]!r}: keys must be XML names (letters, digits, _ - . $)")
    return key


@functools.lru_cache(maxsize=4096)
def _readable_xml_name(key: str) -> bool:
    """Whether XML readers take the key as an element name. ``_XML_NAME`` knows Unicode's letters of
    today; expat and Go's encoding/xml (py-eureka-client, fargo) know only XML 1.0's older name
    classes, and refuse e.g. U+00AA or any letter beyond U+FFFF: one such key in a payload made the
    whole registry unreadable to them. So a non-ASCII key must also be a name expat accepts."""
    if key.isascii():
        return True
    parser = expat.ParserCreate()
    try:
        parser.Parse(f"<{_xml_name(key)}/>".encode(), True)
    except expat.ExpatError:
        return False
    return True


def path_segment(value: str, what: str) -> str:
    """Refuse an app name or instance id that cannot be one segment of a URL path."""
    bad = _NOT_IN_PATH_SEGMENT.search(value)
    if bad:
        char = "'/'" if bad.group() == "/" else f"U+{ord(bad.group()):04X}"
        raise BadInput(
            f"Invalid {what} {value[:60]!r}: {char} is not allowed (no '/', whitespace or control "
            "characters: it is a path segment of the instance's URL)"
        )
    if value in (".", ".."):
        raise BadInput(f"Invalid {what} {value!r}: it cannot be a path segment of the instance's URL")
    return value


def _data_center(value: Any) -> DataCenterInfo | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadInput("Invalid dataCenterInfo: expected an object")
    name = _text(value, "name")
    if not _present(name):
        raise BadInput("Missing dataCenterInfo Name")
    assert name is not None
    if name.lower() == "amazon" or value.get("@class") == c.AMAZON_DATA_CENTER_CLASS:
        # fargo lists every known AWS key, with "" for the unknown ones: those count as absent.
        meta = {k: v for k, v in _metadata(value.get("metadata"), "dataCenterInfo metadata").items() if v}
        return DataCenterInfo("Amazon", freeze(meta))
    # Readers only accept Netflix | Amazon | MyOwn; anything else a client made up is shown as MyOwn.
    return data_center_info(name if name in c.DATA_CENTER_NAMES else "MyOwn")


def build_instance(raw: Mapping[str, Any], now: int, path_app: str | None = None) -> InstanceInfo:
    """Validate in the order of Eureka's ``ApplicationResource.addInstance`` and apply the Java defaults.

    ``path_app`` is the (upper-cased) app of a ``POST apps/{app}``; the body must name the same app.
    """
    host_name = _text(raw, "hostName")
    metadata = _metadata(raw.get("metadata"), "metadata")
    data_center = _data_center(raw.get("dataCenterInfo"))

    instance_id = _text(raw, "instanceId")
    if not _present(instance_id) and _present(metadata.get("instanceId")) and _present(host_name):
        # Spring Cloud's legacy rule: hostName + ":" + metadata.instanceId.
        meta_id = metadata["instanceId"]
        instance_id = meta_id if meta_id.startswith(host_name) else f"{host_name}:{meta_id}"
    if not _present(instance_id) and data_center is not None and data_center.is_amazon:
        instance_id = data_center.metadata.get("instance-id")
    if not _present(instance_id):
        instance_id = host_name
    if _blank(instance_id):
        raise BadInput("Missing instanceId")
    if _blank(host_name):
        raise BadInput("Missing hostname")
    ip_addr = _text(raw, "ipAddr")
    if _blank(ip_addr):
        raise BadInput("Missing ip address")
    app = _text(raw, "app")
    if _blank(app):
        raise BadInput("Missing appName")
    app = shared(app.strip().upper())
    if path_app is not None and path_app != app:
        raise BadInput(f"Mismatched appName, expecting {path_app} but was {app}")
    path_segment(app, "appName")
    path_segment(instance_id, "instanceId")
    if data_center is None:
        raise BadInput("Missing dataCenterInfo")
    if data_center.is_amazon and "instance-id" not in data_center.metadata:
        data_center = DataCenterInfo("Amazon", freeze({**data_center.metadata, "instance-id": instance_id}))

    lease = raw.get("leaseInfo") or {}
    if not isinstance(lease, dict):
        raise BadInput("Invalid leaseInfo: expected an object")
    renewal = (
        _int(lease["renewalIntervalInSecs"], "leaseInfo.renewalIntervalInSecs")
        if _present(lease.get("renewalIntervalInSecs"))
        else 0
    )
    duration = (
        _int(lease["durationInSecs"], "leaseInfo.durationInSecs")
        if _present(lease.get("durationInSecs"))
        else 0
    )

    port, port_enabled = _port(raw, "port", c.DEFAULT_PORT, True)
    secure_port, secure_enabled = _port(raw, "securePort", c.DEFAULT_SECURE_PORT, False)
    overridden = raw.get("overriddenStatus")
    if overridden is None:
        overridden = raw.get("overriddenstatus")
    dirty = raw.get("lastDirtyTimestamp")
    country = raw.get("countryId")
    coordinating = raw.get("isCoordinatingDiscoveryServer")
    group = _text(raw, "appGroupName")
    sid = _text(raw, "sid")

    return InstanceInfo(
        instance_id=instance_id,
        app=app,
        host_name=host_name,
        # Clients that register by address (Spring's prefer-ip-address) send it twice: kept once.
        ip_addr=host_name if ip_addr == host_name else ip_addr,
        sid=shared(sid) if _present(sid) else c.DEFAULT_SID,
        status=parse_status(raw.get("status"), "status", c.UP),
        overridden_status=parse_status(overridden, "overriddenStatus", c.UNKNOWN),
        port=port,
        port_enabled=port_enabled,
        secure_port=secure_port,
        secure_port_enabled=secure_enabled,
        country_id=_int(country, "countryId") if _present(country) else c.DEFAULT_COUNTRY_ID,
        data_center_info=data_center,
        renewal_interval_secs=renewal if renewal > 0 else c.DEFAULT_RENEWAL_INTERVAL_SECS,
        duration_secs=duration if duration > 0 else c.DEFAULT_DURATION_SECS,
        metadata=freeze(metadata),
        app_group_name=shared(group.upper()) if _present(group) else None,
        home_page_url=_text(raw, "homePageUrl"),
        status_page_url=_text(raw, "statusPageUrl"),
        health_check_url=_text(raw, "healthCheckUrl"),
        secure_health_check_url=_text(raw, "secureHealthCheckUrl"),
        vip_address=shared(_text(raw, "vipAddress")),
        secure_vip_address=shared(_text(raw, "secureVipAddress")),
        is_coordinating_discovery_server=_bool(coordinating, "isCoordinatingDiscoveryServer")
        if _present(coordinating)
        else False,
        last_updated_timestamp=now,
        last_dirty_timestamp=_int(dirty, "lastDirtyTimestamp", INT64) if _present(dirty) else now,
        action_type=None,
        asg_name=shared(_text(raw, "asgName")),
    )
