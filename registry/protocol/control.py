"""Operational endpoints, not part of the Eureka API: the control endpoint Celery tasks call, and
liveness / readiness probes."""

from __future__ import annotations

import hmac

import orjson
from django.conf import settings
from django.http import HttpResponse

from registry.domain.constants import CONTROL_HEADER
from registry.health.checker import BadResult, ProbeResult
from registry.protocol.views import EurekaView
from registry.runtime.process import get_node
from registry.runtime.watchdog import overdue_jobs
from registry.wire.http import text


def _json(body: dict, status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(body), status=status, content_type="application/json")


def _summary(result: object) -> object:
    """Job results as JSON: counts for lists (evicted leases), the value for numbers, else nothing."""
    if isinstance(result, (list, tuple)):
        return len(result)
    if isinstance(result, (int, float)):
        return result
    return None


class NodeView(EurekaView):
    """The node's own endpoints: open probes and the control endpoint, which has its own shared
    secret. They answer on the normal stack, never under API accounts."""

    api_accounts = False


class ControlJobView(NodeView):
    """``POST /control/jobs/{job}``: run one periodic job on this process. Needs the shared secret."""

    def post(self, request, job):
        if not _authorized(request):
            return text(403, "Forbidden: missing or wrong control secret")
        node = get_node()
        if job not in node.jobs:
            return text(404, f"Unknown job {job[:40]!r}: expected one of {', '.join(sorted(node.jobs))}")
        result = node.run_job(job, node.now(), "celery")
        return _json({"job": job, "result": _summary(result)})


def _authorized(request) -> bool:
    secret = settings.EUREKA.control_secret
    given = request.META.get("HTTP_" + CONTROL_HEADER.upper().replace("-", "_"), "")
    return bool(secret) and hmac.compare_digest(given.encode(), secret.encode())


class ControlReplicationView(NodeView):
    """``POST /control/replication/{peer}``: a Celery worker reports what a peer answered to a batch
    (follow-ups to carry out here: Registers to send, newer copies to take) or why it failed."""

    def post(self, request, peer):
        if not _authorized(request):
            return text(403, "Forbidden: missing or wrong control secret")
        node = get_node()
        if node.cluster is None or peer not in node.cluster.replicator.peers:
            return text(404, f"Unknown peer {peer[:40]!r}")
        # Here, not at the top: the replicator brings the HTTP client (httpx), which a node without
        # peers never needs (tests/runtime/test_lazy_imports.py).
        from registry.cluster.replicator import FollowUps

        try:
            body = orjson.loads(request.body)
            follow_ups = FollowUps.from_dict(body["follow_ups"]) if body.get("follow_ups") else None
            error = body.get("error")
            queued = int(body.get("queued") or 0)
            lag_ms = int(body.get("lag_ms") or 0)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            return text(400, "Malformed replication report")
        error = error if isinstance(error, str) else None
        node.cluster.report(peer, follow_ups, error, queued, node.now(), lag_ms)
        return _json({"ok": True})


# --- Active health checks in production mode (registry/health/): a Celery worker claims the probes
# that are due here, runs them, and posts the results back; the state machine stays in this process.
MAX_HEALTH_TARGETS = 5_000


def _health_node(request):
    """The node for a health-check control call, or the answer refusing it (no secret, checks off)."""
    if not _authorized(request):
        return None, text(403, "Forbidden: missing or wrong control secret")
    node = get_node()
    if node.health is None:
        return None, text(404, "Active health checks are off (EUREKA_HEALTH_CHECKS=false)")
    return node, None


class ControlHealthTargetsView(NodeView):
    """``POST /control/health/targets?limit=N``: claim up to N due probes (a POST: each target is
    handed out once until its result comes back, so two rounds never probe the same instance), and the
    node's own addresses, which the worker's probes must not reach either (registry/health/addresses.py)."""

    def post(self, request):
        node, refusal = _health_node(request)
        if refusal is not None:
            return refusal
        raw = request.GET.get("limit", "100")
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_HEALTH_TARGETS:
            return text(400, f"limit must be a whole number from 1 to {MAX_HEALTH_TARGETS}")
        now = node.now()
        node.health.refresh(now)
        targets = node.health.claim_due(now, int(raw))
        own = node.health_policy.own_addresses() if node.health_policy is not None else ()
        return _json(
            {
                "targets": [target.as_dict() for target in targets],
                "node_addresses": sorted(str(address) for address in own),
            }
        )


class ControlHealthResultsView(NodeView):
    """``POST /control/health/results``: ``{"results": [...]}`` as ``ProbeResult.as_dict`` writes them.
    All or nothing: one unreadable result refuses the batch (400) before any is applied."""

    def post(self, request):
        node, refusal = _health_node(request)
        if refusal is not None:
            return refusal
        try:
            body = orjson.loads(request.body)
            items = body["results"] if isinstance(body, dict) else None
            if not isinstance(items, list) or len(items) > MAX_HEALTH_TARGETS:
                raise BadResult(f"results must be a list of at most {MAX_HEALTH_TARGETS}")
            results = [ProbeResult.from_dict(item) for item in items]
        except (orjson.JSONDecodeError, KeyError) as exc:
            return text(400, f"Malformed health results: {type(exc).__name__}")
        except BadResult as exc:
            return text(400, f"Malformed health results: {exc}")
        changed = node.health.apply_all(results, node.now())
        return _json({"applied": len(results), "overrides_changed": changed})


class HealthView(NodeView):
    """``GET /healthz``: the process answers."""

    def get(self, request):
        return _json({"status": "ok"})


class ReadyView(NodeView):
    """``GET /readyz``: 200 when open for traffic (``degraded`` if jobs are overdue), else 503."""

    def get(self, request):
        node = get_node()
        now = node.now()
        overdue = overdue_jobs(node, now)
        open_for_reads = node.registry.allows_reads(now)
        jobs = {
            name: {
                "last_run_ms_ago": None if record.last_run is None else now - record.last_run,
                "last_source": record.last_source,
                "runs": record.runs,
                "failures": record.failures,
                "last_error": record.last_error,
                "overdue": name in overdue,
            }
            for name, record in node.job_records.items()
        }
        redis = node.cache.read_only.status()
        replication = node.cluster.status(now) if node.cluster is not None else None
        falling_back = replication is not None and replication["falling_back"]
        degraded = overdue or (redis is not None and not redis["healthy"]) or falling_back
        status = "unavailable" if not open_for_reads else "degraded" if degraded else "ok"
        body = {
            "status": status,
            "open_for_traffic": open_for_reads,
            # True until the start-up sync from peers is done or has given up (reads answer 503).
            "start_up_sync_pending": node.registry.awaiting_sync,
            "jobs_driver": node.config.redis.jobs_driver,
            "read_only_cache": "redis" if redis is not None else "in-process",
            "redis": redis,
            "jobs": jobs,
            "instances": node.registry.reads.size(),
            "replication": replication,
            # Batches peers sent here (an idle peer's probe is a batch of 0 items).
            "received_replication": {
                "batches": node.received.batches,
                "items": node.received.items,
                "last_ms_ago": None if node.received.last_at is None else now - node.received.last_at,
            },
            # What a warm restart brought back and the latest snapshot (None: off, or not started by
            # gunicorn); the change feed's Redis stream (None: embedded mode or the feed is off).
            "warm_restart": node.warm_restart.status(now) if node.warm_restart is not None else None,
            "change_feed_redis": node.change_publisher.status()
            if node.change_publisher is not None
            else None,
        }
        response = _json(body, 200 if open_for_reads else 503)
        # Not ready is a state a probe asks about every few seconds (every start-up with peers goes
        # through it), not an error to log per request.
        response._has_been_logged = True
        return response
