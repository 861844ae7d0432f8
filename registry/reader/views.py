"""The reader's views: the node's read views, served from the Redis tier, and a forwarder for the rest.

They are the node's ``EurekaView`` (API accounts applied per request when ``EUREKA_API_AUTH`` is on,
the same plain-text errors) and answer through the node's helpers: ``response_format`` (Accept),
``wants_compact`` (X-Eureka-Accept), ``wants_gzip`` (Accept-Encoding) pick the cache key and the copy,
``payload_response`` sends it. Only where the payload comes from differs: ``registry/reader/source.py``
instead of ``node.cache.get``.
"""

from __future__ import annotations

import orjson
from django.conf import settings
from django.http import HttpResponse

from registry.cache.response_cache import APP, APPS, DELTA, SVIP, VIP, CacheKey
from registry.protocol.views import EurekaView
from registry.reader.service import get_reader
from registry.wire.http import (
    key_regions,
    payload_response,
    requested_regions,
    response_format,
    wants_compact,
    wants_gzip,
)

SERVED_METHODS = frozenset({"GET", "HEAD"})


class ReaderView(EurekaView):
    """GET and HEAD are served here; any other method goes to the node as it came (its own checks
    apply there)."""

    def dispatch(self, request, *args, **kwargs):
        if request.method not in SERVED_METHODS:
            return get_reader().forwarder.forward(request)
        return super().dispatch(request, *args, **kwargs)


def _regions(request, entity: str) -> tuple[str, ...] | None:
    """The remote regions of the node's key for this request (``key_regions``, from the same
    settings); None when only the node can answer: regions asked for but none of them configured
    (the node may still refuse them, 403, before its first fetch of every region)."""
    config = settings.EUREKA.remote_regions
    if entity not in (APPS, DELTA) or not config.urls:
        return ()
    asked = requested_regions(request)
    regions = key_regions(request, asked, config.urls, config.transparent_fallback)
    return None if asked is not None and not regions else regions


def _served(request, entity: str, name: str = "") -> HttpResponse:
    reader = get_reader()
    fmt = response_format(request)
    regions = _regions(request, entity)
    if regions is None:
        return reader.forwarder.forward(request._request)
    key = CacheKey(entity, name, fmt, wants_compact(request), regions)
    payload, _reason = reader.source.lookup(key, wants_gzip(request))
    if payload is None:
        # Missing, stale or Redis down: the node answers (and publishes the key for next time).
        return reader.forwarder.forward(request._request)
    return payload_response(request, payload, fmt)


class ApplicationsView(ReaderView):
    def get(self, request):
        return _served(request, APPS)


class DeltaView(ReaderView):
    # With EUREKA_DISABLE_DELTA the node publishes no delta: every request goes on to it (403 there).
    def get(self, request):
        return _served(request, DELTA)


class ApplicationView(ReaderView):
    def get(self, request, app):
        return _served(request, APP, app.upper())


class VipView(ReaderView):
    secure = False

    def get(self, request, vip):
        return _served(request, SVIP if self.secure else VIP, vip)


def forward(request, **kwargs) -> HttpResponse:
    """Every other protocol request, whatever its method."""
    return get_reader().forwarder.forward(request)


class ProbeView(EurekaView):
    """Open probes, like the node's: never under API accounts."""

    api_accounts = False


class HealthView(ProbeView):
    def get(self, request):
        return HttpResponse(orjson.dumps({"status": "ok", "role": "reader"}), content_type="application/json")


class ReadyView(ProbeView):
    def get(self, request):
        body = get_reader().status()
        return HttpResponse(
            orjson.dumps(body),
            status=503 if body["status"] == "unavailable" else 200,
            content_type="application/json",
        )
