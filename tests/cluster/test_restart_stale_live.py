"""A restarted node serves nothing stale (issue 35, point 4), live: two real gunicorn nodes and a
stand-in peer, on loopback.

Node A and node B replicate to each other; B also lists peer P, a small HTTP server standing for a
node that has not yet heard of a cancel (its ``GET apps`` still lists the instance, and is slow, so
that B's start-up sync takes a while). B restarts from its warm-restart snapshot after:

- GONE was cancelled at A (B's snapshot and P still list it): B must not bring it back, neither from
  its snapshot nor from P, even though A's replicated cancel reaches B before P's answer does;
- DEAD's lease ran out while B was down (B's snapshot still holds it): dropped at restore;
- NEW registered at A (B's snapshot lacks it).

Until its sync is done, B answers every registry read 503 and /readyz 503, and takes writes; then it
lists LIVE and NEW, and neither GONE nor DEAD.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.factories import instance_body
from tests.interop.conftest import (
    PROJECT_ROOT,
    _gunicorn,
    _stop,
    running_server,
    server_env,
    wait_until,
)
from tests.ports import free_port

pytestmark = pytest.mark.cluster

HOST = "127.0.0.1"
# How long P takes to answer B's GET apps: the window in which B must serve no read.
P_DELAY_S = 2.0
DEAD_LEASE_S = 6
ENV = {
    "EUREKA_WARM_RESTART": "true",
    "EUREKA_WARM_RESTART_INTERVAL_MS": "300",
    "EUREKA_ENABLE_SELF_PRESERVATION": "false",
    "EUREKA_REGISTRY_SYNC_RETRIES": "0",
    "EUREKA_EVICTION_INTERVAL_MS": "300",
    "LOG_LEVEL": "INFO",
}
JSON = {"Accept": "application/json"}
READS = ["apps/", "apps/delta", "apps/ORDERS", "vips/orders", "instances/10.0.0.1:orders:8080"]


def ids(base_url: str) -> set[str]:
    body = httpx.get(f"{base_url}/eureka/apps/", headers=JSON, timeout=5).json()
    return {
        instance["hostName"]
        for application in body["applications"]["application"]
        for instance in application["instance"]
    }


def register(base_url: str, host: str, lease_s: int = 60) -> None:
    body = instance_body(host=host, leaseInfo={"renewalIntervalInSecs": 1, "durationInSecs": lease_s})
    answer = httpx.post(f"{base_url}/eureka/apps/ORDERS", json=body, timeout=5)
    assert answer.status_code == 204, answer.text


class StalePeer(BaseHTTPRequestHandler):
    """A peer that has not heard of GONE's cancel: its registry (``apps``) lists what it was given."""

    apps: dict = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.rstrip("/").endswith("/apps"):
            time.sleep(P_DELAY_S)
            body = self.apps
        else:  # its delta: nothing recent
            body = {"applications": {"versions__delta": "1", "apps__hashcode": "", "application": []}}
        self._answer(json.dumps(body).encode())

    def do_POST(self):  # noqa: N802 (replication batches, all taken)
        items = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        answers = [{"statusCode": 200} for _ in items.get("replicationList", [])]
        self._answer(json.dumps({"responseList": answers}).encode())

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.serial  # its sync and restart deadlines do not hold with other live tests beside it
def test_a_restarted_node_serves_nothing_before_its_sync_and_nothing_cancelled_or_expired_after(tmp_path):
    port_a, port_b = free_port(HOST), free_port(HOST)
    stale = ThreadingHTTPServer((HOST, 0), StalePeer)
    threading.Thread(target=stale.serve_forever, daemon=True).start()
    url_a, url_b = f"http://{HOST}:{port_a}", f"http://{HOST}:{port_b}"
    url_p = f"http://{HOST}:{stale.server_address[1]}/eureka/"
    env_a = {**ENV, "EUREKA_PEER_URLS": f"{url_b}/eureka/"}
    env_b = {**ENV, "EUREKA_PEER_URLS": f"{url_a}/eureka/,{url_p}"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        with running_server(tmp_path / "a", env_a, port=port_a):
            with running_server(tmp_path / "b", env_b, port=port_b) as node_b:
                register(url_a, "10.0.0.1")  # LIVE
                register(url_a, "10.0.0.2")  # GONE
                # DEAD: never renewed; alive when B stops (B evicts it otherwise), gone when B is back.
                register(url_a, "10.0.0.3", lease_s=DEAD_LEASE_S)
                dead_at = time.monotonic()
                wait_until(lambda: ids(url_b) == {"10.0.0.1", "10.0.0.2", "10.0.0.3"}, 10, "B has them")
                # P holds LIVE and GONE as A lists them now.
                StalePeer.apps = httpx.get(f"{url_a}/eureka/apps/", headers=JSON, timeout=5).json()
                StalePeer.apps["applications"]["application"][0]["instance"] = [
                    i
                    for i in StalePeer.apps["applications"]["application"][0]["instance"]
                    if i["hostName"] != "10.0.0.3"
                ]
                time.sleep(0.7)  # a snapshot or two holding all three
                assert time.monotonic() - dead_at < DEAD_LEASE_S - 1, "too slow to stop B before DEAD expires"
                node_b.process.terminate()
                node_b.process.wait(15)
            # While B is down: GONE cancelled, NEW registered, DEAD evicted at A.
            assert (
                httpx.delete(f"{url_a}/eureka/apps/ORDERS/10.0.0.2:orders:8080", timeout=5).status_code == 200
            )
            register(url_a, "10.0.0.4")  # NEW
            wait_until(lambda: ids(url_a) == {"10.0.0.1", "10.0.0.4"}, 15, "A evicts DEAD")

            log_path = tmp_path / "b" / "restarted.log"
            with log_path.open("ab") as log:
                process = subprocess.Popen(
                    [str(_gunicorn()), "-c", "deploy/gunicorn.conf.py", "--bind", f"{HOST}:{port_b}"],
                    cwd=PROJECT_ROOT,
                    env=server_env(tmp_path / "b", env_b),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            try:
                answers: list[tuple[str, int]] = []
                # From B's first answer until its sync is done (P answers after P_DELAY_S).
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    try:
                        ready = httpx.get(f"{url_b}/readyz", timeout=5)
                    except httpx.TransportError:
                        time.sleep(0.02)
                        continue
                    if ready.status_code == 200:
                        break
                    assert ready.json()["start_up_sync_pending"] is True
                    batch = [
                        (path, httpx.get(f"{url_b}/eureka/{path}", headers=JSON, timeout=5).status_code)
                        for path in READS
                    ]
                    if httpx.get(f"{url_b}/readyz", timeout=5).status_code == 503:
                        answers.extend(batch)  # asked while the sync was surely under way
                    # Writes are taken meanwhile.
                    heartbeat = httpx.put(f"{url_b}/eureka/apps/ORDERS/10.0.0.1:orders:8080", timeout=5)
                    assert heartbeat.status_code == 200
                    time.sleep(0.1)
                else:
                    pytest.fail("B never became ready")
                assert len(answers) >= 2 * len(READS), answers
                assert {status for _, status in answers} == {503}, answers

                # Once open: neither the cancelled nor the expired, both the live and the new.
                assert ids(url_b) == {"10.0.0.1", "10.0.0.4"}
                time.sleep(1.5)  # replication and the cache settle: still no phantom
                assert ids(url_b) == {"10.0.0.1", "10.0.0.4"}
                text = log_path.read_text(errors="replace")
                restored = [line for line in text.splitlines() if "warm restart: restored" in line]
                assert restored and "restored 2 instances" in restored[0], restored
                assert "1 leases already expired dropped" in restored[0], restored
                # The 503s of the start-up are not logged as errors, one per read.
                assert "Service Unavailable" not in text, text[-3000:]
            finally:
                _stop(process)
    finally:
        stale.shutdown()
