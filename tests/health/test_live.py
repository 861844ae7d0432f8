"""Health checks for real: a gunicorn node with EUREKA_HEALTH_CHECKS on probes instance servers
running in this process (tests/health/targets.py) and marks them DOWN and UP again, as clients see
it in ``GET /eureka/apps/{APP}/{id}``. An operator's OUT_OF_SERVICE is never touched."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from registry.health.config import KEY_INTERVAL, KEY_KIND, KEY_RECOVER, KEY_THRESHOLD, KEY_TIMEOUT
from tests.factories import instance_body
from tests.health.targets import ERROR, OK, SLOW, HttpTarget, TcpTarget
from tests.interop.conftest import running_server, server_env, wait_until

ROOT = Path(__file__).resolve().parents[2]

# Short, so a DOWN takes ~2 s: probes every second, 0.4 s to answer, DOWN after 2, UP after 2.
CHECK = {KEY_INTERVAL: "1", KEY_TIMEOUT: "0.4", KEY_THRESHOLD: "2", KEY_RECOVER: "2"}
WAIT_S = 15


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    env = {"EUREKA_HEALTH_CHECKS": "true", "EUREKA_HEALTH_CHECK_DISPATCH_MS": "100"}
    workdir = tmp_path_factory.mktemp("health_live")
    # The instance page reads the admin's audit records: the node's database needs its tables.
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity=0"],
        cwd=ROOT,
        env=server_env(workdir, env),
        check=True,
        timeout=120,
    )
    with running_server(workdir, extra_env=env) as server:
        yield server


def register(node, app: str, port: int, kind: str, url: str | None = None) -> str:
    instance_id = f"127.0.0.1:{app.lower()}:{port}"
    extra = {"metadata": {KEY_KIND: kind, **CHECK}}
    if url:
        extra["healthCheckUrl"] = url
    body = instance_body(app=app, host="127.0.0.1", port=port, instance_id=instance_id, **extra)
    response = httpx.post(f"{node.base_url}/eureka/apps/{app}", json=body, timeout=5)
    assert response.status_code == 204, response.text
    return instance_id


def instance(node, app: str, instance_id: str) -> dict:
    response = httpx.get(
        f"{node.base_url}/eureka/apps/{app}/{instance_id}", headers={"Accept": "application/json"}, timeout=5
    )
    assert response.status_code == 200, response.text
    return response.json()["instance"]


def status(node, app: str, instance_id: str) -> str:
    return instance(node, app, instance_id)["status"]


def wait_status(node, app: str, instance_id: str, wanted: str) -> float:
    """Wait for ``wanted``; returns when it was seen (monotonic)."""
    wait_until(
        lambda: status(node, app, instance_id) == wanted,
        WAIT_S,
        lambda: f"{app}/{instance_id} is {status(node, app, instance_id)}, not {wanted}",
        interval=0.05,
    )
    return time.monotonic()


def set_override(node, app: str, instance_id: str, value: str) -> None:
    response = httpx.put(f"{node.base_url}/eureka/apps/{app}/{instance_id}/status?value={value}", timeout=5)
    assert response.status_code == 200


def instance_page(node, app: str, instance_id: str) -> str:
    return httpx.get(f"{node.base_url}/instances/{app}/{instance_id}/", timeout=5).text


def test_an_http_instance_goes_down_on_errors_timeouts_and_refusals_and_comes_back(node):
    target = HttpTarget(slow_seconds=1.5)
    try:
        instance_id = register(node, "HTTPSVC", target.port, "http", target.url)
        wait_until(lambda: target.count(200) >= 2, WAIT_S, "the node never probed the target")
        assert status(node, "HTTPSVC", instance_id) == "UP"

        for bad_mode, reason in (
            (ERROR, "HTTP 500"),
            (SLOW, "timed out after 0.4s"),
            ("closed", "connection refused"),
        ):
            switched = time.monotonic()
            if bad_mode == "closed":
                target.close()
            else:
                target.mode = bad_mode
            wait_status(node, "HTTPSVC", instance_id, "DOWN")
            if bad_mode == ERROR:
                # Not before the threshold: two failed probes were answered before DOWN.
                assert target.count(500, since=switched) >= 2
            assert reason in instance_page(node, "HTTPSVC", instance_id)
            assert instance(node, "HTTPSVC", instance_id)["overriddenStatus"] == "DOWN"

            target.mode = OK
            target.start()
            healthy_again = time.monotonic()
            wait_status(node, "HTTPSVC", instance_id, "UP")
            assert target.count(200, since=healthy_again) >= 2, "UP only after two successes"
            assert instance(node, "HTTPSVC", instance_id)["overriddenStatus"] == "UNKNOWN"
    finally:
        target.close()


def test_a_tcp_instance_goes_down_when_it_stops_listening_and_comes_back(node):
    target = TcpTarget()
    try:
        instance_id = register(node, "TCPSVC", target.port, "tcp")
        wait_until(lambda: target.accepted >= 2, WAIT_S, "the node never connected")
        target.close()
        wait_status(node, "TCPSVC", instance_id, "DOWN")
        target.start()
        wait_status(node, "TCPSVC", instance_id, "UP")
        assert target.accepted >= 4
    finally:
        target.close()


def test_an_operators_out_of_service_is_never_touched(node):
    failing, recovering = HttpTarget(), HttpTarget()
    try:
        # Out of service before the checker sees a failure: it never puts its DOWN over it.
        failing.mode = ERROR
        first = register(node, "OPSVC", failing.port, "http", failing.url)
        set_override(node, "OPSVC", first, "OUT_OF_SERVICE")
        since = time.monotonic()
        wait_until(lambda: failing.count(500, since=since) >= 5, WAIT_S, "the node stopped probing")
        assert instance(node, "OPSVC", first)["overriddenStatus"] == "OUT_OF_SERVICE"
        assert status(node, "OPSVC", first) == "OUT_OF_SERVICE"

        # Out of service while the checker holds DOWN: the operator's wins, the checker never lifts it.
        recovering.mode = ERROR
        second = register(node, "OPSVC", recovering.port, "http", recovering.url)
        wait_status(node, "OPSVC", second, "DOWN")
        set_override(node, "OPSVC", second, "OUT_OF_SERVICE")
        recovering.mode = OK
        since = time.monotonic()
        wait_until(lambda: recovering.count(200, since=since) >= 5, WAIT_S, "the node stopped probing")
        assert status(node, "OPSVC", second) == "OUT_OF_SERVICE"
        assert instance(node, "OPSVC", second)["overriddenStatus"] == "OUT_OF_SERVICE"
        assert "the checker stands aside" in instance_page(node, "OPSVC", second)
    finally:
        failing.close()
        recovering.close()


def test_metrics_show_the_probes_and_the_log_names_each_down_and_up(node):
    text = httpx.get(f"{node.base_url}/metrics", timeout=5).text
    assert 'eureka_health_probes_total{result="success"}' in text
    assert 'eureka_health_probes_total{result="failure"}' in text
    log = node.server_log_path.read_text()
    assert "health check marked HTTPSVC/" in log and "health check lifted its DOWN of HTTPSVC/" in log
