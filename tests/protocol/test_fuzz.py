"""Hostile input, kept honest (issue 14, part 5): the protocol fuzzed with Hypothesis.

Every request goes through the WSGI application gunicorn serves (``RoutingApplication``: chunked
bodies buffered, then the lean protocol handler and the DRF views), with the environ gunicorn builds
(the path percent-decoded into latin-1, the query string raw). Properties:

* arbitrary methods, paths (ids and app names in unicode, percent-encoded, with slashes, very long),
  query strings, headers and bodies (random bytes, random JSON and XML, valid instances with fields
  mutated) answer below 500, and no exception escapes the application;
* the lease map (instances, statuses, overrides, metadata, dirty timestamps, lease times, delta
  queue) is unchanged unless the answer is a success of a write, and then it changed the way that
  write means; after any accepted write the registry is still readable as JSON and XML;
* a valid registration mutated into an invalid one is refused with a 4xx.

The oracle is written from the protocol reference (the route table, §2; the override rules, §5.7.1
and G18; "the newer lastDirtyTimestamp wins", G22), not from the server code. Explicit tests below
the properties cover XML entity tricks, deep nesting, oversize bodies and gzip bombs, and one
regression test per bug the fuzzing found.

Examples are bounded so the file runs in seconds (60 per property, the any-request property three
times as many) and derandomized, so CI runs the same examples every time and no example database is
kept; ``EUREKA_FUZZ_EXAMPLES=2000`` gives each property that many (three times for any-request) to
search further locally, and ``pytest --hypothesis-show-statistics`` shows which routes and answers
the examples reached. Every example gets a fresh node on a fake clock, seeded through the
application with three instances and one override.
"""

from __future__ import annotations

import codecs
import copy
import gzip
import io
import json
import os
import re
import socket
import time
import zlib
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlencode
from wsgiref.util import setup_testing_defaults
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape, quoteattr

import pytest
from django.conf import settings as django_settings
from django.http import QueryDict
from django.utils.http import parse_header_parameters
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from registry.runtime.composition import build_node
from registry.runtime.process import reset_node
from registry.wire.handlers import RoutingApplication
from tests.conftest import FakeClock
from tests.factories import instance_body

# ------------------------------------------------------------------------------------ settings

_DEFAULT_EXAMPLES = 60
settings.register_profile(
    "eureka-fuzz",
    max_examples=int(os.environ.get("EUREKA_FUZZ_EXAMPLES") or _DEFAULT_EXAMPLES),
    # One example is a handful of requests; a slow shared CI machine must not turn that into a failure.
    deadline=None,
    # The same examples on every run (CI is reproducible); no example database is read or written.
    derandomize=True,
    database=None,
    # ``make_env`` is a factory: every example builds its own node, nothing is shared between them.
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
FUZZ = settings.get_profile("eureka-fuzz")


def fuzz(share: float = 1.0) -> settings:
    """The profile with ``share`` of its examples (the cheap properties run more, the heavy ones fewer)."""
    return settings(FUZZ, max_examples=max(10, round(FUZZ.max_examples * share)))


# --------------------------------------------------------------------------------- the seed map

START = 1_796_000_000_000
MAX_DIRTY_AHEAD_MS = 300_000
STATUSES = ("UP", "DOWN", "STARTING", "OUT_OF_SERVICE", "UNKNOWN")
UP, OUT_OF_SERVICE, UNKNOWN = "UP", "OUT_OF_SERVICE", "UNKNOWN"

ORDERS_1 = "10.0.0.1:orders:8080"
ORDERS_2 = "10.0.0.2:orders:8080"
UNICODE_ID = "bïlling-1:☃:🚀"
SEEDS = (
    ("ORDERS", instance_body(app="ORDERS", host="10.0.0.1")),
    ("ORDERS", instance_body(app="ORDERS", host="10.0.0.2", metadata={"zone": "a", "odd_key$": "v"})),
    ("BILLING", instance_body(app="BILLING", host="10.0.0.3", instance_id=UNICODE_ID, status="DOWN")),
)
SEED_OVERRIDE = ("ORDERS", ORDERS_2, OUT_OF_SERVICE)
KNOWN_APPS = ("ORDERS", "orders", "BILLING", "billing", "NEW", "ÜNÏ", "ünï", "delta")
KNOWN_IDS = (ORDERS_1, ORDERS_2, UNICODE_ID, "new-1", "10.0.0.9:new:8080", "status", "metadata")


@pytest.fixture(scope="module")
def wsgi_app():
    return RoutingApplication(trust_forwarded_prefix=False)


class Env:
    """One example's world: a fresh node on a fake clock, seeded through the application itself."""

    def __init__(self, app):
        self.app = app
        self.clock = FakeClock(START)
        options = django_settings.EUREKA.with_changes(response_cache__use_read_only=False)
        self.node = reset_node(build_node(options, clock=self.clock))
        for app_name, body in SEEDS:
            answer = self.send(
                Request(
                    "POST", f"/eureka/apps/{app_name}", body=json.dumps(body).encode(), content_type=JSON_CT
                )
            )
            assert answer.status == 204, answer
        app_name, instance_id, status = SEED_OVERRIDE
        answer = self.send(
            Request("PUT", f"/eureka/apps/{app_name}/{enc(instance_id)}/status", f"value={status}")
        )
        assert answer.status == 200, answer
        self.clock.advance(1_000)

    def send(self, request: Request) -> Answer:
        return call(self.app, request)


@pytest.fixture
def make_env(wsgi_app):
    yield lambda: Env(wsgi_app)
    reset_node(None)


# ------------------------------------------------------------------------------ talking WSGI

JSON_CT = "application/json"
XML_CT = "application/xml"


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # as on the wire: percent-encoded
    query: str = ""  # as on the wire
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    chunked: bool = False
    content_type: str | None = None

    def __repr__(self) -> str:
        body = self.body if len(self.body) < 400 else self.body[:400] + b"..."
        return (
            f"Request({self.method} {self.path[:300]}?{self.query[:300]} headers={self.headers} "
            f"content_type={self.content_type!r} chunked={self.chunked} body={body!r})"
        )


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def __repr__(self) -> str:
        return f"Answer({self.status} {self.headers} {self.body[:300]!r})"


def enc(text: str) -> str:
    return quote(text, safe="")


def call(app, request: Request, stream=None) -> Answer:
    """One request, in the environ gunicorn builds: PATH_INFO percent-decoded into latin-1,
    QUERY_STRING raw, a chunked body decoded and without CONTENT_LENGTH."""
    environ: dict[str, Any] = {}
    setup_testing_defaults(environ)
    environ.update(
        {
            "REQUEST_METHOD": request.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(request.path).decode("latin-1"),
            "RAW_URI": request.path + (f"?{request.query}" if request.query else ""),
            "QUERY_STRING": request.query,
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "localhost:8761",
            "wsgi.input": stream if stream is not None else io.BytesIO(request.body),
        }
    )
    if request.chunked:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
    elif request.body or request.method in ("POST", "PUT"):
        environ["CONTENT_LENGTH"] = str(len(request.body))
    if request.content_type is not None:
        environ["CONTENT_TYPE"] = request.content_type
    for name, value in request.headers:
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    captured: dict[str, Any] = {}

    def start_response(status, headers, exc_info=None):
        captured["status"] = int(status.split()[0])
        captured["headers"] = dict(headers)

    try:
        chunks = app(environ, start_response)
        content = b"".join(chunks)
        if hasattr(chunks, "close"):
            chunks.close()
    except Exception as exc:  # gunicorn would answer 500 and log the traceback
        raise AssertionError(f"{request!r}: an exception escaped the WSGI application: {exc!r}") from exc
    return Answer(captured["status"], captured["headers"], content)


# ------------------------------------------------------------------------- the map, observed


def _record(instance) -> dict[str, Any]:
    out = {}
    for field in fields(instance):
        value = getattr(instance, field.name)
        if field.name == "metadata":
            value = dict(value)
        elif field.name == "data_center_info":
            value = (value.name, dict(value.metadata))
        out[field.name] = value
    return out


@dataclass
class Lease:
    record: dict[str, Any]
    times: tuple[int, int, int, int]  # registration, last renewal, eviction, service up

    @property
    def renewal(self) -> int:
        return self.times[1]


@dataclass
class MapState:
    leases: dict[tuple[str, str], Lease]
    overrides: dict[str, str]
    # The instances the delta lists (each once, as of its latest change).
    delta: frozenset[tuple[str, str]]
    expected_clients: int
    renews_last_minute: int
    recent: tuple[int, int, int]


def observe(node) -> MapState:
    registry = node.registry
    leases = {}
    for app, views in registry.reads.snapshot().apps:
        for view in views:
            leases[(app, view.instance.instance_id)] = Lease(
                _record(view.instance),
                (view.registration_ts, view.last_renewal_ts, view.eviction_ts, view.service_up_ts),
            )
    stats = registry.reads.stats(node.now())
    return MapState(
        leases,
        registry.reads.overrides(),
        frozenset(
            (app, view.instance.instance_id)
            for app, views in registry.reads.snapshot_delta().apps
            for view in views
        ),
        stats["expected_clients"],
        stats["renews_last_minute"],
        tuple(len(events) for events in registry.reads.recent_events()),
    )


# ------------------------------------------------------------------- the route table (ref. §2)

_PREFIX = re.compile(r"/eureka/+(?:v[12]/+)?")
_SEG = r"[^/]+"
ROUTES = [
    ("instance", re.compile(rf"apps/(?P<app>{_SEG})/(?P<id>{_SEG})/?")),
    ("apps", re.compile(r"apps/?")),
    ("delta", re.compile(r"apps/delta/?")),
    ("app", re.compile(rf"apps/(?P<app>{_SEG})/?")),
    ("status", re.compile(rf"apps/(?P<app>{_SEG})/(?P<id>{_SEG})/status/?")),
    ("metadata", re.compile(rf"apps/(?P<app>{_SEG})/(?P<id>{_SEG})/metadata/?")),
    ("instance-by-id", re.compile(rf"instances/(?P<id>{_SEG})/?")),
    ("vip", re.compile(rf"s?vips/{_SEG}/?")),
    ("asg", re.compile(rf"asg/{_SEG}/status/?")),
    ("server-status", re.compile(r"status/?")),
    ("status-overrides", re.compile(r"serverinfo/statusoverrides/?")),
    ("batch", re.compile(r"peerreplication/batch/?")),
]
WRITES = {
    ("app", "POST"),
    ("instance", "PUT"),
    ("instance", "DELETE"),
    ("status", "PUT"),
    ("status", "DELETE"),
    ("metadata", "PUT"),
    ("batch", "POST"),
}


def _django_path(raw: bytes) -> str:
    """The path a Django view sees: UTF-8, with undecodable bytes percent-encoded again."""
    out = []
    while True:
        try:
            out.append(raw.decode())
            return "".join(out)
        except UnicodeDecodeError as exc:
            out.append(raw[: exc.start].decode())
            out.append(quote(raw[exc.start : exc.end]))
            raw = raw[exc.end :]


def route_of(request: Request) -> tuple[str, str | None, str | None] | None:
    """(route, app upper-cased, id) of a request by the documented route table, or None."""
    path = _django_path(unquote_to_bytes(request.path))
    prefix = _PREFIX.match(path)
    if prefix is None:
        return None
    rest = path[prefix.end() :]
    for name, pattern in ROUTES:
        match = pattern.fullmatch(rest)
        if match:
            groups = match.groupdict()
            app = groups.get("app")
            return name, app.upper() if app is not None else None, groups.get("id")
    return None


def _query(request: Request) -> dict[str, list[str]]:
    """The query parameters as Django reads them: decoded with the Content-Type's charset when Python
    knows it (a charset it cannot use is refused before), else UTF-8."""
    charset = parse_header_parameters(request.content_type or "")[1].get("charset") or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        charset = "utf-8"
    return dict(QueryDict(request.query.encode("latin-1"), encoding=charset).lists())


def is_replication(request: Request) -> bool:
    return any(
        name.lower() == "x-netflix-discovery-replication" and value == "true"
        for name, value in request.headers
    )


# ------------------------------------------------------------------------------- the oracle


def _same_except(before: MapState, after: MapState, keys=(), ids=()) -> None:
    """Every lease but ``keys`` and every override but those of ``ids`` is exactly as it was."""
    assert {k: v for k, v in after.leases.items() if k not in keys} == {
        k: v for k, v in before.leases.items() if k not in keys
    }, "a lease the request does not name changed"
    assert {k: v for k, v in after.overrides.items() if k not in ids} == {
        k: v for k, v in before.overrides.items() if k not in ids
    }, "an override the request does not name changed"


def _renewed(lease: Lease, now: int) -> bool:
    duration = lease.record["duration_secs"] * 1000
    return lease.renewal in (now, now + duration)


def _same_but_renewed(before: Lease, after: Lease, now: int) -> None:
    """A heartbeat's change: the renewal time, and (override rules, ref. G19) silently the status."""
    assert _renewed(after, now), (before.times, after.times, now)
    old = {k: v for k, v in before.record.items() if k != "status"}
    new = {k: v for k, v in after.record.items() if k != "status"}
    assert new == old, "a heartbeat changed the instance record"
    assert after.times[0] == before.times[0] and after.times[2:] == before.times[2:]


def _as_text(value: Any) -> str:
    """A JSON scalar as the instance's text field (booleans the JSON way)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _body_status(value: Any, default: str) -> str:
    """A status in a body: case-insensitive, missing is ``default``, empty is UNKNOWN (ref. §3.6)."""
    return default if value is None else _as_text(value).strip().upper() or UNKNOWN


def expected_register_status(body: dict, before: MapState, key, now: int, replication: bool):
    """The record a 204 register must leave (ref. G18, G22, §5.7.1): (status, override, winner)."""
    existing = before.leases.get(key)
    status = _body_status(body.get("status"), UP)
    overridden = body.get("overriddenStatus")
    overridden = _body_status(overridden if overridden is not None else body.get("overriddenstatus"), UNKNOWN)
    dirty = body.get("lastDirtyTimestamp")
    dirty = int(dirty) if dirty not in (None, "") else now
    # Issue 30: no timestamp is kept more than 5 minutes ahead of the node's clock.
    dirty = min(dirty, now + MAX_DIRTY_AHEAD_MS)
    kept_existing = existing is not None and existing.record["last_dirty_timestamp"] > dirty
    if kept_existing:
        status, overridden = existing.record["status"], existing.record["overridden_status"]
    override = before.overrides.get(key[1])
    if override is None and overridden != UNKNOWN:
        override = overridden
    if status in (UP, OUT_OF_SERVICE):
        if override is not None:
            status = override
        elif not replication and existing is not None and existing.record["status"] in (UP, OUT_OF_SERVICE):
            status = existing.record["status"]
    return status, override, kept_existing


def check_effect(env: Env, request: Request, answer: Answer, before: MapState, after: MapState, body=None):
    """The map changed only as the answer says: nothing unless a write succeeded, then that write."""
    note(f"answer: {answer!r}")
    now = env.clock.now
    route = route_of(request)
    name, app, instance_id = route if route is not None else (None, None, None)
    method = request.method
    is_write = (name, method) in WRITES
    if not is_write or not (200 <= answer.status < 300 or answer.status in (404, 409)):
        assert after == before, f"{name} {method} answered {answer.status} but changed the map"
        return
    key = (app, instance_id)
    replication = is_replication(request)
    if name in ("app", "batch") and answer.status < 300 and _gzipped(request):
        assert _complete_gzip(request.body), "a write was taken from a gzip body cut short"

    if name == "app":  # register
        assert answer.status == 204, answer
        changed = {k for k in after.leases if after.leases[k] != before.leases.get(k)}
        assert len(changed) == 1, f"a register changed {changed}"
        (key,) = changed
        assert key[0] == app, "registered under another app than the path's"
        _same_except(before, after, keys={key}, ids={key[1]})
        record = after.leases[key].record
        assert after.leases[key].times[0] == now, "a register makes a new lease"
        assert after.delta == before.delta | {key}
        if isinstance(body, dict):
            instance = body.get("instance", body)
            status, override, kept_existing = expected_register_status(
                instance, before, key, now, replication
            )
            source = before.leases[key].record if kept_existing else None
            assert record["status"] == status, (record["status"], status)
            if override is not None:
                assert after.overrides.get(key[1]) == override
            if isinstance(instance.get("instanceId"), str) and instance["instanceId"]:
                assert key[1] == instance["instanceId"], "registered under another id than the body's"
            if source is None:
                assert record["host_name"] == _as_text(instance["hostName"])
                assert record["ip_addr"] == _as_text(instance["ipAddr"])
            else:
                assert record["host_name"] == source["host_name"], "the newer stored copy must win"
        else:
            assert after.overrides.keys() <= before.overrides.keys() | {key[1]}
        return

    if name == "instance" and method == "PUT":  # renew
        if answer.status == 200 or answer.status == 409:
            assert key in before.leases
            assert answer.status == 200 or replication, "409 answers replicated heartbeats only"
            _same_except(before, after, keys={key})
            _same_but_renewed(before.leases[key], after.leases[key], now)
            assert after.delta == before.delta, "a heartbeat is no delta entry"
        else:
            # 404: unknown lease (nothing changes), or one whose sender copy is newer (renewed first,
            # and a replicated heartbeat may bring its override along: ref. §5.3).
            _same_except(before, after, keys={key}, ids={instance_id} if replication else ())
            if key not in before.leases:
                assert after == before
            elif after.leases[key] != before.leases[key]:
                _same_but_renewed(before.leases[key], after.leases[key], now)
            if instance_id in after.overrides and instance_id not in before.overrides:
                assert after.overrides[instance_id] == _query(request).get("overriddenstatus", [None])[0]
        return

    if name == "instance" and method == "DELETE":  # cancel
        if answer.status == 200:
            assert key in before.leases and key not in after.leases
            assert instance_id not in after.overrides, "a cancel clears the override (G18)"
            _same_except(before, after, keys={key}, ids={instance_id})
            assert after.delta == before.delta | {key}
        else:
            assert key not in before.leases, "cancel of a registered instance answered 404"
            # Eureka's internalCancel drops the override of the id even when there is no lease.
            _same_except(before, after, ids={instance_id})
            assert after.overrides.keys() <= before.overrides.keys()
            assert after.delta == before.delta
        return

    if name in ("status", "metadata") and answer.status == 404:
        assert key not in before.leases, f"{name} {method} of a registered instance answered 404"
        assert after == before
        return

    if name == "status":
        assert answer.status == 200 and key in before.leases
        _same_except(before, after, keys={key}, ids={instance_id})
        old, new = before.leases[key], after.leases[key]
        assert _renewed(new, now)
        params = _query(request)
        value = (params.get("value") or [""])[0]
        if method == "PUT":
            assert new.record["status"] == value
            if old.record["status"] != value:
                assert new.record["overridden_status"] == value
                assert after.overrides.get(instance_id) == value
            else:
                assert new.record == old.record and after.overrides == before.overrides
        else:
            assert instance_id not in after.overrides
            if instance_id in before.overrides:
                assert new.record["status"] == (value or UNKNOWN)
                assert new.record["overridden_status"] == UNKNOWN
            else:
                assert new.record == old.record
        return

    if name == "metadata":
        assert answer.status == 200 and key in before.leases
        _same_except(before, after, keys={key})
        sent = {k: v[0] for k, v in _query(request).items()}
        old, new = before.leases[key].record, after.leases[key].record
        assert new["metadata"] == {**old["metadata"], **sent}
        assert {
            k: v
            for k, v in new.items()
            if k not in ("metadata", "action_type", "last_updated_timestamp", "status")
        } == {
            k: v
            for k, v in old.items()
            if k not in ("metadata", "action_type", "last_updated_timestamp", "status")
        }
        return

    assert name == "batch"
    assert answer.status == 200, answer
    answers = json.loads(answer.body)["responseList"]
    if not isinstance(body, dict):
        body = json.loads(_decoded_body(request))
    items = body["replicationList"]
    assert len(answers) == len(items), "one answer per item, in order"
    assert all(a["statusCode"] != 500 for a in answers), f"an item failed inside the server: {answers}"

    def key_of(item):
        return (_as_text(item.get("appName")).strip().upper(), _as_text(item.get("id")).strip())

    named = [key_of(item) if isinstance(item, dict) else None for item in items]
    named_keys = {k for k in named if k is not None}
    changed = {
        k for k in after.leases.keys() | before.leases.keys() if after.leases.get(k) != before.leases.get(k)
    }
    assert changed <= named_keys, f"a batch changed leases it does not name: {changed - named_keys}"
    _same_except(before, after, keys=named_keys, ids={k[1] for k in named_keys})
    for item_key, item_answer in zip(named, answers, strict=True):
        alone = item_key is not None and sum(1 for k in named if k is not None and k[1] == item_key[1]) == 1
        if item_answer["statusCode"] == 400 and alone:
            assert after.leases.get(item_key) == before.leases.get(item_key), (
                "a refused item changed its lease"
            )


def _gzipped(request: Request) -> bool:
    return any(n.lower() == "content-encoding" and "gzip" in v.lower() for n, v in request.headers)


def _complete_gzip(data: bytes) -> bool:
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        decompressor.decompress(data)
    except zlib.error:
        return False
    return decompressor.eof


def _decoded_body(request: Request) -> bytes:
    return gzip.decompress(request.body) if _gzipped(request) else request.body


def check_answer(request: Request, answer: Answer) -> None:
    """Below 500, and a body that claims to be JSON or XML is well-formed."""
    assert answer.status < 500, f"{request!r} -> {answer!r}"
    content_type = answer.headers.get("Content-Type", "").split(";")[0].strip()
    if answer.status >= 300 or content_type not in (JSON_CT, XML_CT) or request.method == "HEAD":
        return
    data = answer.body
    if answer.headers.get("Content-Encoding") == "gzip":
        data = gzip.decompress(data)
    if content_type == JSON_CT:
        json.loads(data)
    else:
        ET.fromstring(data)


def check_registry_readable(env: Env) -> None:
    """After an accepted write, every JSON and XML reader can still read the registry and its delta."""
    for path in ("/eureka/apps/", "/eureka/apps/delta"):
        for accept, parse in ((JSON_CT, json.loads), (XML_CT, ET.fromstring)):
            answer = env.send(Request("GET", path, headers=(("Accept", accept),)))
            assert answer.status == 200
            parse(answer.body)


def exchange(env: Env, request: Request, body_doc=None) -> Answer:
    """Send one fuzzed request and check every property on its answer and on the map."""
    before = observe(env.node)
    answer = env.send(request)
    after = observe(env.node)
    route = route_of(request)
    # What the examples reached (pytest --hypothesis-show-statistics).
    event(f"{route[0] if route else 'no route'} {request.method} -> {answer.status}")
    check_answer(request, answer)
    check_effect(env, request, answer, before, after, body_doc)
    if after != before:
        check_registry_readable(env)
    return answer


# ------------------------------------------------------------------------------- strategies

INSTANCE_FIELDS = (
    "instanceId",
    "hostName",
    "app",
    "ipAddr",
    "sid",
    "status",
    "overriddenStatus",
    "overriddenstatus",
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
    "vipAddress",
    "secureVipAddress",
    "isCoordinatingDiscoveryServer",
    "lastUpdatedTimestamp",
    "lastDirtyTimestamp",
    "actionType",
    "asgName",
)
OTHER_KEYS = (
    "instance",
    "application",
    "replicationList",
    "action",
    "appName",
    "id",
    "instanceInfo",
    "$",
    "@enabled",
    "@class",
    "name",
    "durationInSecs",
    "renewalIntervalInSecs",
    "instance-id",
)
ODD_STRINGS = (
    "",
    " ",
    "UP",
    "up",
    "OUT_OF_SERVICE",
    "true",
    "false",
    "null",
    "0",
    "-1",
    "65536",
    "2147483648",
    "9223372036854775808",
    "1e400",
    "NaN",
    "١٢٣",
    "1_000",
    "\x00",
    "a\x01b",
    "\ufffe",
    "\u2028",
    "☃",
    "🚀",
    "<x/>",
    "&amp;",
    "]]>",
    "%00",
    "../..",
    "x" * 300,
    "com.netflix.appinfo.AmazonInfo",
    "Amazon",
    "MyOwn",
)

json_keys = st.sampled_from(INSTANCE_FIELDS + OTHER_KEYS) | st.text(max_size=12)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=24)
    | st.sampled_from(ODD_STRINGS)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(json_keys, children, max_size=5),
    max_leaves=20,
)

# Ids a registration may carry: no "/", whitespace or control characters, not "." or ".." (each is
# one segment of the instance's URL path).
id_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Cn", "Zs", "Zl", "Zp")),
    min_size=1,
    max_size=30,
).filter(lambda s: not re.search(r"[/\s\x7f-\x9f]", s) and s not in (".", ".."))
app_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Cn"), exclude_characters="/"),
    min_size=1,
    max_size=20,
).filter(lambda s: s.strip() == s and s != "" and s.lower() != "delta")
instance_ids = st.sampled_from(KNOWN_IDS) | id_text
statuses = st.sampled_from(STATUSES + ("up", "Down", " starting "))
metadata_keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.$-]{0,10}", fullmatch=True)
# Keys of letters and digits from all of Unicode: some are XML names, some not, some only to some parsers.
unicode_keys = st.text(
    alphabet=st.characters(categories=("L", "N", "Pc", "Pd", "Mn")), min_size=1, max_size=6
)


@st.composite
def valid_instances(draw, app: str | None = None) -> dict[str, Any]:
    """A registration body (the ``instance`` object) every server must accept for ``app``."""
    app = app or draw(st.sampled_from(("ORDERS", "BILLING", "NEW", "ÜNÏ")))
    host = draw(st.sampled_from(("10.0.0.1", "10.0.0.2", "host.example", "ünï.example")))
    body = instance_body(
        app=draw(st.sampled_from((app, app.lower(), f" {app} "))),
        host=host,
        instance_id=draw(instance_ids),
        status=draw(statuses),
        port=draw(st.integers(0, 65535)),
    )["instance"]
    if draw(st.booleans()):
        body["overriddenStatus"] = draw(statuses)
    if draw(st.booleans()):
        body["lastDirtyTimestamp"] = draw(
            st.sampled_from((START - 1, START, START + 1, START + 5_000)).map(str) | st.integers(0, 2**62)
        )
    if draw(st.booleans()):
        body["metadata"] = draw(
            st.dictionaries(
                metadata_keys,
                st.text(
                    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Cn")), max_size=10
                ),
                max_size=3,
            )
        )
    if draw(st.booleans()):
        body["dataCenterInfo"] = {
            "@class": "com.netflix.appinfo.AmazonInfo",
            "name": "Amazon",
            "metadata": {"instance-id": "i-123", "availability-zone": "eu-west-1a"},
        }
    if draw(st.booleans()):
        for key in draw(
            st.lists(
                st.sampled_from(("sid", "homePageUrl", "countryId", "leaseInfo", "securePort", "vipAddress")),
                max_size=3,
            )
        ):
            body.pop(key, None)
    return body


def _paths(doc: Any, prefix=()) -> list[tuple]:
    """Every (container path, key) in a JSON document, for mutations."""
    out = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.append((*prefix, key))
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out.append((*prefix, index))
            out.extend(_paths(value, (*prefix, index)))
    return out


def _container(doc, path):
    for part in path[:-1]:
        doc = doc[part]
    return doc


@st.composite
def mutated(draw, doc: Any, max_mutations: int = 3) -> Any:
    """``doc`` with up to ``max_mutations`` fields removed, replaced, retyped or renamed (may stay valid)."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(0, max_mutations))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        container, key = _container(doc, path), path[-1]
        kind = draw(st.sampled_from(("remove", "replace", "retype", "rename", "add")))
        if kind == "remove":
            del container[key]
        elif kind == "replace":
            container[key] = draw(json_values)
        elif kind == "retype":
            value = container[key]
            container[key] = draw(
                st.sampled_from(
                    (str(value), [value], {"$": value}, None, bool(value), 0, -1, 2**31, 2**63, 1.5, "", " ")
                )
            )
        elif kind == "rename" and isinstance(container, dict):
            container[draw(json_keys)] = container.pop(key)
        elif isinstance(container, dict):
            container[draw(json_keys)] = draw(json_values)
    return doc


def to_xml(root: str, value: Any) -> str:
    """A JSON-shaped document as XStream-like XML: ``@x`` keys are attributes, ``$`` the text, lists
    repeat the element. Keys that are no XML name give malformed XML, which is the point."""
    if isinstance(value, list):
        return "".join(to_xml(root, item) for item in value)
    if not isinstance(value, dict):
        text = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        return f"<{root}>{escape(text)}</{root}>"
    attrs = "".join(
        f" {'class' if key == '@class' else key[1:]}={quoteattr(str(item))}"
        for key, item in value.items()
        if key.startswith("@") and len(key) > 1
    )
    inner = escape(str(value["$"])) if "$" in value else ""
    children = "".join(
        to_xml(
            "overriddenstatus" if key == "overriddenStatus" else key.replace("_", "__").replace("$", "_-"),
            item,
        )
        for key, item in value.items()
        if not key.startswith("@") and key != "$"
    )
    return f"<{root}{attrs}>{inner}{children}</{root}>"


xml_names = st.sampled_from(INSTANCE_FIELDS + OTHER_KEYS[:-2] + ("instance", "a:b", "xml-x")) | st.from_regex(
    r"[A-Za-z_][A-Za-z0-9._-]{0,8}", fullmatch=True
)
xml_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
xml_trees = st.recursive(
    st.builds(lambda n, t: f"<{n}>{escape(t)}</{n}>", xml_names, xml_text)
    | st.sampled_from(
        ("<!-- c -->", "<![CDATA[x]]>", "<?pi x?>", "&amp;", "&#0;", "&#x1F680;", "&undefined;")
    ),
    lambda children: st.builds(
        lambda n, attrs, kids: (
            f"<{n}{''.join(f' {k}={quoteattr(v)}' for k, v in attrs.items())}>{''.join(kids)}</{n}>"
        ),
        xml_names,
        st.dictionaries(
            st.sampled_from(("class", "enabled", "xmlns", "xmlns:a", "a:b")), xml_text, max_size=2
        ),
        st.lists(children, max_size=4),
    ),
    max_leaves=15,
)
XML_PROLOGS = (
    "",
    '<?xml version="1.0"?>',
    '<?xml version="1.0" encoding="UTF-8"?>',
    '<?xml version="1.1"?>',
    '<?xml version="1.0" encoding="ISO-8859-1"?>',
    '<?xml version="1.0" encoding="UTF-16"?>',
    '<?xml version="1.0" encoding="big5"?>',
    '<?xml version="1.0" encoding="rot13"?>',
    '<?xml version="1.0" encoding="idna"?>',
    '<?xml version="1.0" encoding="undefined"?>',
    '<?xml version="1.0" encoding="no-such-encoding"?>',
    '<!DOCTYPE instance [<!ENTITY e "x">]>',
    "\ufeff",
)


@st.composite
def xml_bodies(draw, valid: dict | None = None, mutations: int = 3) -> bytes:
    """Random XML, or an instance (mutated or not) in XML, with an odd prologue now and then."""
    document = to_xml("instance", draw(mutated(valid, mutations))) if valid is not None else draw(xml_trees)
    prolog = pick(draw, st.just(""), st.sampled_from(XML_PROLOGS), odds=1)
    data = (prolog + document).encode()
    if draw(st.integers(0, 9)) == 0:
        data = data[: draw(st.integers(0, len(data)))]
    return data


def trimmed(value: Any) -> Any:
    """A document as the XML reader sees it: every text without its surrounding whitespace."""
    if isinstance(value, dict):
        return {key: trimmed(item) for key, item in value.items()}
    return value.strip() if isinstance(value, str) else value


def json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def replication_items(draw) -> Any:
    action = draw(
        st.sampled_from(
            ("Register", "Heartbeat", "Cancel", "StatusUpdate", "DeleteStatusOverride", "register", "Bogus")
        )
    )
    app = draw(st.sampled_from(("ORDERS", "BILLING", "NEW", "orders")) | app_text)
    item: dict[str, Any] = {"action": action, "appName": app}
    if action == "Register":
        info = draw(valid_instances(app=app.strip().upper() or "NEW"))
        item["id"] = info["instanceId"]
        item["instanceInfo"] = info
    else:
        item["id"] = draw(instance_ids)
    for key in ("status", "overriddenStatus", "lastDirtyTimestamp"):
        if draw(st.booleans()):
            item[key] = draw(statuses | st.sampled_from((str(START + 5_000), str(START - 1), "abc")))
    return draw(mutated(item, max_mutations=2))


def pick(draw, sane, hostile, odds: int = 3):
    """``sane`` ``odds`` times out of ``odds + 1``: most parts of a request stay plausible, so that the
    hostile part meets code past the first check and some writes succeed."""
    return draw(sane) if draw(st.integers(0, odds)) else draw(hostile)


@st.composite
def bodies(draw, app: str | None = None) -> tuple[bytes, Any, str | None]:
    """(bytes, the JSON document when there is one, the matching content type)."""
    kind = draw(st.sampled_from(("bytes", "json", "almost-json", "xml", "almost-xml", "batch", "empty")))
    if app is not None:  # a registration: mostly an instance of the path's app
        kind = pick(draw, st.sampled_from(("almost-json", "almost-xml")), st.just(kind))
    if kind == "bytes":
        return draw(st.binary(max_size=300)), None, None
    if kind == "empty":
        return b"", None, None
    if kind == "json":
        doc = draw(json_values)
        return json_bytes(doc), doc, JSON_CT
    mutations = draw(st.sampled_from((0, 1, 3)))
    if kind == "almost-json":
        doc = draw(mutated({"instance": draw(valid_instances(app=app))}, mutations))
        return json_bytes(doc), doc, JSON_CT
    if kind == "xml":
        return draw(xml_bodies()), None, XML_CT
    if kind == "almost-xml":
        return draw(xml_bodies(draw(valid_instances(app=app)), mutations)), None, XML_CT
    return draw(batch_bodies())


@st.composite
def batch_bodies(draw) -> tuple[bytes, Any, str | None]:
    doc = draw(mutated({"replicationList": draw(st.lists(replication_items(), max_size=4))}, max_mutations=1))
    return json_bytes(doc), doc, JSON_CT


header_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40
)
CONTENT_TYPES = (
    JSON_CT,
    XML_CT,
    "application/json; charset=UTF-8",
    "application/xml;charset=utf-8",
    "text/xml",
    "application/vnd.x+json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz",
    "*/*",
    "",
    "application/json; charset=base64",
    "application/json; charset=rot13",
    "application/xml; charset=idna",
    "application/json; charset=undefined",
    "application/json; charset=utf-16",
    "application/json; charset=no-such-charset",
    "application/json; charset=",
)
HEADER_VALUES = {
    "Accept": (JSON_CT, XML_CT, "*/*", "application/json, */*", "text/html", "", "json"),
    "Accept-Encoding": ("gzip", "gzip, deflate", "identity", "br", "", "*"),
    "Content-Encoding": ("gzip", "x-gzip", "GZIP", "deflate", "br", "identity", "gzip, identity", ""),
    "X-Netflix-Discovery-Replication": ("true", "TRUE", "false", "1", ""),
    "X-Eureka-Accept": ("full", "compact", "COMPACT", "bogus"),
    "Expect": ("100-continue",),
    "DiscoveryIdentity-Name": ("DefaultClient", "DefaultServer"),
    "X-Discovery-AllowRedirect": ("true",),
}


@st.composite
def header_sets(draw) -> tuple[tuple[str, str], ...]:
    names = draw(st.lists(st.sampled_from(sorted(HEADER_VALUES)), unique=True, max_size=4))
    return tuple((name, pick(draw, st.sampled_from(HEADER_VALUES[name]), header_text)) for name in names)


QUERY_KEYS = (
    "value",
    "lastDirtyTimestamp",
    "overriddenstatus",
    "status",
    "regions",
    "zone",
    "odd_key$",
    "1bad",
    "a b",
    "",
)
QUERY_VALUES = (
    st.sampled_from(STATUSES)
    | st.sampled_from(ODD_STRINGS)
    | st.integers(-(2**70), 2**70).map(str)
    | st.text(max_size=20)
)


timestamps = st.sampled_from((START - 1, START, START + 1, START + 5_000)).map(str)


@st.composite
def query_strings(draw, template: str = "") -> str:
    """A query string: the parameters the route reads, plausible or not, or garbage."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return ""
    if kind == 1:  # raw garbage, as it may come on the wire (printable ASCII and escapes of any byte)
        parts = draw(
            st.lists(
                st.sampled_from(
                    ("&", "=", ";", "%", "%%", "%zz", "+", "?", "#", "%FF", "%00", "%C3%A9", "%2F")
                )
                | st.from_regex(r"[A-Za-z0-9_.~-]{1,6}", fullmatch=True)
                | st.binary(min_size=1, max_size=3).map(lambda b: quote(b, safe="")),
                max_size=10,
            )
        )
        return "".join(parts)
    if kind == 2:
        pairs = draw(
            st.lists(st.tuples(st.sampled_from(QUERY_KEYS) | st.text(max_size=8), QUERY_VALUES), max_size=4)
        )
        return urlencode(pairs, encoding="utf-8", errors="surrogatepass")
    pairs = []
    if template.endswith("/status"):
        pairs.append(("value", pick(draw, st.sampled_from(STATUSES), QUERY_VALUES)))
    if template.endswith("/metadata"):
        pairs += draw(st.lists(st.tuples(metadata_keys | unicode_keys, st.text(max_size=10)), max_size=3))
    if template.endswith(("{id}", "/status")) and draw(st.booleans()):
        pairs.append(("lastDirtyTimestamp", pick(draw, timestamps, QUERY_VALUES)))
    if template.endswith("{id}") and draw(st.booleans()):
        pairs.append(("overriddenstatus", pick(draw, st.sampled_from(STATUSES), QUERY_VALUES)))
    if template.endswith("{id}") and draw(st.booleans()):
        pairs.append(("status", draw(QUERY_VALUES)))
    return urlencode(pairs, encoding="utf-8", errors="surrogatepass")


HOSTILE_SEGMENTS = (
    st.text(min_size=1, max_size=30).map(enc)
    # slashes and reserved characters left raw
    | st.text(min_size=1, max_size=20).map(lambda t: quote(t, safe="/:@!$&'()*+,;="))
    | st.sampled_from(("%FF%FE%80", "%", "%G1", "%2F", "%00", "..", ".", "%2e%2e", "a%2Fb", "%C3", "%20"))
    # very long (gunicorn's request line limit is 4094 bytes; longer never reaches the application)
    | st.builds(lambda unit, n: unit * n, st.sampled_from(("x", "%E2%98%83")), st.integers(300, 1_300))
)


ROUTE_TEMPLATES = (
    ("POST", "apps/{app}"),
    ("GET", "apps/{app}"),
    ("PUT", "apps/{app}/{id}"),
    ("DELETE", "apps/{app}/{id}"),
    ("GET", "apps/{app}/{id}"),
    ("PUT", "apps/{app}/{id}/status"),
    ("DELETE", "apps/{app}/{id}/status"),
    ("PUT", "apps/{app}/{id}/metadata"),
    ("GET", "apps"),
    ("GET", "apps/delta"),
    ("GET", "instances/{id}"),
    ("GET", "vips/{app}"),
    ("GET", "svips/{app}"),
    ("GET", "status"),
    ("GET", "serverinfo/statusoverrides"),
    ("PUT", "asg/{app}/status"),
    ("POST", "peerreplication/batch"),
)
WRITE_TEMPLATES = [(m, t) for m, t in ROUTE_TEMPLATES if m in ("POST", "PUT", "DELETE") and "asg" not in t]
PREFIXES = ("/eureka/", "/eureka/v2/", "/eureka/v1/", "/eureka//", "/eureka/v2//", "/eureka/v3/")


METHODS = ("GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS", "PATCH", "BREW")


@st.composite
def requests(draw) -> tuple[Request, Any]:
    """A request to any route, each part plausible or hostile; (request, its JSON body document)."""
    # Writes three times as often as reads: they are what can change the map.
    method, template = draw(st.sampled_from(ROUTE_TEMPLATES + tuple(WRITE_TEMPLATES) * 2))
    method = pick(draw, st.just(method), st.sampled_from(METHODS), odds=9)
    # Half the time an instance of the seed map (its app in any case), else any app and any id.
    seeded = st.sampled_from([(app, body["instance"]["instanceId"]) for app, body in SEEDS]).map(
        lambda target: (draw(st.sampled_from((target[0], target[0].lower()))), target[1])
    )
    app_name, instance_id = draw(seeded | st.tuples(st.sampled_from(KNOWN_APPS) | app_text, instance_ids))
    path = pick(draw, st.sampled_from(PREFIXES[:2]), st.sampled_from(PREFIXES)) + template.format(
        app=pick(draw, st.just(enc(app_name)), HOSTILE_SEGMENTS, odds=4),
        id=pick(draw, st.just(enc(instance_id)), HOSTILE_SEGMENTS, odds=4),
    )
    path += pick(draw, st.just(""), st.sampled_from(("/", "/", "//")), odds=5)
    body, doc, content_type = (b"", None, None)
    if template == "apps/{app}" and method == "POST":
        body, doc, content_type = draw(bodies(app=app_name))
    elif template == "peerreplication/batch" and method == "POST":
        body, doc, content_type = pick(draw, batch_bodies(), bodies())
    elif method in ("POST", "PUT") or draw(st.integers(0, 4)) == 0:
        body, doc, content_type = draw(bodies())
    content_type = pick(draw, st.just(content_type), st.sampled_from(CONTENT_TYPES) | header_text)
    headers = draw(header_sets())
    if any(n == "Content-Encoding" and "gzip" in v.lower() for n, v in headers):
        compressed = gzip.compress(body)
        cut = st.integers(0, len(compressed)).map(lambda n: compressed[:n])
        cut_in_trailer = st.integers(1, 8).map(lambda n: compressed[:-n])  # CRC and length missing
        body = pick(draw, st.just(compressed), st.just(body) | cut | cut_in_trailer)
    request = Request(
        method,
        path,
        draw(query_strings(template)),
        headers,
        body,
        chunked=draw(st.booleans()),
        content_type=content_type,
    )
    return request, doc


# ------------------------------------------------------------------------------- properties


@fuzz(3)
@given(data=requests())
def test_any_request_answers_below_500_and_changes_the_map_only_by_a_successful_write(make_env, data):
    request, doc = data
    note(repr(request))
    env = make_env()
    exchange(env, request, doc)


@fuzz(1)
@given(
    app=st.sampled_from(("ORDERS", "BILLING", "NEW")),
    data=st.data(),
    fmt=st.sampled_from(("json", "xml")),
    prefix=st.sampled_from(("/eureka/", "/eureka/v2/")),
    chunked=st.booleans(),
    gzipped=st.booleans(),
    replication=st.booleans(),
)
def test_valid_registrations_are_204_and_leave_what_was_sent(
    make_env, app, data, fmt, prefix, chunked, gzipped, replication
):
    instance = data.draw(valid_instances(app=app))
    body = json_bytes({"instance": instance}) if fmt == "json" else to_xml("instance", instance).encode()
    headers = [("Accept", data.draw(st.sampled_from((JSON_CT, XML_CT, "*/*"))))]
    if gzipped:
        body = gzip.compress(body)
        headers.append(("Content-Encoding", "gzip"))
    if replication:
        headers.append(("X-Netflix-Discovery-Replication", "true"))
    request = Request(
        "POST",
        f"{prefix}apps/{enc(app)}",
        body=body,
        chunked=chunked,
        content_type=JSON_CT if fmt == "json" else XML_CT,
        headers=tuple(headers),
    )
    note(repr(request))
    env = make_env()
    # XML element text is read trimmed (pretty-printed bodies), JSON strings as they are.
    answer = exchange(env, request, {"instance": instance if fmt == "json" else trimmed(instance)})
    assert answer.status == 204, answer
    assert answer.body == b""


# Mutations that make any registration invalid (ref. §2.7 and G23: what a body must have), each with
# the formats that can carry it.
def _invalid_port(value):
    return lambda inst: inst.__setitem__("port", {"$": value, "@enabled": "true"})


BROKEN_WORDS = st.from_regex(r"[A-Za-z][A-Za-z ]{0,10}", fullmatch=True).filter(
    lambda s: s.strip().upper() not in STATUSES and s.strip().lower() not in ("true", "false")
)


@st.composite
def invalidations(draw) -> tuple[str, Any, bool]:
    """(description, mutation of an ``instance`` dict, whether XML can carry it)."""
    word = draw(BROKEN_WORDS)
    blank = draw(st.sampled_from(("", " ", "\t ")))
    required = draw(st.sampled_from(("hostName", "ipAddr", "app", "dataCenterInfo")))
    out_of_range = draw(st.sampled_from((-1, 65536, 2**31, 2**40)))
    not_an_object = draw(st.sampled_from(("MyOwn", "z=a", [1], 5, False)))
    cases = [
        (f"no {required}", lambda inst: inst.pop(required), True),
        (f"blank {required}", lambda inst: inst.__setitem__(required, blank), required != "dataCenterInfo"),
        ("no id and no host", lambda inst: (inst.pop("instanceId"), inst.pop("hostName")), True),
        ("other app", lambda inst: inst.__setitem__("app", "OTHER-" + word), True),
        ("status word", lambda inst: inst.__setitem__("status", word), True),
        ("overridden word", lambda inst: inst.__setitem__("overriddenStatus", word), True),
        ("port word", _invalid_port(word), True),
        ("port out of range", _invalid_port(out_of_range), True),
        ("port fraction", _invalid_port(80.5), True),
        ("port enabled word", lambda inst: inst.__setitem__("port", {"$": 80, "@enabled": word}), True),
        ("country word", lambda inst: inst.__setitem__("countryId", word), True),
        ("country over int", lambda inst: inst.__setitem__("countryId", 2**31), True),
        ("dirty word", lambda inst: inst.__setitem__("lastDirtyTimestamp", word), True),
        ("dirty over long", lambda inst: inst.__setitem__("lastDirtyTimestamp", str(2**63)), True),
        (
            "duration word",
            lambda inst: inst.__setitem__("leaseInfo", {"renewalIntervalInSecs": 30, "durationInSecs": word}),
            True,
        ),
        ("coordinating word", lambda inst: inst.__setitem__("isCoordinatingDiscoveryServer", word), True),
        (
            "dc without name",
            lambda inst: inst.__setitem__("dataCenterInfo", {"@class": "x.MyDataCenterInfo"}),
            True,
        ),
        (
            "metadata key digit",
            lambda inst: inst.__setitem__("metadata", {"1" + word.replace(" ", ""): "v"}),
            False,
        ),
        ("metadata key space", lambda inst: inst.__setitem__("metadata", {"a " + word: "v"}), False),
        (
            "metadata control value",
            lambda inst: inst.__setitem__("metadata", {"zone": "a\x01" + word}),
            False,
        ),
        ("control char in id", lambda inst: inst.__setitem__("instanceId", "i\x07" + word), False),
        ("dc not an object", lambda inst: inst.__setitem__("dataCenterInfo", not_an_object), False),
        ("lease not an object", lambda inst: inst.__setitem__("leaseInfo", not_an_object or [30]), False),
        ("metadata not an object", lambda inst: inst.__setitem__("metadata", not_an_object), False),
        ("metadata nested", lambda inst: inst.__setitem__("metadata", {"zone": {"a": 1}}), False),
        ("host an object", lambda inst: inst.__setitem__("hostName", {"name": word}), False),
        ("app a list", lambda inst: inst.__setitem__("app", [word]), False),
        ("instance not an object", None, False),
    ]
    return draw(st.sampled_from(cases))


@fuzz(1)
@given(
    app=st.sampled_from(("ORDERS", "BILLING", "NEW")),
    data=st.data(),
    case=invalidations(),
    chunked=st.booleans(),
)
def test_a_valid_registration_mutated_into_an_invalid_one_is_4xx(make_env, app, data, case, chunked):
    description, mutate, xml_ok = case
    instance = data.draw(valid_instances(app=app))
    fmt = data.draw(st.sampled_from(("json", "xml"))) if xml_ok else "json"
    if mutate is None:
        document: Any = {"instance": data.draw(st.sampled_from(("x", 5, [instance], None)))}
    else:
        mutate(instance)
        document = {"instance": instance}
    body = json_bytes(document) if fmt == "json" else to_xml("instance", document["instance"]).encode()
    request = Request(
        "POST",
        f"/eureka/apps/{enc(app)}",
        body=body,
        chunked=chunked,
        content_type=JSON_CT if fmt == "json" else XML_CT,
    )
    note(f"{description}: {request!r}")
    env = make_env()
    before = observe(env.node)

    answer = env.send(request)

    assert 400 <= answer.status < 500, (description, answer)
    assert answer.headers.get("Content-Type", "").startswith("text/plain"), answer
    assert observe(env.node) == before


@fuzz(1)
@given(
    items=st.lists(replication_items(), min_size=1, max_size=6),
    gzipped=st.sampled_from(("no", "whole", "cut in its trailer")),
    chunked=st.booleans(),
)
def test_replication_batches_answer_each_item_and_touch_only_what_they_name(
    make_env, items, gzipped, chunked
):
    body = json_bytes({"replicationList": items})
    headers: tuple[tuple[str, str], ...] = (("Accept", JSON_CT),)
    if gzipped != "no":
        body = gzip.compress(body)
        headers += (("Content-Encoding", "gzip"),)
    if gzipped == "cut in its trailer":
        body = body[:-4]  # the length of the data is missing; the data and its CRC are there
    request = Request(
        "POST",
        "/eureka/peerreplication/batch/",
        body=body,
        headers=headers,
        chunked=chunked,
        content_type=JSON_CT,
    )
    note(repr(request))
    env = make_env()

    answer = exchange(env, request)

    assert answer.status == (400 if gzipped == "cut in its trailer" else 200), answer


@fuzz(1)
@given(
    key=unicode_keys | metadata_keys | st.text(min_size=1, max_size=6),
    value=st.text(max_size=8),
    via=st.sampled_from(("register", "metadata PUT")),
    fmt=st.sampled_from((JSON_CT, XML_CT)),
)
def test_metadata_the_server_accepts_never_makes_the_registry_unreadable(make_env, key, value, via, fmt):
    """Metadata keys are element names in XML payloads: one a parser refuses would break every XML
    client's full fetch (py-eureka-client, fargo). Accepted or refused, the registry stays readable."""
    env = make_env()
    if via == "register":
        instance = instance_body(app="ORDERS", host="10.0.0.1", metadata={key: value})
        request = Request("POST", "/eureka/apps/ORDERS", body=json_bytes(instance), content_type=JSON_CT)
    else:
        request = Request(
            "PUT", f"/eureka/apps/ORDERS/{enc(ORDERS_1)}/metadata", urlencode({key: value}), content_type=fmt
        )
    note(repr(request))

    answer = exchange(env, request, instance if via == "register" else None)

    assert answer.status in (200, 204, 400), answer
    for accept, parse in ((JSON_CT, json.loads), (XML_CT, ET.fromstring)):
        fetched = env.send(Request("GET", "/eureka/apps/ORDERS", headers=(("Accept", accept),)))
        assert fetched.status == 200
        parse(fetched.body)


# ---------------------------------------------------------------------------- explicit tests

# Seconds: generous on a slow shared machine; unrefused, these attacks take minutes or never end.
FAST = 2.0


def timed(env: Env, request: Request) -> tuple[Answer, float]:
    started = time.monotonic()
    answer = env.send(request)
    return answer, time.monotonic() - started


@pytest.fixture
def env(make_env) -> Env:
    return make_env()


@pytest.fixture
def listener():
    """A local TCP port that records whether anything connected (an XML parser fetching a DTD)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _connected(server: socket.socket) -> bool:
    try:
        connection, _ = server.accept()
    except BlockingIOError:
        return False
    connection.close()
    return True


VALID_XML_FIELDS = (
    "<instanceId>xml-1</instanceId><hostName>{host}</hostName><app>ORDERS</app><ipAddr>1.2.3.4</ipAddr>"
    "<status>UP</status><dataCenterInfo><name>MyOwn</name></dataCenterInfo>"
)


def _instance_xml(doctype: str, host: str = "h") -> bytes:
    fields = VALID_XML_FIELDS.format(host=host)
    return f'<?xml version="1.0"?>\n{doctype}\n<instance>{fields}</instance>'.encode()


BILLION_LAUGHS = _instance_xml(
    '<!DOCTYPE instance [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">' for i in range(1, 10))
    + "]>",
    host="&lol9;",
)


def _xml_attacks(port: int) -> dict[str, bytes]:
    return {
        "billion-laughs": BILLION_LAUGHS,
        "quadratic-blowup": _instance_xml(
            f'<!DOCTYPE instance [<!ENTITY a "{"a" * 50_000}">]>', host="&a;" * 15
        ),
        "external-entity-file": _instance_xml(
            '<!DOCTYPE instance [<!ENTITY secret SYSTEM "file:///etc/passwd">]>', host="&secret;"
        ),
        "external-entity-http": _instance_xml(
            f'<!DOCTYPE instance [<!ENTITY secret SYSTEM "http://127.0.0.1:{port}/secret">]>', host="&secret;"
        ),
        "external-dtd": _instance_xml(f'<!DOCTYPE instance SYSTEM "http://127.0.0.1:{port}/evil.dtd">'),
        "parameter-entity": _instance_xml(
            f'<!DOCTYPE instance [<!ENTITY % remote SYSTEM "http://127.0.0.1:{port}/p.dtd"> %remote;]>'
        ),
    }


@pytest.mark.parametrize(
    "attack",
    [
        "billion-laughs",
        "quadratic-blowup",
        "external-entity-file",
        "external-entity-http",
        "external-dtd",
        "parameter-entity",
    ],
)
def test_xml_entity_expansion_external_entities_and_dtds_are_refused_fast(env, listener, attack):
    body = _xml_attacks(listener.getsockname()[1])[attack]
    before = observe(env.node)

    answer, elapsed = timed(env, Request("POST", "/eureka/apps/ORDERS", body=body, content_type=XML_CT))

    assert 400 <= answer.status < 500, answer
    assert b"root:" not in answer.body
    assert observe(env.node) == before
    assert not _connected(listener), "the server fetched an external DTD or entity"
    assert elapsed < FAST, f"refused, but only after {elapsed:.1f} s"


DEPTH = 12_000


def _deep_json(depth: int) -> bytes:
    valid = instance_body()["instance"]
    nested = "[" * depth + "]" * depth
    return b'{"instance": ' + json.dumps(valid).encode()[:-1] + b', "extra": ' + nested.encode() + b"}}"


def _deep_xml(depth: int) -> bytes:
    nested = "<a>" * depth + "</a>" * depth
    return f"<instance>{VALID_XML_FIELDS.format(host='h')}<extra>{nested}</extra></instance>".encode()


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_documents_nested_ten_thousand_levels_deep_are_refused_with_a_4xx(env, fmt):
    """Deep nesting hidden in an otherwise valid registration: only a depth limit refuses it."""
    body = _deep_json(DEPTH) if fmt == "json" else _deep_xml(DEPTH)
    shallow = _deep_json(3) if fmt == "json" else _deep_xml(3)
    content_type = JSON_CT if fmt == "json" else XML_CT
    before = observe(env.node)

    answer, elapsed = timed(env, Request("POST", "/eureka/apps/ORDERS", body=body, content_type=content_type))

    assert 400 <= answer.status < 500, answer
    assert answer.headers["Content-Type"].startswith("text/plain")
    assert observe(env.node) == before
    assert elapsed < FAST
    # The same registration, shallow, is accepted: the refusal is about the depth alone.
    assert (
        env.send(Request("POST", "/eureka/apps/ORDERS", body=shallow, content_type=content_type)).status
        == 204
    )


def test_a_replication_batch_nested_ten_thousand_levels_deep_is_refused_with_a_4xx(env):
    body = b'{"replicationList": [' + b"[" * DEPTH + b"]" * DEPTH + b"]}"
    before = observe(env.node)

    answer, elapsed = timed(
        env, Request("POST", "/eureka/peerreplication/batch/", body=body, content_type=JSON_CT)
    )

    assert 400 <= answer.status < 500, answer
    assert observe(env.node) == before
    assert elapsed < FAST


class CountingStream(io.BytesIO):
    """A request body that records how much of it the server read."""


BODY_ENDPOINTS = ["/eureka/apps/ORDERS", "/eureka/v2/peerreplication/batch/"]


@pytest.mark.parametrize("path", BODY_ENDPOINTS)
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_limit_is_413_without_reading_it_all(env, path, chunked):
    limit = django_settings.EUREKA.connections.max_body_bytes
    body = b'{"instance": {}' + b" " * (limit + 1_000) + b"}"
    stream = CountingStream(body)
    before = observe(env.node)

    started = time.monotonic()
    answer = call(
        env.app, Request("POST", path, body=body, chunked=chunked, content_type=JSON_CT), stream=stream
    )
    elapsed = time.monotonic() - started

    assert answer.status == 413, answer
    assert stream.tell() <= limit + 1, "the body was read past the limit"
    if not chunked:
        assert stream.tell() == 0, "a Content-Length over the limit is refused before reading"
    assert observe(env.node) == before
    assert elapsed < FAST


@pytest.mark.parametrize("path", BODY_ENDPOINTS)
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_gzip_bomb_is_413(env, path, chunked):
    limit = django_settings.EUREKA.connections.max_body_bytes
    bomb = gzip.compress(b'{"replicationList": [' + b" " * (16 * limit) + b"]}", compresslevel=9)
    assert len(bomb) < limit // 20, "a small body that inflates to 16 times the limit"
    before = observe(env.node)

    answer, elapsed = timed(
        env,
        Request(
            "POST",
            path,
            body=bomb,
            chunked=chunked,
            content_type=JSON_CT,
            headers=(("Content-Encoding", "gzip"),),
        ),
    )

    assert answer.status == 413, answer
    assert observe(env.node) == before
    assert elapsed < FAST


# ------------------------------------------------------------ regressions: bugs the fuzzing found


@pytest.mark.parametrize("charset", ["base64", "rot13", "undefined", "hex"])
def test_a_content_type_charset_django_cannot_decode_with_is_415_not_an_escaped_exception(env, charset):
    """Django decodes the query string with the request's charset while it builds the request, outside
    any error handling: ``charset=base64`` made a heartbeat raise out of the WSGI application (500)."""
    before = observe(env.node)
    request = Request(
        "PUT",
        f"/eureka/apps/ORDERS/{enc(ORDERS_1)}",
        f"lastDirtyTimestamp={START}",
        content_type=f"application/json; charset={charset}",
    )

    answer = env.send(request)

    assert answer.status == 415, answer
    assert answer.body == f"Unsupported charset '{charset}' in Content-Type\n".encode()
    assert observe(env.node) == before, "a refused heartbeat renewed the lease"


def test_too_many_query_parameters_with_a_charset_are_400_not_an_escaped_exception(env):
    query = "&".join(f"k{i}=v" for i in range(django_settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    before = observe(env.node)

    answer = env.send(
        Request(
            "PUT",
            f"/eureka/apps/ORDERS/{enc(ORDERS_1)}/metadata",
            query,
            content_type=f"{JSON_CT}; charset=UTF-8",
        )
    )

    assert answer.status == 400, answer
    assert observe(env.node) == before


@pytest.mark.parametrize("charset", ["UTF-8", "iso-8859-1", "no-such-charset"])
def test_charsets_django_can_use_or_ignores_still_work(env, charset):
    answer = env.send(
        Request(
            "PUT",
            f"/eureka/apps/ORDERS/{enc(ORDERS_1)}/status",
            "value=DOWN",
            content_type=f"application/json; charset={charset}",
        )
    )

    assert answer.status == 200, answer
    assert env.node.registry.reads.get_instance("ORDERS", ORDERS_1, env.clock.now).instance.status == "DOWN"


@pytest.mark.parametrize("encoding", ["rot13", "big5", "undefined", "idna", "hex"])
def test_an_xml_declaration_naming_an_encoding_expat_cannot_use_is_400(env, encoding):
    """expat asks Python for the codec and raised ValueError / LookupError, which became a 500."""
    body = (
        f'<?xml version="1.0" encoding="{encoding}"?><instance>{VALID_XML_FIELDS.format(host="h")}</instance>'
    )
    before = observe(env.node)

    answer = env.send(Request("POST", "/eureka/apps/ORDERS", body=body.encode(), content_type=XML_CT))

    assert answer.status == 400, answer
    assert answer.body.startswith(b"Malformed XML body")
    assert observe(env.node) == before


@pytest.mark.parametrize("action", [[], ["Register"], {"a": 1}])
def test_a_replication_item_whose_action_is_not_a_string_is_refused_alone(env, action):
    """An unhashable action (a list, an object) raised TypeError inside the batch: the item was answered
    500 and logged as a server failure instead of being refused."""
    items = [
        {"action": action, "appName": "ORDERS", "id": ORDERS_1},
        {"action": "Cancel", "appName": "ORDERS", "id": ORDERS_1},
    ]
    request = Request(
        "POST",
        "/eureka/peerreplication/batch/",
        body=json_bytes({"replicationList": items}),
        content_type=JSON_CT,
    )

    answer = env.send(request)

    assert answer.status == 200, answer
    assert json.loads(answer.body) == {"responseList": [{"statusCode": 400}, {"statusCode": 200}]}
    assert ("ORDERS", ORDERS_1) not in observe(env.node).leases


@pytest.mark.parametrize("key", ["𑅄", "aª", "µs", "½x"])
@pytest.mark.parametrize("via", ["register", "metadata PUT"])
def test_a_metadata_key_xml_readers_refuse_is_400_and_never_stored(env, key, via):
    """Unicode letters of today that XML 1.0's older name classes lack (expat, Go's encoding/xml) were
    accepted as metadata keys, and the next ``GET apps`` was not well-formed XML for any XML client."""
    before = observe(env.node)
    if via == "register":
        body = json_bytes(instance_body(app="ORDERS", host="10.0.0.1", metadata={key: "v"}))
        request = Request("POST", "/eureka/apps/ORDERS", body=body, content_type=JSON_CT)
    else:
        request = Request("PUT", f"/eureka/apps/ORDERS/{enc(ORDERS_1)}/metadata", urlencode({key: "v"}))

    answer = env.send(request)

    assert answer.status == 400, answer
    assert b"metadata key" in answer.body
    assert observe(env.node) == before
    ET.fromstring(env.send(Request("GET", "/eureka/apps/", headers=(("Accept", XML_CT),))).body)


@pytest.mark.parametrize("key", ["zöne", "日本", "Ωmega"])
def test_non_ascii_metadata_keys_xml_readers_take_are_still_accepted(env, key):
    answer = env.send(Request("PUT", f"/eureka/apps/ORDERS/{enc(ORDERS_1)}/metadata", urlencode({key: "v"})))

    assert answer.status == 200, answer
    document = ET.fromstring(env.send(Request("GET", "/eureka/apps/", headers=(("Accept", XML_CT),))).body)
    assert [element.text for element in document.iter(key)] == ["v"]


@pytest.mark.parametrize("missing", [1, 4, 8])
def test_a_gzip_body_cut_short_in_its_trailer_is_400(env, missing):
    """zlib checks a gzip stream's CRC and length only at its end: a body cut inside the 8-byte trailer
    was decompressed to the whole document and accepted, unchecked."""
    whole = gzip.compress(json_bytes(instance_body(app="ORDERS", host="10.0.0.9")))
    before = observe(env.node)

    def post(data: bytes) -> Answer:
        headers = (("Content-Encoding", "gzip"),)
        return env.send(
            Request("POST", "/eureka/apps/ORDERS", body=data, content_type=JSON_CT, headers=headers)
        )

    answer = post(whole[:-missing])

    assert answer.status == 400, answer
    assert b"gzip" in answer.body
    assert observe(env.node) == before
    assert post(whole).status == 204
