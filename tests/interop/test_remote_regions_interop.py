"""Remote regions, live: a node serves another Eureka's registry beside its own when asked ``?regions=``.

A node with ``EUREKA_REMOTE_REGION_URLS=us-west=<url>`` fetches that registry (full, then deltas, every
``EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS``) and merges it into ``GET apps?regions=us-west`` and
``GET apps/delta?regions=us-west``, with ``apps__hashcode`` counted over the merged registry, as the Java
server (``eureka.server.remote-region-urls-with-name``) does. Three set-ups, real processes on loopback:

* **Stock SCE as the region.** A standalone Spring Cloud Netflix Eureka Server (``tests/interop/sce``, the
  jar of ``test_sce_cluster.py``) is the node's ``us-west``, with a whitelist of one app. Instances
  registered, cancelled or taken out of service at SCE show in the node's views within a few fetches,
  records as SCE serves them, in JSON and XML; the delta carries SCE's own change records; the hashcode
  is the client's count over the merged listing (``reconcile_hash``); an app outside the whitelist never
  shows; a node whose region never answered refuses ``?regions=`` with 403, as SCE does.
* **A real client that asks for regions.** Two nodes of ours: ``home`` whose ``us-west`` is ``west``. The
  Netflix eureka-client (both generations, ``test_java_eureka_client.py``'s program) runs against
  ``home`` with ``eureka.fetchRemoteRegionsRegistry=us-west``: it fetches ``apps/?regions=us-west`` once,
  then deltas only (a hashcode that did not match its merged registry would make it fetch in full again),
  files the west instances under region us-west (``getApplicationsForARegion``; they are registered with
  an Amazon data center in zone ``us-west-1a``, which the client maps to its region through
  ``eureka.us-west.availabilityZones``) and follows a registration and a cancel at ``west`` by delta.
* **Our node as SCE's region.** SCE (``remote-region-urls-with-name.us-west``) fetches a node of ours:
  what the node serves is what SCE's ``RemoteRegionRegistry`` reads, and its deltas reconcile (one full
  fetch, then deltas only).

What SCE does with a remote region, measured with the same jar, in short: a region's fetched registry
is merged into ``?regions=`` views (region names in any case), the records as the region sent them; the
delta merges the region's last delta (its ``DELETED`` and ``MODIFIED`` records included); ``?regions=``
of an unconfigured name is the local registry; until every region was fetched once, ``?regions=``
requests get 403. SCE only refreshes a cached view when a *local* change invalidates it or the entry
expires (``response-cache-auto-expiration-in-seconds``, 180 s), so SCE as the home runs with a 1 s expiry.
"""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.factories import instance_body
from tests.interop import maven
from tests.interop.conftest import LiveServer, running_server, wait_until
from tests.interop.test_java_eureka_client import (  # noqa: F401 (pytest fixture)
    CONSUMER_PREFIX,
    java_classpath,
    java_clients,
    wait_for_consumer_on_deltas,
)
from tests.ports import free_port

pytestmark = pytest.mark.interop

REGION = "us-west"
# The node fetches its region every second (Eureka: 30 s).
FETCH_INTERVAL_S = 1
# A change at the region shows at the node within this: the region's read cache (1 s), one fetch, the
# node's read cache (1 s), and slack for a busy two-core machine.
TRAVEL_S = 15.0
# How long a change stays in the deltas of the two nodes of ``node_pair``.
DELTA_RETENTION_S = 15
# The one app of SCE's region the node merges (EUREKA_REMOTE_REGION_APP_WHITELIST); UNLISTED is not.
LISTED_APP = "REMOTEAPP"
UNLISTED_APP = "UNLISTED"
LOCAL_APP = "LOCALAPP"

# SCE: a modest heap, a quick start.
SCE_JVM_OPTIONS = maven.jvm_options("384m")
SCE_START_TIMEOUT_S = 120.0
SCE_STOP_TIMEOUT_S = 30.0

# The client-side region of the west instances: an Amazon zone, mapped to us-west by the client's
# eureka.us-west.availabilityZones (an instance of any other data center counts as local to a client).
WEST_ZONE = "us-west-1a"
JAVA_REGION_PROPERTIES = {
    "eureka.fetchRemoteRegionsRegistry": REGION,
    f"eureka.{REGION}.availabilityZones": WEST_ZONE,
}

JSON = {"Accept": "application/json"}
XML = {"Accept": "application/xml"}


# ---------------------------------------------------------------------------------------- hashcode


def as_list(value) -> list:
    """A listing's ``application`` / ``instance``: one item may come as an object instead of a list."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def instances_of(listing: dict) -> dict[str, dict]:
    """Instance id → record, over every application of an ``applications`` listing."""
    return {
        instance["instanceId"]: instance
        for application in as_list(listing.get("application"))
        for instance in as_list(application.get("instance"))
    }


def reconcile_hash(listing: dict) -> str:
    """The hashcode a Eureka client computes over a registry: instances counted per status, statuses in
    name order, each as ``STATUS_count_`` (Applications.getReconcileHashCode)."""
    counts = Counter(instance["status"] for instance in instances_of(listing).values())
    return "".join(f"{status}_{count}_" for status, count in sorted(counts.items()))


# ------------------------------------------------------------------------------------------- sides


def unique_host() -> str:
    """A host name no other test uses (instance ids are host:app:port)."""
    return f"h-{uuid.uuid4().hex[:10]}"


def amazon_data_center(zone: str, host: str) -> dict:
    return {
        "@class": "com.netflix.appinfo.AmazonInfo",
        "name": "Amazon",
        "metadata": {"availability-zone": zone, "instance-id": f"i-{host}", "local-ipv4": "10.9.0.1"},
    }


class Eureka:
    """One Eureka server (a node of ours or SCE) as a client speaks to it, over ``/eureka/``."""

    def __init__(self, name: str, base_url: str):
        self.name = name
        self.url = f"{base_url}/eureka/"
        self.http = httpx.Client(base_url=self.url, timeout=10.0)
        self.registered: list[tuple[str, str]] = []

    def __repr__(self) -> str:
        return self.name

    def register(self, app: str, host: str | None = None, status: str = "UP", **extra) -> str:
        host = host or unique_host()
        body = instance_body(app=app, host=host, status=status, **extra)
        response = self.http.post(f"apps/{app}", json=body)
        assert response.status_code == 204, (self, response.status_code, response.text[:300])
        instance_id = body["instance"]["instanceId"]
        self.registered.append((app, instance_id))
        return instance_id

    def cancel(self, app: str, instance_id: str) -> None:
        response = self.http.delete(f"apps/{app}/{quote(instance_id, safe='')}")
        assert response.status_code == 200, (self, response.status_code)

    def set_status(self, app: str, instance_id: str, value: str) -> None:
        response = self.http.put(f"apps/{app}/{quote(instance_id, safe='')}/status", params={"value": value})
        assert response.status_code == 200, (self, response.status_code)

    def get(self, path: str, headers: dict = JSON) -> httpx.Response:
        return self.http.get(path, headers=headers)

    def listing(self, path: str) -> dict:
        """A JSON ``applications`` listing (``apps``, ``apps/delta``, with a query)."""
        response = self.get(path)
        assert response.status_code == 200, (self, path, response.status_code, response.text[:300])
        return response.json()["applications"]

    def cleanup(self) -> None:
        for app, instance_id in self.registered:
            self.http.delete(f"apps/{app}/{quote(instance_id, safe='')}")
        self.registered.clear()

    def close(self) -> None:
        self.cleanup()
        self.http.close()


def xml_listing(response: httpx.Response) -> tuple[str, set[str]]:
    """An XML ``<applications>``: its apps__hashcode and instance ids."""
    assert response.status_code == 200, (response.status_code, response.text[:300])
    root = ET.fromstring(response.content)
    return root.findtext("apps__hashcode") or "", {i.findtext("instanceId") for i in root.iter("instance")}


def wait_listed(side: Eureka, path: str, ids: set[str], timeout: float = TRAVEL_S) -> dict:
    """Until ``side``'s listing at ``path`` holds every id of ``ids``; that listing."""

    def holds() -> dict | None:
        response = side.get(path)
        if response.status_code != 200:
            return None
        listing = response.json()["applications"]
        return listing if ids <= set(instances_of(listing)) else None

    return wait_until(
        holds, timeout, lambda: f"{side} {path} never listed {sorted(ids)}: {side.get(path).text[:600]}"
    )


def wait_unlisted(side: Eureka, path: str, ids: set[str], timeout: float = TRAVEL_S) -> dict:
    def free_of() -> dict | None:
        listing = side.listing(path)
        return listing if not ids & set(instances_of(listing)) else None

    return wait_until(free_of, timeout, lambda: f"{side} {path} still lists one of {sorted(ids)}")


# --------------------------------------------------------------------------------------------- SCE


class Sce(maven.JvmProcess):
    """A standalone stock SCE on 127.0.0.1 (registers nowhere, fetches nothing), with test timings and
    Tomcat's access log; ``extra`` adds settings (a remote region)."""

    def __init__(self, java: str, jar: Path, workdir: Path, extra: list[str]):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        arguments = [
            "--server.address=127.0.0.1",
            f"--server.port={self.port}",
            "--spring.application.name=sce-region",
            "--eureka.instance.hostname=127.0.0.1",
            "--eureka.client.register-with-eureka=false",
            "--eureka.client.fetch-registry=false",
            f"--eureka.client.service-url.defaultZone={self.base_url}/eureka/",
            # Readers see a change within a second (30 s); no self-preservation and no five minutes of
            # refused reads after an empty start-up sync (standalone, there is nothing to sync from).
            "--eureka.server.response-cache-update-interval-ms=1000",
            "--eureka.server.eviction-interval-timer-in-ms=1000",
            "--eureka.server.enable-self-preservation=false",
            "--eureka.server.wait-time-in-ms-when-sync-empty=0",
            "--server.tomcat.accesslog.enabled=true",
            f"--server.tomcat.accesslog.directory={workdir}",
            "--server.tomcat.accesslog.prefix=sce-access",
            "--server.tomcat.accesslog.suffix=.log",
            "--server.tomcat.accesslog.file-date-format=",
            "--server.tomcat.accesslog.buffered=false",
            "--server.tomcat.accesslog.pattern=%m %U %q %s",
            *extra,
        ]
        super().__init__([java, *SCE_JVM_OPTIONS, "-jar", str(jar), *arguments], workdir / "sce.log", 30.0)

    def __repr__(self) -> str:
        return "SCE"

    def wait_ready(self) -> None:
        def ready() -> bool:
            self.fail_if_exited()
            if "Started " not in self.log_text():
                return False
            try:
                return httpx.get(f"{self.base_url}/eureka/apps", timeout=2.0).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, SCE_START_TIMEOUT_S, lambda: f"SCE did not start:\n{self.log_tail()}", interval=0.5)


# ---------------------------------------------------------------------------------------- fixtures

REGION_APPS = f"apps?regions={REGION}"
REGION_DELTA = f"apps/delta?regions={REGION}"


def region_env(url: str, whitelist: str | None = None) -> dict[str, str]:
    """A node's settings for one remote region, ``us-west`` at ``url``, fetched every second."""
    env = {
        "EUREKA_REMOTE_REGION_URLS": f"{REGION}={url}",
        "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": str(FETCH_INTERVAL_S),
    }
    if whitelist is not None:
        env["EUREKA_REMOTE_REGION_APP_WHITELIST"] = whitelist
    return env


@pytest.fixture(scope="module")
def sce_jar() -> Path:
    maven.require_java()
    return maven.build_sce()


@dataclass(frozen=True)
class SceRegion:
    sce: Sce
    node: LiveServer


@pytest.fixture(scope="module")
def sce_region(sce_jar, http_server, tmp_path_factory) -> Iterator[SceRegion]:
    """A standalone SCE, and a node whose region us-west is that SCE, merging only ``LISTED_APP``."""
    workdir = tmp_path_factory.mktemp("sce_region")
    sce = Sce(maven.require_java(), sce_jar, workdir, [])
    sce.start()
    try:
        sce.wait_ready()
        (workdir / "node").mkdir()
        env = region_env(f"{sce.base_url}/eureka/", whitelist=f"{REGION}:{LISTED_APP}")
        with running_server(workdir / "node", env, server=http_server) as node:
            yield SceRegion(sce, node)
    finally:
        sce.stop()


@pytest.fixture
def sce_and_node(sce_region) -> Iterator[tuple[Eureka, Eureka]]:
    """(SCE, the node), each as a client speaks to it; what a test registered is cancelled after it."""
    sce = Eureka("SCE", sce_region.sce.base_url)
    node = Eureka("node", sce_region.node.base_url)
    try:
        yield sce, node
    finally:
        node.close()
        sce.close()


@dataclass(frozen=True)
class NodePair:
    west: LiveServer
    home: LiveServer


@pytest.fixture(scope="module")
def node_pair(http_server, tmp_path_factory) -> Iterator[NodePair]:
    """Two nodes of ours: ``home``, whose region us-west is ``west`` (no whitelist). Changes stay
    15 s in their deltas (the suite's 4 s elsewhere): a Java client that misses a change in every
    delta it reads would reconcile with a full fetch, which the client test counts as a failure."""
    workdir = tmp_path_factory.mktemp("node_pair")
    (workdir / "west").mkdir()
    (workdir / "home").mkdir()
    env = {"EUREKA_RETENTION_TIME_IN_DELTA_QUEUE_MS": str(DELTA_RETENTION_S * 1000)}
    with (
        running_server(workdir / "west", env, server=http_server) as west,
        running_server(workdir / "home", {**env, **region_env(west.url)}, server=http_server) as home,
    ):
        yield NodePair(west, home)


@pytest.fixture
def west_and_home(node_pair) -> Iterator[tuple[Eureka, Eureka]]:
    west = Eureka("west", node_pair.west.base_url)
    home = Eureka("home", node_pair.home.base_url)
    try:
        yield west, home
    finally:
        home.close()
        west.close()


def assert_region_views_agree(side: Eureka, timeout: float = TRAVEL_S) -> dict:
    """``apps?regions=``'s hashcode is the client's count over that very listing, and the delta's
    hashcode is the same (it covers the merged registry, not the delta). The two are read one after the
    other, so a change landing in between is waited out; the full listing is returned."""
    seen: list[str] = []

    def agree() -> dict | None:
        full = side.listing(REGION_APPS)
        assert full["apps__hashcode"] == reconcile_hash(full), (side, full["apps__hashcode"], full)
        delta = side.listing(REGION_DELTA)
        seen[:] = [full["apps__hashcode"], delta["apps__hashcode"]]
        return full if delta["apps__hashcode"] == full["apps__hashcode"] else None

    return wait_until(agree, timeout, lambda: f"{side}: full vs delta apps__hashcode {seen}")


# ------------------------------------------------------------------------------- SCE as the region


def test_instances_registered_at_sce_show_in_the_nodes_region_views(sce_and_node):
    sce, node = sce_and_node
    local = node.register(LOCAL_APP)
    up = sce.register(LISTED_APP)
    down = sce.register(LISTED_APP, status="DOWN")

    listing = wait_listed(node, REGION_APPS, {local, up, down})
    # The region's records as SCE serves them.
    at_sce = instances_of(sce.listing("apps"))
    served = instances_of(listing)
    for instance_id in (up, down):
        for key in ("app", "hostName", "ipAddr", "status", "port", "vipAddress", "lastDirtyTimestamp"):
            assert str(served[instance_id][key]) == str(at_sce[instance_id][key]), (key, served[instance_id])
        lease, sce_lease = served[instance_id]["leaseInfo"], at_sce[instance_id]["leaseInfo"]
        assert str(lease["registrationTimestamp"]) == str(sce_lease["registrationTimestamp"])
    assert served[down]["status"] == "DOWN"
    # The hashcode counts local and remote instances alike.
    assert listing["apps__hashcode"] == reconcile_hash(listing)
    assert "DOWN_" in listing["apps__hashcode"], listing["apps__hashcode"]

    # The same in XML.
    def xml_agrees() -> bool:
        xml_hash, xml_ids = xml_listing(node.get(REGION_APPS, XML))
        full = node.listing(REGION_APPS)
        return {local, up, down} <= xml_ids and xml_hash == full["apps__hashcode"]

    wait_until(xml_agrees, TRAVEL_S, lambda: f"XML: {node.get(REGION_APPS, XML).text[:800]}")

    # The delta merges SCE's change records (both registrations, ADDED) in. (SCE keeps a change 3 min in
    # its delta; the node's own registration may have left the node's 4 s window by now.)
    delta = wait_listed(node, REGION_DELTA, {up, down})
    records = instances_of(delta)
    assert records[up]["actionType"] == records[down]["actionType"] == "ADDED", records
    assert_region_views_agree(node)


def test_a_cancel_and_a_status_change_at_sce_reach_the_node(sce_and_node):
    sce, node = sce_and_node
    gone = sce.register(LISTED_APP)
    stays = sce.register(LISTED_APP)
    wait_listed(node, REGION_APPS, {gone, stays})

    sce.cancel(LISTED_APP, gone)
    sce.set_status(LISTED_APP, stays, "OUT_OF_SERVICE")

    def changed() -> dict | None:
        listing = node.listing(REGION_APPS)
        ids = instances_of(listing)
        return listing if gone not in ids and ids.get(stays, {}).get("status") == "OUT_OF_SERVICE" else None

    wait_until(changed, TRAVEL_S, lambda: f"node: {node.get(REGION_APPS).text[:800]}")

    # SCE's own records of the two changes come through the node's delta.
    def delta_carries_them() -> bool:
        records = instances_of(node.listing(REGION_DELTA))
        return (
            records.get(gone, {}).get("actionType") == "DELETED"
            and records.get(stays, {}).get("actionType") == "MODIFIED"
            and records[stays]["status"] == "OUT_OF_SERVICE"
        )

    wait_until(delta_carries_them, TRAVEL_S, lambda: f"node delta: {node.get(REGION_DELTA).text[:1200]}")
    assert_region_views_agree(node)


def test_apps_outside_the_whitelist_are_not_merged(sce_and_node):
    sce, node = sce_and_node
    # UNLISTED first: every view of SCE that holds the later LISTED_APP instance holds it too, so the
    # fetch that brings the listed one to the node brought the unlisted one as well.
    unlisted = sce.register(UNLISTED_APP)
    listed = sce.register(LISTED_APP)
    assert unlisted in instances_of(wait_listed(sce, "apps", {unlisted, listed}))

    listing = wait_listed(node, REGION_APPS, {listed})
    assert unlisted not in instances_of(listing)
    assert UNLISTED_APP not in {app["name"] for app in as_list(listing.get("application"))}
    delta = wait_listed(node, REGION_DELTA, {listed})
    assert unlisted not in instances_of(delta)
    # Not counted either: the hashcode is the count over the listing, which lacks it.
    full = assert_region_views_agree(node)
    assert unlisted not in instances_of(full)


def test_an_unknown_region_is_the_local_registry_and_region_names_ignore_case(sce_and_node):
    sce, node = sce_and_node
    local = node.register(LOCAL_APP)
    remote = sce.register(LISTED_APP)
    wait_listed(node, REGION_APPS, {local, remote})

    # ?regions=US-WEST asks for us-west (the Java server lower-cases the names).
    wait_listed(node, f"apps?regions={REGION.upper()}", {local, remote})
    # A region the node does not know adds nothing.
    nowhere = node.listing("apps?regions=nowhere")
    assert local in instances_of(nowhere)
    assert remote not in instances_of(nowhere)
    assert nowhere["apps__hashcode"] == reconcile_hash(nowhere)


def test_a_node_whose_region_never_answered_refuses_region_requests(http_server, tmp_path):
    """As SCE: until every region was fetched once, a request that asks for regions (any) gets 403,
    while the local views answer."""
    nothing_listens = free_port()
    env = region_env(f"http://127.0.0.1:{nothing_listens}/eureka/")
    with running_server(tmp_path, env, server=http_server) as server:
        node = Eureka("node", server.base_url)
        try:
            assert node.get("apps").status_code == 200
            assert node.get("apps/delta").status_code == 200
            for path in (REGION_APPS, REGION_DELTA, "apps?regions=nowhere"):
                assert node.get(path).status_code == 403, path
        finally:
            node.close()


# ------------------------------------------------------------------------- a node as the region


def test_a_node_serves_another_nodes_registry_as_its_region(west_and_home):
    west, home = west_and_home
    local = home.register(LOCAL_APP)
    first = west.register("WESTAPP")
    second = west.register("WESTAPP", status="OUT_OF_SERVICE")
    listing = wait_listed(home, REGION_APPS, {local, first, second})
    assert instances_of(listing)[second]["status"] == "OUT_OF_SERVICE"
    assert_region_views_agree(home)

    west.cancel("WESTAPP", first)
    wait_unlisted(home, REGION_APPS, {first})
    assert_region_views_agree(home)


# -------------------------------------------------------------------- a Java client asking for it


@pytest.fixture
def java_at_home(java_classpath, node_pair):  # noqa: F811 (the imported fixture, by name)
    """Java clients (each generation in turn) whose service URL is the home node."""
    with java_clients(java_classpath, node_pair.home) as start:
        yield start


def test_a_java_client_asking_for_the_region_gets_it_and_follows_it_by_delta(
    java_at_home, west_and_home, node_pair
):
    west, home = west_and_home
    local = home.register(LOCAL_APP)

    def west_instance() -> str:
        host = unique_host()
        return west.register("WESTAPP", host=host, dataCenterInfo=amazon_data_center(WEST_ZONE, host))

    first = west_instance()
    wait_listed(home, REGION_APPS, {local, first})

    since = node_pair.home.mark()
    client = java_at_home("consumer", "regionclient", 8201, system_properties=JAVA_REGION_PROPERTIES)

    def client_holds(ids: set[str]):
        def check() -> dict | None:
            state = client.state(apps=(LOCAL_APP, "WESTAPP"), vips=("westapp",), region=REGION)
            in_region = set(state["regionApps"].get("WESTAPP", []))
            return state if in_region == ids and set(state["regionVips"]["westapp"]) == ids else None

        return wait_until(check, TRAVEL_S, lambda: f"client's region {REGION}: {client.tail()}")

    state = client_holds({first})
    # The west instances are filed under the region, the home ones locally.
    assert state["apps"]["WESTAPP"] == []
    assert local in {i["instanceId"] for i in state["apps"][LOCAL_APP]}
    # It asked for the region.
    full_fetches = node_pair.home.requests("GET", f"{CONSUMER_PREFIX}apps/", since=since)
    assert full_fetches and all(f"regions={REGION}" in r.query for r in full_fetches), full_fetches

    wait_for_consumer_on_deltas(client)
    client_mark, log_mark = client.mark(), node_pair.home.mark()
    second = west_instance()
    client_holds({first, second})
    west.cancel("WESTAPP", first)
    client_holds({second})

    # By delta only: each delta's hashcode matched the client's merged registry, or it would have
    # fetched in full again.
    assert client.http("GetApplications", since=client_mark) == [], client.tail()
    assert node_pair.home.count("GET", f"{CONSUMER_PREFIX}apps/", since=log_mark) == 0
    deltas = node_pair.home.requests("GET", f"{CONSUMER_PREFIX}apps/delta", since=log_mark)
    assert len(deltas) >= 2 and all(f"regions={REGION}" in r.query for r in deltas), deltas
    assert all(e["status"] == 200 for e in client.http("GetDelta", since=client_mark)), client.tail()
    assert client.client_problems() == []


# ------------------------------------------------------------------------ our node as SCE's region


def test_sce_with_a_node_as_its_region_lists_the_nodes_instances(sce_jar, http_server, tmp_path):
    """SCE's RemoteRegionRegistry reads what the node serves: the node's instances show in SCE's
    ``apps?regions=us-west``, follow a registration and a cancel, and SCE keeps fetching deltas (a
    delta whose hashcode did not match would make it fetch the node's registry in full again). This
    one needs no remote-region support of the node: it checks the node's wire as SCE reads it."""
    (tmp_path / "node").mkdir()
    with running_server(tmp_path / "node", server=http_server) as server:
        node = Eureka("node", server.base_url)
        first = node.register("NODEAPP")
        sce_process = Sce(
            maven.require_java(),
            sce_jar,
            tmp_path,
            [
                f"--eureka.server.remote-region-urls-with-name.{REGION}={server.url}",
                f"--eureka.server.remote-region-registry-fetch-interval={FETCH_INTERVAL_S}",
                # SCE refreshes a cached view only on a local change or when the entry expires (180 s).
                "--eureka.server.response-cache-auto-expiration-in-seconds=1",
            ],
        )
        sce_process.start()
        sce = Eureka("SCE", sce_process.base_url)
        try:
            sce_process.wait_ready()
            listing = wait_listed(sce, REGION_APPS, {first}, timeout=30)
            at_node = instances_of(node.listing("apps"))[first]
            at_sce = instances_of(listing)[first]
            for key in ("app", "hostName", "status", "vipAddress", "lastDirtyTimestamp"):
                assert str(at_sce[key]) == str(at_node[key]), (key, at_sce)
            assert listing["apps__hashcode"] == reconcile_hash(listing)

            mark = server.mark()
            second = node.register("NODEAPP", status="DOWN")
            wait_listed(sce, REGION_APPS, {first, second})
            node.cancel("NODEAPP", first)
            wait_unlisted(sce, REGION_APPS, {first})

            fetches = [r for r in server.requests("GET", since=mark) if r.path.startswith("/eureka/apps")]
            # SCE's full fetch is GET apps/ (the test's own reads are GET apps, none after the mark).
            assert [r for r in fetches if r.path == "/eureka/apps/"] == [], fetches
            assert len([r for r in fetches if r.path == "/eureka/apps/delta"]) >= 2, fetches
            assert "Reconcile hashcodes do not match" not in sce_process.log_text()
        finally:
            sce.close()
            node.close()
            sce_process.stop()
