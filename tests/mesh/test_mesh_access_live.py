"""The mesh's access rules, live (docs/mesh.md, "Access"): a node over HTTPS with API accounts on, and
``manage.py mesh`` beside it, as deployed, with the node's TLS files and accounts.

- Without node credentials the mesh says what to set and serves nothing; with the reader's it follows
  the node (an instance the client account registers reaches xDS).
- xDS streams are opened by an account's certificate, or by ``authorization`` metadata: none, a wrong
  password or a certificate of no account ends UNAUTHENTICATED, an account without the reader role
  PERMISSION_DENIED, each with its reason. A certificate of another CA, or plain text, gets no stream.
- With ``EUREKA_TLS_CLIENT_AUTH=optional`` gRPC asks no client certificate: metadata alone counts.
- DNS answers loopback by default and refuses addresses outside ``EUREKA_DNS_ALLOWED_NETWORKS``.
"""

from __future__ import annotations

import base64
import json
import queue
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import grpc
import pytest
from envoy.config.cluster.v3 import cluster_pb2

from registry.mesh.xds.resources import CLUSTER
from tests.interop.certificates import ORDERS_URI, Identity, Pki, make_pki
from tests.interop.conftest import (
    AUTH_ENV,
    PROJECT_ROOT,
    Account,
    RegistryAdmin,
    running_server,
    server_env,
    wait_until,
)
from tests.interop.tls import client_context, node_tls_env
from tests.mesh.xds_harness import AdsClient
from tests.ports import free_port

pytestmark = pytest.mark.live

APP = "ORDERS"
# SIGTERM to exit: xDS streams get a grace of 2 s, none is open when a test ends.
STOP_S = 4.0
READER = Account("reader", "mesh-reader", "reader-Secret-42")
CLIENT = Account("client", "mesh-client", "client-Secret-42")
# A Django user with no role: it signs in, and may read nothing.
NO_ROLE = Account("none", "mesh-nobody", "nobody-Secret-42")

# migrate, the two role accounts as an operator makes them (the reader known by the orders
# certificate too), and a user with no role group, in one Python process.
_CREATE_ACCOUNTS = """
import json, os, sys
import django
from django.core.management import call_command
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")
django.setup()
from django.contrib.auth import get_user_model
reader, client, nobody, certificate_name = json.loads(sys.argv[1])
call_command("migrate", interactive=False, verbosity=0)
os.environ["EUREKA_ACCOUNT_PASSWORD"] = reader[1]
call_command("eureka_account", reader[0], role="reader", certificate_names=[certificate_name])
os.environ["EUREKA_ACCOUNT_PASSWORD"] = client[1]
call_command("eureka_account", client[0], role="client")
get_user_model().objects.create_user(nobody[0], password=nobody[1])
"""


def basic(account: Account, password: str | None = None) -> tuple[tuple[str, str], ...]:
    token = base64.b64encode(f"{account.username}:{password or account.password}".encode()).decode()
    return (("authorization", f"Basic {token}"),)


@dataclass
class Mesh:
    process: subprocess.Popen
    log: Path
    xds_port: int
    dns_port: int

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def node(pki, tmp_path_factory):
    """HTTPS, client certificates optional (of ``pki.ca``), API accounts on."""
    workdir = tmp_path_factory.mktemp("access_node")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _CREATE_ACCOUNTS,
            json.dumps([[a.username, a.password] for a in (READER, CLIENT, NO_ROLE)] + [ORDERS_URI]),
        ],
        cwd=PROJECT_ROOT,
        env=server_env(workdir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    env = {**node_tls_env(pki, client_auth="optional"), **AUTH_ENV}
    accounts = {"reader": READER, "client": CLIENT}
    with running_server(
        workdir, env, accounts=accounts, server="gunicorn", tls=client_context(pki.ca)
    ) as server:
        server.workdir = workdir
        server.env = env
        yield server


def _start_mesh(node, name: str, extra: dict[str, str]) -> Mesh:
    xds_port, dns_port = free_port(), free_port()
    log = node.workdir / f"mesh-{name}.log"
    env = server_env(
        node.workdir,
        {
            **node.env,
            "EUREKA_MESH_NODE_URL": node.base_url,
            "EUREKA_XDS_PORT": str(xds_port),
            "EUREKA_XDS_BIND": "127.0.0.1",
            "EUREKA_DNS_PORT": str(dns_port),
            "PYTHONUNBUFFERED": "1",
            **extra,
        },
    )
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "mesh"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    mesh = Mesh(process, log, xds_port, dns_port)
    wait_until(lambda: "mesh: DNS on" in mesh.text() or process.poll() is not None, 30, mesh.text)
    return mesh


@contextmanager
def mesh_process(node, name: str, extra: dict[str, str]) -> Iterator[Mesh]:
    """``manage.py mesh`` on the node's database and settings (its TLS files, its accounts), with
    ``extra`` on top; its log is its stdout and stderr. A port taken between picking and binding it
    (other test runs share the machine) gets one more try on new ports."""
    mesh = _start_mesh(node, name, extra)
    if mesh.process.poll() is not None and "address already in use" in mesh.text():
        mesh = _start_mesh(node, name, extra)
    try:
        assert mesh.process.poll() is None, mesh.text()
        yield mesh
    finally:
        asked = time.monotonic()
        mesh.process.send_signal(signal.SIGTERM)
        try:
            mesh.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            mesh.process.kill()
            mesh.process.wait()
    # It stops at once, its stream of the node's changes (over HTTPS) too.
    assert time.monotonic() - asked < STOP_S, mesh.text()


def tls_channel(pki: Pki, port: int, identity: Identity | None = None) -> grpc.Channel:
    """A gRPC channel over TLS that trusts the node's CA and presents ``identity``'s certificate."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.ca.cert_file.read_bytes(),
        private_key=identity.key_file.read_bytes() if identity else None,
        certificate_chain=identity.cert_file.read_bytes() if identity else None,
    )
    return grpc.secure_channel(f"127.0.0.1:{port}", credentials)


def clusters(channel: grpc.Channel, metadata=(), timeout: float = 5.0) -> set[str] | grpc.RpcError:
    """The cluster names one CDS request is answered with, or the error that ended the stream."""
    client = AdsClient("", channel=channel, metadata=metadata)
    try:
        client.send(CLUSTER)
        try:
            item = client.responses.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout} s") from None
        if not hasattr(item, "resources"):
            return client.ended()
        names = set()
        for packed in item.resources:
            cluster = cluster_pb2.Cluster()
            assert packed.Unpack(cluster)
            names.add(cluster.name)
        return names
    finally:
        client.close()


def refusal(result) -> tuple[grpc.StatusCode, str]:
    assert isinstance(result, grpc.RpcError), f"served: {result}"
    return result.code(), result.details()


def dns_rcode(port: int) -> int:
    query = dns.message.make_query(f"{APP.lower()}.service.eureka", dns.rdatatype.A)
    return dns.query.udp(query, "127.0.0.1", port=port, timeout=3).rcode()


# ---------------------------------------------------------------------------- without node credentials


def test_a_mesh_without_node_credentials_says_what_to_set_serves_nothing_and_refuses_other_networks(
    node, pki
):
    with mesh_process(
        node,
        "blind",
        {
            "EUREKA_MESH_NODE_USER": "",
            "EUREKA_MESH_NODE_PASSWORD": "",
            "EUREKA_DNS_ALLOWED_NETWORKS": "10.0.0.0/8",
        },
    ) as mesh:
        wait_until(lambda: "set EUREKA_MESH_NODE_USER" in mesh.text(), 15, mesh.text)
        assert "answered 401" in mesh.text()
        # Credentials that hold, yet no registry to give: the stream stays open, unanswered.
        client = AdsClient("", channel=tls_channel(pki, mesh.xds_port), metadata=basic(READER))
        try:
            client.send(CLUSTER)
            assert client.quiet(1.5) == []
        finally:
            client.close()
        # gRPC cannot ask for an optional client certificate: the orders certificate is not seen.
        assert "EUREKA_TLS_CLIENT_AUTH=optional" in mesh.text()
        code, reason = refusal(clusters(tls_channel(pki, mesh.xds_port, pki.orders)))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "credentials required" in reason
        # DNS answers the networks named alone (before any registry: REFUSED, not SERVFAIL).
        assert dns_rcode(mesh.dns_port) == dns.rcode.REFUSED


# ---------------------------------------------------------------------------- following the node


@pytest.fixture(scope="module")
def mesh(node, pki):
    """The mesh as deployed with the reader's credentials, its xDS port requiring client certificates."""
    with mesh_process(
        node,
        "reader",
        {
            "EUREKA_MESH_NODE_USER": READER.username,
            "EUREKA_MESH_NODE_PASSWORD": READER.password,
            "EUREKA_TLS_CLIENT_AUTH": "required",
        },
    ) as mesh:
        yield mesh


@pytest.fixture(scope="module")
def registered(node, mesh, pki):
    """ORDERS registered by the client account, once the mesh serves it."""
    with RegistryAdmin(node, "eureka/", role="client") as admin:
        admin.register(APP, "orders-1", free_port())
        wait_until(
            lambda: clusters(tls_channel(pki, mesh.xds_port, pki.orders)) == {APP.lower()},
            15,
            lambda: f"{clusters(tls_channel(pki, mesh.xds_port, pki.orders))}\n{mesh.text()}",
        )
        yield admin


def test_the_reader_certificate_opens_a_stream_without_metadata(mesh, registered, pki):
    assert clusters(tls_channel(pki, mesh.xds_port, pki.orders)) == {APP.lower()}


def test_a_certificate_of_no_account_needs_metadata_of_a_reader(mesh, registered, pki):
    # pki.payments is issued by the trusted CA, and no account holds its name.

    def channel() -> grpc.Channel:
        return tls_channel(pki, mesh.xds_port, pki.payments)

    code, reason = refusal(clusters(channel()))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "names no account" in reason
    assert clusters(channel(), basic(READER)) == {APP.lower()}
    code, reason = refusal(clusters(channel(), basic(READER, "not-the-password")))
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "wrong user name or password")
    code, reason = refusal(clusters(channel(), basic(NO_ROLE)))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert NO_ROLE.username in reason and "reader role" in reason


def test_no_stream_without_a_trusted_certificate_or_without_tls(mesh, registered, pki):
    code, _ = refusal(clusters(tls_channel(pki, mesh.xds_port), basic(READER)))
    assert code == grpc.StatusCode.UNAVAILABLE
    code, _ = refusal(clusters(tls_channel(pki, mesh.xds_port, pki.stranger), basic(READER)))
    assert code == grpc.StatusCode.UNAVAILABLE
    code, _ = refusal(clusters(grpc.insecure_channel(f"127.0.0.1:{mesh.xds_port}"), basic(READER)))
    assert code == grpc.StatusCode.UNAVAILABLE
    # No line per failed handshake (gRPC's own, unbounded): a hostile client cannot flood the log.
    assert "Handshake failed" not in mesh.text()


def test_dns_answers_loopback_by_default_with_accounts_on(mesh, registered):
    query = dns.message.make_query(f"{APP.lower()}.service.eureka", dns.rdatatype.A)
    answer = dns.query.udp(query, "127.0.0.1", port=mesh.dns_port, timeout=3)
    assert answer.rcode() == dns.rcode.NOERROR
    assert {record.address for rrset in answer.answer for record in rrset} == {"127.0.0.1"}
