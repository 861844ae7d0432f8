"""The Eureka REST protocol as DRF views. Each view parses, calls one registry function, renders."""

from __future__ import annotations

from time import perf_counter

import orjson
from django.http import HttpResponse
from rest_framework.request import Request
from rest_framework.views import APIView

from registry.access.drf import AccountAuthentication, RolePermission, api_accounts_on
from registry.cache.response_cache import APP, APPS, DELTA, SVIP, VIP, CacheKey, Payload
from registry.cluster.incoming import BadBatch, BatchTooLarge, apply_batch
from registry.domain import constants as c
from registry.domain.core import Renew
from registry.domain.write_rules import LimitExceeded, RegistryFull
from registry.protocol.metrics import request_timer
from registry.runtime import operations
from registry.runtime.process import get_node
from registry.runtime.status import application_stats, general_stats
from registry.wire.codecs import (
    JSON,
    BadInput,
    decode_instance,
    instance_dict,
    metadata_key,
    render,
    xml_safe,
)
from registry.wire.http import (
    CONTENT_TYPES,
    EurekaContentNegotiation,
    PassthroughRenderer,
    RequestRefused,
    empty,
    from_peer_server,
    is_replication,
    key_regions,
    meta,
    parse_timestamp,
    payload_response,
    query_values,
    read_body,
    request_format,
    requested_regions,
    response_format,
    text,
    wants_compact,
    wants_gzip,
)


class EurekaView(APIView):
    renderer_classes = [PassthroughRenderer]
    # Bodies are read by the protocol codecs (read_body), never through DRF's request.data.
    parser_classes: list = []
    authentication_classes: list = []
    permission_classes: list = []
    throttle_classes: list = []
    # No DRF OPTIONS metadata documents: OPTIONS answers 405 like any other method the protocol lacks.
    metadata_class = None
    # Peer replication batches need the peer role when API accounts are on.
    replication_endpoint = False

    # Protocol views need API accounts when EUREKA_API_AUTH is on; the node's own endpoints built on
    # this class (probes, the secret-guarded control endpoint) set this to False.
    api_accounts = True

    # Read per request, so the open default costs nothing.
    def get_authenticators(self):
        return [AccountAuthentication()] if self.api_accounts and api_accounts_on() else []

    def get_permissions(self):
        return [RolePermission()] if self.api_accounts and api_accounts_on() else []

    # One stateless renderer for every request: DRF would instantiate the classes per request.
    _renderers = [PassthroughRenderer()]

    def get_renderers(self):
        return self._renderers

    # Likewise the negotiator (stateless; it picks the one passthrough renderer, and views choose
    # JSON or XML themselves: response_format).
    _negotiator = EurekaContentNegotiation()

    def get_content_negotiator(self):
        return self._negotiator

    def perform_authentication(self, request):
        # DRF authenticates eagerly by reading request.user; with no authenticators that would only
        # build the anonymous user, on every heartbeat.
        if request.authenticators:
            super().perform_authentication(request)

    @property
    def default_response_headers(self):
        # DRF would add "Allow" to every answer; only a 405 needs it (set by the exception handler).
        return {}

    def dispatch(self, request, *args, **kwargs):
        # Latency per protocol operation for GET /metrics, authentication and refusals included.
        observe = request_timer(request)
        started = perf_counter()
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            if observe is not None:
                observe(perf_counter() - started)
            self._let_go()

    def _let_go(self) -> None:
        """Undo the reference cycles a request leaves behind: the view and DRF's request point at each
        other (and DRF's request at itself, Django's view at its own ``get`` as ``head``), and through
        them at the WSGI environ, the connection's objects and the answer's bytes. Left to the
        collector, a request whose connection outlives a collection or two (a client reading a large
        answer slowly) is in the old generation when it ends, where the node's GC policy freezes it
        (registry/runtime/gc_policy.py) with everything it holds, until the hourly full collection."""
        drf_request = self.__dict__.get("request")
        if isinstance(drf_request, Request) and isinstance(drf_request.parser_context, dict):
            drf_request.parser_context.clear()
        self.__dict__.clear()


def _status_param(value: str | None, required: bool) -> str | None:
    """The ``value`` of status calls: exact and case-sensitive, like Java's ``InstanceStatus.valueOf``."""
    if value is None or value == "":
        if required:
            raise BadInput("Missing status value: pass ?value=UP|DOWN|STARTING|OUT_OF_SERVICE|UNKNOWN")
        return None
    if value not in c.STATUSES:
        raise BadInput(
            f"Unknown status value {value[:40]!r}: expected one of {', '.join(sorted(c.STATUSES))}"
        )
    return value


# Seconds a client is told to wait (Retry-After) before reading again from a node whose start-up sync
# is under way; Eureka clients ignore it and go on to their next service URL at once.
STARTING_RETRY_AFTER_S = 1


def _starting() -> HttpResponse | None:
    """503 (no body, Retry-After) for a registry read while the node's start-up sync is under way: what
    the map holds then (a warm restart's snapshot) is not what the cluster holds. Every client takes a
    503 as "try the next service URL" and keeps its cached registry meanwhile; a 403, the Java server's
    answer while it does not allow access, is taken by the Java client as a refused delta (it then
    asks this same node for the full registry) and by eureka-js-client as final (no retry)."""
    if not get_node().registry.awaiting_sync:
        return None
    response = empty(503)
    response["Retry-After"] = str(STARTING_RETRY_AFTER_S)
    # Expected while the node starts, and said by /readyz and the sync's own log lines: not an ERROR
    # line per read from Django's handler (a fleet polls every few seconds).
    response._has_been_logged = True
    return response


def _cached(request, entity: str, name: str = "") -> HttpResponse:
    node = get_node()
    now = node.now()
    if not node.registry.allows_reads(now):
        # Eureka's own gate (EUREKA_WAIT_TIME_IN_MS_WHEN_SYNC_EMPTY) answers 403, as the Java server.
        return _starting() or empty(403)
    regions: tuple[str, ...] = ()
    if entity in (APPS, DELTA):
        remote = node.remote_regions
        asked = requested_regions(request)
        if remote is not None:
            # Regions asked for before every region's first fetch: 403, as the Java server's
            # shouldAllowAccess(true); the Java client then tries again (or another server).
            if asked is not None and not remote.ready():
                return empty(403)
            known = remote.known(asked) if asked is not None else None
            regions = key_regions(request, known, remote.names, remote.fallback)
    fmt = response_format(request)
    key = CacheKey(entity, name, fmt, wants_compact(request), regions)
    # A Eureka server's read (a peer's start-up sync) is served without enlisting the key for the
    # cache sync: it is not read again, and keeping it fresh would cost a full rebuild per change.
    payload = node.cache.get(key, now, wants_gzip(request), enlist=not from_peer_server(request))
    return payload_response(request, payload, fmt)


def _instance_response(request, view, status: int = 200) -> HttpResponse:
    """A live (uncached) instance; 404 with an empty body when there is none."""
    if view is None:
        return empty(404)
    fmt = response_format(request)
    body = render("instance", instance_dict(view, wants_compact(request)), fmt)
    return payload_response(request, Payload(body, 0), fmt, status=status)


class ApplicationsView(EurekaView):
    """``GET apps`` — the full registry, with remote regions merged in (``?regions=``, or all of them
    by transparent fallback: registry/cluster/regions.py)."""

    def get(self, request):
        return _cached(request, APPS)


class DeltaView(EurekaView):
    """``GET apps/delta`` — instances changed in the retention window plus the full-registry hashcode."""

    def get(self, request):
        if get_node().registry.config.disable_delta:
            return empty(403)
        return _cached(request, DELTA)


class ApplicationView(EurekaView):
    """``GET apps/{app}`` and ``POST apps/{app}`` (register)."""

    def get(self, request, app):
        return _cached(request, APP, app.upper())

    def post(self, request, app):
        node = get_node()
        body = read_body(request)
        now = node.now()
        instance = decode_instance(body, request_format(request), now, path_app=app.upper())
        replicated = is_replication(request)
        try:
            node.registry.register(instance, now, replicated)
        except RegistryFull as exc:
            # 503, not a 4xx: the client is not at fault, and Eureka clients retry a registration
            # that did not answer 204 (at their next heartbeat, or at another server of their list).
            return text(503, str(exc))
        except LimitExceeded as exc:
            return text(400, str(exc))
        if not replicated:
            node.registration_sources.record(
                instance.app, instance.instance_id, meta(request).get("REMOTE_ADDR", "")
            )
        return empty(204)


class InstanceView(EurekaView):
    """``GET`` (live lookup), ``PUT`` (renew) and ``DELETE`` (cancel) on ``apps/{app}/{id}``."""

    # A heartbeat's answer is decoded as an instance by Java clients: its refusals carry no body.
    bodiless_refusals = ("PUT",)

    def get(self, request, app, instance_id):
        starting = _starting()
        if starting is not None:
            return starting
        node = get_node()
        view = node.registry.reads.get_instance(app.upper(), instance_id, node.now())
        if view is None and node.remote_regions is not None and node.remote_regions.fallback:
            view = node.remote_regions.find_instance(app.upper(), instance_id)
        return _instance_response(request, view)

    def put(self, request, app, instance_id):
        params = query_values(request)
        last_dirty = parse_timestamp(params.get("lastDirtyTimestamp"), "lastDirtyTimestamp")
        overridden = _status_param(params.get("overriddenstatus"), required=False)
        node = get_node()
        replication = is_replication(request)
        result = node.registry.renew(
            app.upper(), instance_id, node.now(), last_dirty, overridden, is_replication=replication
        )
        if result.outcome is Renew.CONFLICT:
            return _instance_response(request, result.current, status=409)
        return empty(result.outcome.value)

    def delete(self, request, app, instance_id):
        node = get_node()
        cancelled = node.registry.cancel(app.upper(), instance_id, node.now(), is_replication(request))
        return empty(200 if cancelled else 404)


class InstanceStatusView(EurekaView):
    """``PUT`` sets a status override, ``DELETE`` removes it (no ``value`` → UNKNOWN until re-register)."""

    def put(self, request, app, instance_id):
        params = query_values(request)
        status = _status_param(params.get("value"), required=True)
        last_dirty = parse_timestamp(params.get("lastDirtyTimestamp"), "lastDirtyTimestamp")
        change = operations.override_status(
            get_node(), app.upper(), instance_id, status, last_dirty, is_replication=is_replication(request)
        )
        return empty(404 if change is None else 200)

    def delete(self, request, app, instance_id):
        params = query_values(request)
        status = _status_param(params.get("value"), required=False) or c.UNKNOWN
        last_dirty = parse_timestamp(params.get("lastDirtyTimestamp"), "lastDirtyTimestamp")
        change = operations.remove_override(
            get_node(), app.upper(), instance_id, status, last_dirty, is_replication=is_replication(request)
        )
        return empty(404 if change is None else 200)


class InstanceMetadataView(EurekaView):
    """``PUT apps/{app}/{id}/metadata?k=v``: merge into the metadata (a re-registration, as in Eureka)."""

    def put(self, request, app, instance_id):
        params = request.query_params
        entries = {
            metadata_key(key): xml_safe(params.getlist(key)[0], f"metadata value for {key!r}")
            for key in params
        }
        node = get_node()
        try:
            found = node.registry.update_metadata(
                app.upper(), instance_id, entries, node.now(), is_replication(request)
            )
        except LimitExceeded as exc:
            return text(400, str(exc))
        return empty(200 if found else 404)


class InstanceByIdView(EurekaView):
    """``GET instances/{id}``: the first app holding that id."""

    def get(self, request, instance_id):
        starting = _starting()
        if starting is not None:
            return starting
        node = get_node()
        view = node.registry.reads.find_instance(instance_id, node.now())
        if view is None and node.remote_regions is not None and node.remote_regions.fallback:
            view = node.remote_regions.find_by_id(instance_id)
        return _instance_response(request, view)


class VipView(EurekaView):
    """``GET vips/{vip}`` / ``svips/{svip}``: 200 with an empty list when nothing matches."""

    secure = False

    def get(self, request, vip):
        return _cached(request, SVIP if self.secure else VIP, vip)


class AsgStatusView(EurekaView):
    def put(self, request, asg):
        return text(400, "ASG status is only supported by Eureka's AWS registry; this server has no ASGs")


class StatusView(EurekaView):
    """``GET status``: the server's own health, in the shape of Eureka's StatusInfo (no client reads it)."""

    def get(self, request):
        node = get_node()
        now = node.now()
        stats = node.registry.reads.stats(now)
        body = {
            "generalStats": general_stats(node, now),
            "applicationStats": application_stats(node.peers.states(), now),
            "registry": {k: v for k, v in stats.items() if k != "status_counts"},
            "time": now,
        }
        fmt = response_format(request)
        return payload_response(request, Payload(render("status", body, fmt), 0), fmt)


class StatusOverridesView(EurekaView):
    """``GET serverinfo/statusoverrides``: ``{instance id: override}`` as JSON."""

    def get(self, request):
        return HttpResponse(
            orjson.dumps(get_node().registry.reads.overrides()), content_type="application/json"
        )


class PeerReplicationBatchView(EurekaView):
    """``POST peerreplication/batch/`` — a peer's writes, each applied as a replicated one (never sent on),
    answered ``{"responseList": [...]}`` in request order (protocol reference 2.13, 5.11)."""

    replication_endpoint = True

    def post(self, request):
        body = read_body(request)
        if request_format(request) != JSON:
            raise RequestRefused(415, "Replication batches are JSON: send Content-Type application/json")
        node = get_node()
        # One batch at a time, decoded and applied (ReceivedReplication.applying says why).
        with node.received.applying:
            # Decoding a large batch is work the loop cannot interrupt: requests that came in while
            # the body was read go first, so a flood of such batches does not hold heartbeats behind
            # it. apply_batch paces the items itself.
            node.registry.pacing.pause()
            try:
                document = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise BadInput(f"Malformed JSON body: {exc}") from None
            try:
                answers = apply_batch(
                    node.registry,
                    document,
                    node.now,
                    max_items=node.config.cluster.replication_batch_max_items,
                    sender=meta(request).get("REMOTE_ADDR", ""),
                    refusal_lines=node.received.refusal_lines,
                )
            except BatchTooLarge as exc:
                raise RequestRefused(413, str(exc)) from None
            except BadBatch as exc:
                raise BadInput(str(exc)) from None
        node.received.record(len(answers["responseList"]), node.now())
        return HttpResponse(orjson.dumps(answers), content_type=CONTENT_TYPES[JSON])
