"""Delta, reconcile hashcode and response-cache staleness seen through the API (protocol §5.9, §5.10,
gotchas G11, G12, G20). Expected hashcodes are written out from the protocol's rule, or recomputed
from the instances the server served, never taken from the server's own hashcode function."""

from __future__ import annotations

import copy

import pytest

from registry.runtime.jobs import prune_delta_queue, sync_response_cache
from tests.factories import instance_body

from .api_support import (
    by_id,
    enc,
    get_json,
    headers,
    instance_ids,
    json_instances,
    parse,
    reconcile_hashcode,
    register,
)

RETENTION_MS = 180_000


def hashcode(doc) -> str:
    return doc["applications"]["apps__hashcode"]


def version(doc) -> str:
    return doc["applications"]["versions__delta"]


def actions(doc) -> dict[str, str]:
    return {inst["instanceId"]: inst["actionType"] for inst in json_instances(doc)}


def iid(host: str, app: str = "ORDERS") -> str:
    return f"{host}:{app.lower()}:8080"


def forget_old_changes(node, clock) -> None:
    """Let the delta window pass and run the retention job, as the scheduler would."""
    clock.advance(RETENTION_MS + 1_000)
    prune_delta_queue(node, clock.now)


# ------------------------------------------------------------------------------------- hashcode


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_hashcode_counts_every_status_in_alphabetical_order(api, fmt):
    for n in range(12):
        register(api, instance_body(host=f"10.0.1.{n}"))
    register(api, instance_body(app="BILLING", host="10.0.2.1", status="DOWN"))
    for n in (10, 11):
        assert (
            api.put(f"/eureka/apps/ORDERS/{enc(iid(f'10.0.1.{n}'))}/status?value=OUT_OF_SERVICE").status_code
            == 200
        )

    root = parse(api.get("/eureka/apps/", **headers(fmt)))

    served = root.findtext("apps__hashcode") if fmt == "xml" else hashcode(root)
    assert served == "DOWN_1_OUT_OF_SERVICE_2_UP_10_"


def test_hashcode_counts_starting_and_unknown_too(api):
    register(api, instance_body(host="10.0.0.1", status="STARTING"))
    register(api, instance_body(host="10.0.0.2"))
    register(api, instance_body(host="10.0.0.3"))
    api.put(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.3'))}/status?value=OUT_OF_SERVICE")
    api.delete(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.3'))}/status")

    doc = get_json(api, "/eureka/apps/")

    assert hashcode(doc) == "STARTING_1_UNKNOWN_1_UP_1_"
    assert hashcode(doc) == reconcile_hashcode(i["status"] for i in json_instances(doc))


@pytest.mark.parametrize("path", ["/eureka/apps/", "/eureka/apps/delta"])
@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_empty_registry_hashcode_is_the_empty_string(api, path, fmt):
    root = parse(api.get(path, **headers(fmt)))

    if fmt == "json":
        assert hashcode(root) == ""
        assert root["applications"]["application"] == []
    else:
        assert (root.findtext("apps__hashcode") or "") == ""
        assert root.findall("application") == []


def test_hashcode_follows_cancel(api):
    register(api, instance_body(host="10.0.0.1"))
    register(api, instance_body(host="10.0.0.2", status="DOWN"))

    api.delete(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.2'))}")

    assert hashcode(get_json(api, "/eureka/apps/")) == "UP_1_"


def test_vip_hashcode_covers_only_the_vip_subset(api):
    register(api, instance_body(host="10.0.0.1"))
    register(api, instance_body(host="10.0.0.2", status="STARTING"))
    register(api, instance_body(app="BILLING", host="10.0.0.3", status="DOWN"))

    assert hashcode(get_json(api, "/eureka/vips/orders")) == "STARTING_1_UP_1_"
    assert hashcode(get_json(api, "/eureka/apps/")) == "DOWN_1_STARTING_1_UP_1_"


# ---------------------------------------------------------------------------------------- delta


def test_delta_reports_added_modified_and_deleted_with_current_data(api):
    register(api, instance_body(host="10.0.0.1"))
    register(api, instance_body(host="10.0.0.2"))
    register(api, instance_body(app="BILLING", host="10.0.0.3", vip="billing"))
    api.put(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.2'))}/status?value=OUT_OF_SERVICE")
    api.delete(f"/eureka/apps/BILLING/{enc(iid('10.0.0.3', 'BILLING'))}")

    doc = get_json(api, "/eureka/apps/delta")

    assert actions(doc) == {
        iid("10.0.0.1"): "ADDED",
        iid("10.0.0.2"): "MODIFIED",
        iid("10.0.0.3", "BILLING"): "DELETED",
    }
    entries = by_id(doc)
    assert entries[iid("10.0.0.2")]["status"] == "OUT_OF_SERVICE"
    deleted = entries[iid("10.0.0.3", "BILLING")]
    # A DELETED entry still carries the instance's identity (the Java builder needs app).
    assert (deleted["app"], deleted["hostName"], deleted["vipAddress"]) == ("BILLING", "10.0.0.3", "billing")
    assert deleted["leaseInfo"]["evictionTimestamp"] > 0
    # The hashcode is the full registry's: two ORDERS instances remain.
    assert hashcode(doc) == "OUT_OF_SERVICE_1_UP_1_"


def test_an_instance_changed_several_times_appears_once_with_its_latest_data(api):
    register(api, instance_body(host="10.0.0.1", last_dirty=1, metadata={"rev": "1"}))
    register(api, instance_body(host="10.0.0.1", last_dirty=2, metadata={"rev": "2"}))
    api.put(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.1'))}/status?value=DOWN")

    doc = get_json(api, "/eureka/apps/delta")

    instances = json_instances(doc)
    assert [i["instanceId"] for i in instances] == [iid("10.0.0.1")]
    assert instances[0]["metadata"] == {"rev": "2"}
    assert (instances[0]["status"], instances[0]["actionType"]) == ("DOWN", "MODIFIED")


def test_cancelled_then_re_registered_instance_appears_once_as_added(api):
    register(api, instance_body(host="10.0.0.1"))
    api.delete(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.1'))}")
    register(api, instance_body(host="10.0.0.1"))

    doc = get_json(api, "/eureka/apps/delta")

    assert actions(doc) == {iid("10.0.0.1"): "ADDED"}
    assert by_id(doc)[iid("10.0.0.1")]["leaseInfo"]["evictionTimestamp"] == 0


def test_metadata_update_appears_in_the_delta_as_a_re_registration(api, node, clock):
    register(api, instance_body(host="10.0.0.1"))
    forget_old_changes(node, clock)

    api.put(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.1'))}/metadata?zone=b")

    doc = get_json(api, "/eureka/apps/delta")
    entry = by_id(doc)[iid("10.0.0.1")]
    assert entry["metadata"] == {"zone": "b"}
    # Protocol §2.12 / G21: Eureka runs a full register, recorded as ADDED.
    assert entry["actionType"] == "ADDED"


def test_renewals_never_appear_in_the_delta(api, node, clock):
    register(api, instance_body(host="10.0.0.1"))
    forget_old_changes(node, clock)
    assert instance_ids(api.get("/eureka/apps/delta", **headers("json"))) == []

    for _ in range(3):
        clock.advance(30_000)
        assert api.put(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.1'))}").status_code == 200
        assert instance_ids(api.get("/eureka/apps/delta", **headers("json"))) == []
    node.cache.clear()
    assert instance_ids(api.get("/eureka/apps/delta", **headers("json"))) == []


def test_delta_forgets_changes_older_than_the_retention_window(api, node, clock):
    register(api, instance_body(host="10.0.0.1"))
    clock.advance(100_000)
    register(api, instance_body(host="10.0.0.2"))
    clock.advance(RETENTION_MS - 100_000 + 1_000)

    prune_delta_queue(node, clock.now)

    doc = get_json(api, "/eureka/apps/delta")
    assert actions(doc) == {iid("10.0.0.2"): "ADDED"}
    assert hashcode(doc) == "UP_2_"


def test_delta_hashcode_is_computed_over_the_full_registry(api, node, clock):
    for n in range(3):
        register(api, instance_body(host=f"10.0.0.{n}"))
    forget_old_changes(node, clock)

    register(api, instance_body(app="BILLING", host="10.0.9.9", status="STARTING"))

    delta = get_json(api, "/eureka/apps/delta")
    full = get_json(api, "/eureka/apps/")
    assert instance_ids(api.get("/eureka/apps/delta", **headers("json"))) == [iid("10.0.9.9", "BILLING")]
    assert hashcode(delta) == "STARTING_1_UP_3_"
    assert hashcode(delta) == hashcode(full)


def apply_delta(local: dict[str, dict], delta: dict) -> dict[str, dict]:
    """What DiscoveryClient.updateDelta does: ADDED/MODIFIED replace by id, DELETED removes."""
    merged = copy.deepcopy(local)
    for inst in json_instances(delta):
        if inst["actionType"] == "DELETED":
            merged.pop(inst["instanceId"], None)
        else:
            merged[inst["instanceId"]] = inst
    return merged


def test_a_client_applying_the_delta_reconciles_with_the_served_hashcode(api, clock):
    for n in range(4):
        register(api, instance_body(host=f"10.0.0.{n}", last_dirty=1))
    local = by_id(get_json(api, "/eureka/apps/"))
    clock.advance(30_000)

    register(api, instance_body(app="NEWAPP", host="10.0.5.5"))
    api.put(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.0'))}/status?value=OUT_OF_SERVICE")
    api.delete(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.1'))}")
    register(api, instance_body(host="10.0.0.2", status="DOWN", last_dirty=2))
    api.put(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.3'))}")
    delta = get_json(api, "/eureka/apps/delta")

    merged = apply_delta(local, delta)

    assert reconcile_hashcode(i["status"] for i in merged.values()) == hashcode(delta)
    full = get_json(api, "/eureka/apps/")
    assert hashcode(full) == hashcode(delta)
    assert {k: v["status"] for k, v in merged.items()} == {k: v["status"] for k, v in by_id(full).items()}


def test_versions_delta_changes_between_regenerations_and_full_stays_1(api):
    register(api, instance_body(host="10.0.0.1"))
    first = version(get_json(api, "/eureka/apps/delta"))

    register(api, instance_body(host="10.0.0.2"))
    second = version(get_json(api, "/eureka/apps/delta"))
    api.put(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.1'))}/status?value=DOWN")
    third = version(get_json(api, "/eureka/apps/delta"))

    assert len({first, second, third}) == 3
    assert all(int(v) > 0 for v in (first, second, third))
    assert version(get_json(api, "/eureka/apps/")) == "1"


def test_delta_versions_are_never_minus_one_even_when_empty(api):
    doc = get_json(api, "/eureka/apps/delta")

    assert int(version(doc)) != -1
    assert doc["applications"]["application"] == []


@pytest.fixture
def delta_disabled(edit_config):
    edit_config(registry__disable_delta=True)


def test_delta_is_403_with_an_empty_body_when_disabled(delta_disabled, api):
    register(api, instance_body())

    response = api.get("/eureka/apps/delta", **headers("json"))

    assert response.status_code == 403
    assert response.content == b""
    assert api.get("/eureka/apps/", **headers("json")).status_code == 200


# ------------------------------------------------------------------------- read-only cache tier


@pytest.fixture
def read_only_cache(edit_config):
    """The default tier setup of Eureka; request it before ``api``/``node``."""
    edit_config(response_cache__use_read_only=True)


CACHED_READS = [
    "/eureka/apps/",
    "/eureka/apps/delta",
    "/eureka/apps/ORDERS",
    "/eureka/vips/orders",
    "/eureka/svips/orders",
]


@pytest.mark.parametrize("path", CACHED_READS)
def test_cached_reads_stay_stale_until_the_read_only_tier_syncs(read_only_cache, api, node, clock, path):
    register(api, instance_body(host="10.0.0.1"))
    assert instance_ids(api.get(path, **headers("json"))) == [iid("10.0.0.1")]

    register(api, instance_body(host="10.0.0.2"))
    clock.advance(5_000)

    assert instance_ids(api.get(path, **headers("json"))) == [iid("10.0.0.1")]
    # Single-instance reads are live.
    assert api.get(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.2'))}").status_code == 200
    assert api.get(f"/eureka/instances/{enc(iid('10.0.0.2'))}").status_code == 200

    node.cache.sync(clock.now)

    assert instance_ids(api.get(path, **headers("json"))) == [iid("10.0.0.1"), iid("10.0.0.2")]


def test_an_app_read_as_404_is_not_kept_in_the_read_only_tier(read_only_cache, api, node, clock):
    """Eureka keeps the 404 until the sync; any name can be asked for, so a miss is not kept there
    (docs/differences.md): the registration shows at the next read."""
    assert api.get("/eureka/apps/ORDERS", **headers("json")).status_code == 404
    assert node.cache.read_only.keys() == []

    register(api, instance_body())

    assert api.get("/eureka/apps/ORDERS", **headers("json")).status_code == 200
    sync_response_cache(node, clock.advance(30_000))
    assert api.get("/eureka/apps/ORDERS", **headers("json")).status_code == 200


def test_cancel_stays_visible_in_cached_reads_until_the_sync(read_only_cache, api, node, clock):
    register(api, instance_body(host="10.0.0.1"))
    assert instance_ids(api.get("/eureka/apps/", **headers("xml"))) == [iid("10.0.0.1")]

    api.delete(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.1'))}")

    assert instance_ids(api.get("/eureka/apps/", **headers("xml"))) == [iid("10.0.0.1")]
    assert api.get(f"/eureka/apps/ORDERS/{enc(iid('10.0.0.1'))}").status_code == 404
    node.cache.sync(clock.now)
    assert instance_ids(api.get("/eureka/apps/", **headers("xml"))) == []


def test_a_key_read_for_the_first_time_is_fresh(read_only_cache, api, node):
    register(api, instance_body(host="10.0.0.1"))
    api.get("/eureka/apps/", **headers("json"))

    register(api, instance_body(host="10.0.0.2"))

    # Only the JSON full registry was filled; XML, compact and gzip-less variants load on first read.
    assert instance_ids(api.get("/eureka/apps/", **headers("xml"))) == [iid("10.0.0.1"), iid("10.0.0.2")]
    compact = get_json(api, "/eureka/apps/", HTTP_X_EUREKA_ACCEPT="compact")
    assert sorted(i["instanceId"] for i in json_instances(compact)) == [iid("10.0.0.1"), iid("10.0.0.2")]
    assert instance_ids(api.get("/eureka/apps/", **headers("json"))) == [iid("10.0.0.1")]


def test_stale_full_and_delta_still_agree_on_the_hashcode(read_only_cache, api, node, clock):
    register(api, instance_body(host="10.0.0.1"))
    api.get("/eureka/apps/", **headers("json"))
    api.get("/eureka/apps/delta", **headers("json"))

    register(api, instance_body(host="10.0.0.2", status="DOWN"))
    node.cache.sync(clock.advance(30_000))

    full = get_json(api, "/eureka/apps/")
    delta = get_json(api, "/eureka/apps/delta")
    assert hashcode(full) == hashcode(delta) == "DOWN_1_UP_1_"
    assert reconcile_hashcode(i["status"] for i in json_instances(full)) == hashcode(full)


def test_sync_without_changes_keeps_serving_the_same_bytes(read_only_cache, api, node, clock):
    register(api, instance_body())
    before = api.get("/eureka/apps/", **headers("json")).content

    node.cache.sync(clock.advance(30_000))

    assert api.get("/eureka/apps/", **headers("json")).content == before


def test_without_the_read_only_tier_writes_show_at_once(api):
    register(api, instance_body(host="10.0.0.1"))
    assert instance_ids(api.get("/eureka/apps/", **headers("json"))) == [iid("10.0.0.1")]

    register(api, instance_body(host="10.0.0.2"))

    assert instance_ids(api.get("/eureka/apps/", **headers("json"))) == [iid("10.0.0.1"), iid("10.0.0.2")]
    assert instance_ids(api.get("/eureka/vips/orders", **headers("json"))) == [
        iid("10.0.0.1"),
        iid("10.0.0.2"),
    ]
