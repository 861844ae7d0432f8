"""The node's side of health checks through Django: the control endpoints a Celery worker uses,
the instance page and /metrics. Probe results are posted by hand; nothing is probed here."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from registry.health.config import KEY_KIND, KEY_THRESHOLD
from registry.runtime.composition import build_node
from registry.runtime.process import reset_node
from tests.factories import instance_body

SECRET = "s3cret-for-health-tests"
APP = "ORDERS"
INSTANCE = "10.0.0.1:orders:8080"


@pytest.fixture
def node(eureka_options, clock, settings):
    """The conftest's node, with health checks on (whatever order a test asks for its fixtures)."""
    settings.EUREKA = settings.EUREKA.with_changes(control_secret=SECRET, metrics__token="")
    fresh = build_node(eureka_options.with_changes(health_checks__enabled=True), clock=clock)
    reset_node(fresh)
    yield fresh
    reset_node(None)


@pytest.fixture
def registered(api, node):
    body = instance_body(
        healthCheckUrl="http://10.0.0.1:8080/health",
        metadata={KEY_KIND: "http", KEY_THRESHOLD: "2"},
    )
    assert api.post(f"/eureka/apps/{APP}", body, format="json").status_code == 204
    # What the node's loop (or the next claim) does within a dispatch period.
    node.health.refresh(node.now())
    return node


def claim(api, limit="100", secret=SECRET):
    return api.post(f"/control/health/targets?limit={limit}", HTTP_X_EUREKA_CONTROL_SECRET=secret)


def report(api, body, secret=SECRET):
    return api.post("/control/health/results", body, format="json", HTTP_X_EUREKA_CONTROL_SECRET=secret)


def status(api) -> str:
    response = api.get(f"/eureka/apps/{APP}/{INSTANCE}", HTTP_ACCEPT="application/json")
    return response.json()["instance"]["status"]


def fail_once(api, clock):
    clock.advance(10_000)
    [target] = claim(api).json()["targets"]
    result = {
        "app": target["app"],
        "instance_id": target["instance_id"],
        "claim": target["claim"],
        "ok": False,
        "latency_ms": 2000.0,
        "reason": "timed out after 2s",
    }
    answer = report(api, {"results": [result]})
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_the_endpoints_need_the_control_secret(api, registered):
    assert claim(api, secret="wrong").status_code == 403
    assert report(api, {"results": []}, secret="").status_code == 403


def test_the_endpoints_answer_404_when_health_checks_are_off(client, eureka_options, clock, settings):
    settings.EUREKA = settings.EUREKA.with_changes(control_secret=SECRET)
    reset_node(build_node(eureka_options, clock=clock))  # the settings' default: off
    response = claim(client)
    assert response.status_code == 404 and b"EUREKA_HEALTH_CHECKS" in response.content


@pytest.mark.parametrize("limit", ["0", "-1", "many", "5001"])
def test_a_bad_limit_is_a_400(api, registered, limit):
    assert claim(api, limit).status_code == 400


def test_a_worker_claims_due_targets_and_its_results_mark_the_instance_down(api, registered, clock):
    clock.advance(10_000)
    [target] = claim(api).json()["targets"]
    assert target["kind"] == "http" and target["url"] == "http://10.0.0.1:8080/health"
    assert target["timeout_ms"] == 2000
    # Handed out once: a second round right after gets nothing for this instance.
    assert claim(api).json()["targets"] == []
    base = {"app": APP, "instance_id": INSTANCE, "claim": target["claim"], "latency_ms": 1.0}
    assert report(api, {"results": [{**base, "ok": False, "reason": "HTTP 503"}]}).json() == {
        "applied": 1,
        "overrides_changed": 0,
    }
    assert status(api) == "UP"
    assert fail_once(api, clock)["overrides_changed"] == 1
    assert status(api) == "DOWN"
    assert registered.registry.reads.overrides() == {INSTANCE: "DOWN"}


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"results": {}}',
        b'{"results": [{"app": "ORDERS"}]}',
        b'{"outcomes": []}',
    ],
)
def test_unreadable_results_are_a_400_and_nothing_is_applied(api, registered, clock, body):
    clock.advance(10_000)
    [target] = claim(api).json()["targets"]
    good = {
        "app": APP,
        "instance_id": INSTANCE,
        "claim": target["claim"],
        "ok": False,
        "latency_ms": 1.0,
        "reason": "HTTP 500",
    }
    response = api.post(
        "/control/health/results", body, content_type="application/json", HTTP_X_EUREKA_CONTROL_SECRET=SECRET
    )
    assert response.status_code == 400 and b"Malformed health results" in response.content
    # One bad item refuses the batch, the good one with it.
    mixed = report(api, {"results": [good, {**good, "ok": "no"}]})
    assert mixed.status_code == 400
    assert registered.health.view(APP, INSTANCE).probes == 0


def health_table(client):
    page = client.get(f"/instances/{APP}/{INSTANCE}/")
    assert page.status_code == 200
    return BeautifulSoup(page.content.decode(), "html.parser").find(id="health-check")


@pytest.mark.django_db
def test_the_instance_page_shows_staff_the_check_and_the_checkers_override(
    api, registered, clock, admin_client
):
    fail_once(api, clock)
    fail_once(api, clock)
    table = health_table(admin_client)
    text = " ".join(table.get_text(" ", strip=True).split())
    assert "http http://10.0.0.1:8080/health" in text
    assert "timed out after 2s" in text and "in 2000.0 ms" in text
    assert table.find(id="health-state").get_text(strip=True) == "DOWN"
    assert table.find(id="health-failures").get_text(strip=True) == "2"
    assert table.find(id="health-holds-down").get_text(strip=True).startswith("held since")


@pytest.mark.django_db
def test_anonymous_visitors_see_the_health_state_and_no_reason_or_timing(api, registered, clock, client):
    assert health_table(client).find(id="health-state").get_text(strip=True) == "unknown"
    fail_once(api, clock)
    table = health_table(client)
    text = " ".join(table.get_text(" ", strip=True).split())
    assert table.find(id="health-state").get_text(strip=True) == "DOWN"
    # What the probe found would tell a registrant about the network behind the node.
    assert "timed out" not in text and "2000" not in text and "failures" not in text.lower()
    assert table.find(id="health-staff-only") is not None


@pytest.mark.django_db
def test_a_refused_probe_shows_staff_why_and_anonymous_visitors_only_unknown(
    api, registered, clock, client, admin_client
):
    clock.advance(10_000)
    [target] = claim(api).json()["targets"]
    reason = (
        "10.0.0.1 is one of the node's own addresses: "
        "not probed unless EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS allows it"
    )
    result = {
        "app": APP,
        "instance_id": INSTANCE,
        "claim": target["claim"],
        "ok": False,
        "latency_ms": 0.1,
        "reason": reason,
        "refused": True,
    }
    assert report(api, {"results": [result]}).json() == {"applied": 1, "overrides_changed": 0}
    assert status(api) == "UP" and registered.health.view(APP, INSTANCE).failures == 0
    staff = health_table(admin_client)
    assert staff.find(id="health-refused").get_text(strip=True) == reason
    anonymous = health_table(client)
    assert anonymous.find(id="health-state").get_text(strip=True) == "unknown"
    assert "own addresses" not in anonymous.get_text() and anonymous.find(id="health-refused") is None
    assert 'eureka_health_probes_total{result="refused"} 1.0' in api.get("/metrics").content.decode()


def test_a_worker_is_told_the_nodes_own_addresses_with_its_targets(api, registered, clock):
    registered.start_cluster([("198.51.100.9", 8761)])
    answer = claim(api).json()
    assert "198.51.100.9" in answer["node_addresses"] and "127.0.0.1" in answer["node_addresses"]


@pytest.mark.django_db
def test_the_instance_page_shows_staff_a_configuration_error(api, node, client, admin_client):
    body = instance_body(metadata={KEY_KIND: "icmp"})
    api.post(f"/eureka/apps/{APP}", body, format="json")
    node.health.refresh(node.now())
    errors = health_table(admin_client).select(".health-config-error")
    assert "'icmp' is not one of http, tcp" in errors[0].get_text()
    assert health_table(client).select(".health-config-error") == []


@pytest.mark.django_db
def test_a_health_check_url_on_another_host_is_not_probed_and_staff_see_why(api, node, admin_client):
    body = instance_body(
        healthCheckUrl="http://127.0.0.1:8080/health", metadata={KEY_KIND: "http", KEY_THRESHOLD: "2"}
    )
    assert api.post(f"/eureka/apps/{APP}", body, format="json").status_code == 204
    node.health.refresh(node.now())
    assert claim(api).json()["targets"] == []
    errors = health_table(admin_client).select(".health-config-error")
    wanted = "'http://127.0.0.1:8080/health' is neither the instance's ipAddr ('10.0.0.1')"
    assert wanted in errors[0].get_text()


def test_metrics_count_probes_by_result_and_instances_held_down(api, registered, clock):
    fail_once(api, clock)
    fail_once(api, clock)
    text = api.get("/metrics").content.decode()
    assert 'eureka_health_probes_total{result="failure"} 2.0' in text
    assert 'eureka_health_probes_total{result="success"} 0.0' in text
    assert "eureka_health_marked_down 1.0" in text
    assert "eureka_health_checked_instances 1.0" in text
