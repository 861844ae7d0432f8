"""Builds the serialized payload for a response-cache key from a registry snapshot."""

from __future__ import annotations

from registry.cache.response_cache import APP, APPS, DELTA, SVIP, VIP, CacheKey
from registry.core import Registry
from registry.protocol.codecs import application_dict, applications_dict, render


def build_payload(registry: Registry, key: CacheKey) -> bytes | None:
    """Serialized bytes for ``key``, or None when the key names an app with no instances (404)."""
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
