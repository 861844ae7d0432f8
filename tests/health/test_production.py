"""Health checks in production mode: real redis-server, a gunicorn node, Celery worker and beat.

Beat starts a round every EUREKA_HEALTH_CHECK_DISPATCH_MS; the worker claims due probes from the
node's control endpoint, probes the instance servers of this process and posts the results; the node
applies them. Skipped without redis-server, failed under EUREKA_REQUIRE_ALL_SUITES=1."""

from __future__ import annotations

import time

import httpx
import pytest

from registry.health.config import KEY_INTERVAL, KEY_KIND, KEY_RECOVER, KEY_THRESHOLD, KEY_TIMEOUT
from tests.factories import instance_body
from tests.health.targets import ERROR, OK, HttpTarget
from tests.integration.conftest import production_topology
from tests.interop.conftest import wait_until

pytestmark = pytest.mark.integration

CHECK = {KEY_INTERVAL: "1", KEY_TIMEOUT: "0.5", KEY_THRESHOLD: "2", KEY_RECOVER: "2"}
WAIT_S = 20


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    # The instance servers listen on loopback: probes reach it only where the operator allows it.
    extra_env = {
        "EUREKA_HEALTH_CHECKS": "true",
        "EUREKA_HEALTH_CHECK_DISPATCH_MS": "250",
        "EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS": "127.0.0.0/8",
    }
    with production_topology(tmp_path_factory.mktemp("health_topology"), extra_env) as processes:
        yield processes


def register(base: str, app: str, target: HttpTarget) -> str:
    instance_id = f"127.0.0.1:{app.lower()}:{target.port}"
    body = instance_body(
        app=app,
        host="127.0.0.1",
        port=target.port,
        instance_id=instance_id,
        healthCheckUrl=target.url,
        metadata={KEY_KIND: "http", **CHECK},
    )
    assert httpx.post(f"{base}/eureka/apps/{app}", json=body, timeout=5).status_code == 204
    return instance_id


def status(base: str, app: str, instance_id: str) -> str:
    response = httpx.get(
        f"{base}/eureka/apps/{app}/{instance_id}", headers={"Accept": "application/json"}, timeout=5
    )
    return response.json()["instance"]["status"]


def test_a_celery_worker_probes_and_the_node_marks_down_and_up(topology):
    target = HttpTarget()
    try:
        instance_id = register(topology.url, "PRODSVC", target)
        wait_until(lambda: target.count(200) >= 2, WAIT_S, "no worker probed the instance")
        target.mode = ERROR
        wait_until(
            lambda: status(topology.url, "PRODSVC", instance_id) == "DOWN",
            WAIT_S,
            lambda: (
                f"still {status(topology.url, 'PRODSVC', instance_id)}; worker log: "
                + (topology.tmp / "celery-worker.log").read_text()[-2000:]
            ),
        )
        target.mode = OK
        wait_until(lambda: status(topology.url, "PRODSVC", instance_id) == "UP", WAIT_S, "never lifted")
    finally:
        target.close()


def test_an_operators_out_of_service_is_left_alone_in_production_mode(topology):
    target = HttpTarget()
    try:
        target.mode = ERROR
        instance_id = register(topology.url, "PRODOPS", target)
        response = httpx.put(
            f"{topology.url}/eureka/apps/PRODOPS/{instance_id}/status?value=OUT_OF_SERVICE", timeout=5
        )
        assert response.status_code == 200
        since = time.monotonic()
        wait_until(lambda: target.count(500, since=since) >= 4, WAIT_S, "no worker probed the instance")
        assert status(topology.url, "PRODOPS", instance_id) == "OUT_OF_SERVICE"
    finally:
        target.close()


def test_without_celery_nobody_probes_and_rounds_resume_when_it_is_back(topology):
    target = HttpTarget()
    try:
        register(topology.url, "PRODSTOP", target)
        wait_until(lambda: target.count() >= 1, WAIT_S, "no worker probed the instance")
        topology.stop_celery()
        time.sleep(0.5)  # a probe under way when the worker stopped may still land
        before = target.count()
        time.sleep(2.5)  # 2.5 intervals of the instance's check
        assert target.count() == before, "the node probes by itself in production mode"
        topology.start_celery()
        wait_until(lambda: target.count() > before, WAIT_S, "probing did not resume with Celery")
    finally:
        target.close()
