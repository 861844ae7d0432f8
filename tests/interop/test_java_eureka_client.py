"""The real Netflix eureka-client (Java, Maven Central), in both of its generations, against a live node.

Each test runs once per client generation (the ``java_classpath`` fixture is parametrized):

* ``eureka-client-2.0``: 2.0.x with the Jersey 3 transport (``tests/interop/java``). eureka-client 2.x
  ships no HTTP transport of its own: like Netflix's eureka-examples, the program uses
  ``eureka-client-jersey3`` (``Jersey3TransportClientFactories``), whose heartbeat is a PUT with a
  ``{}`` JSON body and which decodes *any* non-empty heartbeat answer as an InstanceInfo, whatever the
  status.
* ``eureka-client-1.10``: 1.10.x with its default transport (``tests/interop/java1``), Jersey 1 over
  Apache HttpClient 4: ``Jersey1TransportClientFactories``, which ``DiscoveryClient`` builds when given
  no transport (the program hands it that very class, only to record calls). Its registration is a POST
  whose JSON body goes out ``Transfer-Encoding: chunked`` with no ``Content-Length``; its heartbeat a PUT
  with no body (``Content-Length: 0``).

Both Maven projects compile the same small CLI, ``interop.EurekaInterop`` (``tests/interop/java-shared``,
their parent POM), around the unmodified client; each supplies only ``interop.ClientTransport``, which
builds the ``DiscoveryClient`` as its generation does. The CLI runs a ``service`` (registers,
heartbeats, fetches, cancels on shutdown) or a fetch-only ``consumer``, with one-second heartbeats,
registry fetches and instance-info replication (``eureka-client.properties``). It prints JSON lines:
``http`` for every call its transport makes (the status it got and whether it decoded a body; from a
pass-through decorator under Netflix's retry/redirect/session decorators), ``cacheRefreshed`` after every
registry fetch with the client's own reconcile hashcode (``getApplications().getReconcileHashCode()``),
``statusChange`` when its own status in the fetched registry changes, and the replies to ``state`` /
``metadata`` / ``shutdown`` commands read from stdin. The 1.x program also prints ``wire`` for every
request as its Apache connection wrote it (request line and every header, framing included) with the
status line it read. The client's log lines (slf4j-simple) come interleaved as plain text.

Who speaks through which prefix, so the access log tells them apart: services use ``/eureka/``,
consumers ``/eureka/v2/`` (Netflix's default), and the test's own ``RegistryAdmin`` ``/eureka/``; so
the test never reads through ``/eureka/v2/`` and every ``GET /eureka/v2/apps/`` is a consumer's full fetch.

With API accounts on (``auth_live_server``) the service URL argument carries the credentials
(``http://user:password@host:port/eureka/``, set as ``eureka.serviceUrl.default``), and both transports
send them with every request, unasked: Jersey 1 hands the URL to Apache HttpClient 4, whose request
director takes its user info as Basic credentials; eureka-client-jersey3 registers
``HttpAuthenticationFeature.basic(user, password)`` (preemptive) from it. On that node only services run,
on ``/eureka/``, so the test reads through ``/eureka/v2/`` there.

Each Maven build runs once per session through ``tests/interop/maven.py`` (``mvn -o compile`` when the
local repository already holds everything, online otherwise) and is skipped entirely while its
``target/build.stamp`` matches the sources (its own and the shared ones).
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest

from tests.interop import maven
from tests.interop.conftest import (
    DELTA_RETENTION_MS,
    DriverProcess,
    LiveServer,
    RegistryAdmin,
    assert_challenge,
    assert_refused,
    client_factory,
    wait_until,
)

pytestmark = pytest.mark.interop

# The test's own requests (``admin``) go through /eureka/ beside the services, never through the
# consumers' /eureka/v2/; on the node with API accounts only services run, so it reads through /eureka/v2/.
ADMIN_PREFIX = "eureka/"
AUTH_ADMIN_PREFIX = "eureka/v2/"

INTEROP_DIR = Path(__file__).resolve().parent
SHARED_DIR = INTEROP_DIR / "java-shared"
MAIN_CLASS = "interop.EurekaInterop"
# Quick JVM start for short-lived clients on a small, shared machine.
JVM_OPTIONS = maven.jvm_options("128m")

SERVICE_PREFIX = "/eureka/"
CONSUMER_PREFIX = "/eureka/v2/"
CONSUMER_FULL_FETCH = f"{CONSUMER_PREFIX}apps/"
CONSUMER_DELTA = f"{CONSUMER_PREFIX}apps/delta"


@dataclass(frozen=True, eq=False)
class Generation:
    """A line of the Netflix eureka-client, the Maven project that drives it and how it speaks."""

    id: str
    version: str
    project: Path
    # interop.ClientTransport.NAME, reported in the program's "ready" line.
    transport: str
    # Jars the run classpath must hold (the pinned client and its transport), and jar-name prefixes
    # it must not (the other generation's transport).
    jars: tuple[str, ...]
    foreign_jars: tuple[str, ...]
    # The heartbeat exactly as the transport sends it (body and the headers that matter).
    heartbeat_body: bytes
    heartbeat_headers: dict[str, str]
    # Whether the program reports "wire" events (what its HTTP connection wrote and read).
    records_wire: bool = False

    @property
    def target(self) -> Path:
        return self.project / "target"

    def pom(self) -> str:
        return (self.project / "pom.xml").read_text()


EUREKA_2 = Generation(
    id="eureka-client-2.0",
    version="2.0.6",
    project=INTEROP_DIR / "java",
    transport="jersey3",
    jars=("eureka-client-2.0.6.jar", "eureka-client-jersey3-2.0.6.jar"),
    foreign_jars=("jersey-client-1.", "jersey-core-1.", "jersey-apache-client4-"),
    # AbstractJersey3EurekaHttpClient.sendHeartBeat: "Jersey3 refuses to handle PUT with no body".
    heartbeat_body=b"{}",
    heartbeat_headers={
        "Content-Type": "application/json",
        "Accept": "application/json",
        "Accept-Encoding": "gzip",
    },
)
EUREKA_1 = Generation(
    id="eureka-client-1.10",
    version="1.10.18",
    project=INTEROP_DIR / "java1",
    transport="jersey1",
    jars=("eureka-client-1.10.18.jar", "jersey-client-1.19.1.jar", "jersey-apache-client4-1.19.1.jar"),
    foreign_jars=("eureka-client-jersey3-", "jersey-client-3.", "jersey-common-3."),
    # AbstractJerseyEurekaHttpClient.sendHeartBeat: put() with no entity, hence Content-Length: 0;
    # GZIPContentEncodingFilter adds Accept-Encoding, and nothing sets Content-Type or Accept.
    heartbeat_body=b"",
    heartbeat_headers={"Accept-Encoding": "gzip"},
    records_wire=True,
)
GENERATIONS = (EUREKA_2, EUREKA_1)


@dataclass(frozen=True)
class JavaBuild:
    """A built client program: the java binary, its run classpath and the generation it drives."""

    java: str
    classpath: str
    generation: Generation


# --- build ---------------------------------------------------------------------------------------


def _classpath(generation: Generation) -> str | None:
    """The built run classpath, or None when the build output is missing or incomplete."""
    target = generation.target
    classpath_file = target / "classpath.txt"
    if not classpath_file.is_file() or not (target / "classes" / "interop" / "EurekaInterop.class").is_file():
        return None
    jars = [j for j in classpath_file.read_text().strip().split(":") if j]
    if not jars or not all(Path(j).is_file() for j in jars):
        return None
    return ":".join([str(target / "classes"), *jars])


def _build(generation: Generation) -> JavaBuild:
    """Build one generation's client program (or reuse an up-to-date build): its own project and the
    shared sources (``maven.build``)."""
    java = maven.require_java()
    maven.build(
        generation.project,
        "compile",
        [*maven.project_sources(generation.project), *maven.project_sources(SHARED_DIR)],
        product=generation.target / "classpath.txt",
        needs=f"com.netflix.eureka:eureka-client:{generation.version} and its dependencies",
        complete=lambda: _classpath(generation) is not None,
    )
    classpath = _classpath(generation)
    assert classpath is not None
    return JavaBuild(java, classpath, generation)


@pytest.fixture(scope="session", params=GENERATIONS, ids=[g.id for g in GENERATIONS])
def java_classpath(request) -> JavaBuild:
    """The client program of each generation in turn: every test that uses ``java_client`` runs
    against each of them."""
    return _build(request.param)


@pytest.fixture(scope="session")
def jersey1_classpath() -> JavaBuild:
    """The 1.x client program alone, for what only its transport shows (``jersey1_client``)."""
    return _build(EUREKA_1)


# --- the Java client process -------------------------------------------------------------------


class JavaClient(DriverProcess):
    """One JVM running interop.EurekaInterop (``DriverProcess``)."""

    def __init__(
        self,
        build: JavaBuild,
        server: LiveServer,
        role: str,
        app: str,
        port: int,
        vip: str | None = None,
        credentials: str | None = None,
        system_properties: dict[str, str] | None = None,
    ):
        self.generation = build.generation
        self.server = server
        self.ready: dict = {}
        self.role = role
        self.app = app.upper()
        self.port = port
        self.vip = vip or f"{app.lower()}.vip"
        # The instance id the program configures (eureka.instanceId), Spring's host:app:port shape.
        self.instance_id = f"127.0.0.1:{app.lower()}:{port}"
        prefix = SERVICE_PREFIX if role == "service" else CONSUMER_PREFIX
        # With ``credentials`` (an API account's role), the account's user and password in the URL.
        self.service_url = server.service_url(credentials, prefix)
        self.register_path = f"{prefix}apps/{self.app}"
        self.path = f"{prefix}apps/{self.app}/{self.instance_id}"
        command = [
            build.java,
            *JVM_OPTIONS,
            # Client settings beyond eureka-client.properties (the program keeps system properties).
            *(f"-D{key}={value}" for key, value in (system_properties or {}).items()),
            "-cp",
            build.classpath,
            MAIN_CLASS,
            role,
            self.service_url,
            app,
            str(port),
            self.vip,
        ]
        super().__init__(command, build.generation.project, f"the Java {role} {app}", close_timeout=15)

    def http(self, op: str, since: int = 0, **fields) -> list[dict]:
        """The client's ``op`` calls (Register, SendHeartBeat, Cancel, GetApplications, GetDelta...)."""
        return self.named("http", since, op=op, **fields)

    def wire(self, method: str | None = None, path: str | None = None, since: int = 0) -> list[dict]:
        """The requests the client's HTTP connection wrote (``wire`` events, 1.x program only).

        Each comes with the status it got and its headers under lower-case names; ``path`` is
        percent-decoded, as in the access log.
        """
        found = []
        for event in self.named("wire", since):
            record = {
                **event,
                "path": unquote(event["path"]),
                "headers": {name.lower(): value for name, value in event["headers"].items()},
            }
            if (method is None or record["method"] == method) and (path is None or record["path"] == path):
                found.append(record)
        return found

    def wait_ready(self) -> None:
        """Wait for the ``ready`` line: its DiscoveryClient is built (a service's instance set UP)."""
        self.ready = self.wait_for("ready", timeout=60)[0]

    def wait_for_http(
        self, op: str, since: int = 0, at_least: int = 1, timeout: float = 10.0, **fields
    ) -> list:
        return self.wait_for("http", since=since, at_least=at_least, timeout=timeout, op=op, **fields)

    def state(
        self,
        apps: tuple[str, ...] = (),
        vips: tuple[str, ...] = (),
        picks: int = 0,
        region: str | None = None,
    ) -> dict:
        """The client's registry as an application sees it: ``{"hash", "apps", "vips", "picks", ...}``.

        ``vips`` come from ``getInstancesByVipAddress(vip, false)``, ``picks`` from ``picks`` calls of
        ``getNextServerFromEureka(vip, false)`` (None when it throws: no instance to choose). With
        ``region``, also that remote region's registry as the client keeps it: ``regionApps`` (app → ids,
        from ``getApplicationsForARegion``) and ``regionVips`` (``getInstancesByVipAddress(vip, false,
        region)``).
        """
        since = self.mark()
        command = {"cmd": "state", "apps": list(apps), "vips": list(vips), "picks": picks}
        if region is not None:
            command["region"] = region
        request_id = self.send(command)
        return self.wait_for("state", since=since, timeout=5, id=request_id)[0]

    def ids_by_app(self, app: str) -> dict[str, dict]:
        return {i["instanceId"]: i for i in self.state(apps=(app,))["apps"][app]}

    def register_metadata(self, entries: dict[str, str]) -> None:
        since = self.mark()
        request_id = self.send({"cmd": "metadata", "entries": entries})
        self.wait_for("done", since=since, timeout=5, id=request_id)

    def shutdown(self) -> None:
        since = self.mark()
        request_id = self.send({"cmd": "shutdown"})
        self.wait_for("stopped", since=since, timeout=15, id=request_id)
        self.process.wait(timeout=10)

    def client_problems(self, since: int = 0) -> list[str]:
        """Warnings and errors the eureka-client logged (its transport failures, decode errors...), the
        JVM's refusals of reflective access (XStream and friends on Java 17) and the program's own errors."""
        logged = [
            e["line"]
            for e in self.named("output", since)
            if (("[WARN]" in e["line"] or "[ERROR]" in e["line"]) and "com.netflix.discovery" in e["line"])
            or "InaccessibleObjectException" in e["line"]
        ]
        return logged + [json.dumps(e) for e in self.named("error", since)]


def fetch_pairs(client: JavaClient, since: int) -> list[tuple[dict, dict | None]]:
    """Each registry fetch after ``since`` with the ``cacheRefreshed`` that followed it (None if none yet)."""
    events = client.events_since(since)
    pairs = []
    for index, event in enumerate(events):
        if event.get("event") == "http" and event.get("op") in ("GetDelta", "GetApplications"):
            refreshed = next(
                (
                    e
                    for e in events[index + 1 :]
                    if e.get("event") == "cacheRefreshed"
                    or (e.get("event") == "http" and e.get("op") in ("GetDelta", "GetApplications"))
                ),
                None,
            )
            if refreshed is not None and refreshed.get("event") != "cacheRefreshed":
                refreshed = None
            pairs.append((event, refreshed))
    return pairs


def java_clients(build: JavaBuild, server: LiveServer):
    """A ``client_factory`` of Java clients of ``build`` against ``server``, each ready when started; all
    are shut down (cancelled) when it closes."""
    return client_factory(partial(JavaClient, build, server), JavaClient.wait_ready)


@pytest.fixture
def java_client(java_classpath, live_server):
    """A factory of running Java clients of the generation under test."""
    with java_clients(java_classpath, live_server) as start:
        yield start


@pytest.fixture
def auth_java_client(java_classpath, auth_live_server):
    """Java clients of the generation under test against the node with API accounts."""
    with java_clients(java_classpath, auth_live_server) as start:
        yield start


@pytest.fixture
def jersey1_client(jersey1_classpath, live_server):
    """A factory of running eureka-client 1.x clients (Jersey 1), whatever the generation under test."""
    with java_clients(jersey1_classpath, live_server) as start:
        yield start


def wait_for_consumer_on_deltas(consumer: JavaClient, timeout: float = 15.0) -> None:
    """Until the consumer holds a non-empty registry and fetches deltas (the Java client full-fetches
    while its registry is empty)."""
    consumer.wait_for_http("GetDelta", since=consumer.mark(), status=200, timeout=timeout)


# --- tests -------------------------------------------------------------------------------------


def test_the_client_under_test_is_the_pinned_release(java_classpath):
    generation = java_classpath.generation
    jars = {Path(j).name for j in java_classpath.classpath.split(":")}
    assert set(generation.jars) <= jars, sorted(jars)
    assert f"<eureka.version>{generation.version}</eureka.version>" in generation.pom()
    # One eureka-client, and nothing of the other generation's transport: 2.x talks through
    # eureka-client-jersey3 (Jersey 3), 1.x through the Jersey 1 it depends on itself.
    clients = sorted(j for j in jars if re.fullmatch(r"eureka-client-[\d.]+\.jar", j))
    assert clients == [f"eureka-client-{generation.version}.jar"]
    assert not [j for j in jars if j.startswith(generation.foreign_jars)], sorted(jars)


def test_lifecycle_register_heartbeat_and_cancel(live_server, java_client, admin):
    since = live_server.mark()
    client = java_client("service", "javalife", 8101)
    generation = client.generation
    assert client.ready["transport"] == generation.transport

    # Register: 204 for the client and in the server's log.
    client.wait_for_http("Register", status=204, timeout=10)
    live_server.wait_for_requests("POST", client.register_path, since=since, status=204, timeout=5)
    assert client.http("Register", status=204) == client.http("Register"), client.http("Register")
    instance = wait_until(
        lambda: (lambda i: i if i and i["status"] == "UP" else None)(
            admin.instance("JAVALIFE", client.instance_id)
        ),
        timeout=5,
        message="the server never held the instance UP",
    )
    assert instance["app"] == "JAVALIFE"
    assert instance["hostName"] == "127.0.0.1"
    assert instance["ipAddr"] == "127.0.0.1"
    assert instance["port"] == {"$": 8101, "@enabled": "true"}
    assert instance["securePort"]["@enabled"] == "false"
    assert instance["vipAddress"] == "javalife.vip"
    assert instance["dataCenterInfo"] == {
        "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
        "name": "MyOwn",
    }
    assert instance["leaseInfo"]["renewalIntervalInSecs"] == 1
    assert instance["leaseInfo"]["durationInSecs"] == 10
    assert instance["metadata"] == {"started.by": "java-interop"}
    first_renewal = instance["leaseInfo"]["lastRenewalTimestamp"]

    # Heartbeats: 200 with no body for the client (Jersey decodes any body it gets as an InstanceInfo).
    beats_since = client.mark()
    beats = client.wait_for_http("SendHeartBeat", since=beats_since, at_least=3, timeout=10)
    assert all(b["status"] == 200 and b["entity"] is False for b in beats), beats
    logged = live_server.wait_for_requests("PUT", client.path, since=since, status=200, at_least=3, timeout=5)
    assert all(re.fullmatch(r"status=UP&lastDirtyTimestamp=\d+", r.query) for r in logged), logged
    assert live_server.count("PUT", client.path, since=since, status=404) == 0
    later = admin.instance("JAVALIFE", client.instance_id)
    assert later["leaseInfo"]["lastRenewalTimestamp"] > first_renewal
    assert later["leaseInfo"]["registrationTimestamp"] == instance["leaseInfo"]["registrationTimestamp"]
    if generation.records_wire:
        # The client's heartbeats as its connection wrote them have the generation's shape (Jersey 1: no
        # body, "Content-Length: 0", no Content-Type), and were answered 200.
        wired = client.wire("PUT", client.path)
        assert len(wired) >= 3, client.tail()
        for record in wired:
            assert record["status"] == 200, record
            assert record["headers"].get("content-length") == str(len(generation.heartbeat_body)), record
            assert "transfer-encoding" not in record["headers"], record
            sent = {
                name: record["headers"].get(name.lower())
                for name in ("Content-Type", "Accept", "Accept-Encoding")
            }
            expected = {name: generation.heartbeat_headers.get(name) for name in sent}
            assert sent == expected, record
    # The same request as this generation's heartbeat (Jersey 3: a "{}" JSON body with Accept JSON;
    # Jersey 1: no body): nothing comes back.
    renew = httpx.put(
        f"{live_server.base_url}{client.path}",
        params={"status": "UP", "lastDirtyTimestamp": instance["lastDirtyTimestamp"]},
        content=generation.heartbeat_body,
        headers=generation.heartbeat_headers,
        timeout=5,
    )
    assert (renew.status_code, renew.content, renew.headers.get("content-type")) == (200, b"", None)

    # The service's own registry: it fetched itself and follows on deltas with a matching hash.
    client.wait_for_http("GetDelta", since=beats_since, status=200, timeout=5)
    state = wait_until(
        lambda: (lambda s: s if s["remoteStatus"] == "UP" else None)(client.state(apps=("JAVALIFE",))),
        timeout=5,
        message="the client never saw itself UP in its fetched registry",
    )
    assert [i["instanceId"] for i in state["apps"]["JAVALIFE"]] == [client.instance_id]
    # An instance an earlier test left (cancelled or evicted a moment ago) can still be in the
    # client's copy until its next delta brings the removal: wait for that delta, within a few of
    # the client's 1 s fetches, rather than compare once (an intermittent "DOWN_1_UP_1_" in CI).
    state = wait_until(
        lambda: (lambda s: s if s["hash"] == "UP_1_" else None)(client.state(apps=("JAVALIFE",))),
        timeout=5,
        message="the client's reconcile hash never came to the server's UP_1_",
    )
    assert state["hash"] == admin.delta()["apps__hashcode"] == "UP_1_"

    # Nothing went wrong for the client so far (its shutdown logs warnings of its own, hence now).
    assert client.client_problems() == []

    # Cancel: shutdown() DELETEs the instance, which the server acknowledges and forgets.
    before_stop = live_server.mark()
    client.shutdown()
    assert [c["status"] for c in client.http("Cancel")] == [200]
    live_server.wait_for_requests("DELETE", client.path, since=before_stop, status=200, timeout=5)
    assert admin.instance("JAVALIFE", client.instance_id) is None
    wait_until(
        lambda: "JAVALIFE" not in {a["name"] for a in admin.applications()["application"]},
        timeout=5,
        message="the full registry still lists the cancelled app",
    )
    after_stop = live_server.mark()
    time.sleep(1.5)
    assert live_server.count(path=re.compile(r"/eureka/apps/JAVALIFE.*"), since=after_stop) == 0


def test_jersey1_registers_with_a_chunked_post_answered_204(live_server, jersey1_client, admin):
    """eureka-client 1.x streams its registration: Jersey 1's Apache handler gives HttpClient a JSON
    entity of unknown length, so the POST goes out ``Transfer-Encoding: chunked`` with no
    ``Content-Length``. The server reads that body whole, answers 204, and the connection goes on."""
    since = live_server.mark()
    client = jersey1_client("service", "javawire", 8601)
    client.wait_for_http("Register", status=204, timeout=10)

    def chunked_posts(after: int = 0) -> list[dict]:
        posts = client.wire("POST", client.register_path, since=after)
        for post in posts:
            headers = post["headers"]
            assert (post["protocol"], headers.get("transfer-encoding")) == ("HTTP/1.1", "chunked"), post
            assert "content-length" not in headers, post
            assert headers.get("content-type") == "application/json", post
        return posts

    first = chunked_posts()
    assert first and all(post["status"] == 204 for post in first), first
    assert all(r["status"] == 204 for r in client.http("Register")), client.http("Register")
    logged = live_server.wait_for_requests("POST", client.register_path, since=since, status=204, timeout=5)
    assert logged == live_server.requests("POST", client.register_path, since=since)
    # What the server holds came from that body alone.
    instance = admin.instance("JAVAWIRE", client.instance_id)
    assert instance is not None
    assert (instance["status"], instance["vipAddress"], instance["port"]["$"]) == ("UP", "javawire.vip", 8601)
    assert instance["metadata"] == {"started.by": "java-interop"}

    # The connection that carried the chunked body serves the client's next requests (the body was
    # consumed to its last chunk, so the next request on it parses): the POST, then more exchanges.
    reused = client.wait_for("wire", at_least=3, timeout=8, localPort=first[0]["localPort"])
    assert all(200 <= r["status"] < 300 for r in reused), reused

    # Every exchange so far (fetches, heartbeats, the POST) was answered 2xx.
    so_far = client.wire()
    assert all(200 <= r["status"] < 300 for r in so_far), [r for r in so_far if r["status"] >= 300]

    # A changed instance is registered again, also chunked: the server takes the new body. (The next
    # heartbeat may carry the new lastDirtyTimestamp before the replicator re-POSTs: the server answers
    # it 404, as Eureka does, and the client re-registers from its heartbeat thread; chunked all the same.)
    again = client.mark()
    client.register_metadata({"wire": "chunked"})
    client.wait_for_http("Register", since=again, status=204, timeout=8)
    second = chunked_posts(after=again)
    assert second and all(post["status"] == 204 for post in second), second
    assert admin.instance("JAVAWIRE", client.instance_id)["metadata"] == {
        "started.by": "java-interop",
        "wire": "chunked",
    }

    # The cancel (DELETE) has no body: nothing framed. (The client's shutdown logs warnings of its
    # own, so its problems are counted before.)
    client.wait_for_http("SendHeartBeat", since=again, status=200, timeout=5)
    assert client.client_problems() == []
    client.shutdown()
    deletes = client.wire("DELETE", client.path)
    assert [d["status"] for d in deletes] == [200], deletes
    assert not {"transfer-encoding", "content-length"} & set(deletes[0]["headers"]), deletes
    assert [r["status"] for r in client.http("Cancel")] == [200]
    assert admin.instance("JAVAWIRE", client.instance_id) is None
    # Both ends agree: every chunked POST the client wrote is one the server logged, each 204.
    logged = live_server.requests("POST", client.register_path, since=since)
    assert [r.status for r in logged] == [p["status"] for p in chunked_posts()] == [204] * len(logged)


def test_deltas_keep_the_reconcile_hashcode_in_step_without_full_fetches(live_server, java_client, admin):
    # The Java client full-fetches while its registry is empty: give it something to hold first, and
    # wait until the full registry (the read-only cache the client reads too) lists it.
    admin.register("JAVADELTA", "javadelta-1", port=8201, vip="javadelta.vip")
    wait_until(
        lambda: admin.listed_ids("JAVADELTA") == {"javadelta-1"},
        timeout=5,
        message="the full registry never listed JAVADELTA/javadelta-1",
    )
    start = live_server.mark()
    consumer = java_client("consumer", "javadeltaconsumer", 8200)
    wait_for_consumer_on_deltas(consumer)
    # One full fetch (DiscoveryClient's constructor), deltas from the first refresh on.
    first = consumer.http("GetApplications")
    assert len(first) == 1 and first[0]["status"] == 200 and first[0]["instances"] == 1, first
    # Let the registration age out of the delta queue: from now on a delta holds less than the
    # registry, and its apps__hashcode must still cover the whole registry.
    wait_until(
        lambda: admin.delta_queue_length() == 0,
        timeout=DELTA_RETENTION_MS / 1000 + 8,
        message="the delta queue never emptied",
    )
    consumer.wait_for_http("GetDelta", since=consumer.mark(), status=200, timeout=5)
    checkpoint, events_checkpoint = live_server.mark(), consumer.mark()

    def server_hash() -> str:
        return admin.delta()["apps__hashcode"]

    def in_step(expected: str) -> bool:
        state = consumer.state()
        return state["hash"] == server_hash() == expected

    # ADDED, in an app the client holds and in a new one.
    admin.register("JAVADELTA", "javadelta-2", port=8202, vip="javadelta.vip")
    admin.register("JAVADELTANEW", "javadeltanew-1", port=8203, vip="javadeltanew.vip")
    wait_until(
        lambda: (
            set(consumer.ids_by_app("JAVADELTA")) == {"javadelta-1", "javadelta-2"}
            and set(consumer.ids_by_app("JAVADELTANEW")) == {"javadeltanew-1"}
        ),
        timeout=8,
        message=lambda: f"the ADDED instances never reached the client:\n{consumer.tail()}",
    )
    wait_until(lambda: in_step("UP_3_"), timeout=5, message="client and server hashcodes differ after ADDED")

    # MODIFIED: a status override.
    assert admin.set_status("JAVADELTA", "javadelta-2", "OUT_OF_SERVICE") == 200
    wait_until(
        lambda: consumer.ids_by_app("JAVADELTA")["javadelta-2"]["status"] == "OUT_OF_SERVICE",
        timeout=8,
        message="the MODIFIED status never reached the client",
    )
    wait_until(
        lambda: in_step("OUT_OF_SERVICE_1_UP_2_"),
        timeout=5,
        message="client and server hashcodes differ after MODIFIED",
    )

    # MODIFIED without a hashcode change: metadata.
    assert admin.put_metadata("JAVADELTA", "javadelta-1", {"color": "blue"}) == 200
    wait_until(
        lambda: consumer.ids_by_app("JAVADELTA")["javadelta-1"]["metadata"].get("color") == "blue",
        timeout=8,
        message="the metadata change never reached the client",
    )

    # DELETED: the new app's only instance; the client drops the emptied app.
    assert admin.cancel("JAVADELTANEW", "javadeltanew-1") == 200
    wait_until(
        lambda: consumer.ids_by_app("JAVADELTANEW") == {},
        timeout=8,
        message="the DELETED instance was never removed from the client",
    )
    wait_until(
        lambda: in_step("OUT_OF_SERVICE_1_UP_1_"),
        timeout=5,
        message="client and server hashcodes differ after DELETED",
    )

    # Every fetch since the checkpoint was a delta, and after each one the hash the client computed
    # over its whole local registry equalled the delta's apps__hashcode (else it would have
    # full-fetched to reconcile).
    pairs = fetch_pairs(consumer, events_checkpoint)
    assert {fetch["op"] for fetch, _ in pairs} == {"GetDelta"}, pairs
    assert len(pairs) >= 4
    assert all(fetch["status"] == 200 and fetch["entity"] for fetch, _ in pairs), pairs
    compared = [(fetch["appsHashcode"], refreshed["hash"]) for fetch, refreshed in pairs if refreshed]
    assert compared and all(server == client for server, client in compared), compared
    assert {server for server, _ in compared} >= {"UP_3_", "OUT_OF_SERVICE_1_UP_2_", "OUT_OF_SERVICE_1_UP_1_"}
    # Server side: deltas only, no full registry fetch.
    assert live_server.count("GET", CONSUMER_DELTA, since=checkpoint, status=200) >= 4
    assert live_server.count("GET", CONSUMER_FULL_FETCH, since=checkpoint) == 0, live_server.requests(
        since=checkpoint
    )
    assert live_server.count("GET", CONSUMER_FULL_FETCH, since=start) == 1
    assert len(consumer.http("GetApplications")) == 1
    assert consumer.client_problems() == []


def test_a_status_override_reaches_clients_through_the_delta(live_server, java_client, admin):
    vip = "javaovr.vip"
    admin.register("JAVAOVR", "javaovr-peer", port=8302, vip=vip)
    service = java_client("service", "javaovr", 8301, vip)
    consumer = java_client("consumer", "javaovrconsumer", 8300)
    both = {service.instance_id, "javaovr-peer"}
    wait_until(
        lambda: set(consumer.state(vips=(vip,))["vips"][vip]) == both,
        timeout=10,
        message=lambda: f"the consumer never saw both JAVAOVR instances UP:\n{consumer.tail()}",
    )
    wait_for_consumer_on_deltas(consumer)
    # getNextServerFromEureka goes round the UP instances of the vip.
    assert set(consumer.state(vips=(vip,), picks=10)["picks"][vip]) == both
    checkpoint, consumer_since, service_since = live_server.mark(), consumer.mark(), service.mark()

    assert admin.set_status("JAVAOVR", service.instance_id, "OUT_OF_SERVICE") == 200

    def overridden() -> dict | None:
        state = consumer.state(apps=("JAVAOVR",), vips=(vip,), picks=20)
        statuses = {i["instanceId"]: i["status"] for i in state["apps"]["JAVAOVR"]}
        return state if statuses.get(service.instance_id) == "OUT_OF_SERVICE" else None

    state = wait_until(overridden, timeout=8, message="the override never reached the consumer")
    # Still in the registry (the hash counts it), but no longer among the client's choices.
    assert {i["instanceId"] for i in state["apps"]["JAVAOVR"]} == both
    mine = next(i for i in state["apps"]["JAVAOVR"] if i["instanceId"] == service.instance_id)
    assert mine["overriddenStatus"] == "OUT_OF_SERVICE"
    assert state["vips"][vip] == ["javaovr-peer"]
    assert state["picks"][vip] == ["javaovr-peer"] * 20
    wait_until(
        lambda: consumer.state()["hash"] == admin.delta()["apps__hashcode"] == "OUT_OF_SERVICE_1_UP_1_",
        timeout=5,
        message="the consumer's hashcode never matched the server's after the override",
    )

    # The overridden service sees its remote status change in its own fetched registry, while it keeps
    # heartbeating "status=UP" (its local status) and the server keeps the override.
    service.wait_for("statusChange", since=service_since, current="OUT_OF_SERVICE", timeout=8)
    beats_since = service.mark()
    beats = service.wait_for_http("SendHeartBeat", since=beats_since, at_least=2, timeout=8)
    assert all(b["status"] == 200 for b in beats), beats
    assert service.state()["localStatus"] == "UP"
    instance = admin.instance("JAVAOVR", service.instance_id)
    assert (instance["status"], instance["overriddenStatus"]) == ("OUT_OF_SERVICE", "OUT_OF_SERVICE")

    assert consumer.http("GetApplications", since=consumer_since) == []
    assert live_server.count("GET", CONSUMER_FULL_FETCH, since=checkpoint) == 0

    # Clearing the override (no value) leaves the instance UNKNOWN: the next heartbeat gets 404 and
    # the client re-registers itself UP, which the consumer sees again through the delta.
    cleared_since = service.mark()
    assert admin.delete_status_override("JAVAOVR", service.instance_id) == 200
    service.wait_for_http("SendHeartBeat", since=cleared_since, status=404, timeout=8)
    service.wait_for_http("Register", since=cleared_since, status=204, timeout=8)
    wait_until(
        lambda: set(consumer.state(vips=(vip,))["vips"][vip]) == both,
        timeout=8,
        message="the instance never came back among the consumer's choices",
    )
    assert admin.instance("JAVAOVR", service.instance_id)["status"] == "UP"
    assert consumer.http("GetApplications", since=consumer_since) == []
    assert live_server.count("GET", CONSUMER_FULL_FETCH, since=checkpoint) == 0, live_server.requests(
        since=checkpoint
    )
    assert consumer.client_problems() == []


def test_it_re_registers_after_the_server_forgets_it(live_server, java_client, admin):
    client = java_client("service", "javarereg", 8401)
    client.wait_for_http("SendHeartBeat", status=200, timeout=10)

    since, events_since = live_server.mark(), client.mark()
    assert admin.cancel("JAVAREREG", client.instance_id) == 200

    # The next heartbeat gets 404 (with no body, so the client sees the status), then it registers anew.
    missed = client.wait_for_http("SendHeartBeat", since=events_since, status=404, timeout=8)[0]
    assert missed["entity"] is False and "error" not in missed, missed
    client.wait_for_http("Register", since=events_since, status=204, timeout=8)
    # The client's own account of it (DiscoveryClient.renew, INFO).
    wait_until(
        lambda: any(
            "Re-registering apps/JAVAREREG" in e["line"] for e in client.named("output", since=events_since)
        ),
        timeout=5,
        message=lambda: f"the client never logged its re-registration:\n{client.tail()}",
    )
    live_server.wait_for_requests("PUT", client.path, since=since, status=404, timeout=5)
    live_server.wait_for_requests("POST", client.register_path, since=since, status=204, timeout=5)
    records = live_server.requests(since=since)
    first_404 = next(i for i, r in enumerate(records) if r.path == client.path and r.status == 404)
    first_post = next(
        i for i, r in enumerate(records) if r.method == "POST" and r.path == client.register_path
    )
    assert first_404 < first_post, records

    instance = wait_until(
        lambda: admin.instance("JAVAREREG", client.instance_id),
        timeout=5,
        message="the server never listed the re-registered instance",
    )
    assert instance["status"] == "UP"
    after = client.mark()
    beats = client.wait_for_http("SendHeartBeat", since=after, at_least=2, timeout=8)
    assert all(b["status"] == 200 for b in beats), beats
    wait_until(
        lambda: (
            client.state()["remoteStatus"] == "UP" and client.instance_id in admin.listed_ids("JAVAREREG")
        ),
        timeout=5,
        message="the instance is not back in the registry, UP",
    )


def test_a_metadata_change_by_the_client_reaches_other_clients(live_server, java_client, admin):
    service = java_client("service", "javameta", 8501)
    consumer = java_client("consumer", "javametaconsumer", 8500)
    wait_until(
        lambda: service.instance_id in consumer.ids_by_app("JAVAMETA"),
        timeout=10,
        message=lambda: f"the consumer never saw the service:\n{consumer.tail()}",
    )
    wait_for_consumer_on_deltas(consumer)
    hashcode = consumer.state()["hash"]
    since, service_since, consumer_since = live_server.mark(), service.mark(), consumer.mark()

    # ApplicationInfoManager.registerAppMetadata marks the instance dirty; the InstanceInfoReplicator
    # re-POSTs the whole registration.
    service.register_metadata({"color": "blue", "build": "42"})
    service.wait_for_http("Register", since=service_since, status=204, timeout=8)
    live_server.wait_for_requests("POST", service.register_path, since=since, status=204, timeout=5)
    instance = admin.instance("JAVAMETA", service.instance_id)
    assert instance["metadata"] == {"started.by": "java-interop", "color": "blue", "build": "42"}
    assert instance["status"] == "UP"

    seen = wait_until(
        lambda: (lambda i: i if i and i["metadata"].get("color") == "blue" else None)(
            consumer.ids_by_app("JAVAMETA").get(service.instance_id)
        ),
        timeout=8,
        message=lambda: f"the consumer never saw the new metadata:\n{consumer.tail()}",
    )
    assert seen["metadata"] == {"started.by": "java-interop", "color": "blue", "build": "42"}
    assert seen["status"] == "UP"
    # A metadata change leaves the status counts, hence the hashcode, as they were; deltas only.
    assert consumer.state()["hash"] == hashcode == admin.delta()["apps__hashcode"]
    assert consumer.http("GetApplications", since=consumer_since) == []
    assert live_server.count("GET", CONSUMER_FULL_FETCH, since=since) == 0
    assert live_server.count("GET", CONSUMER_DELTA, since=since, status=200) >= 1
    assert service.client_problems() == [] and consumer.client_problems() == []


# --- with API accounts (EUREKA_API_AUTH) --------------------------------------------------------------


def service_requests(server: LiveServer, since: int) -> list:
    """The services' requests (``/eureka/``), not the test's (``/eureka/v2/``)."""
    return [r for r in server.requests(since=since) if not r.path.startswith(CONSUMER_PREFIX)]


def test_with_api_accounts_it_registers_heartbeats_fetches_and_cancels(
    auth_live_server, auth_java_client, auth_admin
):
    server = auth_live_server
    since = server.mark()
    client = auth_java_client("service", "javaauth", 8111, credentials="client")

    client.wait_for_http("Register", status=204, timeout=10)
    server.wait_for_requests("POST", client.register_path, since=since, status=204, timeout=5)
    beats = client.wait_for_http("SendHeartBeat", at_least=2, timeout=10)
    assert all(b["status"] == 200 for b in beats), beats
    server.wait_for_requests("PUT", client.path, since=since, status=200, at_least=2, timeout=5)
    # Its registry: full fetch, then deltas, in which it sees itself UP.
    client.wait_for_http("GetDelta", status=200, timeout=10)
    wait_until(
        lambda: (lambda s: s if s["remoteStatus"] == "UP" else None)(client.state(apps=("JAVAAUTH",))),
        timeout=5,
        message="the client never saw itself UP in its fetched registry",
    )
    fetches = client.http("GetApplications") + client.http("GetDelta")
    assert fetches and all(f["status"] == 200 for f in fetches), fetches
    # The node lists it, to a reader.
    with RegistryAdmin(server, prefix="eureka/v2/", role="reader") as reader:
        wait_until(
            lambda: client.instance_id in reader.listed_ids("JAVAAUTH"),
            timeout=5,
            message="the full registry never listed the instance",
        )
    # Preemptive Basic: the credentials went with the first request already, nothing was ever refused.
    assert [r for r in service_requests(server, since) if r.status >= 400] == []
    if client.generation.records_wire:
        account = server.accounts["client"]
        token = base64.b64encode(f"{account.username}:{account.password}".encode()).decode()
        wired = client.wire()
        assert wired and all(w["headers"].get("authorization") == f"Basic {token}" for w in wired), wired
    assert client.client_problems() == []

    before_stop = server.mark()
    client.shutdown()
    assert [c["status"] for c in client.http("Cancel")] == [200]
    server.wait_for_requests("DELETE", client.path, since=before_stop, status=200, timeout=5)
    assert auth_admin.instance("JAVAAUTH", client.instance_id) is None


def test_with_api_accounts_a_client_without_credentials_is_refused(
    auth_live_server, auth_java_client, auth_admin
):
    server = auth_live_server
    since = server.mark()
    client = auth_java_client("service", "javanoauth", 8112)

    # The client sees each refusal's status: its first fetch, its registration, then it keeps trying.
    registers = client.wait_for_http("Register", timeout=10)
    assert [r["status"] for r in registers] == [401], registers
    fetches = client.http("GetApplications")
    assert fetches and all(f["status"] == 401 for f in fetches), fetches
    # Its heartbeats fail too, with the status. (Both Jersey transports read a heartbeat answer that
    # has a body as an InstanceInfo, whatever its status: refusals are bodiless for that reason.)
    beats = client.wait_for_http("SendHeartBeat", timeout=10)
    assert beats and all(b.get("status") == 401 for b in beats), beats
    server.wait_for_requests("PUT", client.path, since=since, status=401, timeout=5)
    assert_refused(server, since, re.compile(r"/eureka/apps/JAVANOAUTH(/.*)?"))
    assert_refused(server, since, re.compile(r"/eureka/apps/?"))
    assert {r.status for r in service_requests(server, since)} == {401}
    if client.generation.records_wire:
        wired = client.wire()
        assert wired and all("authorization" not in w["headers"] for w in wired), wired
        assert {w["status"] for w in wired} == {401}, wired
    assert_challenge(server)
    assert auth_admin.instance("JAVANOAUTH", client.instance_id) is None
    assert client.state()["remoteStatus"] != "UP"
