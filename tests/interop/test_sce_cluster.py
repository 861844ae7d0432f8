"""A mixed cluster: a stock Spring Cloud Netflix Eureka Server (SCE) and our node, each the other's peer.

``tests/interop/sce/`` is a Maven project around the unmodified server (Spring Boot 4.0.7, Spring Cloud
2025.1.4, i.e. spring-cloud-netflix 5.0.x on eureka-core 2.0.x): one class with ``@SpringBootApplication
@EnableEurekaServer`` and no configuration file. Every setting is given on its command line here
(``sce_arguments``); the same jar serves the SCE-vs-node benchmark, so it stays stock. It is built by
``tests/interop/maven.py`` (``build_sce``; ``python -m tests.interop.maven sce`` prints its path).

SCE skips a peer whose host equals its own ``eureka.instance.hostname`` (``PeerEurekaNodes.isThisMyUrl``),
so the two listen on different loopback addresses: SCE on 127.0.0.2, the node on 127.0.0.3 (a second,
fresh node on 127.0.0.4 for the start-up sync). SCE replicates to the node with batches
(``POST /eureka/peerreplication/batch/``, chunked, 200 ms read timeout); the node replicates to SCE in the
same format. The tests write to one side over plain HTTP (as a client would) and read the other side's
``GET /eureka/apps/{APP}`` (JSON), in both directions; then the consoles, the start-up sync of a later node,
and real py-eureka-clients on either side.

SCE's Tomcat access log (``sce-access.log`` next to its log) records every request it answered, so a failure
shows what the node sent it and what SCE answered; SCE's own log is checked last for errors about the node.

Two SCE habits the tests work around: ``GET /eureka/status`` with ``Accept: application/json`` answers 500
(Jackson fails on ``StatusInfo.isHealthy()``, null unless ``minAvailableInstancesForPeerReplication`` is set),
so the tests read its XML; and SCE serves no ``/serverinfo/statusoverrides`` (404), so overrides are read
from the instance records there.
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
import threading
import time
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from py_eureka_client.eureka_client import EurekaClient, WalkNodeException

from tests.interop import maven
from tests.interop.conftest import LiveServer, require_toolchain, running_server, wait_until
from tests.ports import free_port

logger = logging.getLogger(__name__)

pytestmark = [
    pytest.mark.interop,
    # py-eureka-client logs through the deprecated Logger.warn on every failed call.
    pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning"),
]

# ------------------------------------------------------------------------------------------ settings

# A modest heap and a quick start: SCE shares two cores with the node(s) and the test.
JVM_OPTIONS = maven.jvm_options("512m")
SCE_START_TIMEOUT_S = 120.0
SCE_STOP_TIMEOUT_S = 30.0

SCE_HOST = "127.0.0.2"
NODE_HOST = "127.0.0.3"
LATE_NODE_HOST = "127.0.0.4"
# SCE's spring.application.name; SCE registers (and lists) its own app under the upper-cased name. The
# node registers itself with SCE under that name (EUREKA_SELF_APP_NAME): SCE counts a peer as an available
# replica only when an instance of its own app with the peer's host name is registered with it.
SCE_APP_NAME = "sce-server"
SCE_APP = SCE_APP_NAME.upper()

# Jobs on both sides: eviction and the read-only response cache every second (Eureka: 60 s and 30 s).
EVICTION_INTERVAL_MS = 1000
RESPONSE_CACHE_UPDATE_MS = 1000
# A change written at one side shows at the other within this: SCE batches for up to 500 ms and both
# sides' GET apps/{APP} caches refresh every second; the rest is slack for a busy two-core machine.
TRAVEL_S = 10.0
# The short lease of the expiry test. Only its duration matters to the servers; the renewal interval is
# also how long SCE keeps a heartbeat task before it drops it as stale.
RENEWAL_S = 2
LEASE_S = 6
RENEW_EVERY_S = 1.0
# How long a lease is kept alive by heartbeats at the other side only.
KEEP_ALIVE_S = 3 * LEASE_S
# Eureka (SCE) expires a lease twice its duration after the last renewal (Lease.isExpired's kept bug),
# the node after one duration; then eviction, the read cache and replication slack.
EXPIRY_BOUND_S = 2 * LEASE_S + (EVICTION_INTERVAL_MS + RESPONSE_CACHE_UPDATE_MS) / 1000 + 6
# Start-up sync of the late node: attempts and the wait between them (Eureka: 5 and 30 s).
SYNC_RETRIES = 3
SYNC_RETRY_WAIT_MS = 1000

BATCH_PATH = re.compile(r"/eureka/(v2/)?peerreplication/batch/?")

# The first line of an entry of SCE's (Spring Boot's) log, with its level.
SCE_LOG_ENTRY = re.compile(r"^\d{4}-\d\d-\d\dT\S+\s+(ERROR|WARN|INFO|DEBUG|TRACE)\b")
# SCE's sampled log of network-level replication errors (connection refused, read timeout).
SCE_NETWORK_SAMPLE = "Network level connection to peer"


def sce_arguments(port: int, peers: list[str], access_log_dir: Path) -> list[str]:
    """SCE's command-line settings: where it listens, who its peers are, and test timings. Nothing else."""
    return [
        # Where it listens and who it is: a loopback address of its own, so that it does not mistake
        # the node for itself (isThisMyUrl compares a peer URL's host with eureka.instance.hostname).
        f"--server.address={SCE_HOST}",
        f"--server.port={port}",
        f"--spring.application.name={SCE_APP_NAME}",
        f"--eureka.instance.hostname={SCE_HOST}",
        # Its peers, as Spring's peer-aware example configures them: the embedded client's service URLs.
        f"--eureka.client.service-url.defaultZone={','.join(peers)}",
        # Spring's defaults, stated: SCE registers itself with its peers and fetches their registry
        # (which is what its start-up sync reads).
        "--eureka.client.register-with-eureka=true",
        "--eureka.client.fetch-registry=true",
        # Timings a test needs (Eureka's defaults in parentheses), the same as the node runs with:
        # a change is readable within 1 s (30 s),
        f"--eureka.server.response-cache-update-interval-ms={RESPONSE_CACHE_UPDATE_MS}",
        # an expired lease is evicted within 1 s (60 s),
        f"--eureka.server.eviction-interval-timer-in-ms={EVICTION_INTERVAL_MS}",
        # eviction is not suspended by self-preservation, which during the first minute (no full minute
        # of renewals yet) and between tests (few renewals) would keep expired leases on either side;
        # the node runs with EUREKA_ENABLE_SELF_PRESERVATION=false,
        "--eureka.server.enable-self-preservation=false",
        # and start-up sync attempts (5, as register-with-eureka sets) are 1 s apart (30 s), so SCE opens
        # its registry (and starts evicting) a few seconds after start rather than two minutes.
        "--eureka.server.registry-sync-retry-wait-ms=1000",
        # Observation only: Tomcat's access log, one line per request SCE answered.
        "--server.tomcat.accesslog.enabled=true",
        f"--server.tomcat.accesslog.directory={access_log_dir}",
        "--server.tomcat.accesslog.prefix=sce-access",
        "--server.tomcat.accesslog.suffix=.log",
        "--server.tomcat.accesslog.file-date-format=",
        "--server.tomcat.accesslog.rotate=false",
        "--server.tomcat.accesslog.buffered=false",
        "--server.tomcat.accesslog.pattern=%m %U %q %s %{Transfer-Encoding}i",
    ]


def node_env(self_url: str, peers: list[str], **extra: str) -> dict[str, str]:
    return {
        "EUREKA_PEER_URLS": ",".join(peers),
        "EUREKA_SELF_URL": self_url,
        # Eviction not suspended, as on SCE (see sce_arguments).
        "EUREKA_ENABLE_SELF_PRESERVATION": "false",
        **extra,
    }


# --------------------------------------------------------------------------------------------- build


@pytest.fixture(scope="module")
def java() -> str:
    return maven.require_java()


@pytest.fixture(scope="module")
def sce_jar() -> Path:
    """The SCE jar (``maven.build_sce``): built with Maven (offline first, online if the local repository
    lacks something), or reused while ``target/build.stamp`` matches the sources and the Java version."""
    return maven.build_sce()


# -------------------------------------------------------------------------------------- the servers


def _loopback_aliases_work() -> bool:
    try:
        for host in (SCE_HOST, NODE_HOST, LATE_NODE_HOST):
            free_port(host)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class AccessLine:
    method: str
    path: str
    query: str
    status: int
    transfer_encoding: str


class SceServer(maven.JvmProcess):
    """One ``java -jar sce-server.jar``, logging to a file; stopped with SIGTERM."""

    def __init__(self, java: str, jar: Path, port: int, peers: list[str], workdir: Path):
        self.port = port
        self.base_url = f"http://{SCE_HOST}:{port}"
        self.url = f"{self.base_url}/eureka/"
        self.access_log_path = workdir / "sce-access.log"
        command = [java, *JVM_OPTIONS, "-jar", str(jar), *sce_arguments(port, peers, workdir)]
        super().__init__(command, workdir / "sce.log", SCE_STOP_TIMEOUT_S)
        # Log offset where SCE was ready (see test_sce_logged_no_error_about_the_node).
        self.ready_offset = 0

    def __repr__(self) -> str:
        return "SCE"

    def ready(self) -> bool:
        """Serving (GET apps answers) and open for traffic (its start-up sync is over: eviction runs)."""
        self.fail_if_exited()
        if "Started Eureka Server" not in self.log_text():
            return False
        try:
            return httpx.get(f"{self.url}apps", timeout=2.0).status_code == 200
        except httpx.TransportError:
            return False

    def wait_ready(self) -> None:
        wait_until(
            self.ready,
            SCE_START_TIMEOUT_S,
            lambda: f"SCE did not start within {SCE_START_TIMEOUT_S:.0f}s:\n{self.log_tail()}",
            interval=0.5,
        )
        self.ready_offset = self.log_mark()

    def access(self) -> list[AccessLine]:
        try:
            text = self.access_log_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            parts = line.split(" ")
            if len(parts) == 5 and parts[3].isdigit():
                method, path, query, status, encoding = parts
                out.append(AccessLine(method, path, query, int(status), encoding))
        return out


@dataclass
class Instance:
    """A registration as the test writes it (a Java client's JSON shape)."""

    app: str
    port: int
    renewal_s: int = 30
    duration_s: int = 90
    last_dirty: int = field(default_factory=lambda: int(time.time() * 1000))

    @property
    def instance_id(self) -> str:
        return f"127.0.0.1:{self.app.lower()}:{self.port}"

    def body(self) -> dict:
        return {
            "instance": {
                "instanceId": self.instance_id,
                "hostName": "127.0.0.1",
                "app": self.app,
                "ipAddr": "127.0.0.1",
                "status": "UP",
                "overriddenStatus": "UNKNOWN",
                "port": {"$": self.port, "@enabled": "true"},
                "securePort": {"$": 443, "@enabled": "false"},
                "countryId": 1,
                "dataCenterInfo": {
                    "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
                    "name": "MyOwn",
                },
                "leaseInfo": {"renewalIntervalInSecs": self.renewal_s, "durationInSecs": self.duration_s},
                "metadata": {"registered.by": "sce-cluster-test"},
                "homePageUrl": f"http://127.0.0.1:{self.port}/",
                "statusPageUrl": f"http://127.0.0.1:{self.port}/info",
                "healthCheckUrl": f"http://127.0.0.1:{self.port}/health",
                "vipAddress": self.app.lower(),
                "secureVipAddress": self.app.lower(),
                "isCoordinatingDiscoveryServer": "false",
                "lastUpdatedTimestamp": str(self.last_dirty),
                "lastDirtyTimestamp": str(self.last_dirty),
            }
        }


class Side:
    """One server of the cluster as a client sees it: plain HTTP with JSON under ``/eureka/``."""

    def __init__(self, name: str, base_url: str):
        self.name = name
        self.base_url = base_url
        self.url = f"{base_url}/eureka/"
        self.http = httpx.Client(base_url=self.url, headers={"Accept": "application/json"}, timeout=5.0)

    def __repr__(self) -> str:
        return f"<{self.name} {self.url}>"

    @staticmethod
    def _path(instance: Instance, suffix: str = "") -> str:
        return f"apps/{quote(instance.app, safe='')}/{quote(instance.instance_id, safe='')}{suffix}"

    def register(self, instance: Instance) -> None:
        response = self.http.post(f"apps/{instance.app}", json=instance.body())
        assert response.status_code == 204, f"register at {self}: {response.status_code} {response.text}"

    def renew(self, instance: Instance) -> int:
        params = {"status": "UP", "lastDirtyTimestamp": str(instance.last_dirty)}
        return self.http.put(self._path(instance), params=params).status_code

    def cancel(self, instance: Instance) -> int:
        return self.http.delete(self._path(instance)).status_code

    def set_status(self, instance: Instance, value: str) -> int:
        params = {"value": value, "lastDirtyTimestamp": str(instance.last_dirty)}
        return self.http.put(self._path(instance, "/status"), params=params).status_code

    def delete_override(self, instance: Instance, value: str) -> int:
        params = {"value": value, "lastDirtyTimestamp": str(instance.last_dirty)}
        return self.http.delete(self._path(instance, "/status"), params=params).status_code

    def listed(self, app: str) -> dict[str, dict]:
        """``GET apps/{APP}`` (read-only cache): instance id -> instance; empty when the app is unknown."""
        response = self.http.get(f"apps/{quote(app.upper(), safe='')}")
        if response.status_code == 404:
            return {}
        assert response.status_code == 200, (
            f"GET apps/{app} at {self}: {response.status_code} {response.text}"
        )
        instances = response.json()["application"]["instance"]
        if isinstance(instances, dict):
            instances = [instances]
        return {i["instanceId"]: i for i in instances}

    def listed_instance(self, instance: Instance) -> dict | None:
        return self.listed(instance.app).get(instance.instance_id)

    def live(self, instance: Instance) -> dict | None:
        """``GET apps/{APP}/{id}``: the live record (not cached), None on 404."""
        response = self.http.get(self._path(instance))
        if response.status_code == 404:
            return None
        assert response.status_code == 200, f"GET {instance.instance_id} at {self}: {response.status_code}"
        return response.json()["instance"]

    def all_ids(self) -> set[str]:
        """Every instance id of ``GET apps/`` (the full registry, as a start-up sync reads it)."""
        response = self.http.get("apps/")
        assert response.status_code == 200, response.text
        return {
            i["instanceId"]
            for application in response.json()["applications"]["application"]
            for i in (
                application["instance"]
                if isinstance(application["instance"], list)
                else [application["instance"]]
            )
        }

    def overrides(self) -> dict[str, str]:
        """``GET /serverinfo/statusoverrides`` (the node only: SCE answers 404)."""
        response = self.http.get("serverinfo/statusoverrides")
        assert response.status_code == 200, (
            f"statusoverrides at {self}: {response.status_code} {response.text}"
        )
        return response.json()

    def close(self) -> None:
        self.http.close()


@dataclass
class Cluster:
    sce: Side
    node: Side
    sce_server: SceServer
    node_server: LiveServer

    def diagnostics(self) -> str:
        """What to show with a failure: the last requests each side answered and SCE's log tail."""
        node_requests = self.node_server.records()[-20:]
        sce_requests = self.sce_server.access()[-20:]
        return (
            f"\n--- node access log (last 20): {node_requests}"
            f"\n--- SCE access log (last 20): {sce_requests}"
            f"\n--- node log tail:\n{self.node_server.server_log_tail(20)}"
            f"\n--- SCE log tail:\n{self.sce_server.log_tail(30)}"
        )


@pytest.fixture(scope="module")
def cluster(java, sce_jar, http_server, tmp_path_factory) -> Iterator[Cluster]:
    """SCE on 127.0.0.2 and a node on 127.0.0.3, each the other's only peer, for the whole module.

    The node registers itself with SCE under SCE's app name (EUREKA_SELF_APP_NAME) and does not sync at
    start-up (EUREKA_REGISTRY_SYNC_RETRIES=0: both start empty). SCE boots while the node starts.
    """
    require_toolchain(
        "loopback addresses 127.0.0.2-4",
        _loopback_aliases_work(),
        "this suite binds servers to 127.0.0.2, 127.0.0.3 and 127.0.0.4 (Linux routes all of 127/8 to lo)",
    )
    workdir = tmp_path_factory.mktemp("sce_cluster")
    (workdir / "node").mkdir()
    sce_port = free_port(SCE_HOST)
    node_port = free_port(NODE_HOST)
    sce_url = f"http://{SCE_HOST}:{sce_port}/eureka/"
    node_url = f"http://{NODE_HOST}:{node_port}/eureka/"
    sce_server = SceServer(java, sce_jar, sce_port, [node_url], workdir)
    sce_server.start()
    try:
        env = node_env(node_url, [sce_url], EUREKA_SELF_APP_NAME=SCE_APP, EUREKA_REGISTRY_SYNC_RETRIES="0")
        with running_server(
            workdir / "node", env, host=NODE_HOST, port=node_port, server=http_server
        ) as node_server:
            sce = Side("SCE", sce_server.base_url)
            node = Side("node", node_server.base_url)
            try:
                sce_server.wait_ready()
                yield Cluster(sce, node, sce_server, node_server)
            finally:
                sce.close()
                node.close()
                # SCE first: its own client deregisters from the node, which is still up.
                sce_server.stop()
    finally:
        sce_server.stop()


@pytest.fixture
def registrations(cluster) -> Iterator:
    """``register(side, instance)``; each instance is cancelled where it was registered when the test ends
    (only there: a second cancel at the other side would race the replicated one and make SCE log it)."""
    done: list[tuple[Side, Instance]] = []

    def register(side: Side, instance: Instance) -> Instance:
        side.register(instance)
        done.append((side, instance))
        return instance

    yield register
    for side, instance in done:
        try:
            if side.live(instance) is not None:
                side.cancel(instance)
        except (httpx.HTTPError, AssertionError):
            pass


@dataclass
class Direction:
    origin: Side
    other: Side
    name: str


@pytest.fixture(params=["node-to-sce", "sce-to-node"])
def direction(request, cluster) -> Direction:
    if request.param == "node-to-sce":
        return Direction(cluster.node, cluster.sce, request.param)
    return Direction(cluster.sce, cluster.node, request.param)


# Ports of the test's registrations: labels only, nothing listens on them.
_ports = iter(range(20000, 30000))


def new_instance(label: str, direction: Direction | None = None, **lease: int) -> Instance:
    app = f"SCX-{label}" + (f"-{direction.name}" if direction else "")
    return Instance(app=app.upper(), port=next(_ports), **lease)


def wait_listed(side: Side, instance: Instance, cluster: Cluster, timeout: float = TRAVEL_S) -> dict:
    return wait_until(
        lambda: side.listed_instance(instance),
        timeout,
        lambda: f"{instance.instance_id} never listed at {side}{cluster.diagnostics()}",
        interval=0.2,
    )


def wait_unlisted(side: Side, instance: Instance, cluster: Cluster, timeout: float = TRAVEL_S) -> None:
    wait_until(
        lambda: side.listed_instance(instance) is None,
        timeout,
        lambda: (
            f"{instance.instance_id} still listed at {side}: {side.listed_instance(instance)}"
            f"{cluster.diagnostics()}"
        ),
        interval=0.2,
    )


class Renewer:
    """Heartbeats for one instance at one side, every RENEW_EVERY_S, in a thread; the answers are kept."""

    def __init__(self, side: Side, instance: Instance):
        self.side = side
        self.instance = instance
        self.codes: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.side.url, timeout=5.0) as http:
            path = Side._path(self.instance)
            params = {"status": "UP", "lastDirtyTimestamp": str(self.instance.last_dirty)}
            while not self._stop.is_set():
                try:
                    self.codes.append(http.put(path, params=params).status_code)
                except httpx.HTTPError:
                    self.codes.append(0)
                self._stop.wait(RENEW_EVERY_S)

    def __enter__(self) -> Renewer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# --------------------------------------------------------------------------------------------- tests


def test_the_sce_under_test_is_a_stock_spring_cloud_eureka_server(sce_jar):
    with zipfile.ZipFile(sce_jar) as jar:
        names = jar.namelist()
    libs = {Path(n).name for n in names if n.startswith("BOOT-INF/lib/")}
    expected = (
        r"spring-boot-4\.0\.7\.jar",
        r"spring-cloud-netflix-eureka-server-5\.0\.\d+\.jar",
        r"spring-cloud-starter-netflix-eureka-server-5\.0\.\d+\.jar",
        r"eureka-core-2\.0\.\d+\.jar",
        r"eureka-core-jersey3-2\.0\.\d+\.jar",
    )
    for pattern in expected:
        assert any(re.fullmatch(pattern, lib) for lib in libs), (pattern, sorted(libs))
    # Ours is the one class and nothing else: no configuration file, no bean.
    classes = [n for n in names if n.startswith("BOOT-INF/classes/") and not n.endswith("/")]
    assert classes == ["BOOT-INF/classes/interop/sce/SceServer.class"], classes
    sources = [str(p.relative_to(maven.SCE_DIR)) for p in maven.project_sources(maven.SCE_DIR)]
    assert sources == ["pom.xml", "src/main/java/interop/sce/SceServer.java"], sources


def test_a_registration_travels(direction, cluster, registrations):
    origin, other = direction.origin, direction.other
    instance = registrations(
        origin, new_instance("reg", direction, renewal_s=RENEWAL_S, duration_s=LEASE_S + 30)
    )
    written = origin.live(instance)
    assert written is not None
    copy = wait_listed(other, instance, cluster)
    for key in (
        "instanceId",
        "hostName",
        "app",
        "ipAddr",
        "status",
        "vipAddress",
        "secureVipAddress",
        "homePageUrl",
        "statusPageUrl",
        "healthCheckUrl",
    ):
        assert copy[key] == written[key], (key, copy, written)
    assert copy["status"] == "UP"
    assert copy["overriddenStatus"] == "UNKNOWN"
    assert copy["port"] == {"$": instance.port, "@enabled": "true"}
    assert copy["dataCenterInfo"]["name"] == "MyOwn"
    assert copy["metadata"]["registered.by"] == "sce-cluster-test"
    # The lease terms travel with the instance: the other side expires it on the client's terms.
    assert copy["leaseInfo"]["durationInSecs"] == LEASE_S + 30
    assert copy["leaseInfo"]["renewalIntervalInSecs"] == RENEWAL_S
    assert str(copy["lastDirtyTimestamp"]) == str(written["lastDirtyTimestamp"]) == str(instance.last_dirty)
    if other is cluster.node:
        # It reached the node by replication, not through the client API.
        node = cluster.node_server
        assert node.count("POST", f"/eureka/apps/{instance.app}") == 0
        batches = node.requests("POST", BATCH_PATH)
        assert batches and all(r.status == 200 for r in batches), batches
    else:
        # The node's batches to SCE, and SCE's answers.
        batches = [
            a for a in cluster.sce_server.access() if a.method == "POST" and BATCH_PATH.fullmatch(a.path)
        ]
        assert batches and all(a.status == 200 for a in batches), batches


def test_a_cancel_travels(direction, cluster, registrations):
    origin, other = direction.origin, direction.other
    instance = registrations(origin, new_instance("cancel", direction))
    wait_listed(other, instance, cluster)
    assert origin.cancel(instance) == 200
    wait_unlisted(other, instance, cluster)
    assert other.live(instance) is None
    assert origin.live(instance) is None


def test_a_status_override_and_its_removal_travel(direction, cluster, registrations):
    origin, other = direction.origin, direction.other
    instance = registrations(origin, new_instance("status", direction))
    wait_listed(other, instance, cluster)

    assert origin.set_status(instance, "OUT_OF_SERVICE") == 200
    wait_until(
        lambda: (
            (i := other.listed_instance(instance)) is not None
            and (i["status"], i["overriddenStatus"]) == ("OUT_OF_SERVICE", "OUT_OF_SERVICE")
        ),
        TRAVEL_S,
        lambda: f"override not at {other}: {other.listed_instance(instance)}{cluster.diagnostics()}",
        interval=0.2,
    )
    if other is cluster.node:
        # (SCE does not serve /serverinfo/statusoverrides: Spring Cloud registers no ServerInfoResource.)
        assert other.overrides().get(instance.instance_id) == "OUT_OF_SERVICE"
    # A heartbeat at the origin (status=UP, as clients send) leaves the override in place on both sides.
    assert origin.renew(instance) == 200
    time.sleep(2 * RESPONSE_CACHE_UPDATE_MS / 1000 + 0.5)
    for side in (origin, other):
        record = side.live(instance)
        assert (record["status"], record["overriddenStatus"]) == ("OUT_OF_SERVICE", "OUT_OF_SERVICE"), (
            side,
            record,
        )

    assert origin.delete_override(instance, "UP") == 200
    wait_until(
        lambda: (
            (i := other.listed_instance(instance)) is not None
            and (i["status"], i["overriddenStatus"]) == ("UP", "UNKNOWN")
        ),
        TRAVEL_S,
        lambda: f"override removal not at {other}: {other.listed_instance(instance)}{cluster.diagnostics()}",
        interval=0.2,
    )
    if other is cluster.node:
        assert instance.instance_id not in other.overrides()
    record = other.live(instance)
    assert (record["status"], record["overriddenStatus"]) == ("UP", "UNKNOWN"), record


def test_heartbeats_at_one_side_keep_the_lease_alive_at_the_other(direction, cluster, registrations):
    origin, other = direction.origin, direction.other
    instance = registrations(origin, new_instance("beat", direction, renewal_s=RENEWAL_S, duration_s=LEASE_S))
    with Renewer(origin, instance) as renewer:
        first = wait_listed(other, instance, cluster)
        assert other.live(instance)["leaseInfo"]["durationInSecs"] == LEASE_S
        first_renewal = other.live(instance)["leaseInfo"]["lastRenewalTimestamp"]
        # Listed at the other side throughout three lease durations, renewed only at the origin.
        until = time.monotonic() + KEEP_ALIVE_S
        checks = 0
        while time.monotonic() < until:
            assert other.listed_instance(instance) is not None, (
                f"{instance.instance_id} dropped at {other} while renewed at {origin} "
                f"(heartbeat answers {renewer.codes}){cluster.diagnostics()}"
            )
            checks += 1
            time.sleep(0.5)
        later = other.live(instance)
    assert checks >= KEEP_ALIVE_S, checks
    assert renewer.codes and set(renewer.codes) == {200}, renewer.codes
    assert len(renewer.codes) >= KEEP_ALIVE_S / RENEW_EVERY_S * 0.8, renewer.codes
    # The heartbeats themselves reached the other side (not just a lack of eviction there).
    assert later is not None and later["leaseInfo"]["lastRenewalTimestamp"] > first_renewal, (first, later)
    assert later["leaseInfo"]["registrationTimestamp"] == first["leaseInfo"]["registrationTimestamp"]

    # Renewals stop: the lease expires and each side evicts it (SCE: twice its duration; the node: once).
    stopped = time.monotonic()
    wait_unlisted(other, instance, cluster, timeout=EXPIRY_BOUND_S)
    gone_after = time.monotonic() - stopped
    # Not cancelled early either: no side may drop a lease before its duration has passed.
    assert gone_after >= LEASE_S - 1.5, f"gone {gone_after:.1f}s after the last renewal (lease {LEASE_S}s)"
    wait_unlisted(origin, instance, cluster, timeout=EXPIRY_BOUND_S)


def _replica_item(page: str, url: str) -> str | None:
    """The DS Replicas list item of ``url`` on our console, or None."""
    section = re.search(r'<ul[^>]*id="replicas"[^>]*>(.*?)</ul>', page, re.S)
    if section is None:
        return None
    for item in re.findall(r"<li\b.*?</li>", section.group(1), re.S):
        if f'href="{url}"' in item:
            return item
    return None


def _info_row(page: str, name: str) -> str | None:
    """A General Info value (``<td>name</td><td>value</td>``) of an Eureka-style console."""
    match = re.search(rf"<td>\s*{re.escape(name)}\s*</td>\s*<td>(.*?)</td>", page, re.S)
    return None if match is None else html.unescape(match.group(1)).strip()


def _replica_lists(page: str) -> dict[str, list[str]]:
    names = ("registered-replicas", "available-replicas", "unavailable-replicas")
    return {n: [u for u in (_info_row(page, n) or "").split(",") if u.strip()] for n in names}


def test_our_console_shows_the_sce_peer_as_an_available_replica(cluster, registrations):
    # Something to replicate: a registration at the node, seen at SCE.
    instance = registrations(cluster.node, new_instance("console"))
    wait_listed(cluster.sce, instance, cluster)
    sce_url = cluster.sce.url

    def page() -> str:
        response = httpx.get(f"{cluster.node.base_url}/", timeout=5.0)
        assert response.status_code == 200, response.status_code
        return response.text

    def available() -> bool:
        text = page()
        item = _replica_item(text, sce_url)
        return (
            item is not None
            and ">available<" in item
            and sce_url in _replica_lists(text)["available-replicas"]
        )

    wait_until(
        available,
        TRAVEL_S,
        lambda: f"DS Replicas: {_replica_item(page(), sce_url)!r}; lists: {_replica_lists(page())}",
        interval=0.5,
    )
    text = page()
    lists = _replica_lists(text)
    assert lists["registered-replicas"] == [sce_url], lists
    assert lists["unavailable-replicas"] == [], lists
    assert "unavailable" not in _replica_item(text, sce_url)
    assert "No replicas" not in text


def _sce_status(cluster: Cluster) -> dict[str, list[str]]:
    """SCE's ``GET /eureka/status`` replica lists (XML: its JSON rendering fails, see the module report)."""
    response = httpx.get(f"{cluster.sce.url}status", headers={"Accept": "application/xml"}, timeout=5.0)
    assert response.status_code == 200, f"{response.status_code} {response.text[:500]}"
    stats = ET.fromstring(response.text).find("applicationStats")
    assert stats is not None, response.text
    return {
        child.tag: [u for u in (child.text or "").split(",") if u.strip()]
        for child in stats
        if child.tag.endswith("-replicas")
    }


def test_sce_lists_the_node_as_an_available_replica(cluster):
    node_url = cluster.node.url

    def node_self_registration() -> list[dict]:
        return [i for i in cluster.sce.listed(SCE_APP).values() if i["hostName"] == NODE_HOST]

    # The node registered itself with SCE under SCE's app name, with its own host name.
    (registration,) = wait_until(
        node_self_registration,
        TRAVEL_S,
        lambda: (
            f"no {SCE_APP} instance with hostName {NODE_HOST} at SCE: {cluster.sce.listed(SCE_APP)}"
            f"{cluster.diagnostics()}"
        ),
        interval=0.5,
    )
    assert registration["status"] == "UP", registration
    wait_until(
        lambda: node_url in _sce_status(cluster)["available-replicas"],
        TRAVEL_S,
        lambda: f"SCE /eureka/status: {_sce_status(cluster)}",
        interval=0.5,
    )
    status = _sce_status(cluster)
    assert status["registered-replicas"] == [node_url], status
    assert status["unavailable-replicas"] == [], status
    # SCE's own console says the same.
    page = httpx.get(f"{cluster.sce.base_url}/", timeout=5.0).text
    assert _replica_lists(page)["available-replicas"] == [node_url], _replica_lists(page)


def test_a_node_started_later_syncs_the_registry_from_sce(cluster, registrations, http_server, tmp_path):
    at_sce = registrations(cluster.sce, new_instance("sync-sce", renewal_s=RENEWAL_S, duration_s=120))
    at_node = registrations(cluster.node, new_instance("sync-node"))
    cancelled = registrations(cluster.sce, new_instance("sync-cancelled"))
    assert cluster.sce.cancel(cancelled) == 200
    # SCE's registry holds both and not the cancelled one (its live records, not cached)...
    wait_until(
        lambda: cluster.sce.live(at_sce) and cluster.sce.live(at_node) and not cluster.sce.live(cancelled),
        TRAVEL_S,
        lambda: f"SCE's live records: {sorted(cluster.sce.all_ids())}{cluster.diagnostics()}",
        interval=0.2,
    )
    # ... and so does its full registry, what a syncing peer reads. SCE's read-write response cache can
    # keep a GET apps/ that was being built while a write invalidated it (Guava's load races the
    # invalidation), until it expires in 180 s: seen once here, with the three writes above 25 ms
    # apart. Another write invalidates it again, so a throwaway instance is registered and cancelled
    # at SCE whenever the listing is still behind its live records after a refresh or two.
    nudges = []

    def listed_as_registered() -> bool:
        ids = cluster.sce.all_ids()
        if {at_sce.instance_id, at_node.instance_id} <= ids and cancelled.instance_id not in ids:
            return True
        if time.monotonic() - (nudges[-1] if nudges else started) > 2.5:
            nudge = registrations(cluster.sce, new_instance("sync-nudge"))
            assert cluster.sce.cancel(nudge) == 200
            nudges.append(time.monotonic())
        return False

    started = time.monotonic()
    wait_until(
        listed_as_registered,
        TRAVEL_S,
        lambda: f"SCE's GET apps/: {sorted(cluster.sce.all_ids())}{cluster.diagnostics()}",
        interval=0.2,
    )
    expected = {i.instance_id: cluster.sce.live(i) for i in (at_sce, at_node)}

    port = free_port(LATE_NODE_HOST)
    url = f"http://{LATE_NODE_HOST}:{port}/eureka/"
    env = node_env(
        url,
        [cluster.sce.url],
        EUREKA_REGISTRY_SYNC_RETRIES=str(SYNC_RETRIES),
        EUREKA_REGISTRY_SYNC_RETRY_WAIT_MS=str(SYNC_RETRY_WAIT_MS),
    )
    with running_server(tmp_path, env, host=LATE_NODE_HOST, port=port, server=http_server) as late_server:
        late = Side("late node", late_server.base_url)
        try:
            wait_until(
                lambda: all(late.listed_instance(i) for i in (at_sce, at_node)),
                TRAVEL_S,
                lambda: (
                    f"the late node lists {sorted(late.all_ids())}\n{late_server.server_log_tail()}"
                    f"\n{late_server.records()[-20:]}"
                ),
                interval=0.2,
            )
            for instance in (at_sce, at_node):
                copy = late.live(instance)
                source = expected[instance.instance_id]
                for key in (
                    "app",
                    "hostName",
                    "ipAddr",
                    "status",
                    "overriddenStatus",
                    "port",
                    "vipAddress",
                    "metadata",
                ):
                    assert copy[key] == source[key], (key, copy, source)
                assert str(copy["lastDirtyTimestamp"]) == str(source["lastDirtyTimestamp"])
                assert copy["leaseInfo"]["durationInSecs"] == source["leaseInfo"]["durationInSecs"]
            assert late.live(cancelled) is None
            assert cancelled.instance_id not in late.all_ids()
            # Only the start-up sync can have brought them: SCE and the first node do not know this node,
            # so nothing was replicated to it and no client wrote to it.
            assert late_server.count("POST", BATCH_PATH) == 0, late_server.records()
            assert late_server.count("POST", re.compile(r"/eureka/(v2/)?apps/.*")) == 0, late_server.records()
        finally:
            late.close()


class PyEurekaClient:
    """An unmodified py-eureka-client with its own event loop."""

    def __init__(self, **kwargs):
        self.loop = asyncio.new_event_loop()
        self.client = EurekaClient(renewal_interval_in_secs=1, **kwargs)

    def start(self) -> None:
        self.loop.run_until_complete(self.client.start())

    def up_ids(self, app: str) -> set[str]:
        return {i.instanceId for i in self.client.applications.get_application(app.upper()).up_instances}

    def choose(self, app: str) -> str | None:
        try:
            return self.loop.run_until_complete(self.client.walk_nodes(app_name=app, walker=lambda url: url))
        except WalkNodeException:
            return None

    def deregister(self) -> None:
        """Idle the client's heartbeat loop (it would re-register after a cancel), then cancel."""
        self.client._EurekaClient__should_register = False
        time.sleep(1.5)
        self.loop.run_until_complete(self.client.cancel())

    def close(self) -> None:
        self.client._EurekaClient__should_register = False
        self.client._EurekaClient__should_discover = False
        self.loop.close()


def test_a_py_eureka_client_at_sce_is_discovered_by_one_fetching_from_the_node(cluster):
    port = next(_ports)
    app = "PY-AT-SCE"
    provider = PyEurekaClient(
        eureka_server=cluster.sce.url,
        app_name=app.lower(),
        instance_host="127.0.0.1",
        instance_ip="127.0.0.1",
        instance_port=port,
        should_discover=False,
    )
    consumer = PyEurekaClient(eureka_server=cluster.node.url, should_register=False)
    instance_id = f"127.0.0.1:{app.lower()}:{port}"
    try:
        provider.start()
        consumer.start()
        wait_until(
            lambda: instance_id in consumer.up_ids(app),
            TRAVEL_S + 5,
            lambda: (
                f"the consumer (fetching from the node) never saw {instance_id}: {consumer.up_ids(app)}"
                f"{cluster.diagnostics()}"
            ),
            interval=0.2,
        )
        assert consumer.choose(app) == f"http://127.0.0.1:{port}/"
        node = cluster.node_server
        # The provider spoke to SCE only; the node learnt of it by replication.
        assert node.count("POST", f"/eureka/apps/{app}") == 0
        assert node.count("PUT", re.compile(rf"/eureka/apps/{app}/.*")) == 0
        assert node.count("GET", re.compile(r"/eureka/apps/(delta)?")) > 0

        provider.deregister()
        wait_until(
            lambda: instance_id not in consumer.up_ids(app),
            TRAVEL_S + 5,
            lambda: f"the consumer still sees {instance_id} after its cancel at SCE{cluster.diagnostics()}",
            interval=0.2,
        )
        assert consumer.choose(app) is None
    finally:
        provider.close()
        consumer.close()


def _log_entries(text: str) -> list[tuple[str, str]]:
    """(level, entry with its stack trace) for each entry of a Spring Boot log."""
    entries: list[list[str]] = []
    for line in text.splitlines():
        if SCE_LOG_ENTRY.match(line) or not entries:
            entries.append([line])
        else:
            entries[-1].append(line)
    out = []
    for lines in entries:
        match = SCE_LOG_ENTRY.match(lines[0])
        out.append((match.group(1) if match else "", "\n".join(lines)))
    return out


def test_sce_logged_no_error_about_the_node(cluster):
    """Last: nothing the node answered (replication batches, SCE's own client's calls) made SCE log an error.

    A read slower than SCE's 200 ms replication timeout is logged as an ERROR network sample (at most one
    per 10 s) and the batch is resent 1 s later; one such window is tolerated on a busy two-core machine.
    """
    entries = _log_entries(cluster.sce_server.log_text(cluster.sce_server.ready_offset))
    problems = [e for level, e in entries if level == "ERROR" or (level == "WARN" and "Exception" in e)]
    timeouts = [e for e in problems if SCE_NETWORK_SAMPLE in e and "Read timed out" in e]
    others = [e for e in problems if e not in timeouts]
    assert not others, f"{len(others)} problem(s) in SCE's log since it started:\n" + "\n----\n".join(
        "\n".join(e.splitlines()[:15]) for e in others[:5]
    )
    assert len(timeouts) <= 1, f"{len(timeouts)} replication read timeouts:\n" + "\n----\n".join(
        "\n".join(e.splitlines()[:8]) for e in timeouts[:3]
    )
    # Every request to SCE was answered 2xx or 404: the node's batches, its self-registration and heartbeats,
    # and the test's own calls.
    failed = [a for a in cluster.sce_server.access() if a.status >= 400 and a.status != 404]
    assert not failed, failed


# ------------------------------------------------------------------------------ SCE restarted (last)

# Issue 30, item 8: SCE down this long while the node takes writes (each a failed send of the node's),
# then a registration at the node reaches the restarted SCE within this of being made.
SCE_OUTAGE_S = 10.0
SCE_RESUME_LIMIT_S = 1.0


def test_a_registration_at_the_node_reaches_a_restarted_sce_within_a_second(cluster, registrations):
    """After the log check, which it would disturb: it stops SCE and starts it again."""
    node, sce, server = cluster.node, cluster.sce, cluster.sce_server
    server.stop()
    outage_ends = time.monotonic() + SCE_OUTAGE_S
    during = []
    while time.monotonic() < outage_ends:
        during.append(registrations(node, new_instance(f"outage-{len(during)}")))
        time.sleep(1.0)

    mark = server.log_mark()
    restarted = time.monotonic()
    server.start()
    answered_at = None

    def answering() -> bool:
        nonlocal answered_at
        server.fail_if_exited()
        try:
            if answered_at is None and httpx.get(f"{sce.url}apps", timeout=1.0).status_code == 200:
                answered_at = time.monotonic()
        except httpx.TransportError:
            return False
        # Open with its start-up sync over (which reads its own client's copy, made before this test's
        # next write): from here only replication can carry a registration at the node.
        return answered_at is not None and "Started Eureka Server" in server.log_text(mark)

    wait_until(answering, SCE_START_TIMEOUT_S, lambda: f"SCE did not restart:\n{server.log_tail()}", 0.02)
    instance = registrations(node, new_instance("after-restart"))
    written_at = time.monotonic()
    arrived_at = None
    while arrived_at is None and time.monotonic() - written_at < TRAVEL_S:
        if sce.live(instance) is not None:
            arrived_at = time.monotonic()
        else:
            time.sleep(0.02)
    took = None if arrived_at is None else arrived_at - written_at
    logger.info(
        "SCE answered %.1f s after its start, was ready %.2f s later; the registration at the node "
        "reached it %s s after it was made",
        answered_at - restarted,
        written_at - answered_at,
        None if took is None else round(took, 2),
    )
    assert took is not None and took <= SCE_RESUME_LIMIT_S, (
        f"a registration at the node reached the restarted SCE after {took} s{cluster.diagnostics()}"
    )
    # What the node queued for SCE while it was down has arrived too.
    for queued in during:
        wait_until(lambda queued=queued: sce.live(queued), TRAVEL_S, f"{queued.instance_id} never at SCE")
