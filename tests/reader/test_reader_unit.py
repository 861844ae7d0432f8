"""The reader in-process: how the node stamps its Redis payloads, what a reader serves or forwards and
why, its headers on the way to the node and back, API accounts, its probes, and its start-up rules.
The live tests (test_reader_live.py, test_reader_staleness.py) run the same against real processes."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.http import HttpResponse
from django.test import override_settings
from redis.exceptions import ConnectionError as RedisConnectionError

from registry.access import accounts
from registry.access.credentials import CredentialCache
from registry.cache.redis_tier import RETRY_AFTER_MS, RedisReadOnlyTier, TierReader
from registry.cache.response_cache import APP, APPS, DELTA, SVIP, VIP, CacheKey, Payload, ResponseCache
from registry.reader.forwarding import VIA, NodeForwarder, passed_back, request_headers
from registry.reader.service import Reader, check_settings, reset_reader
from registry.reader.source import MISSING, REDIS_DOWN, SERVED, STALE, PayloadSource
from registry.runtime.process import forbid_node, get_node, reset_node
from registry.wire.handlers import ProtocolHandler
from tests.conftest import FakeClock

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_796_000_000_000
BOUND = 3000


class FakeRedis:
    """The commands the tier and its reader use, on dicts, storing bytes as Redis returns them."""

    def __init__(self):
        self.data: dict[str, dict[str, bytes] | bytes] = {}
        self.down = False
        self.calls: list[str] = []

    def _check(self, command: str) -> None:
        self.calls.append(command)
        if self.down:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    @staticmethod
    def _bytes(value) -> bytes:
        return value if isinstance(value, bytes) else str(value).encode()

    def hset(self, name, key=None, value=None, mapping=None):
        self._check("hset")
        fields = self.data.setdefault(name, {})
        for k, v in (mapping or {key: value}).items():
            fields[k] = self._bytes(v)

    def hmget(self, name, *fields):
        self._check("hmget")
        found = self.data.get(name) or {}
        return [found.get(field) for field in fields]

    def set(self, name, value):
        self._check("set")
        self.data[name] = self._bytes(value)

    def get(self, name):
        self._check("get")
        return self.data.get(name)

    def ping(self):
        self._check("ping")
        return True

    def scan_iter(self, pattern):
        self._check("scan")
        return [name for name in self.data if name.startswith(pattern.rstrip("*"))]

    def delete(self, *names):
        self._check("delete")
        for name in names:
            self.data.pop(name, None)

    # Sorted sets, as {member: score} dicts (the readers' read marks).
    def zadd(self, name, mapping):
        self._check("zadd")
        self.data.setdefault(name, {}).update({member: float(score) for member, score in mapping.items()})

    def zscore(self, name, member):
        self._check("zscore")
        return (self.data.get(name) or {}).get(member)

    def zrem(self, name, *members):
        self._check("zrem")
        for member in members:
            (self.data.get(name) or {}).pop(member, None)

    def zremrangebyscore(self, name, low, high):
        self._check("zremrangebyscore")
        assert low == "-inf" and high.startswith("(")
        marks = self.data.get(name) or {}
        for member in [member for member, score in marks.items() if score < float(high[1:])]:
            del marks[member]

    def pipeline(self, transaction=True):
        return FakePipeline(self)


class FakePipeline:
    """Commands run at once, their answers given back by ``execute`` in order, as a pipeline's."""

    def __init__(self, redis: FakeRedis):
        self._redis = redis
        self._answers: list = []

    def __getattr__(self, command):
        def queue(*args, **kwargs):
            self._answers.append(getattr(self._redis, command)(*args, **kwargs))
            return self

        return queue

    def execute(self):
        answers, self._answers = self._answers, []
        return answers


class Builder:
    def __init__(self):
        self.version = 0

    def __call__(self, key: CacheKey) -> bytes | None:
        if key.entity == APP and key.name == "MISSING":
            return None
        return f"{key.entity}:{key.name}:{key.fmt}:{int(key.compact)}:v{self.version}".encode()


@pytest.fixture
def redis() -> FakeRedis:
    return FakeRedis()


@pytest.fixture
def published(redis):
    """A node's cache on the Redis tier (clock [T0]) and a reader's source on the same Redis."""
    clock = FakeClock(T0)
    builder = Builder()
    cache = ResponseCache(builder, expire_ms=180_000, read_only=RedisReadOnlyTier(redis, "eureka", clock))
    source = PayloadSource(TierReader(redis, "eureka"), BOUND, clock=clock)
    return cache, builder, source, clock


# ------------------------------------------------------------------------- the node's stamps


def test_a_put_stamps_synced_at_and_a_new_version_and_a_sync_of_an_unchanged_payload_restamps(
    published, redis
):
    cache, builder, _, clock = published
    key = CacheKey(APPS, "", "json")
    cache.get(key, clock.now)
    stored = redis.data["eureka:ro:apps:json:0:"]
    assert stored["synced_at"] == str(T0).encode() and stored["built_at"] == str(T0).encode()
    first_version = stored["version"]
    clock.advance(1000)
    cache.sync(clock.now)
    # Unchanged: not published again (same version, same built_at), but confirmed at this sync.
    assert stored["version"] == first_version and stored["built_at"] == str(T0).encode()
    assert stored["synced_at"] == str(T0 + 1000).encode()
    assert redis.data["eureka:ro:_synced"] == str(T0 + 1000).encode()
    builder.version = 1
    cache.invalidate("ORDERS", [])
    clock.advance(1000)
    cache.sync(clock.now)
    assert stored["version"] != first_version and stored["body"].endswith(b"v1")


def test_a_sync_while_redis_fails_stamps_nothing(published, redis):
    cache, _, _, clock = published
    key = CacheKey(APPS, "", "json")
    cache.get(key, clock.now)
    redis.down = True
    clock.advance(1000)
    cache.sync(clock.now)
    redis.down = False
    assert redis.data["eureka:ro:apps:json:0:"]["synced_at"] == str(T0).encode()


# ------------------------------------------------------------------------- what a reader serves


def test_a_fresh_payload_is_served_with_the_copy_asked_for(published):
    cache, _, source, clock = published
    key = CacheKey(APPS, "", "json")
    node_payload = cache.get(key, clock.now)
    plain, reason = source.lookup(key, gzip=False)
    assert reason == SERVED and plain.body == node_payload.body
    zipped, reason = source.lookup(key, gzip=True)
    assert reason == SERVED and zipped.gzipped() == node_payload.gzipped()
    assert gzip.decompress(zipped.gzipped()) == node_payload.body


def test_the_bytes_are_fetched_again_only_when_the_version_changes(published, redis):
    cache, builder, source, clock = published
    key = CacheKey(APP, "ORDERS", "xml")
    cache.get(key, clock.now)
    source.lookup(key, gzip=True)
    redis.calls.clear()
    for _ in range(3):
        assert source.lookup(key, gzip=True)[1] == SERVED
    assert redis.calls == ["hmget"] * 3, "one small read per request while the version holds"
    builder.version = 1
    cache.invalidate("ORDERS", [])
    clock.advance(1000)
    cache.sync(clock.now)
    redis.calls.clear()
    payload, _ = source.lookup(key, gzip=False)
    assert payload.body.endswith(b"v1") and redis.calls == ["hmget", "hmget"]


def test_within_the_revalidation_interval_a_worker_serves_its_copy_without_asking_redis(published, redis):
    cache, builder, _, clock = published
    source = PayloadSource(TierReader(redis, "eureka"), BOUND, clock=clock, revalidate_ms=100)
    key = CacheKey(APPS, "", "json")
    cache.get(key, clock.now)
    first, _ = source.lookup(key, gzip=True)
    redis.calls.clear()
    clock.advance(99)
    assert source.lookup(key, gzip=True) == (first, SERVED) and redis.calls == []
    builder.version = 1
    cache.invalidate("ORDERS", [])
    cache.sync(clock.now)  # the node serves the new payload from now on
    assert source.lookup(key, gzip=True)[0] is first, "still the copy, for under 100 ms"
    clock.advance(1)
    newer, reason = source.lookup(key, gzip=True)
    assert reason == SERVED and gzip.decompress(newer.gzipped()).endswith(b"v1")


def test_the_bound_holds_at_every_request_whatever_the_revalidation_interval(published, redis):
    cache, _, _, clock = published
    source = PayloadSource(TierReader(redis, "eureka"), BOUND, clock=clock, revalidate_ms=60_000)
    key = CacheKey(APPS, "", "json")
    cache.get(key, clock.now)
    assert source.lookup(key, gzip=True)[1] == SERVED
    clock.advance(BOUND + 1)
    assert source.lookup(key, gzip=True) == (None, STALE)


def test_a_payload_not_confirmed_within_the_bound_is_not_served(published):
    cache, _, source, clock = published
    key = CacheKey(DELTA, "", "json", compact=True)
    cache.get(key, clock.now)
    clock.advance(BOUND)
    assert source.lookup(key, gzip=True)[1] == SERVED, "exactly at the bound: still served"
    clock.advance(1)
    assert source.lookup(key, gzip=True) == (None, STALE)
    cache.sync(clock.now)  # the node's sync confirms it again
    assert source.lookup(key, gzip=True)[1] == SERVED


def test_a_hash_without_synced_at_is_stale_and_an_unpublished_key_is_a_miss(published, redis):
    _, _, source, _ = published
    redis.data["eureka:ro:apps:json:0:"] = {"found": b"1", "built_at": str(T0).encode(), "body": b"old"}
    assert source.lookup(CacheKey(APPS, "", "json"), gzip=False) == (None, STALE)
    assert source.lookup(CacheKey(APP, "NOBODY", "json"), gzip=False) == (None, MISSING)
    # Only a sync's stamp left on a hash Redis lost: a miss, not an empty answer.
    redis.data["eureka:ro:vip:json:0:v"] = {"synced_at": str(T0).encode()}
    assert source.lookup(CacheKey(VIP, "v", "json"), gzip=False) == (None, MISSING)


def test_a_miss_is_not_published_and_a_published_not_found_is_served_as_not_found(published, redis):
    cache, _, source, clock = published
    key = CacheKey(APP, "MISSING", "json")
    assert cache.get(key, clock.now).body is None
    assert "eureka:ro:app:json:0:MISSING" not in redis.data, "any name can be asked for: misses stay out"
    assert source.lookup(key, gzip=True) == (None, MISSING), "the reader sends it on to the node"
    # What a node that published misses left in Redis is still served as it says.
    redis.data["eureka:ro:app:json:0:MISSING"] = {
        "found": b"0",
        "built_at": str(T0).encode(),
        "synced_at": str(T0).encode(),
        "version": b"old.1",
    }
    payload, reason = source.lookup(key, gzip=True)
    assert reason == SERVED and not payload.found


def test_a_key_read_only_at_readers_stays_in_redis_and_one_nobody_reads_leaves_it(published, redis):
    """The node sees none of the readers' reads: their marks keep what they serve, at one small write
    per key per tenth of the expiry time, not one per read."""
    cache, _, source, clock = published  # 180 s expiry, marks every 18 s
    read, unread = CacheKey(APPS, "", "json"), CacheKey(APP, "ORDERS", "json")
    cache.get(read, clock.now)
    cache.get(unread, clock.now)
    redis.calls.clear()
    for _ in range(200):  # 200 s of syncs every second, and a read of ``read`` at a reader each second
        clock.advance(1000)
        assert source.lookup(read, gzip=True)[1] == SERVED
        cache.sync(clock.now)
    assert "eureka:ro:apps:json:0:" in redis.data, "read at a reader all along: kept"
    assert "eureka:ro:app:json:0:ORDERS" not in redis.data, "unread for 180 s: gone from Redis"
    assert cache.read_only.keys() == [read] and cache.counters.keys_expired == 1
    assert set(redis.data["eureka:ro:_read"]) == {"eureka:ro:apps:json:0:"}
    assert 0 < redis.calls.count("zadd") <= 200_000 // 18_000 + 1
    assert source.lookup(unread, gzip=True) == (None, MISSING), "its next read goes to the node"


def test_while_redis_cannot_say_what_readers_read_the_node_keeps_their_keys(published, redis):
    cache, _, _, clock = published
    key = CacheKey(APPS, "", "json")
    cache.get(key, clock.now)
    clock.advance(180_000)
    redis.down = True
    cache.sync(clock.now)
    assert cache.read_only.keys() == [key], "readers may have read it: not dropped on a guess"
    redis.down = False
    clock.advance(RETRY_AFTER_MS)
    cache.sync(clock.now)
    assert cache.read_only.keys() == [] and "eureka:ro:apps:json:0:" not in redis.data


def test_while_redis_fails_reads_go_to_the_node_and_redis_is_left_alone_for_a_while(published, redis):
    cache, _, source, clock = published
    key = CacheKey(APPS, "", "json")
    cache.get(key, clock.now)
    redis.down = True
    assert source.lookup(key, gzip=True) == (None, REDIS_DOWN)
    assert not source.healthy and "Connection refused" in source.health.last_error
    redis.calls.clear()
    clock.advance(RETRY_AFTER_MS - 1)
    assert source.lookup(key, gzip=True) == (None, REDIS_DOWN) and redis.calls == []
    redis.down = False
    clock.advance(1)
    cache.sync(clock.now)
    assert source.lookup(key, gzip=True)[1] == SERVED and source.healthy


# ------------------------------------------------------------------------- forwarding


def test_the_headers_the_protocol_reads_go_to_the_node_and_nothing_else():
    meta = {
        "HTTP_ACCEPT": "application/json",
        "HTTP_ACCEPT_ENCODING": "gzip",
        "HTTP_X_EUREKA_ACCEPT": "compact",
        "HTTP_AUTHORIZATION": "Basic b3JkZXJzOnB3",
        "CONTENT_TYPE": "application/json",
        "HTTP_CONTENT_ENCODING": "gzip",
        "HTTP_X_NETFLIX_DISCOVERY_REPLICATION": "true",
        "HTTP_DISCOVERYIDENTITY_NAME": "DefaultClient",
        "HTTP_DISCOVERYIDENTITY_VERSION": "1.4",
        "HTTP_COOKIE": "sessionid=x",
        "HTTP_HOST": "reader:8780",
        "REMOTE_ADDR": "10.0.0.7",
    }
    assert request_headers(meta) == {
        "Accept": "application/json",
        "Accept-Encoding": "gzip",
        "X-Eureka-Accept": "compact",
        "Authorization": "Basic b3JkZXJzOnB3",
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
        "x-netflix-discovery-replication": "true",
        "DiscoveryIdentity-Name": "DefaultClient",
        "DiscoveryIdentity-Version": "1.4",
        "X-Forwarded-For": "10.0.0.7",
    }


def test_the_clients_certificate_goes_to_the_node_in_the_certificate_header():
    import trustme
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    from registry.access.certificates import ENVIRON_KEY, names_of_header

    pem = trustme.CA().issue_cert("orders.example").cert_chain_pems[0].bytes()
    der = x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)
    verified = request_headers({ENVIRON_KEY: der, "REMOTE_ADDR": "10.0.0.7"})
    assert "orders.example" in names_of_header(verified["X-Forwarded-Client-Cert"])
    # A trusted proxy's header goes on as it came; anyone else's is not passed.
    proxied = {"HTTP_X_FORWARDED_CLIENT_CERT": "Hash=1;DNS=orders.example", "REMOTE_ADDR": "127.0.0.1"}
    assert request_headers(proxied)["X-Forwarded-Client-Cert"] == "Hash=1;DNS=orders.example"
    claimed = {**proxied, "REMOTE_ADDR": "10.0.0.7"}
    assert "X-Forwarded-Client-Cert" not in request_headers(claimed)
    assert "X-Forwarded-Client-Cert" not in request_headers({"REMOTE_ADDR": "10.0.0.7"})


def test_the_nodes_answer_comes_back_as_it_is_with_via():
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Encoding", "gzip"),
        ("Vary", "Accept, Accept-Encoding, X-Eureka-Accept"),
        ("Content-Length", "3"),
        ("Connection", "keep-alive"),
        ("Server", "gunicorn"),
        ("Date", "now"),
    ]
    response = passed_back(200, headers, b"abc")
    assert response.content == b"abc" and response.status_code == 200
    assert dict(response.items()) == {
        "Content-Type": "application/json",
        "Content-Encoding": "gzip",
        "Vary": "Accept, Accept-Encoding, X-Eureka-Accept",
        "Via": VIA,
    }
    bodiless = passed_back(404, [], b"")
    assert dict(bodiless.items()) == {"Via": VIA}, "no Content-Type, as the node's empty answers"


def test_an_unreachable_node_is_a_503_that_says_so(rf):
    from tests.ports import free_port

    forwarder = NodeForwarder(f"http://127.0.0.1:{free_port()}", timeout_ms=2000)
    try:
        response = forwarder.forward(rf.get("/eureka/apps/ORDERS/x"))
    finally:
        forwarder.close()
    assert response.status_code == 503 and response["Content-Type"].startswith("text/plain")
    assert b"registry node at http://127.0.0.1:" in response.content and b"unreachable" in response.content
    assert forwarder.failures == 1 and "ConnectError" in forwarder.last_error


# ------------------------------------------------------------------------- the views


class FakeForwarder:
    shown_url = "http://node:8761"
    forwarded = 0
    failures = 0
    last_error = None

    node_down = False

    def __init__(self):
        self.requests: list[tuple[str, str, bytes]] = []

    def forward(self, request) -> HttpResponse:
        self.requests.append((request.method, request.get_full_path(), request.body))
        response = HttpResponse(b"from the node", status=299)
        response["Via"] = VIA
        return response

    def close(self) -> None:
        pass


class ReaderTestHandler(ProtocolHandler):
    urlconf = "eureka_site.reader_urls"


def call(method: str, path: str, body: bytes = b"", query: str = "", **headers: str):
    environ: dict = {}
    setup_testing_defaults(environ)
    environ.update(
        {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "wsgi.input": io.BytesIO(body),
            "CONTENT_LENGTH": str(len(body)),
            **headers,
        }
    )
    captured = {}

    def start_response(status, response_headers, exc_info=None):
        captured["status"] = int(status.split()[0])
        captured["headers"] = dict(response_headers)

    content = b"".join(ReaderTestHandler()(environ, start_response))
    return captured["status"], captured["headers"], content


@pytest.fixture
def reader(published):
    """A reader on the fake Redis with a recording forwarder; get_node() forbidden meanwhile."""
    cache, builder, source, clock = published
    forwarder = FakeForwarder()
    reset_reader(Reader(source=source, forwarder=forwarder))
    reset_node(None)  # a node an earlier test left in this process
    forbid_node("a reader test")
    try:
        yield cache, source, forwarder, clock
    finally:
        forbid_node(None)
        reset_reader(None)


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/eureka/apps", CacheKey(APPS, "", "json", True)),
        ("/eureka/v2/apps/", CacheKey(APPS, "", "json", True)),
        ("/eureka//apps/delta", CacheKey(DELTA, "", "json", True)),
        ("/eureka/v1/apps/orders", CacheKey(APP, "ORDERS", "json", True)),
        ("/eureka/vips/orders-vip", CacheKey(VIP, "orders-vip", "json", True)),
        ("/eureka/svips/orders-vip/", CacheKey(SVIP, "orders-vip", "json", True)),
    ],
)
def test_each_cached_read_is_served_from_its_key_as_the_node_serves_it(reader, path, key):
    cache, _, forwarder, clock = reader
    node_payload = cache.get(key, clock.now)
    status, headers, content = call(
        "GET",
        path,
        HTTP_ACCEPT="application/json",
        HTTP_ACCEPT_ENCODING="gzip",
        HTTP_X_EUREKA_ACCEPT="compact",
    )
    assert (status, content) == (200, node_payload.gzipped()) and forwarder.requests == []
    assert headers["Content-Type"] == "application/json" and headers["Content-Encoding"] == "gzip"
    assert headers["Vary"] == "Accept, Accept-Encoding, X-Eureka-Accept" and "Via" not in headers
    status, headers, content = call("GET", path)  # XML, plain, full: another key, not published
    assert (status, content) == (299, b"from the node") and forwarder.requests[-1][0] == "GET"


def test_stale_or_missing_payloads_and_everything_else_go_to_the_node(reader):
    cache, _, forwarder, clock = reader
    cache.get(CacheKey(APPS, "", "xml"), clock.now)
    assert call("GET", "/eureka/apps")[0] == 200
    clock.advance(BOUND + 1)
    assert call("GET", "/eureka/apps")[0] == 299, "stale: the node answers"
    call("GET", "/eureka/apps/ORDERS/10.0.0.1:orders:8080")
    call("POST", "/eureka/apps/ORDERS", b'{"instance": {}}', CONTENT_TYPE="application/json")
    call("PUT", "/eureka/apps/ORDERS/i-1", query="status=UP&lastDirtyTimestamp=1")
    call("DELETE", "/eureka/v2/apps/ORDERS/i-1")
    call("PUT", "/eureka/apps")
    call("OPTIONS", "/eureka/apps/delta")
    call("POST", "/eureka/peerreplication/batch/", b"{}")
    call("GET", "/eureka/no/such/route")
    assert forwarder.requests == [
        ("GET", "/eureka/apps", b""),
        ("GET", "/eureka/apps/ORDERS/10.0.0.1:orders:8080", b""),
        ("POST", "/eureka/apps/ORDERS", b'{"instance": {}}'),
        ("PUT", "/eureka/apps/ORDERS/i-1?status=UP&lastDirtyTimestamp=1", b""),
        ("DELETE", "/eureka/v2/apps/ORDERS/i-1", b""),
        ("PUT", "/eureka/apps", b""),
        ("OPTIONS", "/eureka/apps/delta", b""),
        ("POST", "/eureka/peerreplication/batch/", b"{}"),
        ("GET", "/eureka/no/such/route", b""),
    ]


def test_outside_the_protocol_a_reader_has_its_probes_only(reader):
    status, _, content = call("GET", "/")
    assert status == 404 and b"Not found on a reader" in content
    assert call("GET", "/admin/")[0] == 404 and call("GET", "/metrics")[0] == 404
    status, _, content = call("GET", "/healthz")
    assert status == 200 and json.loads(content) == {"status": "ok", "role": "reader"}


def test_readyz_says_whether_redis_answers_and_how_old_the_last_sync_is(reader, redis):
    cache, _, _, clock = reader
    status, _, content = call("GET", "/readyz")
    body = json.loads(content)
    assert status == 200 and body["status"] == "degraded", "nothing synced yet: reads go to the node"
    assert body["lease_map"] is False and body["role"] == "reader" and body["pid"] == os.getpid()
    cache.get(CacheKey(APPS, "", "json"), clock.now)
    cache.sync(clock.now)
    clock.advance(500)
    body = json.loads(call("GET", "/readyz")[2])
    assert body["status"] == "ok" and body["redis"]["last_sync_ms_ago"] == 500
    redis.down = True
    status, _, content = call("GET", "/readyz")
    assert status == 503 and json.loads(content)["status"] == "unavailable"


def test_the_views_never_reach_for_a_node(reader):
    with pytest.raises(RuntimeError, match="holds no registry node"):
        get_node()
    # Every route above ran with get_node() forbidden; a view that called it would have answered 500.
    for method, path in [("GET", "/eureka/apps"), ("GET", "/eureka/apps/delta"), ("POST", "/eureka/apps/X")]:
        assert call(method, path)[0] != 500


def test_a_node_outage_is_logged_once_not_per_request(published, caplog):
    from tests.ports import free_port

    _, _, source, _ = published
    forwarder = NodeForwarder(f"http://127.0.0.1:{free_port()}", timeout_ms=2000)
    reset_reader(Reader(source=source, forwarder=forwarder))
    try:
        with caplog.at_level("INFO"):
            for _ in range(3):
                assert call("GET", "/eureka/apps/ORDERS/i-1")[0] == 503
    finally:
        reset_reader(None)
    lines = [(r.name, r.levelname) for r in caplog.records]
    assert lines == [("registry.reader.forwarding", "ERROR")], "one line for the outage, none per request"


# ------------------------------------------------------------------------- API accounts


@pytest.fixture
def auth_on():
    accounts.reset_credential_cache(CredentialCache(FakeClock(0), recheck_ms=5_000, refused_ms=2_000))
    hashers = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    with override_settings(
        EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=hashers
    ):
        yield
    accounts.reset_credential_cache(None)


def basic(name: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()


@pytest.mark.django_db
def test_with_api_accounts_on_the_reader_checks_reads_itself_and_leaves_writes_to_the_node(reader, auth_on):
    cache, _, forwarder, clock = reader
    user = get_user_model().objects.create_user("grafana", password="pw")
    user.groups.add(Group.objects.get(name="eureka-reader"))
    cache.get(CacheKey(APPS, "", "xml"), clock.now)
    status, headers, _ = call("GET", "/eureka/apps")
    assert status == 401 and headers["WWW-Authenticate"].startswith('Basic realm="eureka"')
    assert call("GET", "/eureka/apps", HTTP_AUTHORIZATION=basic("grafana", "wrong"))[0] == 401
    status, _, content = call("GET", "/eureka/apps", HTTP_AUTHORIZATION=basic("grafana", "pw"))
    assert (status, content) == (200, cache.get(CacheKey(APPS, "", "xml"), clock.now).body)
    assert forwarder.requests == []
    # A write is the node's to judge: forwarded with the client's credentials, whatever they are.
    call("POST", "/eureka/apps/ORDERS", b"{}", HTTP_AUTHORIZATION=basic("grafana", "pw"))
    assert forwarder.requests == [("POST", "/eureka/apps/ORDERS", b"{}")]


# ------------------------------------------------------------------------- start-up


def test_a_reader_needs_redis_and_a_node_url_without_credentials(settings):
    settings.EUREKA = settings.EUREKA.with_changes(redis__url="")
    with pytest.raises(Exception, match="set REDIS_URL"):
        check_settings(settings)
    settings.EUREKA = settings.EUREKA.with_changes(
        redis__url="redis://127.0.0.1:6379/0", reader__node_url="http://user:secret@registry:8761"
    )
    with pytest.raises(Exception, match="without credentials"):
        check_settings(settings)
    settings.EUREKA = settings.EUREKA.with_changes(reader__node_url="http://registry:8761")
    check_settings(settings)


def _reader_process(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("EUREKA_", "REDIS_URL"))
    }
    environment.update(
        {
            "EUREKA_EMBEDDED": "false",
            "SECRET_KEY": "x",
            "EUREKA_CONTROL_SECRET": "x",
            "LOG_LEVEL": "ERROR",
            **env,
        }
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


def test_the_reader_entry_point_forbids_building_a_node_and_refuses_to_start_without_redis():
    code = (
        "import eureka_site.reader_wsgi\n"
        "from registry.runtime import process\n"
        "try:\n    process.get_node()\nexcept RuntimeError as exc:\n    print('refused:', exc)\n"
        "print('holds node:', process.holds_node())\n"
    )
    started = _reader_process(code, REDIS_URL="redis://127.0.0.1:1/0")
    assert started.returncode == 0, started.stderr
    assert "refused: this process holds no registry node" in started.stdout
    assert "holds node: False" in started.stdout
    refused = _reader_process("import eureka_site.reader_wsgi")
    assert refused.returncode != 0 and "set REDIS_URL" in refused.stderr


def test_reader_workers_default_to_two_and_follow_web_concurrency(monkeypatch):
    conf = ROOT / "deploy" / "gunicorn_reader.conf.py"
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    assert runpy.run_path(str(conf))["workers"] == 2
    monkeypatch.setenv("WEB_CONCURRENCY", "5")
    values = runpy.run_path(str(conf))
    assert values["workers"] == 5 and values["wsgi_app"] == "eureka_site.reader_wsgi:application"


def test_payloads_in_redis_are_the_nodes_payload_objects_bytes(published, redis):
    """The tier stores exactly the bytes and gzip copy the node serves (no re-encoding anywhere)."""
    cache, _, _, clock = published
    payload: Payload = cache.get(CacheKey(APPS, "", "json"), clock.now)
    stored = redis.data["eureka:ro:apps:json:0:"]
    assert stored["body"] == payload.body and stored["gzip"] == payload.gzipped()


def test_a_read_with_regions_is_served_from_the_key_the_node_builds_for_it(reader, settings):
    """The reader picks the node's key for regions (registry/cluster/regions.py): the configured ones
    asked for, or all of them by transparent fallback; never the local registry's key for a read
    that asked for a region, and the node answers a read that named none it knows (it may be a 403)."""
    cache, _, forwarder, clock = reader
    settings.EUREKA = settings.EUREKA.with_changes(remote_regions__urls={"us-west": "http://w1:8761/eureka/"})
    cache.get(CacheKey(APPS, "", "json"), clock.now)
    json_accept = {"HTTP_ACCEPT": "application/json"}
    assert call("GET", "/eureka/apps", query="regions=us-west", **json_accept)[0] == 299
    cache.get(CacheKey(APPS, "", "json", False, ("us-west",)), clock.now)
    assert call("GET", "/eureka/apps", query="regions=US-WEST", **json_accept)[0] == 200
    assert call("GET", "/eureka/apps", **json_accept)[0] == 200  # transparent fallback: every region
    assert call("GET", "/eureka/apps", query="regions=nowhere", **json_accept)[0] == 299
    server = {"HTTP_DISCOVERYIDENTITY_NAME": "DefaultServer", **json_accept}
    assert call("GET", "/eureka/apps", **server)[0] == 200  # the local key, published above
    assert [path for _, path, _ in forwarder.requests] == [
        "/eureka/apps?regions=us-west",
        "/eureka/apps?regions=nowhere",
    ]
