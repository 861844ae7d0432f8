"""End to end, as deployed: a node, ``manage.py mesh`` beside it, three gRPC backends registered by an
unmodified py-eureka-client, and two real xDS clients — grpcio's and grpc-go's — calling
``xds:///orders`` through the mesh. An operator takes one backend out of service in the Django admin,
and puts it back; another backend's process is killed, evicted, and started again. The clients'
traffic follows each change, and plain DNS (dig's library, dnspython) answers from the same copy.

Times are asserted with a margin for this machine's noise (CHANGE_S) and printed as measured;
bench/mesh.py measures propagation precisely.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import dns.exception
import dns.message
import dns.query
import dns.rdatatype
import httpx
import pytest

from tests.interop.conftest import PROJECT_ROOT, running_server, server_env, wait_until
from tests.ports import free_port

pytestmark = pytest.mark.live

# What each step measured (pytest -s --log-cli-level=INFO shows it; a failure shows it anyway).
measured = logging.getLogger("tests.mesh.measured")

APP = "ORDERS"
# The mesh promises a second from the node's change to every client; the test allows for a loaded
# two-core machine (and for gRPC's own reaction to a new assignment).
CHANGE_S = 5.0
STAFF_USER = "operator"
STAFF_PASSWORD = secrets.token_urlsafe(16)
# Leases of 3 s renewed every second: a killed backend is evicted within about 4 s.
RENEWAL_S, DURATION_S = 1, 3
NODE_ENV = {"EUREKA_ENABLE_SELF_PRESERVATION": "false"}


class CallLog:
    """A client process printing one JSON line per call (``backend`` or ``error``), read on a thread."""

    def __init__(self, label: str, command: list[str], env: dict[str, str]):
        self.label = label
        self.calls: list[tuple[float, str | None, str | None]] = []
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            command,
            cwd=PROJECT_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                call = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.calls.append((time.monotonic(), call.get("backend"), call.get("error")))

    def since(self, moment: float) -> list[tuple[float, str | None, str | None]]:
        with self._lock:
            return [call for call in self.calls if call[0] >= moment]

    def backends_since(self, moment: float) -> set[str]:
        return {backend for _, backend, _ in self.since(moment) if backend}

    def last_call_to(self, backend: str) -> float | None:
        with self._lock:
            times = [at for at, name, _ in self.calls if name == backend]
        return times[-1] if times else None

    def stop(self) -> str:
        self.process.terminate()
        try:
            _, stderr = self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, stderr = self.process.communicate()
        return stderr or ""


class Admin:
    """The Django admin, signed in as staff, over plain HTTP as a browser would post its forms."""

    def __init__(self, base_url: str):
        self.http = httpx.Client(base_url=base_url, timeout=10, follow_redirects=True)
        self.http.get("/admin/login/")
        answer = self.http.post(
            "/admin/login/?next=/admin/",
            data={
                "username": STAFF_USER,
                "password": STAFF_PASSWORD,
                "csrfmiddlewaretoken": self.http.cookies["csrftoken"],
                "next": "/admin/",
            },
        )
        assert answer.status_code == 200 and "sessionid" in self.http.cookies, answer.text[:500]

    def act(self, instance_id: str, action: str) -> None:
        page = f"/admin/registry/instances/{APP}/{instance_id}/"
        form = self.http.get(page)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert form.status_code == 200 and token, form.text[:500]
        answer = self.http.post(
            page,
            data={"csrfmiddlewaretoken": token.group(1), "action": action, "reason": "mesh end-to-end test"},
        )
        assert answer.status_code == 200 and "(applied)" in answer.text, answer.text[:2000]


@contextmanager
def backend(node, name: str, port: int) -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.mesh.registered_backend",
            node.url,
            APP,
            name,
            str(port),
            str(RENEWAL_S),
            str(DURATION_S),
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def statuses(node) -> dict[str, str]:
    answer = httpx.get(f"{node.url}apps/{APP}", headers={"Accept": "application/json"}, timeout=5)
    if answer.status_code != 200:
        return {}
    return {i["instanceId"]: i["status"] for i in answer.json()["application"]["instance"]}


def dns_ports(port: int, name: str) -> set[int]:
    """The ports of the SRV answer for ``name`` (every backend shares 127.0.0.1)."""
    query = dns.message.make_query(f"_{name}._tcp.service.eureka", dns.rdatatype.SRV)
    answer = dns.query.tcp(query, "127.0.0.1", port=port, timeout=2)
    return {record.port for rrset in answer.answer for record in rrset}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("mesh_live")
    for command, extra in (
        (["migrate", "--verbosity=0"], {}),
        (
            ["createsuperuser", "--noinput", "--username", STAFF_USER, "--email", "ops@example.org"],
            {"DJANGO_SUPERUSER_PASSWORD": STAFF_PASSWORD},
        ),
    ):
        subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=PROJECT_ROOT,
            env=server_env(workdir, {**NODE_ENV, **extra}),
            check=True,
            capture_output=True,
            timeout=120,
        )
    with running_server(workdir, NODE_ENV, server="gunicorn") as server:
        yield server


@pytest.fixture(scope="module")
def mesh(node, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("mesh_process")
    xds_port, dns_port = free_port(), free_port()
    env = server_env(
        workdir,
        {
            "EUREKA_MESH_NODE_URL": node.base_url,
            "EUREKA_XDS_PORT": str(xds_port),
            "EUREKA_XDS_BIND": "127.0.0.1",
            "EUREKA_DNS_PORT": str(dns_port),
        },
    )
    log = (workdir / "mesh.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "mesh"], cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    bootstrap = workdir / "bootstrap.json"
    bootstrap.write_text(
        json.dumps(
            {
                "xds_servers": [
                    {
                        "server_uri": f"127.0.0.1:{xds_port}",
                        "channel_creds": [{"type": "insecure"}],
                        "server_features": ["xds_v3"],
                    }
                ],
                "node": {"id": "mesh-live-test", "locality": {}},
            }
        )
    )
    try:
        wait_until(lambda: _answers_dns(dns_port), 30, lambda: (workdir / "mesh.log").read_text())
        yield {
            "xds_port": xds_port,
            "dns_port": dns_port,
            "bootstrap": bootstrap,
            "log": workdir / "mesh.log",
        }
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _answers_dns(port: int) -> bool:
    try:
        dns.query.tcp(
            dns.message.make_query("x.service.eureka", dns.rdatatype.A), "127.0.0.1", port=port, timeout=1
        )
        return True
    except (OSError, dns.exception.DNSException):
        return False


def _moved_off(logs: list[CallLog], name: str, since: float, others: set[str]) -> float:
    """Seconds from ``since`` until every client's calls go only to ``others`` (none to ``name``),
    judged over the last second of calls."""

    def settled() -> bool:
        now = time.monotonic()
        for log in logs:
            recent = log.since(max(since, now - 1.0))
            if not recent or any(backend == name for _, backend, _ in recent):
                return False
            if not {backend for _, backend, _ in recent if backend} <= others:
                return False
        return True

    wait_until(
        settled, CHANGE_S + 1.0, lambda: {log.label: log.backends_since(since) for log in logs}, interval=0.05
    )
    last = max((log.last_call_to(name) or since) for log in logs)
    return max(0.0, last - since)


def test_clients_follow_admin_overrides_evictions_and_returns(node, mesh, xds_go_binary):
    ports = {f"who-{i}": free_port() for i in (1, 2, 3)}
    with backend(node, "who-1", ports["who-1"]), backend(node, "who-3", ports["who-3"]):
        killed = backend(node, "who-2", ports["who-2"])
        killed_process = killed.__enter__()
        try:
            wait_until(lambda: len(statuses(node)) == 3, 30, lambda: statuses(node))
            env = {**os.environ, "GRPC_XDS_BOOTSTRAP": str(mesh["bootstrap"])}
            logs = [
                CallLog(
                    "grpcio",
                    [
                        sys.executable,
                        "-m",
                        "tests.mesh.grpc_xds_client",
                        "--target",
                        f"xds:///{APP.lower()}",
                        "--bootstrap",
                        str(mesh["bootstrap"]),
                        "--rate",
                        "40",
                        "--duration",
                        "90",
                    ],
                    env,
                ),
                CallLog(
                    "grpc-go",
                    [
                        str(xds_go_binary),
                        "client",
                        "-target",
                        f"xds:///{APP.lower()}",
                        "-rate",
                        "40",
                        "-duration",
                        "90s",
                    ],
                    env,
                ),
            ]
            try:
                # 1. Calls spread over the three.
                start = time.monotonic()
                wait_until(
                    lambda: all(log.backends_since(start) == set(ports) for log in logs),
                    20,
                    lambda: {log.label: log.backends_since(start) for log in logs},
                )
                assert dns_ports(mesh["dns_port"], APP.lower()) == set(ports.values())

                # 2. Out of service in the Django admin: traffic leaves who-1 (and DNS drops it).
                admin = Admin(node.base_url)
                changed = time.monotonic()
                admin.act("who-1", "take_out_of_service")
                answered = time.monotonic() - changed
                took = _moved_off(logs, "who-1", changed, {"who-2", "who-3"})
                measured.warning(
                    f"admin OUT_OF_SERVICE: the last call to who-1 came {took:.2f} s after the form was "
                    f"posted (the admin answered in {answered:.2f} s)"
                )
                assert took < CHANGE_S
                assert ports["who-1"] not in dns_ports(mesh["dns_port"], APP.lower())

                # 3. Back in service: who-1 gets calls again.
                back = time.monotonic()
                admin.act("who-1", "put_back_in_service")
                wait_until(
                    lambda: all("who-1" in log.backends_since(back) for log in logs),
                    CHANGE_S,
                    lambda: {log.label: log.backends_since(back) for log in logs},
                )
                measured.warning(
                    f"admin back in service → both clients call who-1 after {time.monotonic() - back:.2f} s"
                )

                # 4. who-2's process is killed: no cancel, the node evicts it when its lease runs out.
                killed_process.kill()
                killed_process.wait(timeout=10)
                wait_until(lambda: "who-2" not in statuses(node), 20, lambda: statuses(node), interval=0.1)
                evicted = time.monotonic()
                took = _moved_off(logs, "who-2", evicted, {"who-1", "who-3"})
                measured.warning(
                    f"who-2 killed, then evicted: the last call to it came {took:.2f} s after the eviction"
                )
                assert ports["who-2"] not in dns_ports(mesh["dns_port"], APP.lower())

                # 5. It returns (a new process, registered again): calls come back to it.
                with backend(node, "who-2", ports["who-2"]):
                    returned = time.monotonic()
                    wait_until(
                        lambda: all("who-2" in log.backends_since(returned) for log in logs),
                        CHANGE_S + 10,
                        lambda: {log.label: log.backends_since(returned) for log in logs},
                    )
                    measured.warning(
                        f"who-2 back → both clients call it after {time.monotonic() - returned:.2f} s"
                    )
                    assert dns_ports(mesh["dns_port"], APP.lower()) == set(ports.values())
            finally:
                for log in logs:
                    stderr = log.stop()
                    failed = [c for c in log.calls if c[2]]
                    measured.warning(
                        f"{log.label}: {len(log.calls)} calls, {len(failed)} failed; "
                        f"stderr tail: {stderr[-300:]}"
                    )
        finally:
            killed.__exit__(None, None, None)
