"""The change feed's HTTP views: ``GET /api/v1/changes`` (JSON) and ``GET /api/v1/changes/stream`` (SSE).

Access is the protocol's: with ``EUREKA_API_AUTH`` on, the reader role (or client, peer) is needed,
checked by the same DRF classes as ``GET /eureka/apps`` (``registry/access/drf.py``). Errors are JSON
documents ``{"error": ..., "detail": ...}``; ``EUREKA_CHANGE_FEED=false`` answers 404.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

import orjson
from django.db import connections
from django.http import Http404, HttpResponse, StreamingHttpResponse
from rest_framework import exceptions
from rest_framework.views import APIView

from registry.access.clients import client_address
from registry.access.drf import AccountAuthentication, RolePermission, SignInBusy, api_accounts_on
from registry.domain.changes import TooOld
from registry.feed.query import BadParameter, parse_query, read_page, registry_page
from registry.feed.streams import Refusal, StreamBody, StreamHub, change_stream, resume_point
from registry.runtime.node import Node
from registry.runtime.process import get_node
from registry.wire.http import PassthroughRenderer

if TYPE_CHECKING:
    from registry.config.services import ChangeFeedConfig

REFETCH_DETAIL = "refetch GET /eureka/apps, then follow from lastId"
RETRY_AFTER_FULL_S = 5

_hub_lock = threading.Lock()


def feed_config(node: Node) -> ChangeFeedConfig:
    return node.config.change_feed


def stream_hub(node: Node) -> StreamHub:
    """The node's hub of open streams, made with the first stream (no cost before)."""
    if node.change_streams is None:
        with _hub_lock:
            if node.change_streams is None:
                options = feed_config(node)
                node.change_streams = StreamHub(
                    node.registry, options.streams_max, options.coalesce_ms, options.streams_per_address_max
                )
    return node.change_streams


def json_response(status: int, body: dict[str, Any]) -> HttpResponse:
    return HttpResponse(orjson.dumps(body), status=status, content_type="application/json")


def error(status: int, code: str, detail: str, **extra: Any) -> HttpResponse:
    return json_response(status, {"error": code, "detail": detail, **extra})


def too_old_response(exc: TooOld) -> HttpResponse:
    return error(410, "too_old", REFETCH_DETAIL, lastId=exc.last_id)


def feed_exception_handler(exc, context):
    """DRF's refusals as the feed's JSON errors (401 keeps its Basic challenge)."""
    if isinstance(exc, BadParameter):
        return error(400, "bad_parameter", f"{exc.parameter}: {exc.detail}", parameter=exc.parameter)
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        detail = "HTTP Basic credentials (or a client certificate) of an API account are needed"
        response = error(401, "unauthenticated", detail)
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            response["WWW-Authenticate"] = auth_header
        return response
    if isinstance(exc, exceptions.PermissionDenied):
        return error(403, "forbidden", "the account's role may not read the registry")
    if isinstance(exc, exceptions.NotFound | Http404):
        return error(404, "not_found", "the change feed is off (EUREKA_CHANGE_FEED=false)")
    if isinstance(exc, exceptions.MethodNotAllowed):
        response = error(405, "method_not_allowed", f"{context['request'].method} is not allowed here")
        response["Allow"] = ", ".join(context["view"].allowed_methods)
        return response
    if isinstance(exc, SignInBusy):
        # Too many password checks were waiting: these credentials were not checked.
        response = error(503, "busy", str(exc.detail))
        response["Retry-After"] = str(math.ceil(exc.wait or 1))
        return response
    if isinstance(exc, exceptions.Throttled):
        # Too many failed sign-ins from this address or for this account (registry/access/throttle.py).
        response = error(429, "throttled", str(exc.detail))
        response["Retry-After"] = str(math.ceil(exc.wait or 1))
        return response
    if isinstance(exc, exceptions.APIException):
        return error(exc.status_code, "refused", str(exc.detail))
    return None


class FeedView(APIView):
    http_method_names = ["get", "head"]
    renderer_classes = [PassthroughRenderer]
    throttle_classes: list = []
    metadata_class = None

    # Read per request, like the protocol views: the open default costs nothing.
    def get_authenticators(self):
        return [AccountAuthentication()] if api_accounts_on() else []

    def get_permissions(self):
        return [RolePermission()] if api_accounts_on() else []

    def get_exception_handler(self):
        return feed_exception_handler

    def initial(self, request, *args, **kwargs):
        # Off means absent, before any credentials are asked for.
        if not feed_config(get_node()).enabled:
            raise Http404
        super().initial(request, *args, **kwargs)

    def feed_query(self, request):
        return parse_query(request.query_params, request.META.get("HTTP_LAST_EVENT_ID"))


class ChangesView(FeedView):
    """``GET /api/v1/changes``: a page of changes after ``since`` (see registry/feed/query.py)."""

    def get(self, request):
        query = self.feed_query(request)
        try:
            page = read_page(get_node().registry, query)
        except TooOld as exc:
            return too_old_response(exc)
        return json_response(200, page)


class RegistryView(FeedView):
    """``GET /api/v1/registry``: the whole map now, with the change id to follow on from (a follower's
    starting point: registry/feed/query.py ``registry_page``)."""

    def get(self, request):
        return json_response(200, registry_page(get_node().registry))


class ChangeStreamView(FeedView):
    """``GET /api/v1/changes/stream``: Server-Sent Events from the resume point (registry/feed/streams.py)."""

    # A HEAD would open a stream that nobody reads (its slot held until the maximum duration).
    http_method_names = ["get"]

    def get(self, request):
        query = self.feed_query(request)
        node = get_node()
        options = feed_config(node)
        hub = stream_hub(node)
        cursor, too_old_at = resume_point(node.registry, query)
        address = client_address(request)
        subscription = hub.open(address)
        if subscription is Refusal.FULL:
            response = error(
                503, "too_many_streams", f"{hub.max_streams} change streams are open on this node"
            )
            response["Retry-After"] = str(RETRY_AFTER_FULL_S)
            return response
        if subscription is Refusal.ADDRESS_FULL:
            # The client's own doing (its share is taken): 429, and the other clients keep their slots.
            response = error(
                429,
                "too_many_streams_from_address",
                f"{hub.max_per_address} change streams are open from {address} on this node: "
                "close one before opening another",
            )
            response["Retry-After"] = str(RETRY_AFTER_FULL_S)
            return response
        # A stream lasts minutes: it must not keep the database connection its authentication used.
        connections.close_all()
        body = change_stream(
            hub,
            subscription,
            query,
            cursor,
            too_old_at,
            keepalive_s=float(options.keepalive_seconds),
            max_seconds=float(options.stream_max_seconds),
        )
        response = StreamingHttpResponse(
            StreamBody(body, lambda: hub.release(subscription)), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
        # nginx and similar proxies would buffer the stream otherwise.
        response["X-Accel-Buffering"] = "no"
        return response
