"""Warm restart: ``SavedStateTransfer.export_parts`` / ``restore`` (registry/domain/saved_state.py, the
format in registry/domain/snapshot_format.py) on a fake clock, and the snapshot store and keeper
(registry/runtime/snapshots.py) on a temporary directory.

The live restarts (a real gunicorn stopped and started again under heartbeats) are in
tests/deploy/test_warm_restart.py.
"""

from __future__ import annotations

import copy
import gzip
import logging
import zlib
from types import SimpleNamespace

import orjson
import pytest

from registry.domain import constants as c
from registry.domain.core import Registry, RegistryRules, Renew
from registry.domain.history import History
from registry.domain.instances import DataCenterInfo, freeze
from registry.domain.snapshot_format import SNAPSHOT_FORMAT, BadSnapshot
from registry.runtime import snapshots
from registry.runtime.composition import build_node
from registry.runtime.process import reset_node
from registry.runtime.sampler import take_sample
from registry.runtime.snapshots import (
    FILE_NAME,
    FileStore,
    RedisStore,
    WarmRestart,
    build_store,
    decode,
    encode,
    redis_key,
)
from registry.runtime.status import general_stats
from tests.domain.test_core import MIN, SEC, T0, inst

# The fast profile's numbers (eureka_site/settings.py): expected clients counted exactly from 0.
FAST = {
    "expected_number_of_clients_sending_renews": 0,
    "default_open_for_traffic_count": 0,
    "expected_clients_move_only_above_zero": False,
}


def fleet(config: dict | None = None) -> Registry:
    """A registry with a bit of everything a snapshot must carry: several apps, metadata, an Amazon
    data center, an override, a renewed lease, a cancelled one and a status change."""
    registry = Registry(RegistryRules(**{**FAST, **(config or {})}), T0)
    amazon = DataCenterInfo("Amazon", freeze({"instance-id": "i-123", "availability-zone": "eu-west-1a"}))
    registry.register(inst("ORDERS", 1, metadata=freeze({"zone": "a", "version": "1.2"})), T0)
    registry.register(inst("ORDERS", 2, data_center_info=amazon, asg_name="orders-asg"), T0 + SEC)
    registry.register(inst("BILLING", 3, status=c.STARTING), T0 + 2 * SEC)
    registry.register(inst("BILLING", 4), T0 + 3 * SEC)
    registry.register(inst("GONE", 5), T0 + 3 * SEC)
    registry.cancel("GONE", "host5:gone:8080", T0 + 4 * SEC)
    registry.set_status_override("ORDERS", "host2:orders:8080", c.OUT_OF_SERVICE, T0 + 5 * SEC)
    registry.renew("BILLING", "host4:billing:8080", T0 + 6 * SEC)
    return registry


def round_trip(state: dict) -> dict:
    """What a restarted node reads back: through the snapshot's real encoding."""
    return decode(encode(state))


def everything(registry: Registry, now: int) -> dict:
    """What a client, the console and self-preservation see of a registry."""
    full = registry.reads.snapshot()
    return {
        "apps": full.apps,
        "hashcode": full.hashcode,
        "overrides": {row[0]: row[1:] for row in registry._overrides.rows()},
        "stats": {key: value for key, value in registry.reads.stats(now).items() if key != "start_ts"},
        "self_preservation": registry.reads.self_preservation(now).below_threshold,
        # The ids themselves; a restarted log's next id is above them (see the change-log test).
        "changes": registry.changes.export()["entries"],
    }


def same_but_the_delta(restored: dict, saved: dict) -> bool:
    """``everything`` equal but the delta queue, which is not saved (a restored node's is empty)."""
    return restored["stats"]["delta_queue_length"] == 0 and {
        **restored,
        "stats": {**restored["stats"], "delta_queue_length": None},
    } == {**saved, "stats": {**saved["stats"], "delta_queue_length": None}}


# ------------------------------------------------------------------------------ round trip


def test_a_restored_registry_holds_the_same_leases_overrides_and_numbers():
    before = fleet()
    now = T0 + 7 * SEC
    state = round_trip(before.saved_state.export_parts(now).as_state())
    after = Registry(RegistryRules(**FAST), now + 2 * SEC)

    assert after.saved_state.restore(state, now + 2 * SEC) == 4
    assert same_but_the_delta(everything(after, now), everything(before, now))
    views = {view.instance.instance_id: view for _, views in after.reads.snapshot().apps for view in views}
    assert views["host2:orders:8080"].instance.data_center_info.metadata["instance-id"] == "i-123"
    assert views["host2:orders:8080"].instance.status == c.OUT_OF_SERVICE
    assert views["host1:orders:8080"].instance.metadata == {"zone": "a", "version": "1.2"}
    assert after.saved_state.restored is not None and after.saved_state.restored.age_ms == 2 * SEC


def test_after_a_restore_the_delta_is_empty_and_its_hashcode_is_the_full_registrys():
    before = fleet()
    after = Registry(RegistryRules(**FAST), T0 + 8 * SEC)
    after.saved_state.restore(
        round_trip(before.saved_state.export_parts(T0 + 7 * SEC).as_state()), T0 + 8 * SEC
    )
    delta = after.reads.snapshot_delta()
    assert delta.apps == []
    assert (
        delta.hashcode
        == after.reads.snapshot().hashcode
        == before.reads.snapshot().hashcode
        == "OUT_OF_SERVICE_1_STARTING_1_UP_2_"
    )


def test_the_change_log_goes_on_from_its_last_id_after_a_restore():
    before = fleet()
    state = round_trip(before.saved_state.export_parts(T0 + 7 * SEC).as_state())
    # The restarted node's own log would start from its start time; the restored one goes on.
    after = Registry(RegistryRules(**FAST), T0 + 8 * SEC)
    after.saved_state.restore(state, T0 + 8 * SEC)
    last = before.changes.last_id
    after.register(inst("NEW", 9), T0 + 9 * SEC)
    assert [change.id for change in after.reads.changes_since(last, 10)] == [after.changes.last_id]
    assert after.changes.oldest_id() == before.changes.oldest_id()


def test_a_restored_lease_expires_when_it_would_have_without_the_restart():
    registry = Registry(RegistryRules(**FAST, enable_self_preservation=False), T0)
    registry.register(inst("ORDERS", 1, duration=90), T0)
    registry.register(inst("ORDERS", 2, duration=90), T0)
    registry.renew("ORDERS", "host1:orders:8080", T0 + 30 * SEC)  # host2 never renews: dead
    state = round_trip(registry.saved_state.export_parts(T0 + 35 * SEC).as_state())

    restored = Registry(RegistryRules(**FAST, enable_self_preservation=False), T0 + 40 * SEC)
    restored.saved_state.restore(state, T0 + 40 * SEC)
    assert restored.run_eviction(T0 + 90 * SEC).evicted == []
    assert restored.run_eviction(T0 + 90 * SEC + 1).evicted == [("ORDERS", "host2:orders:8080")]
    assert restored.run_eviction(T0 + 120 * SEC).evicted == []
    assert restored.run_eviction(T0 + 120 * SEC + 1).evicted == [("ORDERS", "host1:orders:8080")]


def test_eurekas_lease_timing_survives_a_restore_too():
    config = {**FAST, "enable_self_preservation": False, "lease_expiry": "eureka"}
    registry = Registry(RegistryRules(**config), T0)
    registry.register(inst("ORDERS", 1, duration=90), T0)
    registry.renew("ORDERS", "host1:orders:8080", T0 + 10 * SEC)
    restored = Registry(RegistryRules(**config), T0 + 20 * SEC)
    restored.saved_state.restore(
        round_trip(registry.saved_state.export_parts(T0 + 15 * SEC).as_state()), T0 + 20 * SEC
    )
    # A renewed lease lives twice its duration with Eureka's timing (the Java server's known bug).
    assert restored.run_eviction(T0 + 190 * SEC).evicted == []
    assert restored.run_eviction(T0 + 190 * SEC + 1).evicted == [("ORDERS", "host1:orders:8080")]


def test_a_restored_node_renews_its_instances_without_a_404():
    before = fleet()
    after = Registry(RegistryRules(**FAST), T0 + 8 * SEC)
    after.saved_state.restore(
        round_trip(before.saved_state.export_parts(T0 + 7 * SEC).as_state()), T0 + 8 * SEC
    )
    for app, instance_id in [
        ("ORDERS", "host1:orders:8080"),
        ("ORDERS", "host2:orders:8080"),
        ("BILLING", "host4:billing:8080"),
    ]:
        assert after.renew(app, instance_id, T0 + 9 * SEC).outcome is Renew.OK, instance_id
    assert after.renew("GONE", "host5:gone:8080", T0 + 9 * SEC).outcome is Renew.NOT_FOUND
    # The override survived: a client's UP re-registration does not lift it.
    after.register(inst("ORDERS", 2), T0 + 10 * SEC)
    assert after.reads.lease("ORDERS", "host2:orders:8080")[0].instance.status == c.OUT_OF_SERVICE


def renewing_fleet(size: int, until: int) -> Registry:
    """``size`` instances registered at T0 and renewing every 30 s up to ``until``."""
    registry = Registry(RegistryRules(**FAST), T0)
    for n in range(size):
        registry.register(inst("ORDERS", n), T0)
    for at in range(T0 + 30 * SEC, until + 1, 30 * SEC):
        for n in range(size):
            registry.renew("ORDERS", f"host{n}:orders:8080", at)
    return registry


def test_self_preservation_carries_on_through_a_restart_instead_of_starting_over():
    registry = renewing_fleet(10, T0 + 3 * MIN)
    now = T0 + 3 * MIN + 5 * SEC
    assert not registry.reads.self_preservation(now).below_threshold
    state = round_trip(registry.saved_state.export_parts(now).as_state())

    fresh = Registry(RegistryRules(**FAST), now + 2 * SEC)
    fresh.saved_state.restore(state, now + 2 * SEC)
    sp = fresh.reads.self_preservation(now + 2 * SEC)
    # Started empty, the node would count 0 renews for a minute and show the banner (and evict nothing).
    assert (sp.expected_clients, sp.renews_threshold) == (10, 17)
    assert sp.renews_last_minute == 20 and not sp.below_threshold and sp.lease_expiration_enabled
    assert fresh.allows_reads(now + 2 * SEC)
    # A minute later the count is the restored node's own.
    for n in range(10):
        fresh.renew("ORDERS", f"host{n}:orders:8080", now + 30 * SEC)
    assert fresh.reads.self_preservation(now + 2 * SEC + MIN).renews_last_minute == 10


def test_the_start_up_sync_after_a_restore_adds_to_the_count_and_keeps_the_renew_measurement():
    registry = renewing_fleet(10, T0 + 3 * MIN)
    now = T0 + 3 * MIN + 5 * SEC
    fresh = Registry(RegistryRules(**FAST), now)
    fresh.saved_state.restore(round_trip(registry.saved_state.export_parts(now).as_state()), now)
    fresh.register(inst("FROM-PEER", 1), now + SEC, is_replication=True)
    fresh.open_for_traffic(11, now + 2 * SEC)
    sp = fresh.reads.self_preservation(now + 3 * SEC)
    assert (sp.expected_clients, sp.renews_last_minute, sp.below_threshold) == (11, 20, False)


def test_an_instance_registered_before_the_restore_is_kept_as_it_is():
    before = fleet()
    state = round_trip(before.saved_state.export_parts(T0 + 7 * SEC).as_state())
    after = Registry(RegistryRules(**FAST), T0 + 8 * SEC)
    newer = inst("ORDERS", 1, dirty=T0 + 8 * SEC, metadata=freeze({"zone": "b"}))
    after.register(newer, T0 + 8 * SEC)
    assert after.saved_state.restore(state, T0 + 8 * SEC) == 3
    assert after.reads.size() == 4
    assert after.reads.lease("ORDERS", "host1:orders:8080")[0].instance.metadata == {"zone": "b"}
    assert after.reads.snapshot().hashcode == "OUT_OF_SERVICE_1_STARTING_1_UP_2_"


def test_restore_through_the_api_serves_get_apps_byte_for_byte_as_before(eureka_options, clock, api, node):
    from tests.factories import instance_body

    for n in range(3):
        body = instance_body(app="ORDERS", host=f"10.0.0.{n}", metadata={"zone": "a"})
        assert api.post("/eureka/apps/ORDERS", body, format="json").status_code == 204
    clock.advance(2 * SEC)
    assert api.put("/eureka/apps/ORDERS/10.0.0.1:orders:8080/status?value=OUT_OF_SERVICE").status_code == 200
    clock.advance(2 * SEC)
    assert api.put("/eureka/apps/ORDERS/10.0.0.2:orders:8080").status_code == 200
    before = api.get("/eureka/apps", HTTP_ACCEPT="application/json").content
    state = round_trip(node.registry.saved_state.export_parts(clock()).as_state())

    clock.advance(SEC)
    restarted = build_node(eureka_options, clock=clock)
    restarted.registry.saved_state.restore(state, clock())
    reset_node(restarted)
    after = api.get("/eureka/apps", HTTP_ACCEPT="application/json").content
    # The versions__delta counter is the node's own (it counts payload builds, not changes).
    assert orjson.loads(after)["applications"].pop("versions__delta") is not None
    assert _without_delta_version(after) == _without_delta_version(before)
    assert b'"OUT_OF_SERVICE"' in after and b'"zone":"a"' in after


def _without_delta_version(payload: bytes) -> bytes:
    document = orjson.loads(payload)
    document["applications"].pop("versions__delta")
    return orjson.dumps(document)


# ------------------------------------------------------------------------------- refusals


def good_state() -> dict:
    return round_trip(fleet().saved_state.export_parts(T0 + 7 * SEC).as_state())


def assert_refused(
    state, message: str | None = None, now: int = T0 + 8 * SEC, max_age_ms: int | None = 90_000
) -> None:
    registry = Registry(RegistryRules(**FAST), now)
    with pytest.raises(BadSnapshot, match=message):
        registry.saved_state.restore(state, now, max_age_ms)
    # Nothing half-applied: the node is as empty as it started.
    assert (
        registry.reads.size() == 0
        and registry.reads.overrides() == {}
        and registry.saved_state.restored is None
    )
    assert (
        registry.reads.snapshot().apps == [] and registry.reads.self_preservation(now).expected_clients == 0
    )


def test_a_snapshot_of_another_format_is_refused():
    state = good_state()
    state["format"] = SNAPSHOT_FORMAT + 1
    assert_refused(state, f"snapshot format {SNAPSHOT_FORMAT + 1}, this node reads")
    assert_refused([1, 2, 3], "a JSON object")


def test_a_snapshot_older_than_the_maximum_age_is_refused():
    assert_refused(good_state(), "91001 ms old", now=T0 + 7 * SEC + 91_001)
    # At the limit it is still taken.
    registry = Registry(RegistryRules(**FAST), T0)
    assert registry.saved_state.restore(good_state(), T0 + 7 * SEC + 90_000, 90_000) == 4


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda s: s.pop("records"),
        lambda s: s.pop("lease_times"),
        lambda s: s.pop("saved_at"),
        lambda s: s.__setitem__("expected_clients", "10"),
        lambda s: s["records"][1].pop(),  # a short record
        lambda s: s["lease_times"][2].__setitem__(2, None),  # a renewal time that is not a number
        lambda s: s["records"][0].__setitem__(1, 42),  # an app name that is not text
        lambda s: s["lease_times"].append([]),  # more lease times than records
        lambda s: s["records"].pop(),  # fewer records than lease times
        lambda s: s["instance_fields"].append("hostname_typo"),
        lambda s: s["lease_fields"].reverse(),
        lambda s: s["overrides"].append(["only-an-id"]),
        lambda s: s["records"][0].__setitem__(15, ["not", "a", "map"]),  # metadata
        lambda s: s["changes"]["entries"][0].__setitem__("colour", "red"),
        lambda s: s["changes"].__setitem__("last_id", "many"),
        lambda s: s.__setitem__("changes", []),
    ],
)
def test_a_corrupt_snapshot_is_refused_whole(corrupt):
    state = copy.deepcopy(good_state())
    corrupt(state)
    assert_refused(state)


def drop_instance_field(state: dict, name: str) -> dict:
    index = state["instance_fields"].index(name)
    del state["instance_fields"][index]
    for values in state["records"]:
        del values[index]
    return state


def test_a_snapshot_without_an_optional_field_restores_it_with_its_default():
    state = drop_instance_field(drop_instance_field(good_state(), "asg_name"), "metadata")
    registry = Registry(RegistryRules(**FAST), T0 + 8 * SEC)
    assert registry.saved_state.restore(state, T0 + 8 * SEC) == 4
    view, _ = registry.reads.lease("ORDERS", "host2:orders:8080")
    assert view.instance.asg_name is None and view.instance.metadata == {}
    assert view.instance.data_center_info.metadata["instance-id"] == "i-123"
    assert_refused(drop_instance_field(good_state(), "host_name"), "'host_name' is missing")


def test_bytes_that_are_not_a_snapshot_are_refused_when_decoded():
    for data in (b"\x1f\x8b\x08\x00garbage", b"{not json", b""):
        with pytest.raises(BadSnapshot, match="not readable"):
            decode(data)
    assert decode(orjson.dumps({"format": 1})) == {"format": 1}  # plain JSON is read too


def test_a_snapshot_cut_short_between_or_inside_its_gzip_members_is_refused(tmp_path):
    """A written snapshot is many gzip members: one cut after a whole member is still valid gzip, and
    refused as JSON that ends early; one cut inside a member is refused as gzip."""
    _, _, store, _ = first_snapshot(tmp_path)
    data = store.load()
    assert decode(data)["format"] == SNAPSHOT_FORMAT
    decompressor = zlib.decompressobj(wbits=31)
    decompressor.decompress(data)
    first_member_end = len(data) - len(decompressor.unused_data)
    assert 0 < first_member_end < len(data)
    for cut in (first_member_end, first_member_end + 5, len(data) - 3):
        with pytest.raises(BadSnapshot, match="not readable"):
            decode(data[:cut])


# -------------------------------------------------------------------------- stores and keeper


def test_the_file_store_replaces_the_snapshot_whole_and_leaves_no_temporary_file(tmp_path):
    store = FileStore(tmp_path / "node" / FILE_NAME)
    assert store.load() is None
    store.save(b"first")
    store.save(b"second")
    assert store.load() == b"second"
    assert [path.name for path in (tmp_path / "node").iterdir()] == [FILE_NAME]


def test_a_failed_file_write_keeps_the_previous_snapshot(tmp_path, monkeypatch):
    store = FileStore(tmp_path / FILE_NAME)
    store.save(b"previous")

    def broken_replace(source, target):
        raise OSError("disk full")

    monkeypatch.setattr("registry.runtime.snapshots.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        store.save(b"next")
    assert store.load() == b"previous"
    assert [path.name for path in tmp_path.iterdir()] == [FILE_NAME]


class FakeRedis:
    def __init__(self):
        self.values: dict[str, bytes] = {}

    def set(self, key, value):
        self.values[key] = value

    def get(self, key):
        return self.values.get(key)


def test_each_mode_keeps_the_snapshot_where_its_node_keeps_its_files(tmp_path, eureka_options):
    embedded = build_store(eureka_options.with_changes(redis__url="", warm_restart__data_dir=str(tmp_path)))
    assert isinstance(embedded, FileStore) and embedded.path == tmp_path / FILE_NAME
    production = build_store(
        eureka_options.with_changes(
            redis__url="redis://127.0.0.1:1/0", redis__namespace="node-b", warm_restart__data_dir="x"
        )
    )
    assert isinstance(production, RedisStore) and production.key == redis_key("node-b") == "node-b:snapshot"


def keeper(registry: Registry, store, now: list[int], max_age_ms: int = 90_000) -> WarmRestart:
    return WarmRestart(registry, store, lambda: now[0], interval_ms=60_000, max_age_ms=max_age_ms)


def test_the_keeper_writes_a_snapshot_a_restarted_keeper_restores(tmp_path):
    now = [T0 + 7 * SEC]
    store = FileStore(tmp_path / FILE_NAME)
    report = keeper(fleet(), store, now).write()
    assert report is not None and report.instances == 4 and report.bytes == len(store.load())

    now[0] += 3 * SEC
    restarted = Registry(RegistryRules(**FAST), now[0])
    second = keeper(restarted, store, now)
    assert second.restore() == 4 and restarted.reads.size() == 4
    status = second.status(now[0])
    assert status["restored_instances"] == 4 and status["restored_snapshot_age_ms"] == 3 * SEC


def test_the_consoles_history_is_saved_beside_the_map_and_restored(tmp_path):
    now = [T0]
    registry = fleet()
    history = History(capacity=6, interval_ms=10 * SEC)
    for _ in range(4):
        now[0] += 10 * SEC
        history.record(
            take_sample(SimpleNamespace(registry=registry, cluster=None, remote_regions=None), now[0])
        )
    first = keeper(registry, FileStore(tmp_path / FILE_NAME), now)
    first.history = history
    assert first.write() is not None
    assert decode(first.store.load())["history"] == orjson.loads(orjson.dumps(history.export()))

    now[0] += 40 * SEC  # a minute's window at 10 s: three of the four samples are still in it
    second = keeper(Registry(RegistryRules(**FAST), now[0]), first.store, now)
    second.history = History(capacity=6, interval_ms=10 * SEC)
    assert second.restore() == 4
    assert second.history.samples() == history.samples()[1:]


def test_a_snapshot_without_a_history_restores_the_map_and_an_empty_history(tmp_path):
    now = [T0 + 7 * SEC]
    store = FileStore(tmp_path / FILE_NAME)
    assert keeper(fleet(), store, now).write() is not None
    assert "history" not in decode(store.load())
    second = keeper(Registry(RegistryRules(**FAST), now[0]), store, now)
    second.history = History()
    assert second.restore() == 4 and len(second.history) == 0


def first_snapshot(tmp_path) -> tuple[list[int], Registry, FileStore, WarmRestart]:
    """A fleet's keeper after its first write to a file: (its clock, the registry, the store, it)."""
    now = [T0 + 7 * SEC]
    registry = fleet()
    store = FileStore(tmp_path / FILE_NAME)
    writer = keeper(registry, store, now)
    writer.write()
    return now, registry, store, writer


def test_a_record_changed_between_two_snapshots_is_saved_as_changed_and_the_rest_reused(tmp_path):
    now, registry, store, writer = first_snapshot(tmp_path)
    first = decode(store.load())
    blocks = dict(writer._records._kept)
    encoded = writer._records.encoded
    registry.update_metadata("ORDERS", "host1:orders:8080", {"zone": "b"}, now[0])
    registry.renew("BILLING", "host4:billing:8080", now[0] + SEC)
    now[0] += 2 * SEC
    writer.write()
    second = decode(store.load())

    restored = Registry(RegistryRules(**FAST), now[0])
    restored.saved_state.restore(second, now[0])
    assert restored.reads.lease("ORDERS", "host1:orders:8080")[0].instance.metadata == {
        "zone": "b",
        "version": "1.2",
    }
    assert restored.reads.lease("BILLING", "host4:billing:8080")[0].last_renewal_ts == T0 + 8 * SEC
    assert everything(restored, now[0])["apps"] == everything(registry, now[0])["apps"]
    assert first["records"] != second["records"] and first["lease_times"] != second["lease_times"]
    # ORDERS' block (two records) was encoded again; BILLING's, whose lease only renewed, was reused.
    kept = writer._records._kept
    assert writer._records.encoded == encoded + 2
    assert kept[("BILLING", 0)] is blocks[("BILLING", 0)]
    assert kept[("ORDERS", 0)] is not blocks[("ORDERS", 0)]
    # What is kept between two snapshots is each block's gzip member, not its JSON.
    billing = [row for row in second["records"] if row[1] == "BILLING"]
    assert orjson.loads(b"[" + gzip.decompress(kept[("BILLING", 0)].member) + b"]") == billing


def test_the_snapshot_written_in_blocks_is_the_registrys_state_as_plain_data(tmp_path, monkeypatch):
    """Blocks of 2 records and of 3 change-log entries: apps and the log span several blocks, some
    reused and some encoded again, and the concatenated gzip members still decode to exactly
    ``export_parts(now).as_state()`` (what ``saved_state.restore`` reads)."""
    monkeypatch.setattr(snapshots, "RECORDS_PER_BLOCK", 2)
    monkeypatch.setattr(snapshots, "CHANGES_PER_BLOCK", 3)
    monkeypatch.setattr(snapshots, "TIMES_PER_PIECE", 4)
    now, registry, store, writer = first_snapshot(tmp_path)
    assert decode(store.load()) == registry.saved_state.export_parts(now[0]).as_state()
    for number in range(6, 13):
        registry.register(inst("ORDERS", number), now[0])
    now[0] += SEC
    writer.write()
    assert decode(store.load()) == registry.saved_state.export_parts(now[0]).as_state()
    registry.cancel("ORDERS", "host7:orders:8080", now[0])
    registry.set_status_override("BILLING", "host3:billing:8080", c.UP, now[0])
    now[0] += SEC
    writer.write()
    state = decode(store.load())
    assert state == registry.saved_state.export_parts(now[0]).as_state()
    assert state["format"] == SNAPSHOT_FORMAT and len(state["records"]) == len(state["lease_times"]) == 10

    restored = Registry(RegistryRules(**FAST), now[0])
    assert restored.saved_state.restore(state, now[0]) == 10
    assert same_but_the_delta(everything(restored, now[0]), everything(registry, now[0]))


def test_a_snapshot_of_the_previous_format_with_records_and_times_paired_is_still_restored():
    """Format 1 (written before this version) saved ``leases`` as [record, lease times] pairs: a node
    upgraded in place restarts warm from it."""
    now = T0 + 7 * SEC
    before = fleet()
    state = round_trip(before.saved_state.export_parts(now).as_state())
    records, times = state.pop("records"), state.pop("lease_times")
    previous = {**state, "format": 1, "leases": [list(pair) for pair in zip(records, times, strict=True)]}

    after = Registry(RegistryRules(**FAST), now + SEC)
    assert after.saved_state.restore(previous, now + SEC) == 4
    assert same_but_the_delta(everything(after, now + SEC), everything(before, now + SEC))


def test_change_log_entries_are_encoded_once_and_the_restored_log_is_the_saved_one(tmp_path):
    now, registry, store, writer = first_snapshot(tmp_path)
    entries = len(registry.changes.copy()[1])
    assert writer._changes.encoded == entries > 0
    registry.register(inst("BILLING", 6), now[0])
    now[0] += SEC
    writer.write()
    # The new entry's block is encoded again (with the entries before it in its block), not the log.
    assert entries < writer._changes.encoded <= entries + snapshots.CHANGES_PER_BLOCK

    restored = Registry(RegistryRules(**FAST), now[0])
    restored.saved_state.restore(decode(store.load()), now[0])
    assert restored.changes.copy()[1] == registry.changes.copy()[1]


def test_gzip_and_a_files_write_run_off_the_loop_a_redis_write_on_it(tmp_path):
    """A native thread may run what releases the GIL (gzip, a file's write and fsync), not a socket of
    the event loop's: the Redis store saves from the calling thread."""
    now = [T0 + 7 * SEC]

    class LoopStore:
        saves_off_loop = False

        def __init__(self):
            self.data = None

        def save(self, data):
            self.data = data

        def load(self):
            return self.data

        def describe(self):
            return "Redis key eureka:snapshot"

    for store, off_loop in ((FileStore(tmp_path / FILE_NAME), 2), (LoopStore(), 1)):
        writer = keeper(fleet(), store, now)
        ran = []

        def runner(function, ran=ran):
            ran.append(function)
            return function()

        writer.runner = runner
        assert writer.write() is not None
        assert len(ran) == off_loop
        assert decode(store.load())["format"] == SNAPSHOT_FORMAT


def test_the_keeper_starts_empty_and_says_why_when_the_snapshot_is_refused(tmp_path, caplog):
    now = [T0 + 7 * SEC]
    store = RedisStore(FakeRedis(), "eureka:snapshot")
    keeper(fleet(), store, now).write()
    now[0] += 100 * SEC
    registry = Registry(RegistryRules(**FAST), now[0])
    late = keeper(registry, store, now)
    with caplog.at_level(logging.WARNING, logger="registry.runtime.snapshots"):
        assert late.restore() == 0
    assert registry.reads.size() == 0
    assert "100000 ms old" in late.refused and "starting empty" in caplog.text

    store.client.values["eureka:snapshot"] = b"\x1f\x8bnot gzip"
    garbled = keeper(Registry(RegistryRules(**FAST), now[0]), store, now)
    assert garbled.restore() == 0 and "not readable" in garbled.refused


def test_a_store_that_fails_is_logged_once_and_the_node_goes_on(caplog):
    class Unreachable:
        saves_off_loop = False

        def save(self, data):
            raise ConnectionError("Redis is down")

        def load(self):
            raise ConnectionError("Redis is down")

        def describe(self):
            return "Redis key eureka:snapshot"

    now = [T0 + 7 * SEC]
    failing = keeper(fleet(), Unreachable(), now)
    with caplog.at_level(logging.ERROR, logger="registry.runtime.snapshots"):
        assert failing.write() is None
        assert failing.write() is None
    assert failing.failures == 2 and "Redis is down" in failing.last_error
    assert caplog.text.count("could not write the snapshot") == 1
    assert failing.restore() == 0 and "could not read" in failing.refused


def test_a_clean_stop_writes_the_map_as_it_is_at_the_stop(tmp_path):
    now = [T0 + 7 * SEC]
    registry = fleet()
    store = FileStore(tmp_path / FILE_NAME)
    running = keeper(registry, store, now)
    running.start()  # no snapshot yet: starts empty, then writes every minute
    registry.register(inst("LATE", 7), now[0])
    running.stop()
    state = decode(store.load())
    assert len(state["records"]) == 5 and state["saved_at"] == now[0]
    running.stop()  # a second stop (worker_exit after a test's reset) writes nothing more
    assert decode(store.load()) == state


def test_the_status_document_names_a_warm_restart(eureka_options, clock, tmp_path):
    eureka_options = eureka_options.with_changes(
        warm_restart__enabled=True, warm_restart__data_dir=str(tmp_path), redis__url=""
    )
    first = build_node(eureka_options, clock=clock)
    first.registry.register(inst("ORDERS", 1), clock())
    first.start_warm_restart()
    assert "warm-restart" not in general_stats(first, clock())
    first.stop()
    clock.advance(1_500)

    second = build_node(eureka_options, clock=clock)
    second.start_warm_restart()
    try:
        assert (
            general_stats(second, clock())["warm-restart"] == "restored 1 instances from a snapshot of 1.5 s"
        )
    finally:
        second.stop()


def test_nodes_do_not_restore_or_write_unless_started(eureka_options, clock, tmp_path):
    """Tests and manage.py commands build nodes too: only gunicorn's post_worker_init starts it."""
    eureka_options = eureka_options.with_changes(
        warm_restart__enabled=True, warm_restart__data_dir=str(tmp_path), redis__url=""
    )
    node = build_node(eureka_options, clock=clock)
    node.registry.register(inst("ORDERS", 1), clock())
    node.stop()
    assert list(tmp_path.iterdir()) == []
    eureka_options = eureka_options.with_changes(warm_restart__enabled=False)
    assert build_node(eureka_options, clock=clock).warm_restart is None


def periodic(tmp_path, interval_ms: int) -> WarmRestart:
    return WarmRestart(fleet(), FileStore(tmp_path / FILE_NAME), lambda: T0, interval_ms, max_age_ms=90_000)


def test_the_interval_stretches_so_that_writing_takes_at_most_a_twentieth_of_the_time(tmp_path):
    from registry.runtime.snapshots import WRITE_BUDGET, WriteReport

    keeper = periodic(tmp_path, interval_ms=5_000)
    assert keeper.next_interval_ms() == 5_000, "no write yet: the configured interval"
    keeper.last_write = WriteReport(T0, 1000, 10_000, took_ms=120.0)  # 10,000 instances
    assert keeper.next_interval_ms() == 5_000
    keeper.last_write = WriteReport(T0, 1000, 100_000, took_ms=1_500.0)  # 100,000 instances
    assert keeper.next_interval_ms() == 1_500 * WRITE_BUDGET == 30_000
    assert keeper.status(T0)["interval_ms"] == 30_000
    # Never so long that the latest snapshot would be too old to restore.
    keeper.last_write = WriteReport(T0, 1000, 300_000, took_ms=4_000.0)
    assert keeper.next_interval_ms() == 45_000
    # A configured interval longer than that is kept as it is.
    slow = periodic(tmp_path, interval_ms=60_000)
    slow.last_write = WriteReport(T0, 1000, 300_000, took_ms=4_000.0)
    assert slow.next_interval_ms() == 60_000


def test_the_loop_waits_the_stretched_interval(tmp_path):
    from registry.runtime.snapshots import WriteReport

    waits = []
    keeper = periodic(tmp_path, interval_ms=5_000)
    keeper.last_write = WriteReport(T0, 1000, 100_000, took_ms=2_000.0)

    class StopAfterOneWait:
        def wait(self, seconds):
            waits.append(seconds)
            return True

    keeper._stop = StopAfterOneWait()
    keeper._loop()
    assert waits == [40.0]


def test_leases_already_expired_at_restore_are_dropped_and_counted_not_served():
    """Issue 35, point 4: a restarted node listed leases its snapshot held already expired (9 of them
    in the fault test) until its first eviction run; the restore drops them by eviction's rule."""
    registry = Registry(RegistryRules(**FAST, enable_self_preservation=False), T0)
    registry.register(inst("ORDERS", 1, duration=6), T0)
    registry.register(inst("ORDERS", 2, duration=6), T0)
    registry.set_status_override("ORDERS", "host2:orders:8080", c.OUT_OF_SERVICE, T0)
    registry.renew("ORDERS", "host1:orders:8080", T0 + 5 * SEC)  # host2 stops renewing at T0
    state = round_trip(registry.saved_state.export_parts(T0 + 5 * SEC).as_state())

    # Restored 2 s after host2's lease ran out (T0 + 6 s), host1's still has 3 s to go.
    restored = Registry(RegistryRules(**FAST, enable_self_preservation=False), T0 + 8 * SEC)
    assert restored.saved_state.restore(state, T0 + 8 * SEC) == 1
    assert [view.instance.instance_id for _, views in restored.reads.snapshot().apps for view in views] == [
        "host1:orders:8080"
    ]
    assert restored.saved_state.restored.expired == 1 and restored.reads.size() == 1
    assert (
        restored.reads.overrides() == {}
        and restored.reads.self_preservation(T0 + 8 * SEC).expected_clients == 1
    )
    assert restored.renew("ORDERS", "host2:orders:8080", T0 + 8 * SEC).outcome is Renew.NOT_FOUND


def test_a_restore_in_self_preservation_keeps_expired_leases_as_eviction_would():
    registry = renewing_fleet(10, T0 + 3 * MIN)
    now = T0 + 3 * MIN + 5 * SEC
    state = round_trip(registry.saved_state.export_parts(now).as_state())
    # Restored after every lease ran out, with renews carried over that keep leases expiring: dropped.
    late = now + 2 * MIN
    fresh = Registry(RegistryRules(**FAST), late)
    assert (
        fresh.saved_state.restore(state, late, max_age_ms=None) == 0
        and fresh.saved_state.restored.expired == 10
    )
    # The same snapshot with renews below the threshold (self-preservation): eviction keeps them all.
    state["renews_last_minute"] = 0
    preserving = Registry(RegistryRules(**FAST), late)
    assert preserving.saved_state.restore(state, late) == 10 and preserving.saved_state.restored.expired == 0


def test_the_restore_log_line_counts_the_expired_leases_dropped(tmp_path, caplog):
    registry = Registry(RegistryRules(**FAST, enable_self_preservation=False), T0)
    registry.register(inst("ORDERS", 1, duration=6), T0)
    registry.register(inst("ORDERS", 2, duration=60), T0)
    store = FileStore(tmp_path / FILE_NAME)
    store.save(encode(registry.saved_state.export_parts(T0).as_state()))
    fresh = Registry(RegistryRules(**FAST, enable_self_preservation=False), T0 + 10 * SEC)
    keeper = WarmRestart(fresh, store, lambda: T0 + 10 * SEC, 5_000, 90_000)
    with caplog.at_level(logging.INFO, logger="registry.runtime.snapshots"):
        assert keeper.restore() == 1
    assert "restored 1 instances" in caplog.text and "1 leases already expired dropped" in caplog.text
    assert keeper.status(T0 + 10 * SEC)["restored_expired_dropped"] == 1
