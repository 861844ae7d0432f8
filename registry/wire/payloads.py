"""Builds the serialized payload for a response-cache key from the registry.

Payloads are assembled from serialized pieces instead of serializing the registry whole:

* each instance's bytes (JSON and XML, full and compact) are kept until its record changes (every
  write gives an instance a new immutable record) or ``expire_ms`` passes, like any cached payload;
* each application's fragment is its instances' bytes in one wrapper, dropped when the application
  changes (the registry's change hook) or expires. Once an instance's bytes are in its application's
  fragment, the instance keeps a view of them there instead of its own copy (``_share``): one copy of
  the registry's serialized bytes per format, not two;
* ``GET apps`` joins the fragments of every application, and ``GET apps/delta`` the bytes of the
  instances in the delta queue, grouped by application as Eureka does;
* the gzip copy of ``GET apps`` is joined from deflate chunks of runs of fragments (one standard
  gzip stream), so after a change only the run holding it (and, when the change is near its end, the
  next, which refers back into it) is compressed again.

So a rebuild costs in proportion to what changed: one change re-serializes one instance, and a delta of
thousands of changes is joined from bytes instead of serialized again while heartbeats wait. A heartbeat
changes no piece (it changes no cached payload in Eureka either): a lease's ``lastRenewalTimestamp`` in
a payload is as of when its bytes were built, at most ``expire_ms`` ago. Every piece is exactly what
serializing the whole registry would give (``tests/wire/test_payload_fragments.py`` compares them with a
full rebuild on random registries).

Each fragment keeps the status counts of its instances, and the reconcile hashcode of an assembled
payload is computed from them, so a payload's hashcode always describes the instances in it.
"""

from __future__ import annotations

import hashlib
import random
import re
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import orjson

from registry.cache.pacing import PACER
from registry.cache.response_cache import (
    APP,
    APPS,
    DEFLATE_WINDOW,
    DELTA,
    SVIP,
    VIP,
    CacheKey,
    NoMatch,
    Pieces,
    deflate_chunk,
)
from registry.domain.core import Registry
from registry.domain.jsonbytes import dumps_to_keep
from registry.domain.lease_map import reconcile_hashcode
from registry.domain.leases import LeaseView
from registry.domain.map_reads import Snapshot
from registry.wire.codecs import JSON, application_dict, applications_dict, instance_dict, render

AppViews = list[tuple[str, list[LeaseView]]]


class RemoteSource(Protocol):
    """The remote regions' instances as payloads merge them in (registry/cluster/regions.py)."""

    def applications(self, names: Iterable[str]) -> AppViews: ...

    def deltas(self, names: Iterable[str]) -> AppViews: ...

    def find_app(self, app: str) -> list[LeaseView] | None: ...

    @property
    def names(self) -> list[str]: ...


# Spreads the expiry of instance bytes; not security sensitive.
_jitter = random.Random()


@dataclass(frozen=True, slots=True)
class Fragment:
    """One application serialized (``{"name":...,"instance":[...]}`` or ``<application>...``)."""

    app: str
    body: bytes
    statuses: Counter
    built_at: int


# Gzip of ``GET apps`` is joined from deflate chunks of runs of fragments, each run about this long.
# Each chunk is primed with the 32 KB before it (deflate's window), so short runs cost little size
# (unprimed, chunks of one small application would make a registry's gzip several times larger);
# priming costs CPU, a run's worth of it for runs under 32 KB. Long runs mean more to compress again:
# after a change its run, and often the next, is compressed again.
CHUNK_TARGET_BYTES = 128 * 1024
# A run may grow to this many times the target when no boundary comes (boundaries depend on names).
CHUNK_MAX_FACTOR = 4


def _runs(fragments: list[Fragment]) -> list[list[Fragment]]:
    """Consecutive fragments in runs of about CHUNK_TARGET_BYTES. A run ends after an application
    whose name hashes to 0 modulo k, so boundaries stay where they are when other applications come,
    go or change size; only the runs holding a change get new chunks."""
    if not fragments:
        return []
    average = sum(len(f.body) for f in fragments) / len(fragments)
    k = max(1, round(CHUNK_TARGET_BYTES / max(average, 1)))
    runs: list[list[Fragment]] = [[]]
    size = 0
    for fragment in fragments:
        runs[-1].append(fragment)
        size += len(fragment.body)
        if zlib.crc32(fragment.app.encode()) % k == 0 or size >= CHUNK_MAX_FACTOR * CHUNK_TARGET_BYTES:
            runs.append([])
            size = 0
    return [run for run in runs if run]


def _ending(run: tuple[Fragment, ...], separator: bytes, leading: bool) -> bytes:
    """The last DEFLATE_WINDOW bytes of a run's text (``leading``: it starts with a separator); empty
    for no run (the first run's primer: the head before it changes with every payload)."""
    pieces: list[bytes | memoryview] = []
    size = 0
    for position in range(len(run) - 1, -1, -1):
        body = run[position].body
        pieces.append(body)
        size += len(body)
        if position or leading:
            pieces.append(separator)
            size += len(separator)
        if size >= DEFLATE_WINDOW:
            break
    pieces.reverse()
    return b"".join(pieces)[-DEFLATE_WINDOW:]


def _seal(primer: bytes) -> bytes:
    return hashlib.blake2b(primer, digest_size=16).digest() if primer else b""


class _ChunkCache:
    """Deflate chunks of runs of fragments, kept while the runs are in the latest payload.

    Every chunk but the first is primed with the end of the run before it (``deflate_chunk``), so
    cutting the stream into runs costs almost nothing in size, and a chunk stays valid only while
    that end is unchanged too: a change compresses its own run again, and the next run when the
    change reached the last DEFLATE_WINDOW bytes of its run. An entry holds its run's fragments and
    those of the run before it, so the ids compared cannot be reused while it exists."""

    def __init__(self):
        # (first?, ids of the run) -> (run, run before it, seal of the primer used, chunk)
        self._chunks: dict[tuple, tuple[tuple[Fragment, ...], tuple[Fragment, ...], bytes, bytes]] = {}
        self.deflated_runs = 0

    def chunks(self, head: bytes, fragments: list[Fragment], separator: bytes, tail: bytes) -> list[bytes]:
        parts = [deflate_chunk(head)]
        kept: dict[tuple, tuple[tuple[Fragment, ...], tuple[Fragment, ...], bytes, bytes]] = {}
        before: tuple[Fragment, ...] = ()
        for n, fragments_of_run in enumerate(_runs(fragments)):
            run = tuple(fragments_of_run)
            key = (n == 0, *map(id, run))
            entry = self._chunks.get(key)
            if entry is not None and not _same(entry[0], run):
                entry = None
            primer = None
            if entry is not None and not _same(entry[1], before):
                # The run before changed; its end (this chunk's primer) may not have.
                primer = _ending(before, separator, n > 1)
                entry = (run, before, entry[2], entry[3]) if _seal(primer) == entry[2] else None
            if entry is None:
                if primer is None:
                    primer = _ending(before, separator, n > 1)
                data = (separator if n else b"") + separator.join(f.body for f in run)
                entry = (run, before, _seal(primer), deflate_chunk(data, primer))
                self.deflated_runs += 1
            kept[key] = entry
            parts.append(entry[3])
            before = run
        parts.append(deflate_chunk(tail))
        self._chunks = kept
        return parts


def _same(these: tuple[Fragment, ...], those: tuple[Fragment, ...]) -> bool:
    return len(these) == len(those) and all(a is b for a, b in zip(these, those, strict=True))


class _InstanceBytes:
    """One instance serialized, valid while the lease still holds this record and these timestamps.
    ``body`` is its own bytes, or a view of them in its application's fragment (``_share``)."""

    __slots__ = ("instance", "registration_ts", "eviction_ts", "service_up_ts", "expires_at", "body")

    def __init__(self, view: LeaseView, expires_at: int, body: bytes | memoryview):
        self.instance = view.instance
        self.registration_ts = view.registration_ts
        self.eviction_ts = view.eviction_ts
        self.service_up_ts = view.service_up_ts
        self.expires_at = expires_at
        self.body = body

    def serves(self, view: LeaseView, now: int) -> bool:
        # Records are immutable, so "the same object" means "unchanged"; the lease's own timestamps
        # are compared too, but not its renewal time: a heartbeat changes no cached payload.
        return (
            self.instance is view.instance
            and self.registration_ts == view.registration_ts
            and self.eviction_ts == view.eviction_ts
            and self.service_up_ts == view.service_up_ts
            and now < self.expires_at
        )


class PayloadBuilder:
    def __init__(self, registry: Registry, clock: Callable[[], int], expire_ms: int):
        self.registry = registry
        self.clock = clock
        self.expire_ms = expire_ms
        self._lock = threading.Lock()
        self._fragments: dict[tuple[str, str, bool], Fragment] = {}
        # Bumped by every change of an app: a fragment built across a change is not kept.
        self._generations: dict[str, int] = {}
        # (fmt, compact) -> (app, instance id) -> bytes. Plain dict operations, atomic under the GIL;
        # entries past expire_ms are swept now and then, so cancelled instances do not pile up.
        self._instances: dict[tuple[str, bool], dict[tuple[str, str], _InstanceBytes]] = {}
        # (app, fmt, compact) -> the app's latest fragment body and the ids of the instances whose
        # bytes are views of it, in order.
        self._shared: dict[tuple[str, str, bool], tuple[bytes, tuple[str, ...]]] = {}
        self._swept_at = clock()
        self._chunk_caches: dict[tuple, _ChunkCache] = {}
        # The delta's part of each app, as the registry's delta version of that app made it.
        self._delta_fragments: dict[tuple[str, bool], dict[str, tuple[int, Fragment]]] = {}
        self.delta_fragments_built = 0
        self.fragments_built = 0
        self.instances_serialized = 0
        # Remote regions (None: none configured). ``remote_fallback``: ``GET apps/{app}`` for an app
        # with no instance here is answered from them (Eureka's transparent fallback).
        self.remote: RemoteSource | None = None
        self.remote_fallback = False
        # ("apps" | "delta", app, fmt, compact) -> (the remote views, their fragment, last used): a
        # remote app is serialized again only when a fetch changed it.
        self._remote_fragments: dict[
            tuple[str, str, str, bool], tuple[tuple[LeaseView, ...], Fragment, int]
        ] = {}

    def invalidate(self, app: str) -> None:
        """The registry changed ``app`` (called under its lock: dictionary operations only)."""
        with self._lock:
            self._generations[app] = self._generations.get(app, 0) + 1
            for fmt in ("json", "xml"):
                for compact in (False, True):
                    self._fragments.pop((app, fmt, compact), None)

    def clear(self) -> None:
        with self._lock:
            for app in list(self._generations):
                self._generations[app] += 1
            self._fragments.clear()
            self._instances = {}
            self._shared = {}
            self._delta_fragments = {}
            self._remote_fragments = {}

    def keep_formats(self, variants: set[tuple[str, bool]]) -> None:
        """Forget the pieces of every (fmt, compact) variant not in ``variants``: no key of theirs is
        served any more (ResponseCache.sync). For a large registry the XML pieces alone are large, and
        would be kept for good once anybody had asked for ``GET apps`` in XML."""
        with self._lock:
            for key in [key for key in self._fragments if key[1:] not in variants]:
                del self._fragments[key]
            self._instances = {
                variant: kept for variant, kept in self._instances.items() if variant in variants
            }
            self._shared = {key: kept for key, kept in self._shared.items() if key[1:] in variants}
            self._chunk_caches = {
                key: kept for key, kept in self._chunk_caches.items() if key[-2:] in variants
            }
            # A variant is (fmt, compact), then the remote regions merged, if any.
            self._delta_fragments = {
                variant: kept for variant, kept in self._delta_fragments.items() if variant[:2] in variants
            }
            self._remote_fragments = {
                key: kept for key, kept in self._remote_fragments.items() if key[2:] in variants
            }

    def _instance_entries(
        self, views: list[LeaseView], fmt: str, compact: bool, now: int
    ) -> list[_InstanceBytes]:
        cache = self._instances.get((fmt, compact))
        if cache is None:
            cache = self._instances.setdefault((fmt, compact), {})
        expire_ms = self.expire_ms
        tick = PACER.tick
        entries = []
        for view in views:
            key = (view.instance.app, view.instance.instance_id)
            cached = cache.get(key)
            if cached is None or not cached.serves(view, now):
                data = instance_dict(view, compact)
                body = dumps_to_keep(data) if fmt == JSON else render("instance", data, fmt)
                # Each entry lives between half and all of expire_ms: a fleet registered in one go
                # then expires over minutes, not in one rebuild that re-serializes every instance.
                lifetime = expire_ms - _jitter.randrange(expire_ms // 2 + 1)
                cached = cache[key] = _InstanceBytes(view, now + lifetime, body)
                self.instances_serialized += 1
                # A fleet's worth would hold the event loop (pacing.py).
                tick()
            entries.append(cached)
        return entries

    def _application(
        self, app: str, views: list[LeaseView], fmt: str, compact: bool, now: int, share: bool = False
    ) -> bytes:
        """``app`` with these instances, byte for byte what ``application_dict`` would serialize to.
        With ``share``, the instances' kept bytes become views of the result."""
        entries = self._instance_entries(views, fmt, compact, now)
        bodies = [entry.body for entry in entries]
        if not share:
            whole = self._whole_fragment(app, views, bodies, fmt, compact)
            if whole is not None:
                return whole
        if fmt == JSON:
            head, separator, closing = b'{"name":' + orjson.dumps(app) + b',"instance":[', b",", b"]}"
        else:
            closing = b"</application>"
            head, separator = render("application", {"name": app, "instance": []}, fmt)[: -len(closing)], b""
        body = b"".join((head, separator.join(bodies), closing))
        if share:
            self._share(app, entries, bodies, body, len(head), len(separator), fmt, compact)
        return body

    def _share(
        self,
        app: str,
        entries: list[_InstanceBytes],
        bodies: list[bytes | memoryview],
        body: bytes,
        offset: int,
        gap: int,
        fmt: str,
        compact: bool,
    ) -> None:
        """Point each instance's kept bytes at its place in ``body``, the app's new fragment, and
        ``_release`` those of the previous fragment that are not in this one."""
        whole = memoryview(body)
        members = []
        for entry, piece in zip(entries, bodies, strict=True):
            end = offset + len(piece)
            # Only if no thread has pointed it elsewhere since ``bodies`` was read.
            if entry.body is piece:
                entry.body = whole[offset:end]
                members.append(entry.instance.instance_id)
            offset = end + gap
        self._release((app, fmt, compact), set(members))
        self._shared[(app, fmt, compact)] = (body, tuple(members))

    def _release(self, shared_key: tuple[str, str, bool], staying: set[str]) -> None:
        """Instances of the app's last fragment that are not ``staying`` get their own copy back, so
        that no entry keeps an old fragment alive."""
        shared = self._shared.get(shared_key)
        if shared is None:
            return
        body, members = shared
        cache = self._instances.get(shared_key[1:], {})
        for instance_id in members:
            if instance_id not in staying:
                entry = cache.get((shared_key[0], instance_id))
                if entry is not None and isinstance(entry.body, memoryview) and entry.body.obj is body:
                    entry.body = bytes(entry.body)

    def _whole_fragment(
        self, app: str, views: list[LeaseView], bodies: list[bytes | memoryview], fmt: str, compact: bool
    ) -> bytes | None:
        """The app's fragment body itself when ``bodies`` are all of it, in its order: a delta holding
        every instance of an app (for three minutes after a fleet registers) then costs no copy."""
        shared = self._shared.get((app, fmt, compact))
        if shared is None or len(shared[1]) != len(bodies):
            return None
        body, members = shared
        for piece in bodies:
            if not isinstance(piece, memoryview) or piece.obj is not body:
                return None
        if tuple(view.instance.instance_id for view in views) != members:
            return None
        return body

    def fragment(self, app: str, fmt: str, compact: bool) -> Fragment | None:
        """The app's serialized fragment (None when it has no instances)."""
        key = (app, fmt, compact)
        now = self.clock()
        with self._lock:
            cached = self._fragments.get(key)
            if cached is not None and now - cached.built_at < self.expire_ms:
                return cached
            generation = self._generations.get(app, 0)
        views = self.registry.reads.snapshot_app(app)
        if not views:
            self._release(key, set())
            self._shared.pop(key, None)
            return None
        built = Fragment(
            app,
            self._application(app, views, fmt, compact, now, share=True),
            Counter(view.instance.status for view in views),
            now,
        )
        self.fragments_built += 1
        with self._lock:
            if self._generations.get(app, 0) == generation:
                self._fragments[key] = built
        return built

    def _sweep(self, now: int) -> None:
        """Drop instance bytes past their expiry (left by cancelled instances), at most every quarter
        of ``expire_ms``: memory stays bounded by live instances plus the last ``expire_ms`` of churn."""
        if now - self._swept_at < self.expire_ms // 4:
            return
        self._swept_at = now
        for variant, cache in list(self._instances.items()):
            self._instances[variant] = {
                key: entry for key, entry in list(cache.items()) if now < entry.expires_at
            }
        self._remote_fragments = {
            key: kept for key, kept in list(self._remote_fragments.items()) if now - kept[2] < self.expire_ms
        }

    def applications(self, fmt: str, compact: bool, regions: tuple[str, ...] = ()) -> Pieces:
        """``GET apps``: the fragments of every application, in the registry's order, then those of
        the remote ``regions`` (an app held here too gets their instances in its own element); the
        hashcode counts them all, as the Java server's (``getApplicationsFromMultipleRegions``)."""
        now = self.clock()
        self._sweep(now)
        fragments = []
        for app in self.registry.reads.app_names():
            fragment = self.fragment(app, fmt, compact)
            if fragment is not None:
                fragments.append(fragment)
            PACER.tick()
        if regions and self.remote is not None:
            remote = dict(self.remote.applications(regions))
            merged = []
            for fragment in fragments:
                extra = remote.pop(fragment.app, None)
                if extra is None:
                    merged.append(fragment)
                else:
                    local = self.registry.reads.snapshot_app(fragment.app)
                    merged.append(self._merged_fragment(fragment.app, local, extra, fmt, compact, now))
            merged += [
                self._remote_fragment("apps", app, views, fmt, compact, now) for app, views in remote.items()
            ]
            fragments = merged
        statuses: Counter = Counter()
        for fragment in fragments:
            statuses.update(fragment.statuses)
        chunk_cache = self._chunk_caches.setdefault((*_regions_part(regions), fmt, compact), _ChunkCache())
        return _applications(fmt, "1", reconcile_hashcode(statuses), fragments, chunk_cache)

    def _merged_fragment(
        self, app: str, local: list[LeaseView], remote: list[LeaseView], fmt: str, compact: bool, now: int
    ) -> Fragment:
        """An app held here and in a remote region: one element, a remote instance replacing a local
        one with the same id (as Java's ``Application.addInstance``). Rare; never kept."""
        ids = {view.instance.instance_id for view in remote}
        views = [view for view in local if view.instance.instance_id not in ids] + remote
        body = self._application(app, views, fmt, compact, now)
        return Fragment(app, body, Counter(view.instance.status for view in views), now)

    def _remote_fragment(
        self, kind: str, app: str, views: list[LeaseView], fmt: str, compact: bool, now: int
    ) -> Fragment:
        """A remote region's app, serialized again only when its instances changed."""
        key = (kind, app, fmt, compact)
        held = tuple(views)
        kept = self._remote_fragments.get(key)
        if kept is not None and kept[0] == held:
            fragment = kept[1]
        else:
            body = render("application", application_dict(app, views, compact), fmt)
            if fmt == JSON:
                body = body[len(b'{"application":') : -1]
            fragment = Fragment(app, body, Counter(view.instance.status for view in views), now)
            PACER.tick()
        self._remote_fragments[key] = (held, fragment, now)
        return fragment

    def delta(self, fmt: str, compact: bool, regions: tuple[str, ...] = ()) -> Pieces:
        """``GET apps/delta``: the delta queue's instances, each app's part kept until it changes (a
        write to the app, or its oldest entries leaving the queue), joined with its gzip runs. With
        remote ``regions``, what their last fetches brought is merged in, and the hashcode counts the
        registry merged with them, as ``GET apps`` with the same regions shows it."""
        now = self.clock()
        variant = (fmt, compact, *_regions_part(regions))
        remote = dict(self.remote.deltas(regions)) if regions and self.remote is not None else {}
        kept = self._delta_fragments.get(variant, {})
        # Parts past expire_ms are built again, like any cached payload (renewal times move on); so
        # are those of apps the remote delta also has (their instances are merged into one element).
        known = {
            app: version
            for app, (version, f) in kept.items()
            if now - f.built_at < self.expire_ms and app not in remote
        }
        parts = self.registry.reads.delta_parts(known)
        fresh: dict[str, tuple[int, Fragment]] = {}
        fragments = []
        for app, version in parts.outline:
            views = parts.changed.get(app)
            if views is None:
                fresh[app] = kept[app]
            elif app in remote:
                # Not kept: the next delta may no longer have the remote part.
                fragments.append(self._merged_fragment(app, views, remote.pop(app), fmt, compact, now))
                continue
            else:
                body = self._application(app, views, fmt, compact, now)
                fresh[app] = (version, Fragment(app, body, Counter(), now))
                self.delta_fragments_built += 1
                PACER.tick()
            fragments.append(fresh[app][1])
        self._delta_fragments[variant] = fresh
        fragments += [
            self._remote_fragment("delta", app, views, fmt, compact, now) for app, views in remote.items()
        ]
        hashcode = parts.hashcode
        if regions and self.remote is not None:
            counts = merged_counts(
                counts_of_hashcode(parts.hashcode),
                self.registry.reads.snapshot_app,
                set(self.registry.reads.app_names()),
                self.remote.applications(regions),
            )
            hashcode = reconcile_hashcode(counts)
        chunk_cache = self._chunk_caches.setdefault(
            ("delta", *_regions_part(regions), fmt, compact), _ChunkCache()
        )
        return _applications(fmt, str(parts.version), hashcode, fragments, chunk_cache)

    def build(self, key: CacheKey) -> bytes | None:
        """Serialized bytes for ``key``, or None when the key names an app with no instances (404)."""
        assembled = self.assemble(key)
        if isinstance(assembled, NoMatch):
            return assembled.body
        return assembled.join() if isinstance(assembled, Pieces) else assembled

    def assemble(self, key: CacheKey) -> bytes | Pieces | NoMatch | None:
        """What the response cache stores for ``key``: as ``build``, but ``GET apps`` and the delta
        are left in pieces (``Pieces``: joined only if a client asks for them uncompressed), and a vip
        no instance carries is marked ``NoMatch`` (a miss, which the cache does not keep for long)."""
        if key.entity == APPS:
            return self.applications(key.fmt, key.compact, key.regions)
        if key.entity == DELTA:
            return self.delta(key.fmt, key.compact, key.regions)
        if key.entity == APP:
            fragment = self.fragment(key.name, key.fmt, key.compact)
            if fragment is None:
                return self._remote_app(key)
            if key.fmt == JSON:
                return b'{"application":' + fragment.body + b"}"
            return fragment.body
        if key.entity in (VIP, SVIP):
            body, matched = self._vip_payload(key)
            return body if matched else NoMatch(body)
        return build_payload(self.registry, key)

    def _vip_payload(self, key: CacheKey) -> tuple[bytes, bool]:
        """``GET vips/{vip}`` / ``svips/{vip}``; with transparent fallback the remote regions'
        instances that carry the vip too (the Java server matches against every region it serves
        without ``regions=``), an app held in both being one element, the hashcode over them all."""
        if not self.remote_fallback or self.remote is None:
            return vip_payload(self.registry, key)
        secure = key.entity == SVIP
        snapshot = self.registry.reads.snapshot_vip(key.name, secure=secure)
        apps: dict[str, dict[str, LeaseView]] = {
            app: {view.instance.instance_id: view for view in views} for app, views in snapshot.apps
        }
        for app, views in self.remote.applications(self.remote.names):
            for view in views:
                if key.name in (view.instance.secure_vips() if secure else view.instance.vips()):
                    apps.setdefault(app, {})[view.instance.instance_id] = view
            PACER.tick()
        grouped = [(app, list(held.values())) for app, held in apps.items()]
        counts = Counter(view.instance.status for _, views in grouped for view in views)
        merged = Snapshot(grouped, reconcile_hashcode(counts), snapshot.version)
        return render("applications", applications_dict(merged, key.compact), key.fmt), bool(grouped)

    def _remote_app(self, key: CacheKey) -> bytes | None:
        """An app with no instance here, from the first remote region that has it (any app: the
        whitelist does not apply to this fallback, in Eureka either); None: 404."""
        if not self.remote_fallback or self.remote is None:
            return None
        views = self.remote.find_app(key.name)
        if not views:
            return None
        return render("application", application_dict(key.name, views, key.compact), key.fmt)


def _regions_part(regions: tuple[str, ...]) -> tuple:
    """What a payload variant's key gains when remote regions are merged in (nothing otherwise, so
    the keys of a node without remote regions are as they were)."""
    return (regions,) if regions else ()


_HASHCODE_PART = re.compile(r"([A-Z_]+?)_(\d+)_")


def counts_of_hashcode(hashcode: str) -> dict[str, int]:
    """The status counts a reconcile hashcode spells (``DOWN_1_UP_3_`` -> {DOWN: 1, UP: 3})."""
    return {status: int(count) for status, count in _HASHCODE_PART.findall(hashcode)}


def merged_counts(
    local_counts: Mapping[str, int],
    local_app: Callable[[str], list[LeaseView]],
    local_names: set[str],
    remote: AppViews,
) -> dict[str, int]:
    """Status counts of the local registry with ``remote`` merged in as ``GET apps`` merges it: a
    remote instance with the id of a local one of the same app replaces it, so it is counted once."""
    counts = dict(local_counts)
    for app, views in remote:
        if app in local_names:
            ids = {view.instance.instance_id for view in views}
            for local in local_app(app):
                if local.instance.instance_id in ids:
                    counts[local.instance.status] -= 1
        for view in views:
            counts[view.instance.status] = counts.get(view.instance.status, 0) + 1
    return counts


def _applications(
    fmt: str, version: str, hashcode: str, fragments: list[Fragment], chunk_cache: _ChunkCache
) -> Pieces:
    """The ``applications`` document around already serialized ``application`` elements, with the
    deflate chunks it is made of (head, runs of fragments, tail) for its gzip copy."""
    separator = b"," if fmt == JSON else b""
    if fmt == JSON:
        head = b"".join(
            (
                b'{"applications":{"versions__delta":',
                orjson.dumps(version),
                b',"apps__hashcode":',
                orjson.dumps(hashcode),
                b',"application":[',
            )
        )
        tail = b"]}}"
    else:
        # ``<applications>...</applications>`` with the application elements before the closing tag.
        tail = b"</applications>"
        empty = render("applications", {"versions__delta": version, "apps__hashcode": hashcode}, fmt)
        head = empty[: -len(tail)]
    # Not joined here (see Pieces): each copy of a large registry would hold the loop unless it runs
    # in a native thread.
    pieces = [head]
    for number, fragment in enumerate(fragments):
        if number and separator:
            pieces.append(separator)
        pieces.append(fragment.body)
    pieces.append(tail)
    return Pieces(pieces, lambda: chunk_cache.chunks(head, fragments, separator, tail))


def build_payload(registry: Registry, key: CacheKey) -> bytes | None:
    """Serialized bytes for ``key`` from one snapshot of the whole registry (no fragments)."""
    if key.entity == APPS:
        snapshot = registry.reads.snapshot()
    elif key.entity == DELTA:
        snapshot = registry.reads.snapshot_delta()
    elif key.entity in (VIP, SVIP):
        return vip_payload(registry, key)[0]
    elif key.entity == APP:
        views = registry.reads.snapshot_app(key.name)
        if not views:
            return None
        return render("application", application_dict(key.name, views, key.compact), key.fmt)
    else:
        raise ValueError(f"unknown cache entity {key.entity!r}")
    return render("applications", applications_dict(snapshot, key.compact), key.fmt)


def vip_payload(registry: Registry, key: CacheKey) -> tuple[bytes, bool]:
    """``GET vips/{vip}`` or ``svips/{vip}``, and whether any instance carries the vip."""
    snapshot = registry.reads.snapshot_vip(key.name, secure=key.entity == SVIP)
    return render("applications", applications_dict(snapshot, key.compact), key.fmt), bool(snapshot.apps)
