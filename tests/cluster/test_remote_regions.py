"""Remote regions (registry/cluster/regions.py): fetching a region like a Eureka client (full, then
deltas, full again when the hashcode disagrees), and the payloads that merge it in (``?regions=``,
transparent fallback, whitelist, 403 before the first fetch), on the fake clock with a fake remote.

Expected hashcodes are recomputed from the instances a payload holds (api_support.reconcile_hashcode),
never taken from the server's own function. The behaviour followed is stock Spring Cloud Eureka
Server's, as measured with a remote region configured (docs/remote-regions.md)."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

import pytest
from bs4 import BeautifulSoup

from registry.cluster.regions import FetchFailed, RemoteRegions, region_limits
from registry.domain.endpoints import BadRegionConfig, Peer, Whitelist, parse_region_urls, parse_whitelist
from registry.runtime.composition import build_node
from registry.runtime.jobs import sync_response_cache
from registry.runtime.process import reset_node
from tests.factories import instance_body
from tests.protocol.api_support import (
    body_bytes,
    get_json,
    json_instances,
    reconcile_hashcode,
    register,
    xml_instances,
)

WEST = "http://user:s3cret@w1:8761/eureka/"
EAST = "http://e1:8761/eureka/"


def remote_instance(
    app: str, host: str, status: str = "UP", action: str = "ADDED", registered: int = 111
) -> dict:
    """An instance as a remote Eureka server serves it: its own lease times, action and timestamps."""
    body = instance_body(app=app, host=host, status=status)["instance"]
    body["leaseInfo"] = {
        "renewalIntervalInSecs": 30,
        "durationInSecs": 90,
        "registrationTimestamp": registered,
        "lastRenewalTimestamp": registered + 5,
        "evictionTimestamp": 0,
        "serviceUpTimestamp": registered + 1,
    }
    body["actionType"] = action
    body["lastUpdatedTimestamp"] = str(registered + 2)
    body["lastDirtyTimestamp"] = str(registered + 3)
    return body


def document(instances: list[dict], hashcode: str | None = None, version: str = "1") -> bytes:
    apps: dict[str, list[dict]] = {}
    for inst in instances:
        apps.setdefault(inst["app"], []).append(inst)
    if hashcode is None:
        hashcode = reconcile_hashcode(i["status"] for i in instances if i["actionType"] != "DELETED")
    return json.dumps(
        {
            "applications": {
                "versions__delta": version,
                "apps__hashcode": hashcode,
                "application": [{"name": name, "instance": insts} for name, insts in apps.items()],
            }
        }
    ).encode()


class FakeRemote:
    """A remote region's server: its registry, the delta it serves next, and every request made."""

    def __init__(self):
        self.instances: dict[str, dict] = {}
        self.delta: list[dict] = []
        self.delta_hashcode: str | None = None
        self.failure: str | None = None
        self.requests: list[str] = []

    def add(self, inst: dict) -> None:
        self.instances[inst["instanceId"]] = inst
        self.delta.append(inst)

    def cancel(self, instance_id: str) -> None:
        gone = dict(self.instances.pop(instance_id), actionType="DELETED")
        self.delta.append(gone)

    def serve(self, delta: bool) -> bytes:
        self.requests.append("delta" if delta else "full")
        if self.failure:
            raise FetchFailed(self.failure)
        if not delta:
            return document(list(self.instances.values()))
        hashcode = self.delta_hashcode
        if hashcode is None:
            hashcode = reconcile_hashcode(i["status"] for i in self.instances.values())
        return document(self.delta, hashcode)


URLS = {"us-west": WEST, "eu": EAST}
# What a region's answer may hold: the node's defaults.
LIMITS = region_limits(100_000, 262_144)


class FakeTransport:
    """Answers each region's requests from its FakeRemote; records the peers asked."""

    def __init__(self, remotes: dict[str, FakeRemote]):
        self.by_url = {Peer(URLS[name]).display_url: remote for name, remote in remotes.items()}
        self.peers: list[Peer] = []

    def fetch(self, peer: Peer, delta: bool) -> bytes:
        self.peers.append(peer)
        return self.by_url[peer.display_url].serve(delta)


def regions_of(clock, remotes: dict[str, FakeRemote], whitelist: Whitelist | None = None):
    transport = FakeTransport(remotes)
    changes: list[tuple[str, set[str]]] = []
    regions = RemoteRegions(
        {name: URLS[name] for name in remotes},
        whitelist or Whitelist(),
        transport,
        clock,
        on_change=lambda region, apps, vips: changes.append((region, apps)),
        spawn=lambda run: run(),
        limits=LIMITS,
    )
    return regions, transport, changes


def ids(app_views) -> dict[str, list[str]]:
    return {app: sorted(v.instance.instance_id for v in views) for app, views in app_views}


# ------------------------------------------------------------------------------------ fetching


def test_a_region_is_fetched_whole_first_then_by_delta(clock):
    west = FakeRemote()
    west.add(remote_instance("PAYMENTS", "10.2.0.1"))
    regions, transport, changes = regions_of(clock, {"us-west": west})
    assert not regions.ready()

    regions.fetch("us-west")
    assert west.requests == ["full"]
    assert regions.ready()
    assert ids(regions.applications(["us-west"])) == {"PAYMENTS": ["10.2.0.1:payments:8080"]}
    assert changes == [("us-west", {"PAYMENTS"})]
    # The server is asked as a Eureka server (its URL without credentials; they go as Basic auth).
    assert transport.peers[0].base_url == "http://w1:8761/eureka/"
    assert transport.peers[0].auth == ("user", "s3cret")

    west.delta = []
    west.add(remote_instance("PAYMENTS", "10.2.0.2"))
    west.cancel("10.2.0.1:payments:8080")
    clock.advance(30_000)
    regions.fetch("us-west")
    assert west.requests == ["full", "delta"]
    assert ids(regions.applications(["us-west"])) == {"PAYMENTS": ["10.2.0.2:payments:8080"]}
    # What the delta brought, the cancel included, is what the region's delta merges in.
    assert {
        v.instance.instance_id: v.instance.action_type for _, vs in regions.deltas(["us-west"]) for v in vs
    } == {
        "10.2.0.2:payments:8080": "ADDED",
        "10.2.0.1:payments:8080": "DELETED",
    }
    health = regions.health()[0]
    assert (health.full_fetches, health.delta_fetches, health.instances) == (1, 1, 1)
    assert health.last_success_at == clock.now


def test_a_delta_that_does_not_add_up_to_the_remote_hashcode_brings_a_full_fetch(clock):
    west = FakeRemote()
    west.add(remote_instance("PAYMENTS", "10.2.0.1"))
    regions, _, _ = regions_of(clock, {"us-west": west})
    regions.fetch("us-west")
    # The remote holds an instance its delta no longer shows (it left the delta window meanwhile).
    west.delta = []
    west.instances["10.2.0.9:payments:8080"] = remote_instance("PAYMENTS", "10.2.0.9", status="DOWN")
    regions.fetch("us-west")
    assert west.requests == ["full", "delta", "full"]
    assert ids(regions.applications(["us-west"])) == {
        "PAYMENTS": ["10.2.0.1:payments:8080", "10.2.0.9:payments:8080"]
    }
    assert regions.health()[0].hashcode_mismatches == 1


def test_a_remote_that_refuses_deltas_is_fetched_whole(clock):
    west = FakeRemote()
    west.add(remote_instance("PAYMENTS", "10.2.0.1"))
    regions, _, _ = regions_of(clock, {"us-west": west})
    regions.fetch("us-west")
    west.serve = lambda delta, serve=west.serve: (
        (_ for _ in ()).throw(FetchFailed("HTTP 403")) if delta else serve(False)
    )
    regions.fetch("us-west")
    assert regions.health()[0].full_fetches == 2
    assert regions.health()[0].last_error is None


def test_a_region_is_not_ready_until_its_first_fetch_and_keeps_its_last_registry_when_down(clock):
    west = FakeRemote()
    west.add(remote_instance("PAYMENTS", "10.2.0.1"))
    west.failure = "ConnectError: connection refused"
    regions, _, changes = regions_of(clock, {"us-west": west})
    regions.fetch("us-west")
    assert not regions.ready()
    assert regions.health()[0].last_error == "ConnectError: connection refused"
    assert changes == []

    west.failure = None
    regions.fetch("us-west")
    assert regions.ready()
    west.failure = "ReadTimeout"
    regions.fetch("us-west")
    # Still ready, still serving what it had (as Spring Cloud Eureka Server does).
    assert regions.ready()
    assert ids(regions.applications(["us-west"])) == {"PAYMENTS": ["10.2.0.1:payments:8080"]}
    assert regions.health()[0].last_error == "ReadTimeout"
    assert regions.health()[0].failures == 2


def test_every_region_must_be_ready(clock):
    west, east = FakeRemote(), FakeRemote()
    regions, _, _ = regions_of(clock, {"us-west": west, "eu": east})
    regions.fetch("us-west")
    assert not regions.ready()
    regions.fetch("eu")
    assert regions.ready()


def test_start_fetches_does_not_start_a_second_fetch_of_a_region_still_being_fetched(clock):
    west = FakeRemote()
    spawned = []
    regions, _, _ = regions_of(clock, {"us-west": west})
    regions._spawn = spawned.append
    assert regions.start_fetches() == 1
    assert regions.start_fetches() == 0
    spawned[0]()
    assert regions.start_fetches() == 1


def test_a_fetch_that_changes_nothing_tells_nobody(clock):
    west = FakeRemote()
    west.add(remote_instance("PAYMENTS", "10.2.0.1"))
    regions, _, changes = regions_of(clock, {"us-west": west})
    regions.fetch("us-west")
    west.delta = []
    regions.fetch("us-west")
    regions.fetch("us-west")
    assert len(changes) == 2  # the first fetch, then the delta going from everything to nothing


# ----------------------------------------------------------------------------------- settings


def test_region_urls_are_parsed_with_lower_case_names():
    assert parse_region_urls(["US-West=http://w1:8761/eureka", " eu = http://e1/eureka/ ", ""]) == {
        "us-west": "http://w1:8761/eureka/",
        "eu": "http://e1/eureka/",
    }


@pytest.mark.parametrize(
    "entry",
    [
        "us-west",
        "us-west=",
        "=http://w1/eureka/",
        "us west=http://w1/eureka/",
        "us-west=ftp://w1/",
        "a=http://[bad",
    ],
)
def test_bad_region_urls_are_refused(entry):
    with pytest.raises(BadRegionConfig):
        parse_region_urls([entry])


def test_a_region_given_twice_is_refused_and_credentials_are_not_shown():
    with pytest.raises(BadRegionConfig, match="twice"):
        parse_region_urls(["a=http://w1/eureka/", "A=http://w2/eureka/"])
    with pytest.raises(BadRegionConfig) as refused:
        parse_region_urls(["http://user:s3cret@w1/eureka/"])
    assert "s3cret" not in str(refused.value)


def test_whitelist_entries_per_region_or_for_every_region():
    whitelist = parse_whitelist(["payments", "us-west:Orders", "US-WEST:users"], ["us-west", "eu"])
    # us-west has its own list: only it; eu has none: the plain entries.
    assert whitelist.allows("us-west", "ORDERS") and whitelist.allows("us-west", "USERS")
    assert not whitelist.allows("us-west", "PAYMENTS")
    assert whitelist.allows("eu", "PAYMENTS") and not whitelist.allows("eu", "ORDERS")
    # No entries at all: every app.
    assert parse_whitelist([], ["eu"]).allows("eu", "ANYTHING")


@pytest.mark.parametrize("entry", ["asia:PAYMENTS", ":PAYMENTS", "us-west:"])
def test_bad_whitelist_entries_are_refused(entry):
    with pytest.raises(BadRegionConfig):
        parse_whitelist([entry], ["us-west"])


# --------------------------------------------------------------------------------- the API


@pytest.fixture
def west():
    remote = FakeRemote()
    remote.add(remote_instance("PAYMENTS", "10.2.0.1"))
    remote.add(remote_instance("PAYMENTS", "10.2.0.2", status="DOWN"))
    remote.add(remote_instance("USERS", "10.2.0.3"))
    return remote


def regional_node(eureka_options, clock, remotes: dict[str, FakeRemote], **settings):
    options = eureka_options.with_changes(
        remote_regions__urls={name: URLS[name] for name in remotes},
        **{f"remote_regions__{name}": value for name, value in settings.items()},
    )
    node = build_node(options, clock=clock)
    node.remote_regions.transport = FakeTransport(remotes)
    node.remote_regions._spawn = lambda run: run()
    reset_node(node)
    return node


@pytest.fixture
def west_node(eureka_options, clock, west):
    node = regional_node(eureka_options, clock, {"us-west": west})
    yield node
    reset_node(None)


def statuses_of(doc) -> list[str]:
    return [inst["status"] for inst in json_instances(doc)]


def ids_of(doc) -> list[str]:
    return sorted(inst["instanceId"] for inst in json_instances(doc))


LOCAL = "10.1.0.1:orders:8080"
WEST_IDS = ["10.2.0.1:payments:8080", "10.2.0.2:payments:8080", "10.2.0.3:users:8080"]


@pytest.mark.parametrize("path", ["/eureka/apps?regions=us-west", "/eureka/apps/delta?regions=us-west"])
def test_regions_are_refused_with_403_until_every_region_was_fetched(api, west_node, path):
    register(api, instance_body(host="10.1.0.1"))
    response = api.get(path, HTTP_ACCEPT="application/json")
    assert response.status_code == 403
    assert response.content == b""
    # An unknown region too: the Java server asks every region to be ready.
    assert api.get("/eureka/apps?regions=nowhere").status_code == 403
    # Without regions= the local registry is served meanwhile.
    assert ids_of(get_json(api, "/eureka/apps")) == [LOCAL]
    west_node.remote_regions.fetch_all()
    assert api.get(path, HTTP_ACCEPT="application/json").status_code == 200


def test_apps_with_regions_merges_the_region_and_counts_it_in_the_hashcode(api, west_node, west):
    register(api, instance_body(host="10.1.0.1"))
    west_node.remote_regions.fetch_all()
    doc = get_json(api, "/eureka/apps?regions=us-west")
    assert ids_of(doc) == sorted([LOCAL, *WEST_IDS])
    assert doc["applications"]["apps__hashcode"] == reconcile_hashcode(statuses_of(doc)) == "DOWN_1_UP_3_"
    assert doc["applications"]["versions__delta"] == "1"
    # The remote instances keep their own data.
    served = {inst["instanceId"]: inst for inst in json_instances(doc)}["10.2.0.1:payments:8080"]
    assert served["leaseInfo"]["registrationTimestamp"] == 111
    assert served["leaseInfo"]["lastRenewalTimestamp"] == 116
    assert served["actionType"] == "ADDED"
    assert served["lastDirtyTimestamp"] == "114"
    # Any spelling and order of the query is the same key and the same payload.
    again = api.get("/eureka/apps?regions=US-WEST,nowhere", HTTP_ACCEPT="application/json")
    assert body_bytes(again) == body_bytes(
        api.get("/eureka/apps?regions=us-west", HTTP_ACCEPT="application/json")
    )
    # An unknown region alone: the local registry.
    assert ids_of(get_json(api, "/eureka/apps?regions=nowhere")) == [LOCAL]


def test_apps_with_regions_in_xml(api, west_node):
    register(api, instance_body(host="10.1.0.1"))
    west_node.remote_regions.fetch_all()
    response = api.get("/eureka/apps?regions=us-west", HTTP_ACCEPT="application/xml")
    root = ET.fromstring(body_bytes(response))
    instances = xml_instances(root)
    assert sorted(i.findtext("instanceId") for i in instances) == sorted([LOCAL, *WEST_IDS])
    assert root.findtext("apps__hashcode") == reconcile_hashcode(i.findtext("status") for i in instances)
    assert sorted(a.findtext("name") for a in root.findall("application")) == ["ORDERS", "PAYMENTS", "USERS"]


def test_an_app_held_here_and_in_the_region_is_one_application(api, west_node, west):
    register(api, instance_body(app="PAYMENTS", host="10.1.0.5"))
    west_node.remote_regions.fetch_all()
    doc = get_json(api, "/eureka/apps?regions=us-west")
    payments = [a for a in doc["applications"]["application"] if a["name"] == "PAYMENTS"]
    assert len(payments) == 1
    assert sorted(i["instanceId"] for i in payments[0]["instance"]) == [
        "10.1.0.5:payments:8080",
        "10.2.0.1:payments:8080",
        "10.2.0.2:payments:8080",
    ]
    delta = get_json(api, "/eureka/apps/delta?regions=us-west")
    assert delta["applications"]["apps__hashcode"] == doc["applications"]["apps__hashcode"]
    assert len([a for a in delta["applications"]["application"] if a["name"] == "PAYMENTS"]) == 1


def test_the_delta_with_regions_merges_the_remote_delta_and_hashes_the_merged_registry(
    api, west_node, west, clock
):
    register(api, instance_body(host="10.1.0.1"))
    west_node.remote_regions.fetch_all()
    # After the first (full) fetch, the remote's part of the delta is its whole registry.
    delta = get_json(api, "/eureka/apps/delta?regions=us-west")
    assert ids_of(delta) == sorted([LOCAL, *WEST_IDS])

    west.delta = []
    west.cancel("10.2.0.1:payments:8080")
    west.add(remote_instance("USERS", "10.2.0.4", status="STARTING"))
    west_node.remote_regions.fetch_all()
    delta = get_json(api, "/eureka/apps/delta?regions=us-west")
    actions = {i["instanceId"]: i["actionType"] for i in json_instances(delta)}
    assert actions == {LOCAL: "ADDED", "10.2.0.1:payments:8080": "DELETED", "10.2.0.4:users:8080": "ADDED"}
    full = get_json(api, "/eureka/apps?regions=us-west")
    # The delta's hashcode is that of the merged full registry, which a client applying it computes.
    assert ids_of(full) == sorted(
        [LOCAL, "10.2.0.2:payments:8080", "10.2.0.3:users:8080", "10.2.0.4:users:8080"]
    )
    assert (
        delta["applications"]["apps__hashcode"]
        == reconcile_hashcode(statuses_of(full))
        == "DOWN_1_STARTING_1_UP_2_"
    )


def test_a_client_applying_full_then_deltas_reconciles(api, west_node, west, clock):
    """What a Java client with fetchRemoteRegionsRegistry does: its copy's hashcode equals the server's."""
    west_node.remote_regions.fetch_all()
    held = {i["instanceId"]: i for i in json_instances(get_json(api, "/eureka/apps?regions=us-west"))}
    for step in range(3):
        west.delta = []
        west.add(remote_instance("USERS", f"10.2.1.{step}", status="DOWN" if step % 2 else "UP"))
        register(api, instance_body(host=f"10.1.1.{step}"))
        west_node.remote_regions.fetch_all()
        clock.advance(1_000)
        delta = get_json(api, "/eureka/apps/delta?regions=us-west")
        for inst in json_instances(delta):
            if inst["actionType"] == "DELETED":
                held.pop(inst["instanceId"], None)
            else:
                held[inst["instanceId"]] = inst
        assert (
            reconcile_hashcode(i["status"] for i in held.values()) == delta["applications"]["apps__hashcode"]
        )


def test_whitelist_limits_the_merged_apps_and_the_hashcode(api, eureka_options, clock, west):
    node = regional_node(
        eureka_options,
        clock,
        {"us-west": west},
        whitelist=Whitelist(None, {"us-west": frozenset({"USERS"})}),
    )
    try:
        node.remote_regions.fetch_all()
        doc = get_json(api, "/eureka/apps?regions=us-west")
        assert ids_of(doc) == ["10.2.0.3:users:8080"]
        assert doc["applications"]["apps__hashcode"] == "UP_1_"
        delta = get_json(api, "/eureka/apps/delta?regions=us-west")
        assert ids_of(delta) == ["10.2.0.3:users:8080"]
        assert delta["applications"]["apps__hashcode"] == "UP_1_"
        # Looking one app up falls back to the regions whatever the whitelist (as Eureka).
        assert api.get("/eureka/apps/PAYMENTS", HTTP_ACCEPT="application/json").status_code == 200
    finally:
        reset_node(None)


def test_transparent_fallback_serves_the_regions_without_regions(api, west_node):
    register(api, instance_body(host="10.1.0.1"))
    west_node.remote_regions.fetch_all()
    doc = get_json(api, "/eureka/apps")
    assert ids_of(doc) == sorted([LOCAL, *WEST_IDS])
    assert doc["applications"]["apps__hashcode"] == "DOWN_1_UP_3_"
    assert get_json(api, "/eureka/apps/delta")["applications"]["apps__hashcode"] == "DOWN_1_UP_3_"
    app = get_json(api, "/eureka/apps/USERS")
    assert ids_of(app) == ["10.2.0.3:users:8080"]
    instance = get_json(api, "/eureka/apps/USERS/10.2.0.3:users:8080")
    assert instance["instance"]["leaseInfo"]["registrationTimestamp"] == 111
    by_id = get_json(api, "/eureka/instances/10.2.0.3:users:8080")
    assert by_id["instance"]["app"] == "USERS"
    # A Eureka server's read (a peer's start-up sync, another region's fetch) gets this region only,
    # so that remote instances are never copied into a peer's map, nor echoed between two regions.
    peer_read = get_json(api, "/eureka/apps", HTTP_DISCOVERYIDENTITY_NAME="DefaultServer")
    assert ids_of(peer_read) == [LOCAL]
    assert api.get("/eureka/apps/NOWHERE").status_code == 404


def test_without_transparent_fallback_only_regions_merges(api, eureka_options, clock, west):
    node = regional_node(eureka_options, clock, {"us-west": west}, transparent_fallback=False)
    try:
        register(api, instance_body(host="10.1.0.1"))
        node.remote_regions.fetch_all()
        assert ids_of(get_json(api, "/eureka/apps")) == [LOCAL]
        assert api.get("/eureka/apps/USERS").status_code == 404
        assert api.get("/eureka/apps/USERS/10.2.0.3:users:8080").status_code == 404
        assert api.get("/eureka/instances/10.2.0.3:users:8080").status_code == 404
        assert ids_of(get_json(api, "/eureka/apps?regions=us-west")) == sorted([LOCAL, *WEST_IDS])
    finally:
        reset_node(None)


def test_a_fetch_that_changed_the_region_reaches_the_read_only_tier_at_the_next_sync(
    api, west_node, west, clock
):
    """Spring Cloud Eureka Server serves a remote change only after a local write or 180 s; here the
    fetch drops the payloads it makes stale, and the next cache sync serves the change."""
    west_node.cache._use_read_only = True
    west_node.remote_regions.fetch_all()
    assert ids_of(get_json(api, "/eureka/apps?regions=us-west")) == WEST_IDS
    west.delta = []
    west.cancel("10.2.0.3:users:8080")
    west_node.remote_regions.fetch_all()
    clock.advance(500)
    sync_response_cache(west_node, clock.now)
    assert ids_of(get_json(api, "/eureka/apps?regions=us-west")) == WEST_IDS[:2]
    assert "10.2.0.3:users:8080" not in ids_of(get_json(api, "/eureka/apps"))


def test_the_console_health_never_shows_credentials(west_node, west):
    west.failure = "ConnectError: refused"
    west_node.remote_regions.fetch_all()
    (health,) = west_node.remote_regions.health()
    assert health.url == "http://w1:8761/eureka/"
    assert not health.ready and health.last_error == "ConnectError: refused"


def test_a_node_without_regions_ignores_regions(api, node):
    register(api, instance_body(host="10.1.0.1"))
    assert node.remote_regions is None
    assert "fetch_remote_regions" not in node.jobs
    assert ids_of(get_json(api, "/eureka/apps?regions=us-west")) == [LOCAL]
    assert ids_of(get_json(api, "/eureka/apps/delta?regions=us-west")) == [LOCAL]


# ------------------------------------------------------------------------------------ console


def remote_regions_block(client):
    page = BeautifulSoup(client.get("/").content.decode(), "html.parser")
    return page.select_one("#remote-regions")


def test_the_status_page_shows_each_region_and_its_error_to_staff_only(
    west_node, west, clock, client, admin_client
):
    west.failure = "ConnectError: [Errno 111] Connection refused (10.9.8.7:8761)"
    west_node.remote_regions.fetch_all()
    block = remote_regions_block(client)
    item = block.select_one('[data-region="us-west"]')
    text = " ".join(item.get_text(" ", strip=True).split())
    assert "us-west" in text and "http://w1:8761/eureka/" in text and "not ready" in text
    assert "s3cret" not in str(block)
    assert "failed" in text and "10.9.8.7" not in text
    staff_text = remote_regions_block(admin_client).get_text(" ", strip=True)
    assert "10.9.8.7" in staff_text

    west.failure = None
    clock.advance(5_000)
    west_node.remote_regions.fetch_all()
    clock.advance(3_000)
    text = " ".join(remote_regions_block(client).get_text(" ", strip=True).split())
    assert "ready" in text and "not ready" not in text
    assert "last fetch: 3 s ago" in text and "instances: 3" in text


def test_the_status_page_has_no_region_block_without_regions(node, client):
    assert remote_regions_block(client) is None


def test_metrics_show_each_region(west_node, west, clock, client):
    from tests.protocol.test_metrics import scrape, value

    west.failure = "ReadTimeout"
    west_node.remote_regions.fetch_all()
    samples = scrape(client)
    assert value(samples, "eureka_remote_region_ready", region="us-west") == 0
    assert value(samples, "eureka_remote_region_fetch_failures_total", region="us-west") == 1
    assert value(samples, "eureka_remote_region_seconds_since_last_fetch", region="us-west") is None
    west.failure = None
    west_node.remote_regions.fetch_all()
    clock.advance(4_000)
    samples = scrape(client)
    assert value(samples, "eureka_remote_region_ready", region="us-west") == 1
    assert value(samples, "eureka_remote_region_instances", region="us-west") == 3
    assert value(samples, "eureka_remote_region_seconds_since_last_fetch", region="us-west") == 4.0


def test_vips_include_the_regions_by_transparent_fallback_and_follow_their_changes(
    api, west_node, west, clock
):
    register(api, instance_body(app="PAYMENTS", host="10.1.0.9"))
    west_node.cache._use_read_only = True
    west_node.remote_regions.fetch_all()
    doc = get_json(api, "/eureka/vips/payments")
    assert ids_of(doc) == ["10.1.0.9:payments:8080", "10.2.0.1:payments:8080", "10.2.0.2:payments:8080"]
    assert len(doc["applications"]["application"]) == 1
    assert doc["applications"]["apps__hashcode"] == reconcile_hashcode(statuses_of(doc)) == "DOWN_1_UP_2_"
    assert ids_of(get_json(api, "/eureka/svips/users")) == ["10.2.0.3:users:8080"]
    west.delta = []
    west.cancel("10.2.0.2:payments:8080")
    west_node.remote_regions.fetch_all()
    clock.advance(500)
    sync_response_cache(west_node, clock.now)
    assert ids_of(get_json(api, "/eureka/vips/payments")) == [
        "10.1.0.9:payments:8080",
        "10.2.0.1:payments:8080",
    ]


def test_vips_are_local_without_transparent_fallback(api, eureka_options, clock, west):
    node = regional_node(eureka_options, clock, {"us-west": west}, transparent_fallback=False)
    try:
        node.remote_regions.fetch_all()
        assert get_json(api, "/eureka/vips/payments")["applications"]["application"] == []
    finally:
        reset_node(None)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"EUREKA_REMOTE_REGION_URLS": "us-west"},
            "EUREKA_REMOTE_REGION_URLS: 'us-west': expected region=http",
        ),
        (
            {
                "EUREKA_REMOTE_REGION_URLS": "us-west=http://w1/eureka/",
                "EUREKA_REMOTE_REGION_APP_WHITELIST": "eu:A",
            },
            "EUREKA_REMOTE_REGION_APP_WHITELIST: whitelist entry 'eu:A': no remote region 'eu' is configured",
        ),
        (
            {"EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": "0"},
            "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS: must be >= 1, got 0",
        ),
    ],
)
def test_bad_settings_stop_the_start_with_the_variable_named(env, message):
    from tests.runtime.test_logs import run_python

    result = run_python("import django; django.setup()", env)
    assert result.returncode != 0
    assert f"ImproperlyConfigured: {message}" in result.stderr


def test_a_password_in_a_region_url_is_masked_in_log_lines():
    from tests.runtime.test_logs import run_python

    result = run_python(
        "import django, logging\ndjango.setup()\nlogging.getLogger('x').warning('fetch failed: s3cret-pw')",
        {"EUREKA_REMOTE_REGION_URLS": "us-west=http://user:s3cret-pw@w1:8761/eureka/"},
    )
    assert result.returncode == 0, result.stderr
    assert "s3cret-pw" not in result.stderr and "fetch failed: ***" in result.stderr
