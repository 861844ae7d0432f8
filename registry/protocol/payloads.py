"""Builds the serialized payload for a response-cache key from the registry.

The full registry (``GET apps``) is assembled from one serialized fragment per application (JSON and
XML, full and compact), so a change in one application re-serializes that application only: with
10,000 instances in 100 applications a rebuild after one change costs about a hundredth of a full
serialization, instead of holding the event loop for hundreds of milliseconds. A fragment is dropped
when its application changes (the registry's change hook) and after ``expire_ms`` like any cached
payload; its bytes are exactly what serializing the whole registry would give for that application
(``tests/protocol/test_payload_fragments.py`` compares them with a full rebuild).

Each fragment keeps the status counts of its instances, and the reconcile hashcode of an assembled
payload is computed from them, so a payload's hashcode always describes the instances in it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from registry.cache.response_cache import APP, APPS, DELTA, SVIP, VIP, CacheKey
from registry.core import Registry, reconcile_hashcode
from registry.protocol.codecs import JSON, application_dict, applications_dict, render


@dataclass(frozen=True, slots=True)
class Fragment:
    """One application serialized (``{"name":...,"instance":[...]}`` or ``<application>...``)."""

    body: bytes
    statuses: Counter
    built_at: int


class PayloadBuilder:
    def __init__(self, registry: Registry, clock: Callable[[], int], expire_ms: int):
        self.registry = registry
        self.clock = clock
        self.expire_ms = expire_ms
        self._lock = threading.Lock()
        self._fragments: dict[tuple[str, str, bool], Fragment] = {}
        # Bumped by every change of an app: a fragment built across a change is not kept.
        self._generations: dict[str, int] = {}
        self.fragments_built = 0

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

    def fragment(self, app: str, fmt: str, compact: bool) -> Fragment | None:
        """The app's serialized fragment (None when it has no instances)."""
        key = (app, fmt, compact)
        now = self.clock()
        with self._lock:
            cached = self._fragments.get(key)
            if cached is not None and now - cached.built_at < self.expire_ms:
                return cached
            generation = self._generations.get(app, 0)
        views = self.registry.snapshot_app(app)
        if not views:
            return None
        body = application_dict(app, views, compact)
        encoded = orjson.dumps(body) if fmt == JSON else render("application", body, fmt)
        built = Fragment(encoded, Counter(view.instance.status for view in views), now)
        self.fragments_built += 1
        with self._lock:
            if self._generations.get(app, 0) == generation:
                self._fragments[key] = built
        return built

    def applications(self, fmt: str, compact: bool) -> bytes:
        """``GET apps``: the fragments of every application, in the registry's order."""
        fragments = [f for f in (self.fragment(app, fmt, compact) for app in self.registry.app_names()) if f]
        statuses: Counter = Counter()
        for fragment in fragments:
            statuses.update(fragment.statuses)
        hashcode = reconcile_hashcode(statuses)
        if fmt == JSON:
            return b"".join(
                (
                    b'{"applications":{"versions__delta":"1","apps__hashcode":',
                    orjson.dumps(hashcode),
                    b',"application":[',
                    b",".join(f.body for f in fragments),
                    b"]}}",
                )
            )
        head = render("applications", {"versions__delta": "1", "apps__hashcode": hashcode}, fmt)
        # ``<applications>...</applications>`` with the application elements before the closing tag.
        closing = b"</applications>"
        return head[: -len(closing)] + b"".join(f.body for f in fragments) + closing

    def build(self, key: CacheKey) -> bytes | None:
        """Serialized bytes for ``key``, or None when the key names an app with no instances (404)."""
        if key.entity == APPS:
            return self.applications(key.fmt, key.compact)
        if key.entity == APP:
            fragment = self.fragment(key.name, key.fmt, key.compact)
            if fragment is None:
                return None
            if key.fmt == JSON:
                return b'{"application":' + fragment.body + b"}"
            return fragment.body
        return build_payload(self.registry, key)


def build_payload(registry: Registry, key: CacheKey) -> bytes | None:
    """Serialized bytes for ``key`` from one snapshot of the whole registry (no fragments)."""
    if key.entity == APPS:
        snapshot = registry.snapshot()
    elif key.entity == DELTA:
        snapshot = registry.snapshot_delta()
    elif key.entity in (VIP, SVIP):
        snapshot = registry.snapshot_vip(key.name, secure=key.entity == SVIP)
    elif key.entity == APP:
        views = registry.snapshot_app(key.name)
        if not views:
            return None
        return render("application", application_dict(key.name, views, key.compact), key.fmt)
    else:
        raise ValueError(f"unknown cache entity {key.entity!r}")
    return render("applications", applications_dict(snapshot, key.compact), key.fmt)
