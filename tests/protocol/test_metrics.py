"""GET /metrics: what real operations move, the bearer token, and turning metrics off.

Every number is read the way Prometheus reads it: the text exposition parsed by prometheus-client's
own parser. Counters kept by the node start at zero with each test's fresh node; the request latency
histograms and the auth refusal counter live for the whole process, so those are compared as
differences between two scrapes.
"""

from __future__ import annotations

import orjson
import pytest
from django.urls import URLPattern, URLResolver
from prometheus_client.parser import text_string_to_metric_families

from registry.access import accounts
from registry.cache.redis_tier import RedisReadOnlyTier
from registry.domain.endpoints import Peer, parse_peer_urls
from registry.protocol import metrics
from registry.protocol import urls as protocol_urls
from registry.runtime.composition import build_node
from registry.runtime.process import reset_node
from tests.factories import instance_body

ORDERS_ID = "10.0.0.1:orders:8080"
PAYMENTS_ID = "10.0.0.2:payments:8080"
SECRET = "control-secret-for-tests"
TOKEN = "metrics-token-for-tests"
REPLICATION = {"HTTP_X_NETFLIX_DISCOVERY_REPLICATION": "true"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def scrape(client, **headers) -> Samples:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse(response.content.decode())


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def requests_timed(samples: Samples, operation: str) -> float:
    return value(samples, "eureka_request_duration_seconds_count", operation=operation) or 0.0


def register(api, app: str = "ORDERS", host: str = "10.0.0.1") -> None:
    response = api.post(f"/eureka/apps/{app}", instance_body(app=app, host=host), format="json")
    assert response.status_code == 204


# ------------------------------------------------------------------------------- real operations


def test_writes_move_their_counters_gauges_and_latency_histograms(api, node, clock):
    before = scrape(api)
    register(api)
    register(api, "PAYMENTS", "10.0.0.2")
    for _ in range(3):
        assert api.put(f"/eureka/apps/ORDERS/{ORDERS_ID}").status_code == 200
    assert api.put("/eureka/apps/ORDERS/10.9.9.9:nobody:1").status_code == 404
    assert api.put(f"/eureka/apps/ORDERS/{ORDERS_ID}", **REPLICATION).status_code == 200
    assert api.put(f"/eureka/apps/ORDERS/{ORDERS_ID}/status?value=OUT_OF_SERVICE").status_code == 200
    assert api.delete(f"/eureka/apps/PAYMENTS/{PAYMENTS_ID}").status_code == 200
    assert api.delete(f"/eureka/apps/PAYMENTS/{PAYMENTS_ID}").status_code == 404
    clock.advance(60_000)  # "renews in the last minute" is the previous full minute

    after = scrape(api)
    assert value(after, "eureka_registers_total", origin="client") == 2
    assert value(after, "eureka_renews_total", origin="client") == 3
    assert value(after, "eureka_renews_total", origin="peer") == 1
    assert value(after, "eureka_renews_not_found_total", origin="client") == 1
    assert value(after, "eureka_cancels_total", origin="client") == 1
    assert value(after, "eureka_status_overrides_total", action="set", origin="client") == 1
    assert value(after, "eureka_status_overrides_total", action="remove", origin="client") == 0
    assert value(after, "eureka_instances", status="OUT_OF_SERVICE") == 1
    assert value(after, "eureka_instances", status="UP") == 0
    assert value(after, "eureka_applications") == 1
    assert value(after, "eureka_renews_last_minute") == 4
    assert value(after, "eureka_status_override_entries") == 1
    # Every request was timed under its operation, 404s included.
    timed = {
        op: requests_timed(after, op) - requests_timed(before, op) for op in ("register", "renew", "cancel")
    }
    assert timed == {"register": 2, "renew": 5, "cancel": 2}
    assert requests_timed(after, "status") - requests_timed(before, "status") == 1
    renew_sum = value(after, "eureka_request_duration_seconds_sum", operation="renew")
    assert renew_sum > value(before, "eureka_request_duration_seconds_sum", operation="renew")


def test_removing_an_override_and_a_replicated_cancel_count_by_origin(api, node):
    register(api)
    assert api.put(f"/eureka/apps/ORDERS/{ORDERS_ID}/status?value=OUT_OF_SERVICE").status_code == 200
    assert api.delete(f"/eureka/apps/ORDERS/{ORDERS_ID}/status?value=UP").status_code == 200
    assert api.delete(f"/eureka/apps/ORDERS/{ORDERS_ID}", **REPLICATION).status_code == 200
    samples = scrape(api)
    assert value(samples, "eureka_status_overrides_total", action="remove", origin="client") == 1
    assert value(samples, "eureka_cancels_total", origin="peer") == 1
    assert value(samples, "eureka_cancels_total", origin="client") == 0
    assert sum(value(samples, "eureka_instances", status=s) for s in ("UP", "DOWN", "UNKNOWN")) == 0


@pytest.fixture
def evicting_options(eureka_options):
    return eureka_options.with_changes(
        registry__lease_expiry="exact",
        registry__expected_number_of_clients_sending_renews=0,
        registry__default_open_for_traffic_count=0,
        registry__expected_clients_move_only_above_zero=False,
    )


def test_an_eviction_run_counts_the_evicted_lease_and_the_job(api, evicting_options, clock):
    evicting_options = evicting_options.with_changes(registry__enable_self_preservation=False)
    node = reset_node(build_node(evicting_options, clock=clock))
    try:
        register(api)
        register(api, "PAYMENTS", "10.0.0.2")
        clock.advance(60_000)
        assert api.put(f"/eureka/apps/PAYMENTS/{PAYMENTS_ID}").status_code == 200
        clock.advance(31_000)  # ORDERS' 90 s lease has run out; PAYMENTS renewed 31 s ago
        evicted = node.run_job("evict", clock.now, "scheduler")
        assert evicted == [("ORDERS", ORDERS_ID)]
        samples = scrape(api)
    finally:
        reset_node(None)
    assert value(samples, "eureka_evictions_total") == 1
    assert value(samples, "eureka_evictions_prevented_total") == 0
    assert value(samples, "eureka_self_preservation_active") == 0
    assert value(samples, "eureka_instances", status="UP") == 1
    assert value(samples, "eureka_job_runs_total", job="evict") == 1
    assert value(samples, "eureka_job_failures_total", job="evict") == 0
    assert value(samples, "eureka_job_last_success_timestamp_seconds", job="evict") == clock.now / 1000
    # Jobs that never ran have no last success, but do have runs, failures and an interval.
    assert value(samples, "eureka_job_last_success_timestamp_seconds", job="prune_delta_queue") is None
    assert value(samples, "eureka_job_runs_total", job="prune_delta_queue") == 0
    assert value(samples, "eureka_job_interval_seconds", job="evict") == node.job_intervals()["evict"] / 1000


def test_self_preservation_keeps_expired_leases_and_counts_each_once(api, evicting_options, clock):
    node = reset_node(build_node(evicting_options, clock=clock))
    try:
        register(api)
        register(api, "PAYMENTS", "10.0.0.2")
        clock.advance(91_000)  # no heartbeat at all: 0 renews against a threshold of 3
        assert node.run_job("evict", clock.now, "scheduler") == []
        clock.advance(2_000)
        assert node.run_job("evict", clock.now, "scheduler") == []
        samples = scrape(api)
    finally:
        reset_node(None)
    assert value(samples, "eureka_self_preservation_active") == 1
    assert value(samples, "eureka_renews_threshold") == 3
    assert value(samples, "eureka_renews_last_minute") == 0
    assert value(samples, "eureka_evictions_total") == 0
    assert value(samples, "eureka_evictions_prevented_total") == 2
    assert value(samples, "eureka_expired_leases_kept") == 2
    assert value(samples, "eureka_job_runs_total", job="evict") == 2


def test_jobs_run_by_celery_through_the_control_endpoint_are_the_nodes_records(api, node, clock, settings):
    """Production mode: beat schedules, a worker posts to the control endpoint, the node runs the job;
    its record (and so /metrics, served by the node) knows the run."""
    settings.EUREKA = settings.EUREKA.with_changes(control_secret=SECRET)
    clock.advance(5_000)
    response = api.post("/control/jobs/prune_delta_queue", HTTP_X_EUREKA_CONTROL_SECRET=SECRET)
    assert response.status_code == 200

    def broken(target, now):
        raise RuntimeError("disk full")

    node.jobs = {**node.jobs, "recount_expected_clients": broken}
    with pytest.raises(RuntimeError):
        api.post("/control/jobs/recount_expected_clients", HTTP_X_EUREKA_CONTROL_SECRET=SECRET)
    samples = scrape(api)
    assert value(samples, "eureka_job_runs_total", job="prune_delta_queue") == 1
    assert (
        value(samples, "eureka_job_last_success_timestamp_seconds", job="prune_delta_queue")
        == clock.now / 1000
    )
    assert value(samples, "eureka_job_failures_total", job="recount_expected_clients") == 1
    assert value(samples, "eureka_job_runs_total", job="recount_expected_clients") == 0


def test_overdue_jobs_show_as_overdue(api, node, clock):
    assert value(scrape(api), "eureka_job_overdue", job="evict") == 0
    clock.advance(3 * node.job_intervals()["evict"] + 1)
    assert value(scrape(api), "eureka_job_overdue", job="evict") == 1


def test_response_cache_hits_misses_and_builds(api, eureka_options, clock):
    reset_node(build_node(eureka_options.with_changes(response_cache__use_read_only=True), clock=clock))
    try:
        register(api)
        before = scrape(api)
        for _ in range(3):
            assert api.get("/eureka/apps/", HTTP_ACCEPT="application/json").status_code == 200
        samples = scrape(api)
    finally:
        reset_node(None)
    assert value(samples, "eureka_response_cache_misses_total", tier="read_only") == 1
    assert value(samples, "eureka_response_cache_hits_total", tier="read_only") == 2
    assert value(samples, "eureka_response_cache_misses_total", tier="read_write") == 1
    assert value(samples, "eureka_response_cache_build_seconds_count") == 1
    assert value(samples, "eureka_response_cache_build_seconds_sum") > 0
    assert value(samples, "eureka_response_cache_keys", tier="read_only") == 1
    assert value(samples, "eureka_response_cache_syncs_deferred_total") == 0
    assert value(samples, "eureka_response_cache_syncs_dropped_total") == 0
    assert requests_timed(samples, "apps") - requests_timed(before, "apps") == 3
    # No Redis tier here, so no Redis health.
    assert value(samples, "eureka_redis_up") is None


class StubRedis:
    def __init__(self, answers: bool):
        self.answers = answers

    def ping(self):
        from redis.exceptions import ConnectionError

        if not self.answers:
            raise ConnectionError("Error 111 connecting to redis:6379. Connection refused.")
        return True


def test_redis_up_follows_a_ping_of_the_read_only_tier(api, node, clock):
    stub = StubRedis(answers=True)
    node.cache.read_only = RedisReadOnlyTier(stub, "eureka", clock)
    samples = scrape(api)
    assert value(samples, "eureka_redis_up") == 1
    node_info = {"environment": "test", "datacenter": "default", "jobs_driver": "embedded"}
    assert value(samples, "eureka_node_info", **node_info, read_only_cache="redis") == 1
    stub.answers = False
    samples = scrape(api)
    assert value(samples, "eureka_redis_up") == 0
    assert value(samples, "eureka_redis_failures_total") == 1
    assert api.get("/readyz").json()["status"] == "degraded"  # the ping's outcome is the tier's health
    clock.advance(5_000)  # past the tier's back-off
    stub.answers = True
    assert value(scrape(api), "eureka_redis_up") == 1


@pytest.fixture
def cluster_node(eureka_options, clock, settings):
    settings.EUREKA = settings.EUREKA.with_changes(control_secret=SECRET)
    peers = tuple(parse_peer_urls(["http://user:pw@127.0.0.1:9/eureka/"]))
    fresh = reset_node(build_node(eureka_options.with_changes(cluster__peers=peers), clock=clock))
    yield fresh
    reset_node(None)


def test_replication_per_peer_queue_age_failures_and_sends(api, cluster_node, clock):
    peer = "http://127.0.0.1:9/eureka/"
    key = Peer(peer).key
    register(api)
    assert api.put(f"/eureka/apps/ORDERS/{ORDERS_ID}").status_code == 200
    assert value(scrape(api), "eureka_replication_buffered_events") == 2
    cluster_node.cluster.replicator.flush(clock.now)
    clock.advance(1_500)

    response = api.get("/metrics")
    assert b"pw@" not in response.content, "peer credentials never appear"
    samples = parse(response.content.decode())
    assert value(samples, "eureka_replication_buffered_events") == 0
    assert value(samples, "eureka_replication_queue_items", peer=peer) == 2
    assert value(samples, "eureka_replication_oldest_item_age_seconds", peer=peer) == 1.5
    assert value(samples, "eureka_replication_peer_available", peer=peer) == 0

    def report(body):
        return api.post(
            f"/control/replication/{key}",
            data=orjson.dumps(body),
            content_type="application/json",
            HTTP_X_EUREKA_CONTROL_SECRET=SECRET,
        )

    assert report({"follow_ups": None, "error": "ConnectError: refused", "queued": 2}).status_code == 200
    outbox = cluster_node.cluster.replicator.outboxes[key]
    outbox.ack(len(outbox))
    assert report({"follow_ups": {"sent": 2, "refused": 1}, "error": None, "queued": 0}).status_code == 200
    samples = scrape(api)
    assert value(samples, "eureka_replication_failures_total", peer=peer) == 1
    assert value(samples, "eureka_replication_items_sent_total", peer=peer) == 2
    assert value(samples, "eureka_replication_items_refused_total", peer=peer) == 1
    assert value(samples, "eureka_replication_items_dropped_total", peer=peer) == 0
    assert value(samples, "eureka_replication_queue_items", peer=peer) == 0
    assert value(samples, "eureka_replication_oldest_item_age_seconds", peer=peer) == 0
    assert value(samples, "eureka_replication_peer_available", peer=peer) == 1
    assert value(samples, "eureka_replication_falling_back") == 0


def test_a_standalone_node_counts_batches_peers_sent_and_reports_no_peers(api, node):
    batch = {"replicationList": []}
    assert api.post("/eureka/peerreplication/batch/", batch, format="json").status_code == 200
    samples = scrape(api)
    assert value(samples, "eureka_replication_received_batches_total") == 1
    assert not [name for name, _ in samples if name.startswith("eureka_replication_queue")]


# --------------------------------------------------------------------------- token and switch


def test_an_open_endpoint_needs_no_token(api, node, settings):
    settings.EUREKA = settings.EUREKA.with_changes(metrics__token="")
    assert api.get("/metrics").status_code == 200


def test_the_token_is_required_when_set(api, node, settings):
    settings.EUREKA = settings.EUREKA.with_changes(metrics__token=TOKEN)
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": f"Basic {TOKEN}"}):
        response = api.get("/metrics", **headers)
        assert response.status_code == 401, headers
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"eureka_" not in response.content
    samples = scrape(api, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert value(samples, "eureka_applications") == 0


def test_metrics_turned_off_answer_404_and_time_nothing(api, node, settings):
    register(api)
    before = scrape(api)
    settings.EUREKA = settings.EUREKA.with_changes(metrics__enabled=False)
    assert api.get("/metrics").status_code == 404
    assert api.put(f"/eureka/apps/ORDERS/{ORDERS_ID}").status_code == 200
    settings.EUREKA = settings.EUREKA.with_changes(metrics__enabled=True)
    after = scrape(api)
    assert requests_timed(after, "renew") == requests_timed(before, "renew")
    assert value(after, "eureka_renews_total", origin="client") == 1, "the map's own counts go on"


def test_metrics_is_read_only(api, node):
    assert api.post("/metrics").status_code == 405


# ------------------------------------------------------------------------------------- the API


def test_auth_refusals_are_counted_by_reason(api, node):
    before = scrape(api)
    accounts.note_refusal("unauthenticated", "no credentials from 127.0.0.1")
    accounts.note_refusal("forbidden", "'a' lacks write_instances")
    accounts.note_refusal("forbidden", "'b' lacks write_instances")
    after = scrape(api)
    for reason, moved in (("unauthenticated", 1), ("forbidden", 2)):
        name = "eureka_auth_refusals_total"
        assert value(after, name, reason=reason) - value(before, name, reason=reason) == moved
    with pytest.raises(KeyError):
        accounts.note_refusal("teapot", "not a reason")


def test_the_workers_connections_and_refusals_are_exported(api, node, monkeypatch):
    from registry.serving import connections

    assert value(scrape(api), "eureka_connections_open") is None  # no gunicorn worker here
    admission = connections.ConnectionAdmission(max_per_address=1, max_total=3)
    monkeypatch.setattr(connections, "CURRENT", admission)
    admission.admit("10.0.0.1")
    admission.admit("10.0.0.1")
    admission.admit("10.0.0.2")
    admission.admit("10.0.0.3")
    admission.admit("10.0.0.4")

    samples = scrape(api)

    assert value(samples, "eureka_connections_open") == 3
    assert value(samples, "eureka_connections_refused_total", cap="per_address") == 1
    assert value(samples, "eureka_connections_refused_total", cap="total") == 1


def test_the_slow_readers_closed_are_exported_by_reason(api, node, monkeypatch):
    from registry.serving import connections

    readers = connections.SlowReaders(timeout_s=20)
    monkeypatch.setattr(connections, "CURRENT", connections.ConnectionAdmission(0, 0))
    monkeypatch.setattr(connections, "SLOW_READERS", readers)
    readers.begin("a", b"x")
    readers.shed()

    samples = scrape(api)

    assert value(samples, "eureka_slow_readers_closed_total", reason="shed") == 1
    assert value(samples, "eureka_slow_readers_closed_total", reason="write_timeout") == 0
    assert value(samples, "eureka_slow_readers_closed_total", reason="held_bytes") == 0


def protocol_routes():
    for pattern in protocol_urls.urlpatterns:
        assert isinstance(pattern, URLPattern) and not isinstance(pattern, URLResolver)
        view = pattern.callback.view_class
        methods = [m.upper() for m in ("get", "post", "put", "delete") if hasattr(view, m)]
        yield f"{protocol_urls.app_name}:{pattern.name}", methods


def test_every_protocol_route_is_timed_under_an_operation():
    """A new route (or a renamed one) without an operation would go untimed."""
    untimed = [
        (route, method)
        for route, methods in protocol_routes()
        for method in methods
        if (route, method) not in metrics.PROTOCOL_OPERATIONS and route != "eureka:asg-status"
    ]
    assert untimed == []
    assert len(set(metrics.PROTOCOL_OPERATIONS.values())) == len(metrics.PROTOCOL_OPERATIONS)
