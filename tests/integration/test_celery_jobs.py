"""Celery beat drives the periodic jobs through the control endpoint; the node covers for it when it stops."""

from __future__ import annotations

import httpx
import pytest

from tests.factories import instance_body
from tests.interop.conftest import wait_until

from .conftest import CONTROL_SECRET

pytestmark = pytest.mark.integration


def register_short_lease(base: str, host: str) -> str:
    body = instance_body(app="SHORT", host=host)
    body["instance"]["leaseInfo"] = {"renewalIntervalInSecs": 1, "durationInSecs": 2}
    response = httpx.post(f"{base}/eureka/apps/SHORT", json=body, timeout=5)
    assert response.status_code == 204
    return body["instance"]["instanceId"]


def is_registered(base: str, instance_id: str) -> bool:
    return httpx.get(f"{base}/eureka/apps/SHORT/{instance_id}", timeout=5).status_code == 200


def app_names(base: str) -> list[str]:
    full = httpx.get(f"{base}/eureka/apps", headers={"Accept": "application/json"}, timeout=5).json()
    return [app["name"] for app in full["applications"]["application"]]


def test_control_endpoint_refuses_requests_without_the_secret(topology):
    assert httpx.post(f"{topology.url}/control/jobs/evict", timeout=5).status_code == 403
    url = f"{topology.url}/control/jobs/evict"
    wrong = httpx.post(url, headers={"X-Eureka-Control-Secret": "x"}, timeout=5)
    assert wrong.status_code == 403
    right = httpx.post(
        f"{topology.url}/control/jobs/evict", headers={"X-Eureka-Control-Secret": CONTROL_SECRET}, timeout=5
    )
    assert right.status_code == 200 and right.json()["job"] == "evict"


def test_beat_driven_eviction_removes_a_dead_instance(topology):
    instance_id = register_short_lease(topology.url, "10.9.0.1")
    assert is_registered(topology.url, instance_id)
    # 2 s lease, no heartbeats; eviction every second through beat -> worker -> control endpoint.
    wait_until(lambda: not is_registered(topology.url, instance_id), 20, "the dead instance was not evicted")
    wait_until(
        lambda: topology.ready()["jobs"]["evict"]["last_source"] == "celery",
        15,
        lambda: f"evict was not driven by Celery: {topology.ready()['jobs']['evict']}",
    )
    wait_until(lambda: "SHORT" not in app_names(topology.url), 10, "cache sync did not drop the evicted app")


def test_node_takes_over_overdue_jobs_when_celery_stops(topology):
    topology.stop_celery()
    try:
        # Three missed intervals (1 s each) make a job overdue; the watchdog then runs it itself.
        wait_until(
            lambda: topology.ready()["jobs"]["evict"]["last_source"] == "watchdog",
            20,
            lambda: f"the node did not take over eviction: {topology.ready()['jobs']['evict']}",
        )
        instance_id = register_short_lease(topology.url, "10.9.0.2")
        wait_until(lambda: not is_registered(topology.url, instance_id), 30, "no eviction without Celery")
    finally:
        topology.start_celery()
    wait_until(
        lambda: topology.ready()["jobs"]["evict"]["last_source"] == "celery",
        30,
        "Celery did not resume driving the jobs",
    )


def test_a_killed_client_is_evicted_by_the_beat_driven_job_while_a_live_one_stays(topology):
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = Path(__file__).with_name("py_client_process.py")
    clients = {
        name: subprocess.Popen(
            [sys.executable, str(script), f"{topology.url}/eureka/", name, str(port), "1", "3"],
            stdout=open(topology.tmp / f"client-{name}.log", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
        )
        for name, port in (("doomed", 9101), ("survivor", 9102))
    }
    doomed = "127.0.0.1:doomed:9101"
    survivor = "127.0.0.1:survivor:9102"
    try:
        wait_until(
            lambda: (
                is_registered_in(topology.url, "DOOMED", doomed)
                and is_registered_in(topology.url, "SURVIVOR", survivor)
                and {"DOOMED", "SURVIVOR"} <= set(app_names(topology.url))
            ),
            20,
            "the py-eureka-client processes did not register",
        )
        clients["doomed"].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until(lambda: "DOOMED" not in app_names(topology.url), 20, "the killed client was not evicted")
        gone_after = time.monotonic() - killed_at
        assert gone_after < 3 + 2 + 1 + 2, f"evicted {gone_after:.1f}s after the kill (3 s lease)"
        assert "SURVIVOR" in app_names(topology.url), "the live client must stay"
        assert topology.ready()["jobs"]["evict"]["last_source"] in ("celery", "watchdog")
    finally:
        for process in clients.values():
            process.kill()
            process.wait(10)


def is_registered_in(base: str, app: str, instance_id: str) -> bool:
    return httpx.get(f"{base}/eureka/apps/{app}/{instance_id}", timeout=5).status_code == 200
