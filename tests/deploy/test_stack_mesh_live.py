"""`make stack MESH=1` end to end: deploy/stack.sh starts the mesh process beside the node once the
node is ready, the process serves what is registered with the node over DNS and listens for xDS on the
ports the stack names, and stopping the stack stops it.

The protocols themselves are tested in tests/mesh/; here only that the stack wires the process to its
node and to its ports, and takes it down with the rest.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rdatatype
import httpx
import pytest

from tests.factories import instance_body
from tests.interop.conftest import wait_until
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def dns_answer(port: int, name: str) -> set[str]:
    query = dns.message.make_query(name, dns.rdatatype.A)
    try:
        response = dns.query.udp(query, "127.0.0.1", port=port, timeout=2)
    except (OSError, dns.exception.Timeout):
        return set()
    return {item.address for rrset in response.answer for item in rrset if rrset.rdtype == dns.rdatatype.A}


def test_make_stack_mesh_serves_the_nodes_instances_and_stops_with_the_stack(tmp_path, redis_url):
    port, xds_port, dns_port = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "STACK_MESH": "1",
        "EUREKA_XDS_PORT": str(xds_port),
        "EUREKA_DNS_PORT": str(dns_port),
        "REDIS_URL": redis_url,
        "EUREKA_ENV_FILE": str(tmp_path / "no.env"),
        "EUREKA_DATA_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "SECRET_KEY": "stack-mesh-test-secret-key",
        "EUREKA_CONTROL_SECRET": "stack-mesh-test-control-secret",
        "LOG_LEVEL": "WARNING",
    }
    for inherited in ("EUREKA_CONTROL_URL", "EUREKA_MESH_NODE_URL"):
        env.pop(inherited, None)
    stack = subprocess.Popen(
        ["bash", "deploy/stack.sh"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(stack.stdout), daemon=True)
    reader.start()

    def output() -> str:
        return "".join(lines[-40:])

    try:
        wait_until(
            lambda: (
                any(f"mesh: DNS at 127.0.0.1:{dns_port}" in line for line in lines)
                or stack.poll() is not None
            ),
            120,
            lambda: f"the stack never said its mesh process listens:\n{output()}",
        )
        assert stack.poll() is None, f"the stack stopped:\n{output()}"
        text = "".join(lines)
        assert f"mesh: xDS (ADS, gRPC) at 127.0.0.1:{xds_port}" in text
        # Started after the node was ready, following it at PORT.
        assert text.index("open for traffic") < text.index("started mesh")
        assert f"following http://127.0.0.1:{port}" in text
        assert listening(xds_port)

        body = instance_body(app="ORDERS", host="10.47.0.1")
        response = httpx.post(f"http://127.0.0.1:{port}/eureka/apps/ORDERS", json=body, timeout=5)
        assert response.status_code == 204
        wait_until(
            lambda: dns_answer(dns_port, "orders.service.eureka") == {"10.47.0.1"},
            15,
            lambda: f"DNS never answered the registered instance:\n{output()}",
        )

        stack.send_signal(signal.SIGTERM)
        assert stack.wait(90) == 0, output()
        reader.join(10)
        assert "stopping mesh" in "".join(lines)
        assert not listening(xds_port) and not listening(dns_port), "the mesh process outlived the stack"
    finally:
        if stack.poll() is None:
            # The stack stops what it started on TERM; KILL only for the script itself if it hangs.
            stack.send_signal(signal.SIGTERM)
            try:
                stack.wait(60)
            except subprocess.TimeoutExpired:
                stack.kill()
                stack.wait(10)
