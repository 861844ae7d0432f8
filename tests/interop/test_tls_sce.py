"""A stock Spring Cloud Eureka Server (SCE) over mutual TLS: Spring's own clients and peers, then SCE and
our node as each other's peers over mTLS, and a node whose certificate comes from another CA.

SCE (``tests/interop/sce/``, built by ``maven.build_sce``) runs on 127.0.0.2 with Spring Boot's
``server.ssl.*`` (a PKCS12 key store, ``client-auth=need`` against a PKCS12 trust store) and, for its
own calls to its peers, the same key store and trust store twice: in Spring Cloud's
``eureka.client.tls.*`` (its embedded client, which registers it with its peers and fetches their
registry) and in the JVM's ``javax.net.ssl.*`` system properties (its replication to its peers:
eureka-core's Jersey 3 replication client ignores ``eureka.client.tls``, so without them SCE trusts
only the JDK's CAs and presents no certificate to a peer).
The certificates are made at test time (``tests/interop/certificates.py``): the server certificate
names 127.0.0.1 to 127.0.0.5, so every server of the module presents the same one and verifies
hostnames.

* The Spring Boot 4 interop app (``tests/interop/spring/sc-2025.1``) with ``eureka.client.tls.*``
  registers, heartbeats, fetches and cancels at SCE over mTLS: this proves the harness (stores,
  properties, SCE's TLS) on a server that already does TLS, whatever our node does.
* SCE refuses a connection without a client certificate, and one with a certificate of the other CA.
* SCE and our node (127.0.0.3; EUREKA_TLS_* with client certificates required, EUREKA_OUTBOUND_* for
  its calls to SCE) replicate to each other over mTLS, in both directions.
* A third node of ours (127.0.0.4) whose certificate (to serve and to call its peers) comes from the
  other CA, with SCE and the node as its peers, is refused by both: what is registered at it never
  reaches either, while a registration at the node still reaches SCE.

The node's side needs the serving layer's HTTPS and client certificates (EUREKA_TLS_*) and the outbound
certificate (EUREKA_OUTBOUND_*) of issue 46.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.interop import maven
from tests.interop.certificates import Pki, make_pki
from tests.interop.conftest import LiveServer, require_toolchain, running_server, wait_until
from tests.interop.test_sce_cluster import (
    LATE_NODE_HOST,
    NODE_HOST,
    SCE_APP,
    SCE_HOST,
    Instance,
    _loopback_aliases_work,
    node_env,
    sce_arguments,
)
from tests.interop.tls import (
    TlsSpringApp,
    client_context,
    jvm_tls_properties,
    node_tls_env,
    spring_boot4_jar,
    spring_server_ssl_arguments,
    spring_tls_arguments,
)
from tests.ports import free_port

pytestmark = pytest.mark.interop

JVM_OPTIONS = maven.jvm_options("512m")
SCE_START_TIMEOUT_S = 120.0
SCE_STOP_TIMEOUT_S = 30.0
# A change written at one side shows at the other within this (see test_sce_cluster's TRAVEL_S).
TRAVEL_S = 10.0
# How long the refused node is given to try to replicate (it retries every second or so).
REFUSED_FOR_S = 8.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def java() -> str:
    return maven.require_java()


@dataclass(frozen=True)
class Ports:
    sce: int
    node: int

    @property
    def sce_url(self) -> str:
        return f"https://{SCE_HOST}:{self.sce}/eureka/"

    @property
    def node_url(self) -> str:
        return f"https://{NODE_HOST}:{self.node}/eureka/"


@pytest.fixture(scope="module")
def ports() -> Ports:
    require_toolchain(
        "loopback addresses 127.0.0.2-4",
        _loopback_aliases_work(),
        "this suite binds servers to 127.0.0.2, 127.0.0.3 and 127.0.0.4 (Linux routes all of 127/8 to lo)",
    )
    return Ports(free_port(SCE_HOST), free_port(NODE_HOST))


class Side:
    """A server as a client with a certificate sees it: HTTPS, JSON, under ``/eureka/``."""

    def __init__(self, name: str, url: str, pki: Pki):
        self.name = name
        self.url = url
        self.http = httpx.Client(
            base_url=url,
            headers={"Accept": "application/json"},
            timeout=5.0,
            verify=client_context(pki.ca, pki.orders),
        )

    def __repr__(self) -> str:
        return f"<{self.name} {self.url}>"

    def register(self, instance: Instance) -> None:
        response = self.http.post(f"apps/{instance.app}", json=instance.body())
        assert response.status_code == 204, f"register at {self}: {response.status_code} {response.text}"

    def live(self, app: str, instance_id: str) -> dict | None:
        """``GET apps/{APP}/{id}``: the live record, None on 404."""
        response = self.http.get(f"apps/{quote(app, safe='')}/{quote(instance_id, safe='')}")
        if response.status_code == 404:
            return None
        assert response.status_code == 200, f"GET {instance_id} at {self}: {response.status_code}"
        return response.json()["instance"]

    def cancel(self, instance: Instance) -> int:
        return self.http.delete(f"apps/{instance.app}/{quote(instance.instance_id, safe='')}").status_code

    def close(self) -> None:
        self.http.close()


class TlsSce(maven.JvmProcess):
    """SCE on 127.0.0.2 over HTTPS, client certificates required, its peers called with its own."""

    def __init__(self, java: str, jar: Path, port: int, peers: list[str], workdir: Path, pki: Pki):
        self.pki = pki
        self.url = f"https://{SCE_HOST}:{port}/eureka/"
        self.access_log_path = workdir / "sce-access.log"
        command = [
            java,
            *JVM_OPTIONS,
            *jvm_tls_properties(pki.server, pki.ca),
            "-jar",
            str(jar),
            *sce_arguments(port, peers, workdir),
            *spring_server_ssl_arguments(pki.server, pki.ca),
            *spring_tls_arguments("eureka.client.tls", pki.server, pki.ca),
        ]
        super().__init__(command, workdir / "sce.log", SCE_STOP_TIMEOUT_S)

    def __repr__(self) -> str:
        return "SCE (TLS)"

    def ready(self) -> bool:
        self.fail_if_exited()
        if "Started Eureka Server" not in self.log_text():
            return False
        try:
            context = client_context(self.pki.ca, self.pki.server)
            return httpx.get(f"{self.url}apps", timeout=2.0, verify=context).status_code == 200
        except httpx.TransportError:
            return False

    def access(self) -> list[tuple[str, str, int]]:
        """(method, path, status) of every request SCE answered (its Tomcat access log)."""
        try:
            text = self.access_log_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            parts = line.split(" ")
            if len(parts) == 5 and parts[3].isdigit():
                out.append((parts[0], parts[1], int(parts[3])))
        return out


@pytest.fixture(scope="module")
def sce(java, pki, ports, tmp_path_factory) -> Iterator[TlsSce]:
    """SCE over mTLS for the module, with the node's HTTPS URL as its peer (the node starts later, with
    ``node``; until then SCE's replication to it fails, as to any peer that is down)."""
    workdir = tmp_path_factory.mktemp("tls_sce")
    server = TlsSce(java, maven.build_sce(), ports.sce, [ports.node_url], workdir, pki)
    server.start()
    try:
        wait_until(
            server.ready,
            SCE_START_TIMEOUT_S,
            lambda: f"SCE did not start over TLS within {SCE_START_TIMEOUT_S:.0f}s:\n{server.log_tail()}",
            interval=0.5,
        )
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def node(sce, pki, ports, http_server, tmp_path_factory) -> Iterator[LiveServer]:
    """Our node on 127.0.0.3 over mTLS, SCE its only peer (over mTLS as well)."""
    workdir = tmp_path_factory.mktemp("tls_node")
    env = {
        **node_env(ports.node_url, [ports.sce_url], EUREKA_SELF_APP_NAME=SCE_APP),
        "EUREKA_REGISTRY_SYNC_RETRIES": "0",
        **node_tls_env(pki),
    }
    context = client_context(pki.ca, pki.server)
    with running_server(
        workdir, env, host=NODE_HOST, port=ports.node, server=http_server, tls=context
    ) as server:
        yield server


@pytest.fixture
def sides(sce, node, pki) -> Iterator[dict[str, Side]]:
    out = {"sce": Side("SCE", sce.url, pki), "node": Side("node", node.url, pki)}
    yield out
    for side in out.values():
        side.close()


_ports = iter(range(31000, 32000))


def new_instance(label: str) -> Instance:
    return Instance(app=f"TLS-{label}".upper(), port=next(_ports))


# ------------------------------------------------------------------------------------ SCE alone


def test_a_spring_boot_4_app_over_mtls_registers_heartbeats_fetches_and_cancels_at_sce(
    sce, java, pki, tmp_path
):
    app = TlsSpringApp(java, spring_boot4_jar(), "tls-sce-app", sce.url, tmp_path, pki.orders, pki.ca)
    path = f"/eureka/apps/{app.app}/{app.instance_id}"
    try:
        app.start()
        app.wait_up()
        wait_until(
            lambda: ("POST", f"/eureka/apps/{app.app}", 204) in sce.access(),
            30,
            lambda: f"{app} never registered at SCE:\n{sce.access()[-10:]}\n{app.log_tail()}",
        )
        # Heartbeats, and the registry it fetched holds itself.
        wait_until(
            lambda: sce.access().count(("PUT", path, 200)) >= 2,
            15,
            lambda: f"no two heartbeats of {app} at SCE:\n{sce.access()[-10:]}\n{app.log_tail()}",
        )
        wait_until(
            lambda: app.peer_ids(app.name) == [app.instance_id],
            20,
            lambda: f"{app} never fetched itself from SCE:\n{app.log_tail()}",
        )
        assert any(method == "GET" and "/eureka/apps/" in p for method, p, _ in sce.access())
        # A graceful shutdown cancels the lease, over the same connection settings.
        assert app.stop() in (0, 143), app.log_tail()
        wait_until(
            lambda: ("DELETE", path, 200) in sce.access(),
            10,
            lambda: f"{app} never cancelled at SCE:\n{sce.access()[-10:]}",
        )
    finally:
        app.stop()
    assert "SSLHandshakeException" not in app.log_text(), app.log_tail()


def test_sce_refuses_a_client_without_a_certificate_or_with_one_of_another_ca(sce, pki):
    with_certificate = httpx.get(f"{sce.url}apps", verify=client_context(pki.ca, pki.orders), timeout=5)
    assert with_certificate.status_code == 200
    for identity in (None, pki.stranger):
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{sce.url}apps", verify=client_context(pki.ca, identity), timeout=5)


# ---------------------------------------------------------------------------- SCE and our node


@pytest.mark.parametrize("origin", ["sce", "node"])
def test_a_registration_and_its_cancel_travel_over_mtls(sides, sce, node, origin):
    source = sides[origin]
    other = sides["node" if origin == "sce" else "sce"]
    instance = new_instance(f"from-{origin}")
    source.register(instance)
    try:
        wait_until(
            lambda: other.live(instance.app, instance.instance_id),
            TRAVEL_S,
            lambda: (
                f"{instance.instance_id} registered at {source} never reached {other}\n"
                f"SCE access: {sce.access()[-10:]}\nnode access: {node.records()[-10:]}\n"
                f"node log:\n{node.server_log_tail(20)}\nSCE log:\n{sce.log_tail(20)}"
            ),
        )
        assert source.cancel(instance) == 200
        wait_until(
            lambda: other.live(instance.app, instance.instance_id) is None,
            TRAVEL_S,
            f"the cancel at {source} never reached {other}",
        )
    finally:
        source.cancel(instance)


def test_a_node_with_a_certificate_of_another_ca_is_refused_by_sce_and_the_node(
    sides, sce, node, pki, ports, http_server, tmp_path
):
    host = LATE_NODE_HOST
    port = free_port(host)
    stranger_url = f"https://{host}:{port}/eureka/"
    env = {
        **node_env(stranger_url, [ports.sce_url, ports.node_url]),
        "EUREKA_REGISTRY_SYNC_RETRIES": "0",
        # It trusts the cluster's CA (it can verify SCE and the node), but its own certificate, served
        # and presented to its peers, comes from the other CA.
        **node_tls_env(pki, identity=pki.stranger, client_auth="none"),
    }
    context = client_context(pki.other_ca)
    with running_server(tmp_path, env, host=host, port=port, server=http_server, tls=context) as stranger:
        refused = new_instance("from-stranger")
        with httpx.Client(base_url=stranger.url, verify=context, timeout=5) as http:
            response = http.post(f"apps/{refused.app}", json=refused.body())
            assert response.status_code == 204, response.text
            # A registration at the node still travels to SCE meanwhile: the cluster itself works.
            control = new_instance("control")
            sides["node"].register(control)
            try:
                wait_until(lambda: sides["sce"].live(control.app, control.instance_id), TRAVEL_S, "control")
                deadline = time.monotonic() + REFUSED_FOR_S
                while time.monotonic() < deadline:
                    for side in sides.values():
                        assert side.live(refused.app, refused.instance_id) is None, (
                            f"{side} took a replication from a node with a certificate of another CA"
                        )
                    time.sleep(0.5)
                # The stranger did try: its instance is registered with it, and its /readyz shows both
                # peers failing, each with the reason its handshake was refused.
                assert http.get(f"apps/{refused.app}").status_code == 200

                def peers_failing() -> dict[str, str]:
                    ready = httpx.get(f"{stranger.base_url}/readyz", verify=context, timeout=5).json()
                    return {
                        peer["url"]: peer["last_error"]
                        for peer in ready["replication"]["peers"]
                        if not peer["available"] and peer["last_error"]
                    }

                failing = wait_until(
                    lambda: len(peers_failing()) == 2 and peers_failing(),
                    TRAVEL_S,
                    lambda: f"the stranger's /readyz: {peers_failing()}",
                )
                assert set(failing) == {ports.sce_url, ports.node_url}, failing
            finally:
                sides["node"].cancel(control)
    # Nor was it ever written at either by its own path (the test only read it there).
    assert not [r for r in node.records() if refused.app in r.path and r.method != "GET"]
    assert not [a for a in sce.access() if refused.app in a[1] and a[0] != "GET"]
