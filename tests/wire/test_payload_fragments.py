"""The full registry and the delta assembled from serialized pieces are byte for byte a full
serialization (registry/wire/payloads.py), and a change re-serializes only what it changed."""

from __future__ import annotations

import copy
import gzip
import random
import re

import pytest

from registry.cache.response_cache import APP, APPS, DELTA, CacheKey, compress
from registry.domain import constants as c
from registry.domain.core import Registry, RegistryRules
from registry.wire.codecs import build_instance
from registry.wire.payloads import PayloadBuilder, build_payload
from tests.conftest import FakeClock
from tests.factories import instance_body

KEYS = [CacheKey(APPS, "", fmt, compact) for fmt in ("json", "xml") for compact in (False, True)]
DELTA_KEYS = [CacheKey(DELTA, "", fmt, compact) for fmt in ("json", "xml") for compact in (False, True)]
VERSION = re.compile(rb'("versions__delta":"|<versions__delta>)[0-9]+')


def without_version(payload: bytes) -> bytes:
    """Every delta snapshot takes the next version number: compare the rest."""
    return VERSION.sub(rb"\1N", payload)


def wired(clock) -> tuple[Registry, PayloadBuilder]:
    holder: list[PayloadBuilder] = []
    registry = Registry(RegistryRules(), clock(), on_change=lambda app, vips: holder[0].invalidate(app))
    builder = PayloadBuilder(registry, clock, expire_ms=180_000)
    holder.append(builder)
    return registry, builder


def populated(seed: int, instances: int) -> tuple[FakeClock, Registry, PayloadBuilder]:
    """A wired registry with ``instances`` random registrations."""
    clock = FakeClock()
    registry, builder = wired(clock)
    rng = random.Random(seed)
    for n in range(instances):
        register(registry, clock, rng, n)
    return clock, registry, builder


def register(registry, clock, rng: random.Random, n: int) -> None:
    app = f"APP-{rng.randrange(6)}"
    metadata = {"zone": rng.choice(["a", "b"]), "odd_key": "x&<y>"} if rng.random() < 0.5 else {}
    raw = copy.deepcopy(
        instance_body(app=app, host=f"10.0.0.{n % 250}", instance_id=f"{app.lower()}-{n}", metadata=metadata)
    )["instance"]
    raw["status"] = rng.choice([c.UP, c.UP, c.UP, c.DOWN, c.STARTING])
    if rng.random() < 0.2:
        raw["dataCenterInfo"] = {
            "@class": c.AMAZON_DATA_CENTER_CLASS,
            "name": "Amazon",
            "metadata": {"instance-id": f"i-{n}", "availability-zone": "eu-west-1a"},
        }
    registry.register(build_instance(raw, clock(), path_app=app), clock.advance(1))


def random_write(registry, clock, rng: random.Random, n: int) -> None:
    """A write that changes the registry. (An override that changes nothing is a renewal in Eureka:
    it moves the lease's lastRenewalTimestamp and, like a heartbeat, no cached payload.)"""
    listed = [(app, inst) for app, instances in registry.reads.instances() for inst in instances]
    overridden = registry.reads.overrides()
    choice = rng.random()
    if not listed or choice < 0.4:
        register(registry, clock, rng, n)
        return
    app, instance = rng.choice(listed)
    if choice < 0.55:
        registry.cancel(app, instance.instance_id, clock.advance(1))
    elif choice < 0.7 and instance.status != c.OUT_OF_SERVICE:
        registry.set_status_override(app, instance.instance_id, c.OUT_OF_SERVICE, clock.advance(1))
    elif choice < 0.8 and instance.instance_id in overridden:
        registry.remove_status_override(app, instance.instance_id, clock.advance(1), c.UP)
    else:
        registry.update_metadata(app, instance.instance_id, {"build": str(n)}, clock.advance(1))


@pytest.mark.parametrize("seed", range(8))
def test_assembled_payloads_equal_a_full_serialization_after_random_changes(seed):
    rng = random.Random(seed)
    clock = FakeClock()
    registry, builder = wired(clock)
    for n in range(40):
        register(registry, clock, rng, n)
    for round_ in range(12):
        for key in KEYS:
            assert builder.build(key) == build_payload(registry, key), (seed, round_, key)
        for key in DELTA_KEYS:
            assembled, full = builder.build(key), build_payload(registry, key)
            assert without_version(assembled) == without_version(full), (seed, round_, key)
        for app in registry.reads.app_names():
            for fmt in ("json", "xml"):
                key = CacheKey(APP, app, fmt, rng.random() < 0.5)
                assert builder.build(key) == build_payload(registry, key), (seed, round_, key)
        for n in range(rng.randrange(1, 6)):
            random_write(registry, clock, rng, 1000 + round_ * 10 + n)


def test_an_empty_registry_and_an_unknown_app():
    clock = FakeClock()
    registry, builder = wired(clock)
    for key in KEYS:
        assert builder.build(key) == build_payload(registry, key)
    assert builder.build(CacheKey(APP, "NOPE", "json")) is None


def test_a_change_re_serializes_its_own_application_only():
    clock, registry, builder = populated(seed=1, instances=60)
    key = CacheKey(APPS, "", "json")
    builder.build(key)
    built = builder.fragments_built
    assert built == len(registry.reads.app_names())
    app, instances = registry.reads.instances()[0]
    registry.set_status_override(app, instances[0].instance_id, c.OUT_OF_SERVICE, clock.advance(1))
    assert builder.build(key) == build_payload(registry, key)
    assert builder.fragments_built == built + 1


def test_the_hashcode_describes_the_instances_of_the_payload():
    clock, registry, builder = populated(seed=2, instances=30)
    payload = builder.build(CacheKey(APPS, "", "json"))
    assert payload == build_payload(registry, CacheKey(APPS, "", "json"))
    assert b'"apps__hashcode":"' in payload


def test_fragments_expire_like_any_cached_payload():
    clock, registry, builder = populated(seed=3, instances=10)
    key = CacheKey(APPS, "", "json")
    first = builder.build(key)
    app, instances = registry.reads.instances()[0]
    registry.renew(app, instances[0].instance_id, clock.advance(5_000))
    # A renewal changes no fragment (as it changes no cached payload in Eureka) ...
    assert builder.build(key) == first
    # ... until the fragment expires, when it is serialized again with the lease as it is now.
    clock.advance(180_000)
    assert builder.build(key) == build_payload(registry, key) != first


def test_a_fragment_built_across_a_change_is_not_kept():
    clock = FakeClock()
    registry, builder = wired(clock)
    rng = random.Random(4)
    register(registry, clock, rng, 1)
    app = registry.reads.app_names()[0]
    real_snapshot = registry.reads.snapshot_app

    def snapshot_then_change(name):
        views = real_snapshot(name)
        builder.invalidate(name)  # a write lands while the fragment is being serialized
        return views

    registry.reads.snapshot_app = snapshot_then_change
    builder.fragment(app, "json", False)
    registry.reads.snapshot_app = real_snapshot
    before = builder.fragments_built
    builder.fragment(app, "json", False)
    assert builder.fragments_built == before + 1, "the fragment of the stale snapshot was dropped"


def test_a_change_re_serializes_its_own_instance_only_in_the_registry_and_the_delta():
    clock, registry, builder = populated(seed=5, instances=60)
    apps_key, delta_key = CacheKey(APPS, "", "json"), CacheKey(DELTA, "", "json")
    builder.build(apps_key)
    builder.build(delta_key)
    assert builder.instances_serialized == 60, "the delta reuses the bytes the registry's build made"
    app, instances = registry.reads.instances()[0]
    registry.update_metadata(app, instances[0].instance_id, {"build": "2"}, clock.advance(1))
    registry.cancel(app, instances[1].instance_id, clock.advance(1))
    assert builder.build(apps_key) == build_payload(registry, apps_key)
    assert without_version(builder.build(delta_key)) == without_version(build_payload(registry, delta_key))
    # The changed record and the cancelled one (DELETED, with its eviction time): two, not 60.
    assert builder.instances_serialized == 62


def test_instance_bytes_of_cancelled_instances_are_swept_after_they_expire():
    clock, registry, builder = populated(seed=6, instances=20)
    key = CacheKey(APPS, "", "json")
    builder.build(key)
    for app, instances in registry.reads.instances():
        for instance in instances[:1]:
            registry.cancel(app, instance.instance_id, clock.advance(1))
    assert registry.reads.size() < 20
    builder.build(CacheKey(DELTA, "", "json"))  # serializes the DELETED records in their slots
    assert len(builder._instances[("json", False)]) == 20
    clock.advance(180_000)
    builder.build(key)
    assert len(builder._instances[("json", False)]) == registry.reads.size(), "only live instances are kept"


def entries_of(builder, app: str, fmt: str = "json"):
    return {k[1]: e for k, e in builder._instances[(fmt, False)].items() if k[0] == app}


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_instance_bytes_are_views_of_their_apps_fragment_and_keep_no_old_fragment_alive(fmt):
    clock, registry, builder = populated(seed=8, instances=30)
    builder.build(CacheKey(APPS, "", fmt))
    app, instances = registry.reads.instances()[0]
    first = builder.fragment(app, fmt, False).body
    entries = entries_of(builder, app, fmt)
    assert len(entries) == len(instances)
    views = [isinstance(e.body, memoryview) and e.body.obj is first for e in entries.values()]
    assert all(views), "no own copy"
    gone = instances[0].instance_id
    registry.cancel(app, gone, clock.advance(1))
    registry.update_metadata(app, instances[1].instance_id, {"build": "2"}, clock.advance(1))
    assert builder.build(CacheKey(APPS, "", fmt)) == build_payload(registry, CacheKey(APPS, "", fmt))
    second = builder.fragment(app, fmt, False).body
    assert second is not first
    entries = entries_of(builder, app, fmt)
    assert not any(isinstance(e.body, memoryview) and e.body.obj is first for e in entries.values()), (
        "an entry still holds the old fragment"
    )
    assert isinstance(entries[gone].body, bytes), "the cancelled instance's bytes are its own again"
    assert all(entries[i.instance_id].body.obj is second for i in registry.reads.instances()[0][1])


def test_a_delta_holding_every_instance_of_an_app_is_joined_from_the_apps_fragment_itself():
    clock, registry, builder = populated(seed=9, instances=30)
    builder.build(CacheKey(APPS, "", "json"))
    delta_key = CacheKey(DELTA, "", "json")
    assembled = builder.build(delta_key)
    assert without_version(assembled) == without_version(build_payload(registry, delta_key))
    reused = [
        app
        for app, (_, part) in builder._delta_fragments[("json", False)].items()
        if part.body is builder.fragment(app, "json", False).body
    ]
    assert sorted(reused) == sorted(registry.reads.app_names()), "every app registered in the delta window"
    app, instances = registry.reads.instances()[0]
    registry.cancel(app, instances[0].instance_id, clock.advance(1))
    assert without_version(builder.build(delta_key)) == without_version(build_payload(registry, delta_key))
    part = builder._delta_fragments[("json", False)][app][1]
    assert part.body is not builder.fragment(app, "json", False).body, "the DELETED record is not in the app"


def test_a_heartbeat_changes_no_delta_bytes_until_they_expire():
    clock, registry, builder = populated(seed=7, instances=5)
    key = CacheKey(DELTA, "", "json")
    first = without_version(builder.build(key))
    app, instances = registry.reads.instances()[0]
    registry.renew(app, instances[0].instance_id, clock.advance(5_000))
    assert without_version(builder.build(key)) == first
    clock.advance(180_000)
    renewed = without_version(builder.build(key))
    assert renewed == without_version(build_payload(registry, key)) != first


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_the_gzip_of_an_assembled_registry_decodes_to_its_bytes_and_reuses_unchanged_runs(fmt, monkeypatch):
    from registry.cache import response_cache
    from registry.wire import payloads

    # Runs of about two applications, so that this small registry has several.
    monkeypatch.setattr(payloads, "CHUNK_TARGET_BYTES", 8_000)
    clock, registry, builder = populated(seed=8, instances=120)
    key = CacheKey(APPS, "", fmt)
    assembled = builder.assemble(key)
    assert isinstance(assembled, response_cache.Pieces), "GET apps is left in pieces for the cache"
    body = assembled.join()
    assert body == builder.build(key) == build_payload(registry, key) and len(assembled) == len(body)
    zipped = response_cache.compress(assembled)
    assert gzip.decompress(zipped) == body
    assert zipped[:10] == gzip.compress(b"", 6, mtime=0)[:10], "the same header as a whole gzip"
    runs = payloads._runs([builder.fragment(app, fmt, False) for app in registry.reads.app_names()])
    assert len(runs) > 1
    chunks = builder._chunk_caches[(fmt, False)]
    assert chunks.deflated_runs == len(runs)

    app, instances = registry.reads.instances()[0]
    registry.update_metadata(app, instances[0].instance_id, {"build": "9"}, clock.advance(1))
    changed = builder.assemble(key)
    assert gzip.decompress(response_cache.compress(changed)) == changed.join() == build_payload(registry, key)
    first_run = next(n for n, run in enumerate(runs) if any(f.app == app for f in run))
    again = 2 if first_run < len(runs) - 1 else 1
    assert chunks.deflated_runs == len(runs) + again, "the changed run, and the next (primed with its end)"


def _text(rng: random.Random, size: int) -> bytes:
    words = [b"status", b"UP", b"hostName", b"10.0.", b"metadata", b"zone", b"port", b"lease"]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + str(rng.randrange(10_000)).encode() + b","
    return bytes(out[:size])


def test_primed_chunks_cost_almost_nothing_in_size_and_are_compressed_again_only_when_their_primer_changed(
    monkeypatch,
):
    from registry.cache import response_cache
    from registry.wire import payloads
    from registry.wire.payloads import Fragment, _ChunkCache

    monkeypatch.setattr(payloads, "CHUNK_TARGET_BYTES", 1)  # a run per application
    rng = random.Random(3)
    cache = _ChunkCache()

    def gzipped(parts: list[Fragment]) -> tuple[bytes, bytes]:
        pieces = [b"[", b",".join(f.body for f in parts), b"]"]
        body = response_cache.Pieces(pieces, lambda: cache.chunks(b"[", parts, b",", b"]"))
        return body.join(), response_cache.compress(body)

    # Three applications of 10 KB repeating one another: only chunks that refer back into the one
    # before them get the gzip down to about one application's size, as one stream does.
    short = _text(rng, 10_000)
    body, zipped = gzipped([Fragment(f"APP-{n}", short, None, 0) for n in range(3)])
    assert gzip.decompress(zipped) == body
    assert len(zipped) < 1.1 * len(gzip.compress(body, 6)) < 1.5 * len(gzip.compress(short, 6))

    cache = _ChunkCache()
    text = _text(rng, 40_000)
    fragments = [Fragment(f"APP-{n}", text, None, 0) for n in range(3)]
    body, zipped = gzipped(fragments)
    assert gzip.decompress(zipped) == body
    assert cache.deflated_runs == 3

    # A change at the start of an application of 40 KB leaves its last 32 KB, the next one's primer.
    fragments[0] = Fragment("APP-0", b"changed" + text[7:], None, 0)
    body, zipped = gzipped(fragments)
    assert gzip.decompress(zipped) == body
    assert cache.deflated_runs == 4, "only the changed run"

    # A change at its end changes the next chunk's primer: that chunk is compressed again too.
    fragments[1] = Fragment("APP-1", text[:-7] + b"changed", None, 0)
    body, zipped = gzipped(fragments)
    assert gzip.decompress(zipped) == body
    assert cache.deflated_runs == 6, "the changed run and the next"

    # A run that comes to follow another run (one went away) has another primer.
    del fragments[1]
    body, zipped = gzipped(fragments)
    assert gzip.decompress(zipped) == body
    assert cache.deflated_runs == 7


def test_runs_keep_their_boundaries_when_an_application_comes_or_goes():
    from registry.wire.payloads import Fragment, _runs

    def fragments(names):
        return [Fragment(name, b"x" * 1_000, None, 0) for name in names]

    names = [f"APP-{n}" for n in range(2_000)]
    before = [[f.app for f in run] for run in _runs(fragments(names))]
    after = [[f.app for f in run] for run in _runs(fragments(names[:1000] + ["NEW"] + names[1000:]))]
    assert 4 < len(before) < 40, "runs of about 256 KB from 2 MB"
    assert sum(run not in before for run in after) <= 2, "only the run that took the new one changes"


def test_an_empty_registry_gzips_from_its_pieces_too():
    from registry.cache import response_cache

    clock = FakeClock()
    _, builder = wired(clock)
    for fmt in ("json", "xml"):
        body = builder.build(CacheKey(APPS, "", fmt))
        assert gzip.decompress(response_cache.compress(body)) == body


def test_the_delta_rebuilds_the_part_of_the_app_that_changed_or_lost_entries_only():
    clock, registry, builder = populated(seed=9, instances=60)
    key = CacheKey(DELTA, "", "json")
    builder.build(key)
    apps_in_delta = len(registry.reads.app_names())
    assert builder.delta_fragments_built == apps_in_delta

    app, instances = registry.reads.instances()[0]
    registry.update_metadata(app, instances[0].instance_id, {"build": "3"}, clock.advance(100_000))
    assert without_version(builder.build(key)) == without_version(build_payload(registry, key))
    assert builder.delta_fragments_built == apps_in_delta + 1, "only the app that changed"

    # The registrations leave the queue: the other apps leave the delta, the changed app's part
    # loses its older entries and is built again.
    registry.prune(clock.advance(90_000))
    assert [app] == [name for name, _ in registry.reads.snapshot_delta().apps]
    assert without_version(builder.build(key)) == without_version(build_payload(registry, key))
    assert builder.delta_fragments_built == apps_in_delta + 2


def test_the_pieces_of_a_format_no_longer_served_are_forgotten_and_rebuilt_exactly():
    clock, registry, builder = populated(seed=7, instances=40)
    for key in (*KEYS, *DELTA_KEYS):
        builder.build(key)
    builder.keep_formats({("json", False)})
    assert set(builder._instances) == {("json", False)}
    assert {key[1:] for key in builder._fragments} == {("json", False)}
    assert {key[1:] for key in builder._shared} == {("json", False)}
    assert {key[-2:] for key in builder._chunk_caches} == {("json", False)}
    assert set(builder._delta_fragments) == {("json", False)}
    built = builder.fragments_built
    builder.build(KEYS[0])
    assert builder.fragments_built == built, "the served format keeps its pieces"
    for key in KEYS:
        assembled = builder.build(key)
        assert assembled == build_payload(registry, key)
        assert gzip.decompress(compress(assembled)) == assembled, "gzipped from fresh chunks"
