"""The two-tier response cache, with a counting builder and explicit timestamps."""

from __future__ import annotations

import gzip
import threading
import time

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from registry.cache.redis_tier import RedisReadOnlyTier
from registry.cache.response_cache import (
    APP,
    APPS,
    DELTA,
    SVIP,
    VIP,
    CacheKey,
    NoMatch,
    ReadOnlyTier,
    ResponseCache,
)

T0 = 1_796_000_000_000


class CountingBuilder:
    """Builds every key, but apps named in ``missing`` (or JUNK-...) have no instances, and vips
    named junk-... are carried by none (an empty document, as the server answers them)."""

    def __init__(self):
        self.version = 0
        self.calls: list[CacheKey] = []
        self.during_build = None
        self.missing = {"MISSING"}

    def __call__(self, key: CacheKey) -> bytes | NoMatch | None:
        self.calls.append(key)
        if self.during_build:
            self.during_build()
        if key.entity == APP and (key.name in self.missing or key.name.startswith("JUNK-")):
            return None
        if key.entity in (VIP, SVIP) and key.name.startswith("junk-"):
            return NoMatch(f"{key.entity}:{key.name}:{key.fmt}:empty".encode())
        return f"{key.entity}:{key.name}:{key.fmt}:v{self.version}".encode()


def make(use_read_only=True, expire_ms=180_000):
    builder = CountingBuilder()
    return ResponseCache(builder, expire_ms=expire_ms, use_read_only=use_read_only), builder


def test_a_payload_is_built_once_per_key_and_reused():
    cache, builder = make()
    key = CacheKey(APPS, "", "json")
    first = cache.get(key, T0)
    assert cache.get(key, T0 + 1) is first
    assert builder.calls == [key]


def test_gzip_copy_is_computed_once_and_decompresses_to_the_payload():
    cache, _ = make()
    payload = cache.get(CacheKey(APPS, "", "json"), T0)
    zipped = payload.gzipped()
    assert payload.gzipped() is zipped
    assert gzip.decompress(zipped) == payload.body


def test_read_only_tier_stays_stale_until_sync():
    cache, builder = make()
    key = CacheKey(APPS, "", "xml")
    assert cache.get(key, T0).body.endswith(b"v0")
    builder.version = 1
    cache.invalidate("ORDERS", ["orders"])
    assert cache.get(key, T0 + 1).body.endswith(b"v0"), "readers see the read-only copy until the sync job"
    assert cache.sync(T0 + 2) == 1
    assert cache.get(key, T0 + 3).body.endswith(b"v1")


def test_without_read_only_tier_writes_show_at_once():
    cache, builder = make(use_read_only=False)
    key = CacheKey(APPS, "", "json")
    cache.get(key, T0)
    builder.version = 1
    cache.invalidate("ORDERS", [])
    assert cache.get(key, T0).body.endswith(b"v1")


def test_invalidation_drops_app_full_delta_and_split_vip_keys_but_not_other_apps():
    cache, builder = make(use_read_only=False)
    keys = [
        CacheKey(APPS, "", "json"),
        CacheKey(DELTA, "", "xml", compact=True),
        CacheKey(APP, "ORDERS", "json"),
        CacheKey(APP, "BILLING", "json"),
        CacheKey(VIP, "a", "json"),
        CacheKey(VIP, "a,b", "json"),
        CacheKey(SVIP, "b", "xml", compact=True),
        CacheKey(VIP, "c", "json"),
    ]
    for key in keys:
        cache.get(key, T0)
    builder.calls.clear()
    cache.invalidate("ORDERS", ["a,b"])
    for key in keys:
        cache.get(key, T0)
    rebuilt = set(builder.calls)
    assert rebuilt == set(keys) - {CacheKey(APP, "BILLING", "json"), CacheKey(VIP, "c", "json")}


def test_read_write_entries_expire_after_the_configured_age():
    cache, builder = make(use_read_only=False, expire_ms=180_000)
    key = CacheKey(APPS, "", "json")
    cache.get(key, T0)
    cache.get(key, T0 + 179_999)
    assert len(builder.calls) == 1
    cache.get(key, T0 + 180_000)
    assert len(builder.calls) == 2


def test_a_missing_app_is_served_as_not_found():
    cache, _ = make()
    assert cache.get(CacheKey(APP, "MISSING", "json"), T0).body is None


def test_a_write_during_a_build_keeps_the_stale_payload_out_of_the_cache():
    cache, builder = make(use_read_only=False)
    key = CacheKey(APPS, "", "json")
    builder.during_build = lambda: cache.invalidate("ORDERS", [])
    cache.get(key, T0)
    builder.during_build = None
    cache.get(key, T0)
    assert len(builder.calls) == 2, "the payload built across an invalidation must not be kept"
    cache.get(key, T0)
    assert len(builder.calls) == 2


def test_concurrent_misses_on_one_key_build_once():
    cache, builder = make(use_read_only=False)
    key = CacheKey(APPS, "", "json")
    gate = threading.Event()
    builder.during_build = gate.wait
    threads = [threading.Thread(target=cache.get, args=(key, T0)) for _ in range(5)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(5)
    assert builder.calls == [key]


def test_readers_that_waited_for_a_build_share_it_even_when_a_write_kept_it_out_of_the_cache():
    """Registrations going on land during nearly every build of a large registry: a build is then
    served and not kept. Readers that queued behind it are served that build too (it began before
    they were answered, as a kept one would have), not one build each: every build is a copy of the
    registry that the slow readers among them would hold while they take their time."""
    cache, builder = make(use_read_only=False)
    key = CacheKey(APPS, "", "json")
    gate = threading.Event()

    def write_landing_while_held() -> None:
        cache.invalidate("ORDERS", [])
        gate.wait()

    builder.during_build = write_landing_while_held
    served = []
    threads = [threading.Thread(target=lambda: served.append(cache.get(key, T0))) for _ in range(5)]
    for t in threads:
        t.start()
    time.sleep(0.1)  # the other four wait for the first one's build
    gate.set()
    for t in threads:
        t.join(5)

    assert builder.calls == [key] and len(served) == 5
    assert all(payload is served[0] for payload in served)
    builder.during_build = None
    cache.get(key, T0)
    assert builder.calls == [key, key], "the build a write overtook is still not kept"


def test_payloads_are_gzipped_and_gunzipped_by_the_configured_offload_once():
    from registry.cache import response_cache
    from registry.cache.response_cache import PLAIN_KEEP_BYTES, Payload, run_here, set_offload

    calls = []

    def recording(function, data: bytes) -> bytes:
        calls.append((function.__name__, len(data)))
        return function(data)

    set_offload(recording)
    try:
        small = Payload(b'{"applications":{}}' * 100, 0)
        assert gzip.decompress(small.gzipped()) == small.body
        assert small.gzipped() is small.gzipped()
        assert calls == [("compress", len(small.body))]
        calls.clear()
        text = b"<application>" * (PLAIN_KEEP_BYTES // 10)
        large = Payload(text, 0, keep_plain=False)
        large.gzipped()
        assert large.body == text
        assert large.body is large.body, "decompressed once, then kept"
        assert calls == [("compress", len(text)), ("decompress", len(large.gzipped()))]
    finally:
        set_offload(run_here)
    assert response_cache._offload[0] is run_here


def test_a_payload_in_pieces_is_gzipped_from_its_chunks_and_joined_only_when_asked_for_plain():
    from registry.cache import response_cache
    from registry.cache.response_cache import PLAIN_KEEP_BYTES, Payload, Pieces, run_here, set_offload

    calls = []

    def recording(function, data) -> bytes:
        calls.append(function.__name__)
        return function(data)

    parts = [b'{"applications":[', b'{"name":"A"}', b",", b'{"name":"B"}', b"]}"]
    chunk_calls = []

    def chunks() -> list[bytes]:
        chunk_calls.append(1)
        return [response_cache.deflate_chunk(part) for part in parts]

    set_offload(recording)
    try:
        payload = Payload(Pieces(parts, chunks), 0)
        assert payload.found and not payload.holds_plain
        assert gzip.decompress(payload.gzipped()) == b"".join(parts)
        assert (calls, chunk_calls) == (["compress"], [1]), "gzipped from the chunks, in the offload"
        assert not payload.holds_plain, "nothing joined for a gzip reader"
        assert payload.body == b"".join(parts) and payload.holds_plain
        assert payload.body is payload.body, "joined once, then kept"
        assert calls == ["compress", "join"], "joined in the offload"

        # A large one nobody reads plain keeps only its gzip copy, as a joined payload does.
        calls.clear()
        big = [b"<application>" * (PLAIN_KEEP_BYTES // 20)] * 2
        large = Payload(
            Pieces(big, lambda: [response_cache.deflate_chunk(part) for part in big]), 0, keep_plain=False
        )
        large.gzipped()
        assert not large.holds_plain and large._pieces is None
        assert large.body == b"".join(big)
        assert calls == ["compress", "decompress"]
    finally:
        set_offload(run_here)


def large_payload_cache():
    from registry.cache.response_cache import PLAIN_KEEP_BYTES

    builder = CountingBuilder()

    def build(key):
        return builder(key) * (PLAIN_KEEP_BYTES // 10)

    return ResponseCache(build, expire_ms=180_000), builder


def test_a_large_payload_read_only_gzipped_keeps_only_its_gzip_copy():
    cache, _ = large_payload_cache()
    key = CacheKey(APPS, "", "json")
    payload = cache.get(key, T0, gzip=True)
    assert payload.holds_plain, "uncompressed until the gzip copy exists"
    zipped = payload.gzipped()
    assert not payload.holds_plain
    assert payload.found
    assert payload.body == gzip.decompress(zipped), "still served uncompressed when asked"
    assert payload.holds_plain


def test_a_key_read_uncompressed_keeps_its_uncompressed_bytes_across_rebuilds():
    cache, builder = large_payload_cache()
    key = CacheKey(APPS, "", "json")
    cache.get(key, T0, gzip=False).gzipped()
    assert cache.get(key, T0, gzip=True).holds_plain
    builder.version = 1
    cache.invalidate("ORDERS", [])
    cache.sync(T0 + 1)
    rebuilt = cache.get(key, T0 + 2, gzip=True)
    assert rebuilt.body.endswith(b"v1")
    rebuilt.gzipped()
    assert rebuilt.holds_plain
    other = CacheKey(DELTA, "", "json")
    cache.get(other, T0 + 3, gzip=True).gzipped()
    assert not cache.get(other, T0 + 3, gzip=True).holds_plain, "only the key read uncompressed keeps them"


def test_small_payloads_keep_their_uncompressed_bytes():
    cache, _ = make()
    payload = cache.get(CacheKey(APPS, "", "json"), T0, gzip=True)
    payload.gzipped()
    assert payload.holds_plain


class CountingTier(ReadOnlyTier):
    def __init__(self):
        super().__init__()
        self.stored: list[CacheKey] = []

    def put(self, key, payload):
        self.stored.append(key)
        super().put(key, payload)


def test_a_sync_stores_only_the_payloads_that_changed():
    builder = CountingBuilder()
    tier = CountingTier()
    cache = ResponseCache(builder, expire_ms=180_000, read_only=tier)
    orders, billing = CacheKey(APP, "ORDERS", "json"), CacheKey(APP, "BILLING", "json")
    cache.get(orders, T0)
    cache.get(billing, T0)
    assert tier.stored == [orders, billing]
    cache.sync(T0 + 1)
    assert tier.stored == [orders, billing], "nothing changed: nothing stored again"
    cache.get(orders, T0 + 1)
    cache.get(billing, T0 + 1)
    builder.version = 1
    cache.invalidate("ORDERS", [])
    cache.sync(T0 + 2)
    assert tier.stored == [orders, billing, orders]
    assert cache.get(orders, T0 + 3).body.endswith(b"v1")


class FlakyRedis:
    """Enough of a redis client for the tier: stores hashes, or fails while ``down``."""

    def __init__(self):
        self.hashes: dict[str, dict] = {}
        self.down = False

    def hset(self, name, key=None, value=None, mapping=None):
        if self.down:
            raise RedisConnectionError("connection refused")
        self.hashes.setdefault(name, {}).update(mapping or {key: value})

    def set(self, name, value):
        self.hset(name, "value", value)

    # The cache sync's confirmation is one pipeline: here, the same calls one by one.
    def pipeline(self, transaction=True):
        return self

    def execute(self):
        return []


def test_the_redis_tier_publishes_everything_again_after_an_outage():
    client = FlakyRedis()
    clock = [T0]
    tier = RedisReadOnlyTier(client, "eureka", lambda: clock[0])
    builder = CountingBuilder()
    cache = ResponseCache(builder, expire_ms=180_000, read_only=tier)
    key = CacheKey(APPS, "", "json")
    tier.put(key, cache._load(key, T0))
    assert tier.holds(key, cache._load(key, T0))
    client.down = True
    tier.put(CacheKey(APP, "ORDERS", "json"), cache._load(CacheKey(APP, "ORDERS", "json"), T0))
    assert not tier.healthy
    # Redis may have lost what it held (a restart without persistence): the next sync sends it all.
    client.hashes.clear()
    client.down = False
    clock[0] += 5_000
    cache.sync(clock[0])
    assert "eureka:ro:apps:json:0:" in client.hashes and tier.healthy


class SlowBuilder(CountingBuilder):
    """Each build "takes" ``cost_s`` seconds of the CPU clock the cache reads (time.thread_time)."""

    def __init__(self, monkeypatch, cost_s: float):
        super().__init__()
        self.clock = [0.0]
        self.cost_s = cost_s
        from registry.cache import response_cache

        monkeypatch.setattr(response_cache.time, "thread_time", lambda: self.clock[0])

    def __call__(self, key):
        self.clock[0] += self.cost_s
        return super().__call__(key)


def test_a_costly_key_is_rebuilt_by_the_sync_at_most_once_per_ten_build_times(monkeypatch):
    from registry.cache.response_cache import SYNC_BUDGET

    builder = SlowBuilder(monkeypatch, cost_s=0.25)  # 100,000 instances' GET apps: 0.2-0.4 s
    cache = ResponseCache(builder, expire_ms=180_000)
    key = CacheKey(APPS, "", "xml")
    cache.get(key, T0)
    assert SYNC_BUDGET * 250 == 2500
    # Every second a change, and a sync: the copy is refreshed at once, then no sooner than 2.5 s later.
    refreshed = []
    for second in range(1, 11):
        builder.version = second
        cache.invalidate("ORDERS", [])
        cache.sync(T0 + second * 1000)
        served = cache.get(key, T0 + second * 1000 + 1).body
        refreshed.append(int(served.rsplit(b"v", 1)[1]))
    assert refreshed == [1, 1, 1, 4, 4, 4, 7, 7, 7, 10]
    assert cache.counters.syncs_deferred == 6
    assert builder.calls.count(key) == 5


def test_a_cheap_key_is_rebuilt_at_every_sync_and_an_unchanged_one_never(monkeypatch):
    builder = SlowBuilder(monkeypatch, cost_s=0.0625)  # 10,000 instances: tens of ms
    cache = ResponseCache(builder, expire_ms=180_000)
    key = CacheKey(APPS, "", "json")
    cache.get(key, T0)
    for second in range(1, 6):
        builder.version = second
        cache.invalidate("ORDERS", [])
        cache.sync(T0 + second * 1000)
        assert cache.get(key, T0 + second * 1000 + 1).body.endswith(f"v{second}".encode())
    builds = builder.calls.count(key)
    assert cache.counters.syncs_dropped == 0, "read between every two syncs: refreshed at each"
    for second in range(6, 9):
        cache.sync(T0 + second * 1000)
    assert builder.calls.count(key) == builds and cache.counters.syncs_deferred == 0


def test_one_slow_build_does_not_hold_a_cheap_key_back(monkeypatch):
    """A build that a GC collection or a busy machine made slow once is not the key's cost: judged by
    it, the key would be left stale for ten times that long."""
    builder = SlowBuilder(monkeypatch, cost_s=0.02)  # 10,000 instances: tens of ms
    cache = ResponseCache(builder, expire_ms=180_000)
    key = CacheKey(APPS, "", "json")
    cache.get(key, T0)
    builder.cost_s = 0.4  # once
    for step in range(1, 7):
        builder.version = step
        cache.invalidate("ORDERS", [])
        cache.sync(T0 + step * 500)
        builder.cost_s = 0.02
        assert cache.get(key, T0 + step * 500 + 1).body.endswith(f"v{step}".encode()), step
    assert cache.counters.syncs_deferred == 0
    assert cache.build_cost_ms(key) == pytest.approx(20.0)


def test_a_read_that_does_not_enlist_its_key_is_served_but_never_refreshed_by_the_sync():
    cache, builder = make()
    key = CacheKey(APPS, "", "json")
    assert cache.get(key, T0, enlist=False).body.endswith(b"v0")
    assert cache.read_only.keys() == []
    builder.version = 1
    cache.invalidate("ORDERS", ["orders"])
    assert cache.sync(T0 + 1) == 0, "nothing to keep fresh"
    assert builder.calls == [key]
    # Read again without enlisting: the read-write tier's payload, as fresh as a miss can be.
    assert cache.get(key, T0 + 2, enlist=False).body.endswith(b"v1")
    # A reader that enlists it: from now on the sync keeps it fresh.
    assert cache.get(key, T0 + 3).body.endswith(b"v1")
    builder.version = 2
    cache.invalidate("ORDERS", ["orders"])
    assert cache.sync(T0 + 4) == 1
    assert cache.get(key, T0 + 5, enlist=False).body.endswith(b"v2"), "an enlisted copy is served as is"


def test_a_changed_key_nobody_read_since_the_last_sync_leaves_the_tier_and_is_built_on_its_next_read():
    cache, builder = make()
    key = CacheKey(APPS, "", "xml")
    cache.get(key, T0)
    builder.version = 1
    cache.invalidate("ORDERS", [])
    assert cache.sync(T0 + 500) == 1, "read before this sync: refreshed"
    assert builder.calls == [key, key]
    builder.version = 2
    cache.invalidate("ORDERS", [])
    assert cache.sync(T0 + 1000) == 0, "changed and unread since the sync before: dropped, not rebuilt"
    assert cache.read_only.keys() == [] and builder.calls == [key, key]
    assert cache.counters.syncs_dropped == 1
    assert cache.get(key, T0 + 1500).body.endswith(b"v2"), "its next read builds it, as fresh as can be"
    assert cache.read_only.keys() == [key], "and enlists it again"


def test_an_unread_key_that_did_not_change_stays_and_is_not_rebuilt():
    cache, builder = make()
    key = CacheKey(APP, "ORDERS", "json")
    cache.get(key, T0)
    for step in range(1, 5):
        cache.sync(T0 + step * 500)
    assert cache.read_only.keys() == [key] and builder.calls == [key]
    assert cache.counters.syncs_dropped == 0
    cache.sync(T0 + 180_000)
    assert cache.read_only.keys() == [], "past the read-write tier's expiry it would be rebuilt: dropped"


def test_the_redis_tier_keeps_every_key_fresh_as_readers_elsewhere_read_it_unseen():
    client = FlakyRedis()
    tier = RedisReadOnlyTier(client, "eureka", lambda: T0)
    builder = CountingBuilder()
    cache = ResponseCache(builder, expire_ms=180_000, read_only=tier)
    key = CacheKey(APPS, "", "json")
    tier.put(key, cache._load(key, T0))
    for step in range(1, 4):
        builder.version = step
        cache.invalidate("ORDERS", [])
        assert cache.sync(T0 + step * 500) == 1
        assert client.hashes["eureka:ro:apps:json:0:"]["body"].endswith(f"v{step}".encode())
    assert cache.counters.syncs_dropped == 0


def test_the_builder_is_told_which_formats_are_still_served_when_that_changes():
    told: list[set] = []
    builder = CountingBuilder()
    cache = ResponseCache(builder, expire_ms=180_000, keep_formats=lambda formats: told.append(set(formats)))
    xml, json = CacheKey(APPS, "", "xml"), CacheKey(DELTA, "", "json", compact=True)
    cache.get(xml, T0)
    cache.get(json, T0)
    cache.sync(T0 + 500)
    assert told == [{("xml", False), ("json", True)}]
    cache.get(json, T0 + 600)
    cache.sync(T0 + 1000)
    assert len(told) == 1, "nothing changed: not told again"
    cache.invalidate("ORDERS", [])
    cache.get(json, T0 + 1100)
    cache.sync(T0 + 1500)
    assert told[-1] == {("json", True)}, "the XML key went unread after a change"


# ------------------------------------------------------------------------- names nobody registered


def held_entries(cache: ResponseCache) -> int:
    """Everything the cache holds per key, whatever its tables are called: the entries of each dict
    and set it keeps, and the read-only tier's."""
    held = len(cache.read_only)
    for value in vars(cache).values():
        if isinstance(value, dict | set):
            held += len(value)
    return held


def holds_anything_for(cache: ResponseCache, key: CacheKey) -> bool:
    tables = [value for value in vars(cache).values() if isinstance(value, dict | set)]
    in_tier = cache.read_only.keys()
    return key in in_tier or any(key in table for table in tables)


def junk(n: int) -> list[CacheKey]:
    """Distinct names nobody registered, as a scanner asks for them: apps, vips and secure vips."""
    entities = [(APP, "JUNK-{}"), (VIP, "junk-{}"), (SVIP, "junk-{}")]
    return [CacheKey(entities[k % 3][0], entities[k % 3][1].format(k), "json") for k in range(n)]


def test_names_nobody_registered_are_served_as_misses_and_keep_nothing_but_a_bounded_few():
    from registry.cache.response_cache import MAX_MISSES

    cache, builder = make()
    real = CacheKey(APP, "ORDERS", "json")
    cache.get(real, T0)
    held_before = held_entries(cache)
    for key in junk(3 * MAX_MISSES):
        payload = cache.get(key, T0, gzip=False)
        assert payload.miss
        # As the server answers them: an app nobody registered is a 404, a vip nobody carries an empty 200.
        assert (payload.body is None) == (key.entity == APP)
    assert cache.read_only.keys() == [real], "no miss enters the read-only tier"
    # Each table may keep the last MAX_MISSES misses (and a name index beside them), no more.
    assert held_entries(cache) <= held_before + 2 * MAX_MISSES
    cache.sync(T0 + 1000)
    assert cache.read_only.keys() == [real]
    assert held_entries(cache) <= held_before + 2 * MAX_MISSES


def test_a_miss_read_again_is_served_from_the_few_kept_until_its_app_registers():
    cache, builder = make()
    key = CacheKey(APP, "LATER", "json")
    builder.missing.add("LATER")
    assert cache.get(key, T0).body is None
    assert cache.get(key, T0 + 1).body is None
    assert builder.calls == [key], "a client polling a missing name does not have it built per poll"
    builder.missing.discard("LATER")
    cache.invalidate("OTHER", ["other"])
    assert cache.get(key, T0 + 2).body is None, "a write elsewhere leaves the miss as it is"
    cache.invalidate("LATER", ["later"])
    assert cache.get(key, T0 + 3).body.endswith(b"v0"), "its own registration drops it at once"
    assert cache.read_only.keys() == [key], "and from then on it is kept as any key"


def test_a_key_whose_app_went_away_leaves_the_read_only_tier_at_the_next_sync():
    cache, builder = make()
    key = CacheKey(APP, "ORDERS", "json")
    cache.get(key, T0)
    builder.missing.add("ORDERS")  # its last instance cancelled
    cache.invalidate("ORDERS", ["orders"])
    cache.get(key, T0 + 1)  # read since: the sync rebuilds it, and finds nothing
    assert cache.sync(T0 + 500) == 0 and cache.read_only.keys() == []
    assert cache.get(key, T0 + 600).body is None


def test_a_key_nobody_read_for_the_expiry_time_leaves_every_table_and_a_key_read_meanwhile_stays():
    cache, builder = make(expire_ms=180_000)
    read, unread = CacheKey(APPS, "", "json"), CacheKey(APP, "ORDERS", "xml")
    cache.get(read, T0)
    cache.get(unread, T0, gzip=False)
    for second in range(1, 200):
        now = T0 + second * 1000
        if second % 30 == 0:
            assert cache.get(read, now).found
        cache.sync(now)
        if second == 179:
            assert holds_anything_for(cache, unread), "read 179 s ago: still kept"
    assert cache.read_only.keys() == [read]
    assert not holds_anything_for(cache, unread), "unread for 180 s: nothing is kept for it anywhere"
    assert cache.counters.keys_expired == 1
    assert builder.calls.count(unread) == 1
    assert cache.get(unread, T0 + 200_000).found, "its next read builds it again"
    assert builder.calls.count(unread) == 2


def test_without_a_read_only_tier_a_key_nobody_read_for_the_expiry_time_is_dropped_too():
    cache, _ = make(use_read_only=False, expire_ms=180_000)
    read, unread = CacheKey(APPS, "", "json"), CacheKey(VIP, "orders", "json")
    cache.get(read, T0)
    cache.get(unread, T0)
    for second in range(1, 240, 10):
        cache.get(read, T0 + second * 1000)
        cache.sync(T0 + second * 1000)
    assert holds_anything_for(cache, read)
    assert not holds_anything_for(cache, unread)


class CountingDict(dict):
    """A dict that counts the entries looked at through it: each one iterated, each lookup."""

    def __init__(self, data, touched: list[int]):
        super().__init__(data)
        self.touched = touched

    def _touch(self, n: int = 1) -> None:
        self.touched[0] += n

    def __iter__(self):
        for key in super().__iter__():
            self._touch()
            yield key

    def keys(self):
        return list(iter(self))

    def items(self):
        return [(key, dict.__getitem__(self, key)) for key in self]

    def values(self):
        return [dict.__getitem__(self, key) for key in self]

    def __getitem__(self, key):
        self._touch()
        return super().__getitem__(key)

    def __contains__(self, key):
        self._touch()
        return super().__contains__(key)

    def get(self, key, default=None):
        self._touch()
        return super().get(key, default)

    def pop(self, key, *default):
        self._touch()
        return super().pop(key, *default)

    def setdefault(self, key, default=None):
        self._touch()
        return super().setdefault(key, default)


def entries_a_write_looks_at(junk_reads: int) -> int:
    """A cache holding a few real keys after ``junk_reads`` distinct made-up names were read: how many
    entries of its tables (whatever they are) one write's invalidation looks at."""
    cache, _ = make()
    for key in (
        CacheKey(APPS, "", "json"),
        CacheKey(DELTA, "", "json"),
        CacheKey(APP, "ORDERS", "json"),
        CacheKey(APP, "BILLING", "xml"),
        CacheKey(VIP, "orders", "json"),
    ):
        cache.get(key, T0)
    for key in junk(junk_reads):
        cache.get(key, T0)
    touched = [0]
    for name, value in list(vars(cache).items()):
        if type(value) is dict:
            setattr(cache, name, CountingDict(value, touched))
    cache.invalidate("ORDERS", ["orders"])
    return touched[0]


def test_what_a_write_looks_at_does_not_grow_with_the_names_read_before_it():
    """Every write runs the invalidation under the registry's lock: with 200,000 made-up names kept
    and looked at one by one, each write cost ~9 ms."""
    clean = entries_a_write_looks_at(0)
    assert 0 < clean <= 30
    assert entries_a_write_looks_at(5_000) == clean
