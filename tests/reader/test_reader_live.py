"""A live reader beside a live node (production mode): the same bytes as the node, writes and misses
forwarded to it, and no lease map in the reader's processes."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from redis import Redis

from tests.factories import instance_body
from tests.integration.conftest import ROOT, _answers, stop
from tests.interop.conftest import require_toolchain, wait_until
from tests.ports import free_port
from tests.reader.conftest import JSON, ReaderStack

pytestmark = pytest.mark.integration

VIA = "1.1 eureka-reader"
# Leases that outlive the module: nothing is evicted while answers are compared.
LONG_LEASE = {"renewalIntervalInSecs": 30, "durationInSecs": 3600}
INSTANCES = [
    # (app, host, vip, secure vip)
    ("ALPHA", "10.9.0.1", "alpha-vip,shared-vip", "alpha-secure"),
    ("ALPHA", "10.9.0.2", "alpha-vip,shared-vip", "alpha-secure"),
    ("BETA", "10.9.0.3", "shared-vip", "beta-secure"),
]
PATHS = [
    "/eureka/apps",
    "/eureka/apps/delta",
    "/eureka/apps/ALPHA",
    "/eureka/apps/alpha",  # the node upper-cases the app name; so does the reader
    "/eureka/apps/NO-SUCH-APP",  # a miss: 404, empty body
    "/eureka/vips/shared-vip",
    "/eureka/svips/alpha-secure",
    "/eureka/vips/no-such-vip",  # a miss too: 200 with an empty list
    "/eureka/v2/apps/",
]
# Names nobody registered are never published (any name can be asked for): the node answers them.
MISSES = {"/eureka/apps/NO-SUCH-APP", "/eureka/vips/no-such-vip"}
# JSON / XML x gzip / plain x full / compact.
VARIANTS = [
    {
        **({"Accept": "application/json"} if fmt == "json" else {}),
        **({"Accept-Encoding": "gzip"} if gz else {"Accept-Encoding": "identity"}),
        **({"X-Eureka-Accept": "compact"} if compact else {}),
    }
    for fmt, gz, compact in itertools.product(("json", "xml"), (True, False), (False, True))
]


def register(base: str, app: str, host: str, vip: str, svip: str) -> httpx.Response:
    body = instance_body(app=app, host=host, vip=vip, leaseInfo=LONG_LEASE)
    body["instance"]["secureVipAddress"] = svip
    return httpx.post(f"{base}/eureka/apps/{app}", json=body, timeout=10)


@dataclass
class Raw:
    status_code: int
    headers: httpx.Headers
    content: bytes


def answer(response: Raw) -> tuple:
    """What a client sees of an answer (the raw body: never decompressed)."""
    return (
        response.status_code,
        response.headers.get("Content-Type"),
        response.headers.get("Content-Encoding"),
        response.headers.get("Vary"),
        response.content,
    )


def get_raw(client: httpx.Client, url: str, headers: dict[str, str]) -> Raw:
    """GET with exactly these headers (no httpx defaults), the body as it came over the wire."""
    request = client.build_request("GET", url, headers=headers)
    for name in ("Accept", "Accept-Encoding"):
        if name not in headers:
            del request.headers[name]
    response = client.send(request, stream=True)
    try:
        return Raw(response.status_code, response.headers, b"".join(response.iter_raw()))
    finally:
        response.close()


def served_by_reader(client: httpx.Client, stack: ReaderStack, path: str, headers: dict[str, str]) -> Raw:
    """The reader's own answer (no Via): the node's answer publishes the key first. A miss is the
    node's answer, forwarded by the reader."""
    get_raw(client, stack.url + path, headers)
    if path in MISSES:
        forwarded = get_raw(client, stack.reader_url + path, headers)
        assert forwarded.headers.get("Via") == VIA, f"{path} was served from Redis: a miss was published"
        return forwarded

    def served_from_redis() -> Raw | None:
        response = get_raw(client, stack.reader_url + path, headers)
        return response if response.headers.get("Via") is None else None

    return wait_until(served_from_redis, 10, f"the reader never served {path} {headers} from Redis")


def node_operation_count(stack: ReaderStack, operation: str) -> float:
    metrics = httpx.get(f"{stack.url}/metrics", timeout=5).text
    found = re.search(
        rf'^eureka_request_duration_seconds_count\{{operation="{operation}"\}} (\S+)$', metrics, re.M
    )
    return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def registered(stack: ReaderStack) -> ReaderStack:
    for app, host, vip, svip in INSTANCES:
        assert register(stack.url, app, host, vip, svip).status_code == 204
    wait_until(
        lambda: (
            httpx.get(f"{stack.url}/eureka/apps", headers=JSON, timeout=5).text.count('"instanceId"') == 3
        ),
        10,
        "the node never listed the three registrations",
    )
    return stack


@pytest.mark.parametrize("path", PATHS)
def test_the_reader_answers_byte_for_byte_as_the_node(registered, path):
    stack = registered
    mismatches = []
    with httpx.Client(timeout=10) as client:
        for headers in VARIANTS:
            served = served_by_reader(client, stack, path, headers)
            node = get_raw(client, stack.url + path, headers)
            if answer(served) != answer(node):
                mismatches.append((headers, answer(served)[:4], answer(node)[:4], len(served.content)))
            elif headers.get("Accept-Encoding") == "gzip" and served.status_code == 200:
                assert served.headers["Content-Encoding"] == "gzip"
                gzip.decompress(served.content)  # a valid gzip stream
    assert mismatches == []


def test_the_answers_compared_hold_the_registry(registered):
    """The comparison above is not between two empty answers."""
    with httpx.Client(timeout=10) as client:
        apps = served_by_reader(client, registered, "/eureka/apps", {"Accept": "application/json"})
        vip = served_by_reader(client, registered, "/eureka/vips/shared-vip", {})
        missing = served_by_reader(client, registered, "/eureka/apps/NO-SUCH-APP", {})
    assert apps.content.count(b'"instanceId"') == 3
    assert vip.content.count(b"<instanceId>") == 3
    assert (missing.status_code, missing.content, missing.headers.get("Content-Type")) == (404, b"", None)


def test_a_key_the_node_never_published_is_answered_by_the_node_then_served(registered):
    stack = registered
    assert register(stack.url, "GAMMA", "10.9.0.9", "gamma", "gamma").status_code == 204
    path, headers = "/eureka/apps/GAMMA", {"Accept": "application/json", "Accept-Encoding": "gzip"}
    key = "eureka:ro:app:json:0:GAMMA"
    assert not Redis.from_url(stack.redis_url).exists(key), "nobody has read GAMMA yet"
    asked_before = node_operation_count(stack, "app")
    with httpx.Client(timeout=10) as client:
        first = get_raw(client, stack.reader_url + path, headers)
        assert first.headers.get("Via") == VIA, "a miss is forwarded to the node"
        assert node_operation_count(stack, "app") == asked_before + 1
        assert first.status_code == 200 and b"10.9.0.9:gamma:8080" in gzip.decompress(first.content)
        # The node published it while answering: the next one is the reader's own, and the same.
        assert Redis.from_url(stack.redis_url).exists(key)
        second = get_raw(client, stack.reader_url + path, headers)
        assert second.headers.get("Via") is None
        assert node_operation_count(stack, "app") == asked_before + 1
        assert answer(second) == answer(first)
        assert answer(second) == answer(get_raw(client, stack.url + path, headers))


def test_writes_sent_to_the_reader_are_applied_by_the_node(registered):
    stack = registered
    reader, node = f"{stack.reader_url}/eureka", f"{stack.url}/eureka"
    # Register (JSON with a Content-Length), as Spring clients do.
    assert register(stack.reader_url, "DELTA-APP", "10.9.1.1", "d", "d").status_code == 204
    live = httpx.get(f"{node}/apps/DELTA-APP/10.9.1.1:delta-app:8080", headers=JSON, timeout=5)
    assert live.status_code == 200 and live.json()["instance"]["status"] == "UP"

    # Register chunked (Jersey 1 clients) and gzipped: the reader passes body and encoding on.
    body = json.dumps(instance_body(app="DELTA-APP", host="10.9.1.2", leaseInfo=LONG_LEASE)).encode()
    chunked = httpx.post(
        f"{reader}/v2/apps/DELTA-APP",
        content=iter([body[:50], body[50:]]),
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert chunked.status_code == 204 and chunked.headers["Via"] == VIA
    zipped = gzip.compress(
        json.dumps(instance_body(app="DELTA-APP", host="10.9.1.3", leaseInfo=LONG_LEASE)).encode()
    )
    sent = httpx.post(
        f"{reader}/apps/DELTA-APP",
        content=zipped,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        timeout=10,
    )
    assert sent.status_code == 204
    for host in ("10.9.1.2", "10.9.1.3"):
        assert httpx.get(f"{node}/apps/DELTA-APP/{host}:delta-app:8080", timeout=5).status_code == 200

    # Heartbeat, override, metadata, cancel: the node's answers, as the node gives them.
    instance = "apps/DELTA-APP/10.9.1.1:delta-app:8080"
    renewed = httpx.put(f"{reader}/{instance}?status=UP", timeout=5)
    assert (renewed.status_code, renewed.content, renewed.headers.get("Content-Type")) == (200, b"", None)
    assert httpx.put(f"{reader}/apps/DELTA-APP/nobody", timeout=5).status_code == 404
    assert httpx.put(f"{reader}/{instance}/status?value=OUT_OF_SERVICE", timeout=5).status_code == 200
    assert httpx.put(f"{reader}/{instance}/metadata?zone=z1", timeout=5).status_code == 200
    record = httpx.get(f"{node}/{instance}", headers=JSON, timeout=5).json()["instance"]
    assert (record["status"], record["metadata"]["zone"]) == ("OUT_OF_SERVICE", "z1")
    # A live lookup through the reader is the node's too (the reader serves no instance route).
    through = httpx.get(f"{reader}/{instance}", headers=JSON, timeout=5)
    assert through.headers["Via"] == VIA and through.json()["instance"]["status"] == "OUT_OF_SERVICE"
    assert httpx.delete(f"{reader}/{instance}", timeout=5).status_code == 200
    assert httpx.get(f"{node}/{instance}", timeout=5).status_code == 404

    # The node's refusals come back word for word.
    bad = httpx.post(
        f"{reader}/apps/DELTA-APP", content=b"{not json", headers=JSON | {"Content-Type": "application/json"}
    )
    direct = httpx.post(
        f"{node}/apps/DELTA-APP", content=b"{not json", headers=JSON | {"Content-Type": "application/json"}
    )
    assert (bad.status_code, bad.content) == (direct.status_code, direct.content) and bad.status_code == 400
    # A peer's replication batch, too.
    batch = httpx.post(f"{reader}/peerreplication/batch/", json={"replicationList": []}, timeout=5)
    assert batch.status_code == 200 and batch.json() == {"responseList": []}


def run_nginx(tmp: Path, site: str, port: int, prefix: str) -> subprocess.Popen:
    """nginx in the foreground with ``site`` (a server block and its upstreams) as its http context."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    require_toolchain("nginx", os.path.exists(nginx), "install it with `sudo apt-get install nginx`")
    (tmp / "site.conf").write_text(site)
    temp = " ".join(
        f"{kind}_temp_path {tmp / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (tmp / "nginx.conf").write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"daemon off;\npid {tmp / 'nginx.pid'};\nerror_log {tmp / 'error.log'};\nevents {{}}\n"
        + f"http {{\n  access_log {tmp / 'access.log'};\n  {temp}\n  include {tmp / 'site.conf'};\n}}\n"
    )
    checked = subprocess.run(
        [nginx, "-t", "-c", str(tmp / "nginx.conf"), "-p", str(tmp)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    process = subprocess.Popen(
        [nginx, "-c", str(tmp / "nginx.conf"), "-p", str(tmp)], stderr=subprocess.DEVNULL
    )
    error_log = tmp / "error.log"
    try:
        wait_until(
            lambda: _answers(f"http://127.0.0.1:{port}{prefix}/healthz"),
            15,
            lambda: f"nginx did not start: {error_log.read_text() if error_log.exists() else ''}",
        )
    except BaseException:
        stop(process)
        raise
    return process


@pytest.mark.parametrize(
    ("conf", "prefix"),
    [("nginx-compose.conf", ""), ("nginx.conf.example", "/registry")],
)
def test_nginx_sends_the_reads_to_the_readers_and_the_rest_to_the_node(registered, tmp_path, conf, prefix):
    """deploy/'s nginx configurations as shipped, with the upstreams' addresses on loopback."""
    stack = registered
    port = free_port()
    site = (ROOT / "deploy" / conf).read_text()
    for old, new in {
        "registry:8761": f"127.0.0.1:{stack.port}",
        "reader:8780": f"127.0.0.1:{stack.reader_port}",
        "127.0.0.1:8761": f"127.0.0.1:{stack.port}",
        "127.0.0.1:8780": f"127.0.0.1:{stack.reader_port}",
        "listen 80;": f"listen 127.0.0.1:{port};",
    }.items():
        site = site.replace(old, new)
    nginx = run_nginx(tmp_path, site, port, prefix)
    base = f"http://127.0.0.1:{port}{prefix}/eureka"
    try:
        with httpx.Client(timeout=10) as client:
            reads = {
                "apps": ("/apps", {"Accept": "application/json", "Accept-Encoding": "gzip"}),
                "delta": ("/v2/apps/delta/", {"Accept": "application/json"}),
                "app": ("/apps/ALPHA", {"Accept-Encoding": "gzip"}),
                "vip": ("/vips/shared-vip", {"Accept": "application/json", "X-Eureka-Accept": "compact"}),
                "svip": ("/svips/alpha-secure", {}),
            }
            for operation, (path, headers) in reads.items():
                served_by_reader(client, stack, "/eureka" + path, headers)  # published and fresh
                asked_the_node = []

                def same_through_nginx_as_at_the_node(
                    path=path, headers=headers, operation=operation, asked_the_node=asked_the_node
                ):
                    # An earlier test's last change may reach the tier a sync interval after the node:
                    # the answers agree once it has (the staleness bound is the contract, not zero).
                    # None of the requests through nginx may reach the node.
                    before = node_operation_count(stack, operation)
                    through = [get_raw(client, base + path, headers) for _ in range(3)]
                    asked_the_node.append(node_operation_count(stack, operation) - before)
                    direct = get_raw(client, stack.url + "/eureka" + path, headers)
                    return [answer(r) for r in through] == [answer(direct)] * 3

                wait_until(same_through_nginx_as_at_the_node, 5, f"{path}: through nginx != at the node")
                assert set(asked_the_node) == {0}, f"{path} reached the node"
            # Writes and instance lookups go to the node itself: no reader on the way (no Via).
            body = instance_body(app="PROXIED", host="10.9.2.1", leaseInfo=LONG_LEASE)
            registered_here = client.post(f"{base}/apps/PROXIED", json=body)
            assert registered_here.status_code == 204 and "Via" not in registered_here.headers
            instance = f"{base}/apps/PROXIED/10.9.2.1:proxied:8080"
            assert client.put(f"{instance}?status=UP").headers.get("Via") is None
            looked_up = client.get(instance, headers=JSON)
            assert looked_up.status_code == 200 and "Via" not in looked_up.headers
            assert client.delete(instance).status_code == 200
    finally:
        stop(nginx)


def test_the_readers_processes_hold_no_lease_map(registered):
    """After every route above (served, forwarded, missed), in each worker: no node was built (the
    probe reads registry.runtime.process in that process), and none could be (get_node() is forbidden
    there: any code path reaching it would have answered 500)."""
    stack = registered
    seen: dict[int, dict] = {}
    with httpx.Client(timeout=5) as client:
        for _ in range(10):  # on new connections, so that both workers serve and forward
            headers = {"Connection": "close", "Accept": "application/json"}
            assert (
                client.get(
                    f"{stack.reader_url}/eureka/apps/ALPHA/10.9.0.1:alpha:8080", headers=headers
                ).status_code
                == 200
            )
            assert client.get(f"{stack.reader_url}/eureka/apps", headers=headers).status_code == 200
        for _ in range(200):
            body = client.get(f"{stack.reader_url}/readyz", headers={"Connection": "close"}).json()
            seen[body["pid"]] = body
            if len(seen) == stack.workers:
                break
    assert len(seen) == stack.workers, f"only saw workers {sorted(seen)}"
    assert {pid: body["lease_map"] for pid, body in seen.items()} == dict.fromkeys(seen, False)
    assert sum(body["reads"]["served"] for body in seen.values()) > 0
    assert sum(body["node"]["forwarded"] for body in seen.values()) > 0
    assert all(body["redis"]["healthy"] for body in seen.values())
    wait_until(lambda: stack.reader_ready()["status"] == "ok", 10, "the reader's /readyz never said ok")
    # A node built in the reader would have emptied the node's tier (a new node clears it at start).
    assert Redis.from_url(stack.redis_url).exists("eureka:ro:apps:json:0:")
    assert "Traceback" not in stack.log("reader")
