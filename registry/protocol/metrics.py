"""``GET /metrics``: the node's numbers in Prometheus' text format.

Built as a scrape-time collector. Heartbeats are most of a registry's traffic, and the node already
keeps nearly every number worth exporting: the lease map its sizes, rates and cumulative event
counts (``MapReads.stats``, ``MapReads.event_counts``: plain integers bumped under the lock the
write holds anyway), the response cache its lookups and builds, the node its job records (whoever
ran the job: the embedded scheduler, the watchdog, or Celery through the control endpoint), the
cluster member each peer's queue and results (what ``/readyz`` shows). ``NodeCollector`` reads those
when Prometheus asks, every 15-60 s, and builds the metric families then; updating a
prometheus-client Counter on every heartbeat instead would take a lock and a label lookup per
request for numbers that exist already.

Only one thing goes to prometheus-client as it happens: the latency of protocol requests, one
Histogram child per operation bound once at import (``request_timer``, called by
``EurekaView.dispatch``). API refusals are counted by ``registry.access`` and requests refused
before any view by ``registry.wire.handlers``; both are read here too.

The metrics come from the registry process only: Celery workers and beat hold no map, and what they
do reaches the node's records through the control endpoint. Served through Django's full stack (not
the lean protocol handler), behind a bearer token (``EUREKA_METRICS_TOKEN``) and, with API accounts
on, an account that may read the registry (``scrape_allowed``).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.signals import setting_changed
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_safe
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from registry.access import accounts, roles
from registry.access.clients import client_address
from registry.domain import constants as c
from registry.runtime.process import get_node
from registry.runtime.watchdog import overdue_jobs
from registry.serving import connections
from registry.wire import handlers

if TYPE_CHECKING:
    from registry.runtime.node import Node

# The classic text format, which every Prometheus reads (prometheus-client's "latest" is 1.0.0 from
# 0.22 on; the bytes are the same while every name is a classic one, as all of these are).
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"

# ``*_created`` series double every counter and histogram child, and nothing here reads them.
disable_created_metrics()

# The node's own registry rather than prometheus-client's global one: only what is added here is
# exported, with the process, platform and garbage-collector collectors the global one would have.
REGISTRY = CollectorRegistry(auto_describe=False)
for _standard_collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_standard_collector)

# (route of registry/protocol/urls.py as Django names it, HTTP method) -> operation label.
PROTOCOL_OPERATIONS: dict[tuple[str, str], str] = {
    ("eureka:app", "POST"): "register",
    ("eureka:instance", "PUT"): "renew",
    ("eureka:instance", "DELETE"): "cancel",
    ("eureka:instance", "GET"): "instance",
    ("eureka:instance-status", "PUT"): "status",
    ("eureka:instance-status", "DELETE"): "status_delete",
    ("eureka:instance-metadata", "PUT"): "metadata",
    ("eureka:instance-by-id", "GET"): "instance_by_id",
    ("eureka:apps", "GET"): "apps",
    ("eureka:delta", "GET"): "delta",
    ("eureka:app", "GET"): "app",
    ("eureka:vip", "GET"): "vip",
    ("eureka:svip", "GET"): "svip",
    ("eureka:replication-batch", "POST"): "batch",
    ("eureka:status", "GET"): "server_status",
    ("eureka:status-overrides", "GET"): "status_overrides",
}

# A renew takes a fraction of a millisecond in the view, a payload rebuild or a 250-item batch tens.
LATENCY_BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

REQUEST_LATENCY = Histogram(
    "eureka_request_duration_seconds",
    "Time the protocol views took per request (DRF dispatch: authentication, parsing, the registry "
    "call, rendering), by operation.",
    ["operation"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
# Each child bound once: ``labels()`` takes a lock and builds a key, which the request path skips.
_OBSERVERS: dict[tuple[str, str], Callable[[float], None]] = {
    route: REQUEST_LATENCY.labels(operation).observe for route, operation in PROTOCOL_OPERATIONS.items()
}

# EUREKA_METRICS_ENABLED, kept here: reading a Django setting goes through LazySettings'
# __getattribute__, a noticeable share of what timing the request costs.
_timing = settings.EUREKA.metrics.enabled


def _follow_metrics_setting(*, setting: str, value: object, **kwargs) -> None:
    global _timing
    if setting == "EUREKA":
        _timing = settings.EUREKA.metrics.enabled


# Settings change at run time only in tests (override_settings sends this signal).
setting_changed.connect(_follow_metrics_setting)


def request_timer(request: HttpRequest) -> Callable[[float], None] | None:
    """Where to record this protocol request's latency in seconds; None when it is not a timed
    operation or metrics are off."""
    if not _timing:
        return None
    match = request.resolver_match
    if match is None:
        return None
    return _OBSERVERS.get((match.view_name, request.method))


# ---------------------------------------------------------------------------------- the collector

ORIGINS = (("client", "from_clients"), ("peer", "from_peers"))


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


class NodeCollector(Collector):
    """Reads the node's state at scrape time (see the module docstring)."""

    def __init__(self, node_source: Callable[[], Node] = get_node):
        self._node_source = node_source

    def describe(self) -> list[Metric]:
        # Nothing to announce at registration: building the node there would read the settings early.
        return []

    def collect(self) -> Iterator[Metric]:
        node = self._node_source()
        now = node.now()
        yield from self._registry(node, now)
        yield from self._events(node)
        yield from self._response_cache(node)
        yield from self._jobs(node, now)
        yield from self._replication(node, now)
        yield from self._access()
        yield from self._change_feed(node)
        yield from self._health_checks(node)
        yield from self._loop_watch(node)
        yield from self._remote_regions(node, now)
        yield from self._connections()
        yield from self._console(node)

    def _console(self, node: Node) -> Iterator[Metric]:
        pages = node.console_pages  # dashboard/shared_pages.py, made by the console's first view
        views = CounterMetricFamily(
            "eureka_console_views",
            "Console views by how they were answered: rendered, shared (a copy younger than "
            "EUREKA_DASHBOARD_CACHE_MS), stale (an older copy while another page was being rendered) "
            "or busy (503: no copy while another page was being rendered).",
            labels=["outcome"],
        )
        for outcome, attribute in (
            ("rendered", "rendered"),
            ("shared", "shared"),
            ("stale", "stale"),
            ("busy", "refused"),
        ):
            views.add_metric([outcome], getattr(pages, attribute) if pages is not None else 0)
        yield views

    def _connections(self) -> Iterator[Metric]:
        """The serving worker's connection admission (registry/serving/connections.py); nothing
        outside a gunicorn worker of ours (tests, management commands)."""
        admission = connections.CURRENT
        if admission is None:
            return
        yield _gauge("eureka_connections_open", "Client connections this worker holds.", admission.open_total)
        refused = CounterMetricFamily(
            "eureka_connections_refused",
            "New connections refused with 503 before any byte was read, by the cap that refused them.",
            labels=["cap"],
        )
        for cap, count in admission.refused.items():
            refused.add_metric([cap], count)
        yield refused
        slow_readers = connections.SLOW_READERS
        if slow_readers is not None:
            closed = CounterMetricFamily(
                "eureka_slow_readers_closed",
                "Connections closed while their clients were not reading their answers, by reason.",
                labels=["reason"],
            )
            for reason, count in slow_readers.closed.items():
                closed.add_metric([reason], count)
            yield closed

    def _remote_regions(self, node: Node, now: int) -> Iterator[Metric]:
        """Each remote region's fetches (registry/cluster/regions.py); nothing when none is configured."""
        if node.remote_regions is None:
            return
        families = {
            "ready": GaugeMetricFamily(
                "eureka_remote_region_ready",
                "1 once the region was fetched (regions= is served).",
                labels=["region"],
            ),
            "instances": GaugeMetricFamily(
                "eureka_remote_region_instances",
                "Instances held from the region's last fetch.",
                labels=["region"],
            ),
            "age": GaugeMetricFamily(
                "eureka_remote_region_seconds_since_last_fetch",
                "Since the region's last successful fetch (absent before the first).",
                labels=["region"],
            ),
            "failures": CounterMetricFamily(
                "eureka_remote_region_fetch_failures", "Fetches of the region that failed.", labels=["region"]
            ),
            "mismatches": CounterMetricFamily(
                "eureka_remote_region_hashcode_mismatches",
                "Deltas that did not add up to the region's hashcode (a full fetch followed).",
                labels=["region"],
            ),
        }
        for region in node.remote_regions.health():
            labels = [region.name]
            families["ready"].add_metric(labels, int(region.ready))
            families["instances"].add_metric(labels, region.instances)
            if region.last_success_at is not None:
                families["age"].add_metric(labels, max(now - region.last_success_at, 0) / 1000)
            families["failures"].add_metric(labels, region.failures)
            families["mismatches"].add_metric(labels, region.hashcode_mismatches)
        yield from families.values()

    def _loop_watch(self, node: Node) -> Iterator[Metric]:
        """Stalls of the serving event loop (registry/runtime/loop_watch.py), under gevent only."""
        watch = node.loop_watch
        if watch is None:
            return
        yield _counter(
            "eureka_event_loop_stalls",
            "Times the event loop turned later than EUREKA_LOOP_STALL_THRESHOLD_MS (each is logged "
            "with the code that held it).",
            watch.stalls,
        )
        yield _counter(
            "eureka_event_loop_stalled_seconds",
            "Seconds the event loop was held, summed over those stalls.",
            watch.held_s_total,
        )
        yield _gauge(
            "eureka_event_loop_longest_stall_seconds",
            "The longest stall of the event loop since the node started.",
            watch.longest_s,
        )

    def _health_checks(self, node: Node) -> Iterator[Metric]:
        """Active health checks (registry/health/), only when EUREKA_HEALTH_CHECKS is on."""
        checker = getattr(node, "health", None)
        if checker is None:
            return
        probes = CounterMetricFamily(
            "eureka_health_probes",
            "Health-check probes by result: success and failure are counted, refused ones were not made.",
            labels=["result"],
        )
        probes.add_metric(["success"], checker.stats.probes_ok)
        probes.add_metric(["failure"], checker.stats.probes_failed)
        # Not made: the address policy let none out (registry/health/addresses.py); not failures.
        probes.add_metric(["refused"], checker.stats.probes_refused)
        yield probes
        yield _gauge(
            "eureka_health_marked_down",
            "Instances the health checker holds DOWN now (its own status override).",
            len(checker.held_down()),
        )
        yield _gauge(
            "eureka_health_checked_instances", "Instances with a runnable health check.", checker.checked()
        )
        yield _counter(
            "eureka_health_marked_down_events",
            "Times the health checker set its DOWN override.",
            checker.stats.marked_down,
        )

    def _change_feed(self, node: Node) -> Iterator[Metric]:
        """The change feed (registry/feed/): open SSE streams; changes published to Redis."""
        hub = node.change_streams
        yield _gauge(
            "eureka_change_streams_open", "Open change streams (SSE).", hub.open_streams if hub else 0
        )
        yield _counter(
            "eureka_change_streams_refused",
            "Change streams refused: the node held EUREKA_CHANGE_STREAMS_MAX or was stopping.",
            hub.refused if hub else 0,
        )
        yield _counter(
            "eureka_change_streams_refused_per_address",
            "Change streams refused with 429: the client's address held "
            "EUREKA_CHANGE_STREAMS_PER_ADDRESS_MAX.",
            hub.refused_per_address if hub else 0,
        )
        publisher = node.change_publisher
        if publisher is not None:
            yield _counter(
                "eureka_change_feed_published", "Changes published to the Redis Stream.", publisher.published
            )
            yield _counter(
                "eureka_change_feed_dropped",
                "Changes dropped before Redis because the buffer was full.",
                publisher.dropped,
            )
            yield _counter(
                "eureka_change_feed_redis_errors", "Failed sends to the Redis Stream.", publisher.errors
            )

    def _access(self) -> Iterator[Metric]:
        refusals = CounterMetricFamily(
            "eureka_auth_refusals",
            "Requests refused by API accounts: unauthenticated (401), forbidden for the account's "
            "role (403), throttled after too many failed sign-ins (429), or busy: not checked while too "
            "many password checks were waiting (503).",
            labels=["reason"],
        )
        for reason, count in accounts.REFUSALS.items():
            refusals.add_metric([reason], count)
        yield refusals
        bad = CounterMetricFamily(
            "eureka_bad_requests",
            "Requests refused with 4xx before any view: a Host not in ALLOWED_HOSTS (host), or HTTP "
            "gunicorn could not parse (malformed; granian answers those without the node seeing them).",
            labels=["reason"],
        )
        for reason, count in handlers.BAD_REQUESTS.items():
            bad.add_metric([reason], count)
        yield bad

    def _registry(self, node: Node, now: int) -> Iterator[Metric]:
        stats = node.registry.reads.stats(now)
        instances = GaugeMetricFamily(
            "eureka_instances", "Registered instances (leases in the map) by status.", labels=["status"]
        )
        counts = stats["status_counts"]
        for status in sorted(c.STATUSES):
            instances.add_metric([status], counts.get(status, 0))
        yield instances
        yield _gauge("eureka_applications", "Applications with at least one instance.", stats["applications"])
        yield _gauge(
            "eureka_renews_last_minute",
            "Heartbeats received in the last full minute (Eureka's 'Renews (last min)').",
            stats["renews_last_minute"],
        )
        yield _gauge(
            "eureka_renews_threshold",
            "Renews per minute below which self-preservation stops evictions.",
            stats["renews_threshold"],
        )
        yield _gauge(
            "eureka_expected_clients",
            "Clients expected to send heartbeats (the threshold's base).",
            stats["expected_clients"],
        )
        active = stats["self_preservation_enabled"] and not stats["lease_expiration_enabled"]
        yield _gauge(
            "eureka_self_preservation_active",
            "1 while self-preservation keeps expired leases (renews at or below the threshold).",
            int(active),
        )
        yield _gauge(
            "eureka_open_for_traffic",
            "1 once reads are served (0 during the start-up wait after an empty peer sync).",
            int(node.registry.allows_reads(now)),
        )
        yield _gauge(
            "eureka_delta_queue_entries",
            "Instances in the delta queue (changed within the retention window; each once).",
            stats["delta_queue_length"],
        )
        yield _gauge(
            "eureka_status_override_entries",
            "Instance ids with a recorded status override.",
            stats["overrides"],
        )
        info = GaugeMetricFamily(
            "eureka_node_info",
            "Constant 1, labelled with how this node runs.",
            labels=["environment", "datacenter", "jobs_driver", "read_only_cache"],
        )
        read_only = "redis" if node.cache.read_only.status() is not None else "in-process"
        info.add_metric(
            [
                node.config.identity.environment,
                node.config.identity.datacenter,
                node.config.redis.jobs_driver,
                read_only,
            ],
            1,
        )
        yield info

    def _events(self, node: Node) -> Iterator[Metric]:
        counts = node.registry.reads.event_counts()
        per_origin = {
            "eureka_registers_total": (
                "registers",
                "Registrations applied (POST apps/{app}, replicated Registers).",
            ),
            "eureka_renews_total": ("renews", "Heartbeats that renewed a lease."),
            "eureka_renews_not_found_total": (
                "renews_not_found",
                "Heartbeats answered 404: unknown instance (the client then registers), status UNKNOWN, "
                "or a newer copy at the sender.",
            ),
            "eureka_cancels_total": (
                "cancels",
                "Leases cancelled (DELETE apps/{app}/{id}, replicated Cancels).",
            ),
            "eureka_records_too_large_total": (
                "too_large",
                "Registrations and metadata updates refused (400, nothing changed) for a record over "
                "EUREKA_MAX_INSTANCE_BYTES.",
            ),
        }
        for name, (field, documentation) in per_origin.items():
            family = CounterMetricFamily(
                name.removesuffix("_total"), documentation + " By origin: client or peer.", labels=["origin"]
            )
            for origin, attribute in ORIGINS:
                family.add_metric([origin], getattr(getattr(counts, attribute), field))
            yield family
        overrides = CounterMetricFamily(
            "eureka_status_overrides",
            "Status override calls that found their instance: set (PUT .../status) or remove (DELETE), "
            "by origin.",
            labels=["action", "origin"],
        )
        for origin, attribute in ORIGINS:
            writes = getattr(counts, attribute)
            overrides.add_metric(["set", origin], writes.overrides_set)
            overrides.add_metric(["remove", origin], writes.overrides_removed)
        yield overrides
        yield _counter("eureka_evictions", "Expired leases evicted.", counts.evictions)
        yield _counter(
            "eureka_evictions_prevented",
            "Expired leases an eviction run kept (self-preservation, or the per-run cap), each counted "
            "once per stretch of being kept.",
            counts.evictions_prevented,
        )
        yield _gauge(
            "eureka_expired_leases_kept", "Expired leases the latest eviction run kept.", counts.expired_kept
        )

    def _response_cache(self, node: Node) -> Iterator[Metric]:
        cache = node.cache
        counters = cache.counters
        hits = CounterMetricFamily(
            "eureka_response_cache_hits",
            "Response-cache lookups answered from a stored payload, by tier (read_write lookups come "
            "from read-only misses and the cache sync).",
            labels=["tier"],
        )
        hits.add_metric(["read_only"], counters.read_only_hits)
        hits.add_metric(["read_write"], counters.read_write_hits)
        yield hits
        misses = CounterMetricFamily(
            "eureka_response_cache_misses",
            "Response-cache lookups that found no stored payload, by tier (a read_write miss builds one).",
            labels=["tier"],
        )
        misses.add_metric(["read_only"], counters.read_only_misses)
        misses.add_metric(["read_write"], counters.builds)
        yield misses
        yield SummaryMetricFamily(
            "eureka_response_cache_build_seconds",
            "Payload builds (serialization, before gzip) and the time they took.",
            count_value=counters.builds,
            sum_value=counters.build_seconds,
        )
        yield CounterMetricFamily(
            "eureka_response_cache_syncs_deferred",
            "Cache syncs that left a changed payload's read-only copy for a later sync, because its "
            "last build took more than a tenth of the time since its last refresh.",
            value=counters.syncs_deferred,
        )
        yield CounterMetricFamily(
            "eureka_response_cache_syncs_dropped",
            "Changed payloads that a cache sync took out of the read-only tier instead of rebuilding, "
            "as nobody had read them since the sync before; their next read builds them.",
            value=counters.syncs_dropped,
        )
        yield CounterMetricFamily(
            "eureka_response_cache_keys_expired",
            "Payloads a cache sync took out of the read-only tier, and everything kept for them, as "
            "nobody (readers included) had read them for the response cache's expiry time.",
            value=counters.keys_expired,
        )
        keys = GaugeMetricFamily("eureka_response_cache_keys", "Payloads held, by tier.", labels=["tier"])
        stats = cache.stats()
        keys.add_metric(["read_only"], stats["read_only_keys"])
        keys.add_metric(["read_write"], stats["read_write_keys"])
        yield keys
        up = cache.read_only.check()
        if up is not None:
            # Only where the read-only tier lives in Redis (production mode).
            yield _gauge(
                "eureka_redis_up", "1 when Redis (the read-only cache tier) answered a ping.", int(up)
            )
            yield _counter(
                "eureka_redis_failures",
                "Redis calls of the read-only tier that failed.",
                cache.read_only.status()["failures"],
            )

    def _jobs(self, node: Node, now: int) -> Iterator[Metric]:
        runs = CounterMetricFamily("eureka_job_runs", "Successful runs of each periodic job.", labels=["job"])
        failures = CounterMetricFamily(
            "eureka_job_failures", "Runs of each periodic job that raised.", labels=["job"]
        )
        last_success = GaugeMetricFamily(
            "eureka_job_last_success_timestamp_seconds",
            "When each periodic job last succeeded (Unix time; absent before its first run).",
            labels=["job"],
        )
        overdue = GaugeMetricFamily(
            "eureka_job_overdue",
            "1 when a job has not run for 3 of its intervals (the node then runs it itself).",
            labels=["job"],
        )
        interval = GaugeMetricFamily("eureka_job_interval_seconds", "Each job's interval.", labels=["job"])
        overdue_now = set(overdue_jobs(node, now))
        intervals = node.job_intervals()
        for name, record in node.job_records.items():
            runs.add_metric([name], record.runs)
            failures.add_metric([name], record.failures)
            if record.last_run is not None:
                last_success.add_metric([name], record.last_run / 1000)
            overdue.add_metric([name], int(name in overdue_now))
            interval.add_metric([name], intervals[name] / 1000)
        yield from (runs, failures, last_success, overdue, interval)

    def _replication(self, node: Node, now: int) -> Iterator[Metric]:
        received = node.received
        yield _counter(
            "eureka_replication_received_batches",
            "Replication batches peers sent to this node (an idle peer's probe is an empty batch).",
            received.batches,
        )
        yield _counter(
            "eureka_replication_received_items", "Items in the batches peers sent.", received.items
        )
        if node.cluster is None:
            return
        status = node.cluster.status(now)
        per_peer = {
            "sent": CounterMetricFamily(
                "eureka_replication_items_sent", "Items a peer accepted or answered.", labels=["peer"]
            ),
            "refused": CounterMetricFamily(
                "eureka_replication_items_refused",
                "Items a peer refused (dropped, not retried).",
                labels=["peer"],
            ),
            "dropped": CounterMetricFamily(
                "eureka_replication_items_dropped",
                "Items dropped because the peer's queue was full (oldest first).",
                labels=["peer"],
            ),
            "failures": CounterMetricFamily(
                "eureka_replication_failures",
                "Batches that could not be delivered (left queued for a retry).",
                labels=["peer"],
            ),
            "queued": GaugeMetricFamily(
                "eureka_replication_queue_items", "Items waiting in the peer's queue.", labels=["peer"]
            ),
        }
        oldest = GaugeMetricFamily(
            "eureka_replication_oldest_item_age_seconds",
            "How long the oldest queued item has waited (0 when the queue is empty).",
            labels=["peer"],
        )
        available = GaugeMetricFamily(
            "eureka_replication_peer_available",
            "1 when the peer's latest replication attempt succeeded recently.",
            labels=["peer"],
        )
        for peer in status["peers"]:
            labels = [peer["url"]]  # already without credentials
            for key, family in per_peer.items():
                family.add_metric(labels, peer[key])
            oldest.add_metric(labels, peer["lag_ms"] / 1000)
            available.add_metric(labels, int(peer["available"]))
        yield from per_peer.values()
        yield from (oldest, available)
        yield _gauge(
            "eureka_replication_buffered_events",
            "Writes waiting for the next flush to the queues.",
            status["buffered"],
        )
        yield _counter(
            "eureka_replication_coalesced_events",
            "Writes replaced by a newer one of the same instance before a flush.",
            status["coalesced"],
        )
        yield _counter(
            "eureka_replication_dropped_before_queue_events",
            "Writes dropped because the flush buffer was full.",
            status["dropped_before_queue"],
        )
        yield _gauge(
            "eureka_replication_falling_back",
            "1 while Redis is unreachable and this process sends the queues itself (production mode).",
            int(status["falling_back"]),
        )


REGISTRY.register(NodeCollector())


# ---------------------------------------------------------------------------------------- the view


def scrape_allowed(request: HttpRequest) -> bool:
    """Whether ``request`` may read the metrics. Open unless ``EUREKA_METRICS_TOKEN`` is set or API
    accounts are on; then ``Authorization: Bearer <that token>`` or, with API accounts on, Basic
    credentials of an account that may read the registry (the reader role, or more)."""
    token = settings.EUREKA.metrics.token
    api_accounts = settings.EUREKA.access.api_auth
    if not token and not api_accounts:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer":
        return hmac.compare_digest(given.strip().encode(), token.encode())
    if api_accounts and scheme.lower() == "basic":
        try:
            principal = accounts.authenticate(
                request.headers["Authorization"], lambda: client_address(request)
            )
        except accounts.Refused:
            return False
        return roles.READ in principal.permissions
    return False


@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: 404 when metrics are off, 401 without the token, else the text exposition."""
    if not settings.EUREKA.metrics.enabled:
        raise Http404("Metrics are turned off (EUREKA_METRICS_ENABLED=false)")
    if not scrape_allowed(request):
        accepted = (["Bearer <EUREKA_METRICS_TOKEN>"] if settings.EUREKA.metrics.token else []) + (
            ["Basic credentials of a reader account"] if settings.EUREKA.access.api_auth else []
        )
        response = HttpResponse(
            f"Unauthorized: send Authorization: {' or '.join(accepted)}\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        challenges = (['Bearer realm="metrics"'] if settings.EUREKA.metrics.token else []) + (
            ['Basic realm="metrics"'] if settings.EUREKA.access.api_auth else []
        )
        response["WWW-Authenticate"] = ", ".join(challenges)
        return response
    response = HttpResponse(generate_latest(REGISTRY), content_type=TEXT_FORMAT)
    response["Cache-Control"] = "no-store"
    return response
