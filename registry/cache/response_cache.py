"""Eureka's two-tier response cache (protocol reference 5.9). Plain Python, no Django.

* read-write tier: payloads built on demand from the registry, dropped by writes and after
  ``expire_ms``;
* read-only tier: what readers see; filled lazily and refreshed from the read-write tier by the
  cache-sync job, so changes reach readers 0..sync-interval later, exactly as with Eureka.

Any name can be asked for, so nothing is kept per name that the registry does not hold: a miss (an
app with no instances, a vip none carries) is served but kept only in a small bounded table, and a
key nobody read for ``expire_ms`` leaves both tiers and every table beside them (readers' reads of a
remote tier count: ``ReadOnlyTier.read_times``).

A payload is serialized once per key and gzip-compressed at most once, never per request.
"""

from __future__ import annotations

import gzip
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from registry.cache.pacing import PACER

APPS = "apps"
DELTA = "delta"
APP = "app"
VIP = "vip"
SVIP = "svip"

FORMATS = ("json", "xml")


@dataclass(frozen=True, slots=True)
class CacheKey:
    entity: str
    name: str
    fmt: str
    compact: bool = False
    # The remote regions merged into the payload (registry/cluster/regions.py): configured ones only,
    # lower-cased and sorted, so any spelling or order of ``?regions=`` shares one key, and made-up
    # names make no keys. A write drops every regions variant of the names it touches (``_named``).
    regions: tuple[str, ...] = ()


# A payload at least this large keeps only its gzip copy once it has one, unless its key is served
# uncompressed: a large registry's plain ``GET apps`` is many times its gzip copy, and clients of
# every generation ask for gzip.
PLAIN_KEEP_BYTES = 1024 * 1024


class Payload:
    """Serialized bytes for one key; not ``found`` means "not found" (served as an empty 404).

    ``body`` is the uncompressed bytes, ``gzipped()`` their gzip copy, made once. A large payload
    that nobody has asked for uncompressed (``keep_plain`` false) drops its uncompressed bytes when
    its gzip copy is made; should a client then ask for them, they are decompressed once and kept.
    ``matched`` false: a body that names nothing the registry holds (``NoMatch``).
    """

    __slots__ = ("_body", "_pieces", "built_at", "_gzipped", "_lock", "keep_plain", "matched")

    def __init__(
        self,
        body: bytes | Pieces | None,
        built_at: int,
        gzipped: bytes | None = None,
        keep_plain: bool = True,
        matched: bool = True,
    ):
        # A payload built as pieces is joined only when its uncompressed bytes are asked for.
        self._pieces = body if isinstance(body, Pieces) else None
        self._body = None if self._pieces is not None else body
        self.built_at = built_at
        self._gzipped = gzipped
        self._lock = threading.Lock()
        self.keep_plain = keep_plain
        self.matched = matched

    @property
    def found(self) -> bool:
        return self._body is not None or self._gzipped is not None or self._pieces is not None

    @property
    def miss(self) -> bool:
        """Whether the key names nothing the registry holds (a 404, or a vip no instance carries)."""
        return not self.matched or not self.found

    @property
    def body(self) -> bytes | None:
        body = self._body
        if body is None and (self._pieces is not None or self._gzipped is not None):
            with self._lock:
                if self._body is None:
                    self.keep_plain = True
                    if self._pieces is not None:
                        self._body = _offload[0](Pieces.join, self._pieces)
                    else:
                        self._body = _offload[0](gzip.decompress, self._gzipped)
                body = self._body
        return body

    @property
    def holds_plain(self) -> bool:
        """Whether the uncompressed bytes are in memory now (for tests and metrics)."""
        return self._body is not None

    def gzipped(self) -> bytes:
        if self._gzipped is None:
            with self._lock:
                if self._gzipped is None:
                    source = self._pieces if self._pieces is not None else self._body or b""
                    self._gzipped = _offload[0](compress, source)
                    if not self.keep_plain and len(source) >= PLAIN_KEEP_BYTES:
                        self._body = self._pieces = None
        return self._gzipped


GZIP_LEVEL = 6  # zlib's default, as Java's GZIPOutputStream
# What gzip.compress(..., mtime=0) writes first: magic, deflate, no flags, no time, no extra flags,
# OS Unix. The same bytes whichever way the payload is compressed.
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"
_FINAL_EMPTY_BLOCK = b"\x03\x00"


class Pieces:
    """A payload as the pieces it is assembled from (``GET apps``: head, application fragments, tail),
    not joined yet. For a large registry joining is a large block of fresh memory to copy into (most
    of the time the kernel mapping the pages) that the event loop would wait for, and most clients
    never need it: they are sent the gzip copy, which ``chunks()`` makes from each piece's deflate
    chunk (``deflate_chunk``), reusing those of pieces that did not change, so that gzipping a registry
    after one application changed compresses that application, not the registry. ``join()`` runs
    where the payload's uncompressed bytes are first asked for, through the offload (under gevent a
    native thread: the copy releases the GIL)."""

    __slots__ = ("pieces", "chunks", "_length")

    def __init__(self, pieces: list[bytes], chunks: Callable[[], list[bytes]]):
        self.pieces = pieces
        self.chunks = chunks
        self._length = sum(map(len, pieces))

    def __len__(self) -> int:
        return self._length

    def join(self) -> bytes:
        return b"".join(self.pieces)

    def crc32(self) -> int:
        crc = 0
        for piece in self.pieces:
            crc = zlib.crc32(piece, crc)
        return crc


# Deflate looks back this far for repeats: a chunk primed with the last this-many bytes before it
# compresses as well as if it were compressed in one stream with them.
DEFLATE_WINDOW = 1 << zlib.MAX_WBITS


def deflate_chunk(data: bytes, primer: bytes = b"") -> bytes:
    """``data`` as raw deflate blocks that end on a byte boundary and are not final: chunks made so
    concatenate into one valid deflate stream. ``primer``, if given, must be the bytes that come
    right before ``data`` in that stream (at most its last DEFLATE_WINDOW): the chunk may then refer
    back into them, as the decoder has them in its window, and loses nothing to being cut."""
    if primer:
        compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS, zdict=primer)
    else:
        compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)


def compress(data: bytes | Pieces) -> bytes:
    """One gzip member of ``data``: from its pieces' chunks when it is in pieces, else compressed whole."""
    if not isinstance(data, Pieces):
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    trailer = struct.pack("<II", data.crc32(), len(data) & 0xFFFFFFFF)
    return b"".join((_GZIP_HEADER, *data.chunks(), _FINAL_EMPTY_BLOCK, trailer))


# How payloads are gzipped and gunzipped: ``run(function, data)``. Under gevent the server replaces it
# with one that runs the function in a native thread (zlib releases the GIL): gzipping a registry
# then no longer holds the event loop, and heartbeats are answered meanwhile (deploy/gunicorn.conf.py,
# post_worker_init).
Offload = Callable[[Callable[[Any], bytes], Any], bytes]


def run_here(function: Callable[[Any], bytes], data: Any) -> bytes:
    return function(data)


_offload: list[Offload] = [run_here]


def set_offload(run: Offload) -> None:
    _offload[0] = run


@dataclass(frozen=True, slots=True)
class NoMatch:
    """What a builder returns for a key that names nothing the registry holds yet has a body to send:
    a vip no instance carries is answered 200 with an empty ``applications`` document, as by Eureka.
    Served like any payload, but a miss (``Payload.miss``): never enlisted, never kept for long."""

    body: bytes


Builder = Callable[[CacheKey], "bytes | Pieces | NoMatch | None"]


@dataclass(slots=True)
class CacheCounters:
    """Cumulative lookups and builds since start, read by GET /metrics. Plain integers without a
    lock: a rare increment lost between two threads matters less to a metric than a lock per read.
    A read-write lookup comes from a reader that missed the read-only tier, or from the cache sync;
    a build is a read-write miss (a waiter that finds the fresh payload counts as a hit)."""

    read_only_hits: int = 0
    read_only_misses: int = 0
    read_write_hits: int = 0
    builds: int = 0
    build_seconds: float = 0.0
    # Cache syncs that left a changed key's read-only copy as it was (SYNC_BUDGET).
    syncs_deferred: int = 0
    # Changed keys that a sync took out of the read-only tier instead of rebuilding, as nobody had
    # read them since the sync before (ResponseCache.sync).
    syncs_dropped: int = 0
    # Keys a sync took out of the read-only tier (and every table beside it) as nobody, readers of a
    # remote tier included, had read them for the expiry time.
    keys_expired: int = 0


class ReadOnlyTier:
    """Where the read-only tier lives. This one is a dict in the process; see ``redis_tier``."""

    # Whether every read of this tier goes through the cache (``ResponseCache.get``). Readers in other
    # processes read a remote tier directly, so the node cannot tell that a key there is unread.
    sees_every_read = True

    def __init__(self):
        self._payloads: dict[CacheKey, Payload] = {}

    def get(self, key: CacheKey, gzip: bool = False) -> Payload | None:
        """The payload; ``gzip`` says which copy the reader will send (a remote tier fetches only that)."""
        return self._payloads.get(key)

    def put(self, key: CacheKey, payload: Payload) -> None:
        self._payloads[key] = payload

    def discard(self, key: CacheKey) -> None:
        """Stop serving ``key``: its next read misses and builds it afresh."""
        self._payloads.pop(key, None)

    def discard_many(self, keys: list[CacheKey]) -> None:
        """``discard`` each of ``keys`` (a remote tier in one round trip)."""
        for key in keys:
            self.discard(key)

    def read_times(self, keys: list[CacheKey], older_than: int) -> dict[CacheKey, int] | None:
        """When readers that do not go through the cache last read each of ``keys`` (those they read
        at all), or None when that cannot be known now. In the process every read goes through the
        cache: none. Marks of reads before ``older_than`` no longer matter (a remote tier may drop them)."""
        return {}

    def holds(self, key: CacheKey, payload: Payload) -> bool:
        """Whether readers already get exactly ``payload`` for ``key`` (then a sync has nothing to do)."""
        return self._payloads.get(key) is payload

    def confirm(self, keys: list[CacheKey], now: int) -> None:
        """A sync found ``keys`` current at ``now``: a remote tier tells its readers (in the process,
        nothing to tell)."""

    def keys(self) -> list[CacheKey]:
        return list(self._payloads)

    def clear(self) -> None:
        self._payloads.clear()

    def __len__(self) -> int:
        return len(self._payloads)

    def status(self) -> dict | None:
        """Health of a remote tier (None: in the process, nothing can fail)."""
        return None

    def check(self) -> bool | None:
        """Whether a remote tier answers now (None: in the process, nothing to ask)."""
        return None


def _vip_names(vips: Iterable[str | None]) -> set[str]:
    """The cache names a change's raw vip strings touch: each whole string and each of its parts."""
    names: set[str] = set()
    for raw in vips:
        if raw:
            names.add(raw)
            names.update(raw.split(","))
    return names


# A cache sync rebuilds a changed key at most once per SYNC_BUDGET times that key's last build time
# (and at most once a sync, as always). Builds of a registry of ordinary size are short, so nothing
# changes there; a very large registry's full ``GET apps`` rebuilt at every sync while a fleet
# registers would take a large share of the node's time.
SYNC_BUDGET = 10
# The build times a key's cost is judged by (ResponseCache.build_cost_ms).
BUILD_TIMES_KEPT = 3

# How many keys read uncompressed are remembered (PLAIN_KEEP_BYTES); past it the memory starts afresh.
MAX_PLAIN_KEYS = 4096

# Misses (``Payload.miss``: an app with no instances, a vip no instance carries) kept at once, the
# oldest going first. A few spare a client polling one missing name a scan of the registry per poll (a
# vip lookup walks every lease); keeping every one would let any stream of made-up names grow the
# node, and every write's invalidation with it.
MAX_MISSES = 1024


class _Build:
    """A build of one key in progress: its lock, which the readers that came meanwhile wait on, and
    the payload it made, which they are served."""

    __slots__ = ("lock", "payload")

    def __init__(self):
        self.lock = threading.Lock()
        self.payload: Payload | None = None


class ResponseCache:
    def __init__(
        self,
        build: Builder,
        expire_ms: int,
        use_read_only: bool = True,
        read_only: ReadOnlyTier | None = None,
        on_clear: Callable[[], None] | None = None,
        keep_formats: Callable[[set[tuple[str, bool]]], None] | None = None,
    ):
        self._build = build
        # What the builder keeps of its own (serialized fragments) goes with the cache: all of it on
        # ``clear``, and a format's pieces once no key of that format is served (``keep_formats``
        # is told the (fmt, compact) variants that still are).
        self._on_clear = on_clear
        self._keep_formats = keep_formats
        self._formats_in_use: set[tuple[str, bool]] | None = None
        self._expire_ms = expire_ms
        self._use_read_only = use_read_only
        self._read_write: dict[CacheKey, Payload] = {}
        # Misses, apart from the read-write tier: at most MAX_MISSES, never in the read-only tier.
        self._misses: dict[CacheKey, Payload] = {}
        # (entity, name) -> the keys of either table under that name: a write drops what it makes
        # stale by name, without looking at any other key (it runs under the registry's lock).
        self._named: dict[tuple[str, str], set[CacheKey]] = {}
        self.read_only = read_only if read_only is not None else ReadOnlyTier()
        # Guards only check-and-store against invalidation; never held while building, because
        # invalidate() runs under the registry lock and building takes that lock.
        self._lock = threading.Lock()
        self._generation = 0
        # A key's build is in the table only while it runs.
        self._builds: dict[CacheKey, _Build] = {}
        self.counters = CacheCounters()
        # Per key: how long its last few builds took (ms of CPU), and when a sync last refreshed its copy.
        self._build_ms: dict[CacheKey, tuple[float, ...]] = {}
        self._synced_at: dict[CacheKey, int] = {}
        # Keys some client reads uncompressed: their payloads keep the uncompressed bytes.
        self._plain_keys: set[CacheKey] = set()
        # Keys read since the last sync (ResponseCache.sync), and when each key that is no miss was
        # last read through here (a key unread for ``expire_ms`` is dropped: ``_unread``).
        self._read_keys: set[CacheKey] = set()
        self._last_read: dict[CacheKey, int] = {}
        self._swept_at: int | None = None

    def get(self, key: CacheKey, now: int, gzip: bool = False, enlist: bool = True) -> Payload:
        """The payload readers get for ``key``. A key enters the read-only tier on its first read, and
        from then on every cache sync keeps it fresh (rebuilt and gzipped after each change) until
        nobody has read it for ``expire_ms``. A read with ``enlist=False`` does not enter it: for a
        one-time read, such as a peer's start-up sync, which would otherwise have the node rebuild its
        whole registry at every sync for good. A miss never enters it (MAX_MISSES)."""
        plain = not gzip and key not in self._plain_keys
        if plain:
            if len(self._plain_keys) >= MAX_PLAIN_KEYS:  # any app name can be asked for
                self._plain_keys.clear()
            self._plain_keys.add(key)
        if self._use_read_only:
            payload = self.read_only.get(key, gzip)
            if payload is None:
                self.counters.read_only_misses += 1
                payload = self._load(key, now)
                if enlist and not payload.miss:
                    self.read_only.put(key, payload)
            else:
                self.counters.read_only_hits += 1
        else:
            payload = self._load(key, now)
        if payload.miss:
            if plain:
                self._plain_keys.discard(key)
        else:
            self._read_keys.add(key)
            self._last_read[key] = now
        return payload

    def _fresh(self, key: CacheKey, now: int) -> Payload | None:
        """The payload built for ``key`` if a read would be served it as is (not expired)."""
        payload = self._read_write.get(key)
        if payload is None:
            payload = self._misses.get(key)
        return payload if payload is not None and now - payload.built_at < self._expire_ms else None

    def _load(self, key: CacheKey, now: int) -> Payload:
        payload = self._fresh(key, now)
        if payload is not None:
            self.counters.read_write_hits += 1
            return payload
        # One builder per key; concurrent readers of the same key wait for its result, and are served
        # it even when a write that landed meanwhile kept it out of the table: they came while it was
        # being built, and a build each would be a copy of the payload each (a registry of megabytes
        # per reader, held by the slow ones for as long as they take to read it).
        build = self._builds.setdefault(key, _Build())
        with build.lock:
            try:
                if build.payload is not None:
                    self.counters.read_write_hits += 1
                    return build.payload
                payload = self._fresh(key, now)
                if payload is not None:
                    self.counters.read_write_hits += 1
                    return payload
                build.payload = self._build_and_keep(key, now)
                return build.payload
            finally:
                # Those already waiting hold the build and find its payload; kept for good, the table
                # would hold a build per name anybody ever made up.
                if self._builds.get(key) is build:
                    del self._builds[key]

    def _build_and_keep(self, key: CacheKey, now: int) -> Payload:
        generation = self._generation
        started, started_cpu, paused_cpu = time.perf_counter(), time.thread_time(), PACER.paused_cpu()
        built = self._build(key)
        if isinstance(built, NoMatch):
            payload = Payload(built.body, now, keep_plain=key in self._plain_keys, matched=False)
        else:
            payload = Payload(built, now, keep_plain=key in self._plain_keys)
        self.counters.builds += 1
        self.counters.build_seconds += time.perf_counter() - started
        if not payload.miss:
            # CPU time, not wall time: a build that waited for the CPU (a busy machine) is not costly;
            # nor is what other greenlets ran while the build paused (pacing.py).
            own_cpu = time.thread_time() - started_cpu - (PACER.paused_cpu() - paused_cpu)
            recent = (*self._build_ms.get(key, ())[1 - BUILD_TIMES_KEPT :], max(own_cpu, 0.0) * 1000)
            self._build_ms[key] = recent
        with self._lock:
            # A write that landed while we built may not be in this payload: serve it once, keep nothing.
            if generation == self._generation:
                self._keep(key, payload)
        return payload

    def _keep(self, key: CacheKey, payload: Payload) -> None:
        """Store a freshly built payload (under ``_lock``): a miss among the misses, the oldest miss
        going when there are MAX_MISSES, anything else in the read-write tier."""
        if payload.miss:
            self._read_write.pop(key, None)
            if key not in self._misses and len(self._misses) >= MAX_MISSES:
                self._forget_built(next(iter(self._misses)))
            self._misses[key] = payload
        else:
            self._misses.pop(key, None)
            self._read_write[key] = payload
        self._named.setdefault((key.entity, key.name), set()).add(key)

    def _forget_built(self, key: CacheKey) -> None:
        """Drop ``key``'s built payload, whichever table holds it (under ``_lock``)."""
        self._read_write.pop(key, None)
        self._misses.pop(key, None)
        name = (key.entity, key.name)
        keys = self._named.get(name)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._named[name]

    def invalidate(self, app: str, vips: Iterable[str | None]) -> None:
        """Drop what a change to ``app`` (with these raw vip / secure-vip strings) makes stale."""
        with self._lock:
            self._generation += 1
            if not self._named:
                return
            # The names a change touches are looked up, never searched for among the keys held: any
            # name can have been asked for, and every write runs this under the registry's lock.
            stale = [(APPS, ""), (DELTA, ""), (APP, app)]
            for name in _vip_names(vips):
                stale += ((VIP, name), (SVIP, name))
            for name in stale:
                keys = self._named.pop(name, None)
                if keys:
                    for key in keys:
                        self._read_write.pop(key, None)
                        self._misses.pop(key, None)

    def _defer(self, key: CacheKey, now: int) -> bool:
        """Whether this sync leaves ``key``'s read-only copy as it is: it changed (its read-write copy
        is gone) and was refreshed less than SYNC_BUDGET times its build time ago."""
        if key in self._read_write:
            return False
        refreshed = self._synced_at.get(key)
        return refreshed is not None and now - refreshed < SYNC_BUDGET * self.build_cost_ms(key)

    def build_cost_ms(self, key: CacheKey) -> float:
        """What building ``key`` costs: the least of its last BUILD_TIMES_KEPT builds' CPU times, so
        that one slow build (a collection of the GC inside it) does not hold the key back for long."""
        return min(self._build_ms.get(key, (0.0,)))

    def sync(self, now: int) -> int:
        """The cache-sync job: refresh every read-only entry from the read-write tier (a costly key
        at most once per SYNC_BUDGET times its build time).

        A key that changed and that nobody read since the last sync is taken out of the tier instead
        of rebuilt, when every read of the tier comes through here (``sees_every_read``): its next
        read misses and builds it, no staler than a refreshed copy. So a key is rebuilt at most once
        per read instead of once per sync: the ``GET apps`` in XML that someone asked for once no
        longer costs a rebuild at every sync while a fleet registers, and its serialized pieces go
        (``keep_formats``). A key read at least once a sync is refreshed as before.

        A key nobody read for ``expire_ms`` (here or, for a remote tier, at its readers) leaves the
        tier and every table kept for it, and a key whose payload became a miss (its app is gone)
        leaves the tier: whatever names were asked for, what is kept is what is read."""
        read, self._read_keys = self._read_keys, set()
        drop_unread = self.read_only.sees_every_read
        keys = self.read_only.keys()
        expired = self._unread(keys, now)
        kept, dropped = [], []
        for key in keys:
            if key in expired:
                dropped.append(key)
                continue
            if drop_unread and key not in read and self._fresh(key, now) is None:
                dropped.append(key)
                self.counters.syncs_dropped += 1
                continue
            if self._defer(key, now):
                kept.append(key)
                self.counters.syncs_deferred += 1
                continue
            self._synced_at[key] = now
            payload = self._load(key, now)
            if payload.miss:
                # Its app (or every instance of its vip) is gone: answered as a miss from now on.
                dropped.append(key)
                continue
            kept.append(key)
            # Unchanged payloads are not stored again: a remote tier would otherwise be sent every
            # payload (megabytes of JSON at 10,000 instances) each interval, changed or not.
            if not self.read_only.holds(key, payload):
                self.read_only.put(key, payload)
        if dropped:
            self.read_only.discard_many(dropped)
            for key in dropped:
                self._synced_at.pop(key, None)
        for key in expired:
            self._forget(key)
        self.counters.keys_expired += len(expired)
        # Readers in other processes measure staleness by this confirmation (registry/reader/). A
        # deferred key is confirmed too: it is what the node itself serves until its next rebuild.
        self.read_only.confirm(kept, now)
        self._sweep(now)
        self._forget_unused_formats()
        return len(kept)

    def _unread(self, keys: list[CacheKey], now: int) -> set[CacheKey]:
        """Those of the read-only tier's ``keys`` nobody read for ``expire_ms``. Reads through here
        are in ``_last_read``; a remote tier is asked about the few keys that have none as recent (its
        readers mark what they serve, at most once per key every few seconds: ``read_times``)."""
        cutoff = now - self._expire_ms
        last_read = self._last_read
        candidates = []
        for key in keys:
            # A key that entered the tier without a read through here (put by a test, or by an older
            # process of this cache) is given a whole period from the first sync that sees it.
            if last_read.setdefault(key, now) <= cutoff:
                candidates.append(key)
        if not candidates:
            return set()
        elsewhere = self.read_only.read_times(candidates, cutoff)
        if elsewhere is None:
            return set()  # the remote tier cannot say now whether its readers read them: keep them
        unread = set()
        for key in candidates:
            read_at = elsewhere.get(key)
            if read_at is not None and read_at > cutoff:
                last_read[key] = read_at
            else:
                unread.add(key)
        return unread

    def _forget(self, key: CacheKey) -> None:
        """Everything kept for ``key`` beside the read-only tier."""
        with self._lock:
            self._forget_built(key)
        self._last_read.pop(key, None)
        self._build_ms.pop(key, None)
        self._synced_at.pop(key, None)
        self._plain_keys.discard(key)

    def _sweep(self, now: int) -> None:
        """Every quarter of ``expire_ms``: drop what is kept for keys outside the read-only tier (read
        without enlisting, or with no read-only tier) once unread for ``expire_ms``, and payloads past
        ``expire_ms``, which are never served again (``_fresh``)."""
        if self._swept_at is not None and now - self._swept_at < self._expire_ms // 4:
            return
        self._swept_at = now
        cutoff = now - self._expire_ms
        in_tier = set(self.read_only.keys())
        for key, read_at in list(self._last_read.items()):
            if read_at <= cutoff and key not in in_tier:
                self._last_read.pop(key, None)
        with self._lock:
            for key, payload in list(self._read_write.items()):
                if payload.built_at <= cutoff or (key not in in_tier and key not in self._last_read):
                    self._forget_built(key)
            for key, payload in list(self._misses.items()):
                if payload.built_at <= cutoff:
                    self._forget_built(key)
        # Over copies: reads and builds may add to these tables meanwhile.
        for table in (self._build_ms, self._synced_at):
            for key in list(table):
                if key not in in_tier and key not in self._last_read:
                    table.pop(key, None)
        unread_plain = [key for key in list(self._plain_keys) if key not in self._last_read]
        self._plain_keys.difference_update(unread_plain)

    def _forget_unused_formats(self) -> None:
        """Tell the builder which formats are still served, when that changed since the last sync."""
        if self._keep_formats is None:
            return
        with self._lock:
            built = list(self._read_write)
        in_use = {(key.fmt, key.compact) for key in (*self.read_only.keys(), *built)}
        if in_use != self._formats_in_use:
            self._formats_in_use = in_use
            self._keep_formats(in_use)

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._read_write.clear()
            self._misses.clear()
            self._named.clear()
            self._synced_at.clear()
            self._build_ms.clear()
            self._last_read.clear()
            self.read_only.clear()
        if self._on_clear is not None:
            self._on_clear()

    def stats(self) -> dict:
        return {
            "read_write_keys": len(self._read_write),
            "read_only_keys": len(self.read_only),
            "miss_keys": len(self._misses),
        }
