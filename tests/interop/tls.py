"""What the TLS interop suites share: client contexts for the test's own requests, a node's TLS settings,
and the Spring Boot 4 app of ``tests/interop/spring/`` configured with Spring Cloud's
``eureka.client.tls.*``.

The certificates come from ``tests/interop/certificates.py`` (``make_pki``). A node of ours serves
HTTPS with ``node_tls_env`` (the settings of the shared design: EUREKA_TLS_CERT_FILE / KEY_FILE, client
certificates against EUREKA_TLS_CLIENT_CA_FILE, and for its own calls to peers EUREKA_OUTBOUND_CA_FILE,
CERT_FILE and KEY_FILE); ``running_server(..., tls=client_context(...))`` starts it and probes it over
HTTPS.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.interop import maven
from tests.interop.certificates import KEY_ALIAS, STORE_PASSWORD, Authority, Identity, Pki
from tests.interop.conftest import PROJECT_ROOT, server_env, wait_until
from tests.ports import free_port

SPRING_DIR = Path(__file__).resolve().parent / "spring"
# The Spring Cloud train of Boot 4 (spring-cloud-netflix 5.0, RestClient transport), as test_spring_cloud.
SPRING_TRAIN = "sc-2025.1"
APP_START_TIMEOUT_S = 120.0
APP_STOP_TIMEOUT_S = 30.0


def client_context(authority: Authority, identity: Identity | None = None) -> ssl.SSLContext:
    """A client's TLS context: it verifies servers against ``authority`` and presents ``identity``'s
    certificate when given."""
    context = ssl.create_default_context(cafile=str(authority.cert_file))
    if identity is not None:
        context.load_cert_chain(str(identity.cert_file), str(identity.key_file))
    return context


def node_tls_env(pki: Pki, identity: Identity | None = None, client_auth: str = "required") -> dict[str, str]:
    """A node serving HTTPS with ``identity``'s certificate (``pki.server`` by default), asking clients
    for a certificate issued by ``pki.ca`` (``client_auth``: none, optional, required), and presenting
    the same certificate to its peers, whose certificates it verifies against ``pki.ca``."""
    identity = identity or pki.server
    env = {
        "EUREKA_TLS_CERT_FILE": str(identity.cert_file),
        "EUREKA_TLS_KEY_FILE": str(identity.key_file),
        "EUREKA_TLS_CLIENT_AUTH": client_auth,
        "EUREKA_OUTBOUND_CA_FILE": str(pki.ca.cert_file),
        "EUREKA_OUTBOUND_CERT_FILE": str(identity.cert_file),
        "EUREKA_OUTBOUND_KEY_FILE": str(identity.key_file),
    }
    if client_auth != "none":
        env["EUREKA_TLS_CLIENT_CA_FILE"] = str(pki.ca.cert_file)
    return env


def spring_tls_arguments(prefix: str, identity: Identity | None, authority: Authority) -> list[str]:
    """Spring Cloud's TLS properties under ``prefix`` (``eureka.client.tls``): the PKCS12 key store of
    ``identity`` (none: no client certificate) and the trust store of ``authority``."""
    arguments = [
        f"--{prefix}.enabled=true",
        f"--{prefix}.trust-store=file:{authority.truststore}",
        f"--{prefix}.trust-store-type=PKCS12",
        f"--{prefix}.trust-store-password={STORE_PASSWORD}",
    ]
    if identity is not None:
        arguments += [
            f"--{prefix}.key-store=file:{identity.keystore}",
            f"--{prefix}.key-store-type=PKCS12",
            f"--{prefix}.key-store-password={STORE_PASSWORD}",
            f"--{prefix}.key-password={STORE_PASSWORD}",
        ]
    return arguments


def spring_server_ssl_arguments(identity: Identity, authority: Authority) -> list[str]:
    """Spring Boot's ``server.ssl.*`` of a server presenting ``identity`` and demanding a client
    certificate issued by ``authority`` (``client-auth=need``)."""
    return [
        "--server.ssl.enabled=true",
        f"--server.ssl.key-store=file:{identity.keystore}",
        "--server.ssl.key-store-type=PKCS12",
        f"--server.ssl.key-store-password={STORE_PASSWORD}",
        f"--server.ssl.key-password={STORE_PASSWORD}",
        f"--server.ssl.key-alias={KEY_ALIAS}",
        "--server.ssl.client-auth=need",
        f"--server.ssl.trust-store=file:{authority.truststore}",
        "--server.ssl.trust-store-type=PKCS12",
        f"--server.ssl.trust-store-password={STORE_PASSWORD}",
    ]


def jvm_tls_properties(identity: Identity, authority: Authority) -> list[str]:
    """The JVM's default TLS context (``javax.net.ssl.*``): ``identity``'s key store, ``authority``'s trust
    store. What a Spring Cloud Eureka Server replicates to its peers with: eureka-core's Jersey 3
    replication client takes no ``eureka.client.tls`` settings."""
    return [
        f"-Djavax.net.ssl.keyStore={identity.keystore}",
        "-Djavax.net.ssl.keyStoreType=PKCS12",
        f"-Djavax.net.ssl.keyStorePassword={STORE_PASSWORD}",
        f"-Djavax.net.ssl.trustStore={authority.truststore}",
        "-Djavax.net.ssl.trustStoreType=PKCS12",
        f"-Djavax.net.ssl.trustStorePassword={STORE_PASSWORD}",
        # Without it, the replication client's Apache connection verifies with the default trust store
        # and presents no certificate.
        "-Dcom.netflix.eureka.shouldSSLConnectionsUseSystemSocketFactory=true",
    ]


def spring_boot4_jar() -> Path:
    """The interop app's Boot 4 jar, built (or reused) exactly as test_spring_cloud builds it: the same
    sources, so the same ``build.stamp``."""
    project = SPRING_DIR / SPRING_TRAIN
    app_sources = sorted(p for p in (SPRING_DIR / "app").rglob("*") if p.is_file())
    return maven.build(
        project,
        "package",
        [project / "pom.xml", *app_sources],
        product=project / "target" / f"interop-{SPRING_TRAIN}.jar",
        needs=f"the {SPRING_TRAIN} dependencies",
    )


class TlsSpringApp(maven.JvmProcess):
    """The interop app (Spring Boot 4, RestClient transport) registering at ``service_url`` (https) with
    ``eureka.client.tls.*``: ``identity``'s key store (none: no client certificate) and ``authority``'s
    trust store. Its own actuator answers plain HTTP on loopback."""

    def __init__(
        self,
        java: str,
        jar: Path,
        name: str,
        service_url: str,
        workdir: Path,
        identity: Identity | None,
        authority: Authority,
    ):
        self.name = name
        self.app = name.upper()
        self.port = free_port()
        self.instance_id = f"127.0.0.1:{name}:{self.port}"
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            java,
            *maven.jvm_options("256m"),
            "-jar",
            str(jar),
            f"--server.port={self.port}",
            f"--spring.application.name={name}",
            "--interop.role=service",
            f"--eureka.client.service-url.defaultZone={service_url}",
            *spring_tls_arguments("eureka.client.tls", identity, authority),
        ]
        super().__init__(command, workdir / f"{name}.log", APP_STOP_TIMEOUT_S)
        self.http = httpx.Client(base_url=self.url, timeout=10.0)

    def __repr__(self) -> str:
        return f"<{self.name} :{self.port}>"

    def up(self) -> bool:
        """Its actuator answers (the app is running; whether it registered is the server's to say)."""
        self.fail_if_exited()
        try:
            return self.http.get("/actuator/health").status_code == 200
        except httpx.TransportError:
            return False

    def wait_up(self) -> None:
        wait_until(
            self.up,
            APP_START_TIMEOUT_S,
            lambda: f"{self} never answered:\n{self.log_tail()}",
            interval=0.5,
        )

    def peer_ids(self, service: str) -> list[str]:
        """``DiscoveryClient.getInstances(service)`` in the app: what it fetched from the server."""
        response = self.http.get(f"/peers/{service}")
        assert response.status_code == 200, f"{self} /peers/{service}: {response.status_code}"
        return sorted(p["instanceId"] for p in response.json())

    def stop(self) -> int | None:
        self.http.close()
        return super().stop()


# Run in one Python process: ``manage.py migrate``, then ``manage.py eureka_account NAME --role ROLE
# [--certificate-name ...] [--apps ...]`` per account with its password in EUREKA_ACCOUNT_PASSWORD, as an
# operator runs them.
_CREATE_ACCOUNTS = """
import json, os, sys
import django
from django.core.management import call_command
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")
django.setup()
call_command("migrate", interactive=False, verbosity=0)
for account in json.loads(sys.argv[1]):
    os.environ["EUREKA_ACCOUNT_PASSWORD"] = account.pop("password")
    call_command("eureka_account", account.pop("username"), **account)
"""


def create_accounts(workdir: Path, accounts: list[dict]) -> None:
    """A migrated database in ``workdir`` (the node's, see ``server_env``) holding ``accounts``: dicts of
    ``username``, ``password``, ``role`` and optionally ``certificate_names`` (a list) and ``apps``."""
    done = subprocess.run(
        [sys.executable, "-c", _CREATE_ACCOUNTS, json.dumps(accounts)],
        cwd=PROJECT_ROOT,
        env=server_env(workdir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        pytest.fail(f"could not create the API accounts:\n{done.stdout}{done.stderr}", pytrace=False)
