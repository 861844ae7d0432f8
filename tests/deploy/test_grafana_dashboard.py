"""deploy/grafana/eureka-registry.json queries only metrics GET /metrics exposes.

Prometheus stores sample names, so the dashboard's expressions are checked against the samples of a
real scrape (``eureka_registers_total``, ``eureka_request_duration_seconds_bucket``...), not against
family names: a renamed metric, or a counter queried without its ``_total``, fails here. The scrape
is of a node that shows everything a node can (a peer, a Redis tier, jobs that ran).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from registry.cache.redis_tier import RedisReadOnlyTier
from registry.domain.endpoints import parse_peer_urls
from registry.runtime.composition import build_node
from registry.runtime.loop_watch import LoopWatch
from registry.runtime.process import reset_node

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "eureka-registry.json"
METRIC_NAME = re.compile(r"\beureka_[a-z0-9_]+\b")


class AnsweringRedis:
    def ping(self):
        return True


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def expressions(document: dict) -> list[str]:
    found = []
    for panel in document["panels"]:
        found.extend(target["expr"] for target in panel.get("targets", []))
    for variable in document["templating"]["list"]:
        query = variable.get("query")
        found.append(query["query"] if isinstance(query, dict) else query or "")
    return found


@pytest.fixture
def fully_featured_node(eureka_options, clock):
    peers = tuple(parse_peer_urls(["http://127.0.0.1:9/eureka/"]))
    node = reset_node(build_node(eureka_options.with_changes(cluster__peers=peers), clock=clock))
    for job in node.jobs:
        node.run_job(job, clock.now, "scheduler")
    # After the jobs: a scrape only pings the tier, the cache sync would publish to it.
    node.cache.read_only = RedisReadOnlyTier(AnsweringRedis(), "eureka", clock)
    # A gevent node's loop watch (deploy/gunicorn.conf.py starts it with the worker).
    node.loop_watch = LoopWatch()
    yield node
    reset_node(None)


def exposed_sample_names(client) -> set[str]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        sample.name
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def test_every_metric_the_dashboard_queries_is_exposed(client, fully_featured_node):
    exposed = exposed_sample_names(client)
    used = {name for expr in expressions(dashboard()) for name in METRIC_NAME.findall(expr)}
    assert len(used) >= 25, "the dashboard's expressions were not found"
    assert sorted(used - exposed) == []


def test_the_checker_catches_a_renamed_metric(client, fully_featured_node):
    exposed = exposed_sample_names(client)
    assert "eureka_registers_total" in exposed
    assert "eureka_registers" not in exposed, "a counter is queried with its _total"
    assert "eureka_request_duration_seconds" not in exposed, "a histogram by _bucket/_sum/_count"
    assert {"eureka_request_duration_seconds_bucket", "eureka_request_duration_seconds_count"} <= exposed


def test_the_dashboards_panels_have_unique_ids_and_a_templated_data_source():
    document = dashboard()
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids))
    queried = [panel for panel in document["panels"] if panel["type"] != "row"]
    assert all(panel["targets"] and panel["datasource"]["uid"] == "${datasource}" for panel in queried)
    titles = " ".join(panel["title"] for panel in queried).lower()
    for subject in (
        "status",
        "threshold",
        "self-preservation",
        "p99",
        "hit ratio",
        "job",
        "peer",
        "auth",
        "redis",
        "event loop",
    ):
        assert subject in titles, subject
