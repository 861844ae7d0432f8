"""Health checks for real: a gunicorn node with EUREKA_HEALTH_CHECKS on probes instance servers
running in this process (tests/health/targets.py) and marks them DOWN and UP again, as clients see
it in ``GET /eureka/apps/{APP}/{id}``. An operator's OUT_OF_SERVICE is never touched. The servers
listen on loopback, which a node probes only where EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS allows it:
the ``node`` here allows 127.0.0.0/8, the ``secure_node`` keeps the default (none)."""

from __future__ import annotations

import html
import re
import secrets
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from registry.health.config import KEY_INTERVAL, KEY_KIND, KEY_RECOVER, KEY_THRESHOLD, KEY_TIMEOUT
from tests.factories import instance_body
from tests.health.targets import ERROR, OK, SLOW, HttpTarget, TcpTarget
from tests.interop.conftest import running_server, server_env, wait_until

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]

# Short, so a DOWN takes ~2 s: probes every second, 0.4 s to answer, DOWN after 2, UP after 2.
CHECK = {KEY_INTERVAL: "1", KEY_TIMEOUT: "0.4", KEY_THRESHOLD: "2", KEY_RECOVER: "2"}
WAIT_S = 15


STAFF_USER = "operator"
STAFF_PASSWORD = secrets.token_urlsafe(16)


@contextmanager
def health_node(workdir: Path, **extra_env: str):
    """A node probing every 100 ms, with a migrated database (the instance page reads the admin's
    audit records) and a staff user, who alone sees why probes failed."""
    env = {"EUREKA_HEALTH_CHECKS": "true", "EUREKA_HEALTH_CHECK_DISPATCH_MS": "100", **extra_env}
    for command, more_env in (
        (["migrate", "--verbosity=0"], {}),
        (
            ["createsuperuser", "--noinput", "--username", STAFF_USER, "--email", "ops@example.org"],
            {"DJANGO_SUPERUSER_PASSWORD": STAFF_PASSWORD},
        ),
    ):
        subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env=server_env(workdir, {**env, **more_env}),
            check=True,
            capture_output=True,
            timeout=120,
        )
    with running_server(workdir, extra_env=env) as server:
        yield server


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with health_node(
        tmp_path_factory.mktemp("health_live"), EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS="127.0.0.0/8"
    ) as server:
        yield server


@pytest.fixture(scope="module")
def secure_node(tmp_path_factory):
    with health_node(tmp_path_factory.mktemp("health_live_secure")) as server:
        yield server


def register(node, app: str, port: int, kind: str, url: str | None = None, host: str = "127.0.0.1") -> str:
    instance_id = f"{host}:{app.lower()}:{port}"
    extra = {"metadata": {KEY_KIND: kind, **CHECK}}
    if url:
        extra["healthCheckUrl"] = url
    body = instance_body(app=app, host=host, port=port, instance_id=instance_id, **extra)
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


def instance_page(node, app: str, instance_id: str, staff: httpx.Client | None = None) -> str:
    return (staff or httpx).get(f"{node.base_url}/instances/{app}/{instance_id}/", timeout=5).text


def health_text(page: str) -> str:
    """The instance page's health-check table as text."""
    table = re.search(r'<table class="kv striped" id="health-check">(.*?)</table>', page, re.S)
    assert table, "no health-check table on the page"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", table.group(1))).split())


@contextmanager
def staff_session(node):
    """Signed in to the admin as the staff user (the login form, as a browser sends it)."""
    with httpx.Client(base_url=node.base_url, timeout=10) as client:
        form = client.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        answer = client.post(
            "/admin/login/",
            data={
                "username": STAFF_USER,
                "password": STAFF_PASSWORD,
                "csrfmiddlewaretoken": token,
                "next": "/admin/",
            },
        )
        assert answer.status_code == 302, answer.text[-500:]
        yield client


@pytest.fixture(scope="module")
def staff(node):
    with staff_session(node) as client:
        yield client


def test_an_http_instance_goes_down_on_errors_timeouts_and_refusals_and_comes_back(node, staff):
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
            assert reason in health_text(instance_page(node, "HTTPSVC", instance_id, staff))
            # Anonymous visitors see the state, not what the probe found.
            anonymous = health_text(instance_page(node, "HTTPSVC", instance_id))
            assert "Health DOWN" in anonymous and reason not in anonymous
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


def test_an_operators_out_of_service_is_never_touched(node, staff):
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
        assert "the checker stands aside" in instance_page(node, "OPSVC", second, staff)
    finally:
        failing.close()
        recovering.close()


def test_metrics_show_the_probes_and_the_log_names_each_down_and_up(node):
    text = httpx.get(f"{node.base_url}/metrics", timeout=5).text
    assert 'eureka_health_probes_total{result="success"}' in text
    assert 'eureka_health_probes_total{result="failure"}' in text
    log = node.server_log_path.read_text()
    assert "health check marked HTTPSVC/" in log and "health check lifted its DOWN of HTTPSVC/" in log


def test_a_health_check_url_on_another_host_than_the_instance_is_never_probed(node, staff):
    """The instance says it is 10.0.0.9 but asks for a URL on 127.0.0.1 (where the node may probe): the
    node does not GET it. A second instance, whose URL is its own, shows the probes went on meanwhile."""
    elsewhere, own = HttpTarget(), HttpTarget()
    try:
        hijack = register(node, "OTHERHOST", elsewhere.port, "http", elsewhere.url, host="10.0.0.9")
        register(node, "OWNHOST", own.port, "http", own.url)
        wait_until(lambda: own.count(200) >= 3, WAIT_S, "the node never probed the instance's own URL")
        assert elsewhere.count() == 0, "the node probed a URL on another host than the instance's"
        reason = health_text(instance_page(node, "OTHERHOST", hijack, staff))
        assert "is neither the instance's ipAddr ('10.0.0.9') nor its hostName ('10.0.0.9')" in reason
        assert status(node, "OTHERHOST", hijack) == "UP"
    finally:
        elsewhere.close()
        own.close()


def test_by_default_loopback_is_not_probed_and_only_staff_see_why(secure_node):
    target, tcp = HttpTarget(), TcpTarget()
    try:
        instance_id = register(secure_node, "LOOPSVC", target.port, "http", target.url)
        tcp_id = register(secure_node, "LOOPTCP", tcp.port, "tcp")
        with staff_session(secure_node) as staff:
            expected = (
                "127.0.0.1 is a loopback address: "
                "not probed unless EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS allows it"
            )
            # The refusal is recorded at each probe's time (every second): no connection is ever made.
            wait_until(
                lambda: expected in health_text(instance_page(secure_node, "LOOPSVC", instance_id, staff)),
                WAIT_S,
                lambda: health_text(instance_page(secure_node, "LOOPSVC", instance_id, staff)),
            )
            wait_until(
                lambda: expected in health_text(instance_page(secure_node, "LOOPTCP", tcp_id, staff)),
                WAIT_S,
                "the tcp check was not refused",
            )
        time.sleep(1.2)  # one more interval: still nothing reaches the servers
        assert target.count() == 0 and tcp.accepted == 0
        # Refused is not failed: the instance stays UP, anonymous visitors see "unknown" and no reason.
        assert status(secure_node, "LOOPSVC", instance_id) == "UP"
        anonymous = health_text(instance_page(secure_node, "LOOPSVC", instance_id))
        assert "Health unknown" in anonymous and "loopback" not in anonymous
        log = secure_node.server_log_path.read_text()
        assert f"health check of LOOPSVC/{instance_id} not probed: {expected}" in log
    finally:
        target.close()
        tcp.close()
