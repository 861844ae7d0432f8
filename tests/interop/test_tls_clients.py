"""The real clients against our node over HTTPS with client certificates required (mTLS).

The node serves HTTPS only (EUREKA_TLS_CERT_FILE / KEY_FILE) and requires a client certificate issued
by the test CA (EUREKA_TLS_CLIENT_AUTH=required, EUREKA_TLS_CLIENT_CA_FILE); the certificates are made
at test time (``tests/interop/certificates.py``). Each client is configured as its users would:

* the Spring Boot 4 interop app (Spring Cloud 2025.1, RestClient): ``eureka.client.tls.enabled``,
  ``key-store`` / ``key-store-password`` (PKCS12) and ``trust-store`` / ``trust-store-password``
  (PKCS12); it registers, heartbeats, fetches and cancels;
* the Netflix eureka-client (both generations of ``test_java_eureka_client``): the JVM's
  ``javax.net.ssl.keyStore`` / ``trustStore`` system properties (PKCS12). eureka-client 2.x's Jersey 3
  transport builds its TLS from them unasked; 1.x's Jersey 1 / Apache HttpClient 4 transport only with
  ``com.netflix.eureka.shouldSSLConnectionsUseSystemSocketFactory=true`` (without it, it trusts the
  JVM's default trust store and presents no client certificate);
* py-eureka-client: no TLS setting of its own (its httpx client verifies against the system's trust
  store and sends no certificate); its documented hook ``http_client.set_http_client`` takes an
  ``HttpClient`` whose ``urlopen`` the application writes, here the library's own with an SSL context;
* eureka-js-client: no TLS setting either; its ``requestMiddleware`` adds ``ca``, ``cert`` and ``key``
  to each request's options, which the ``request`` library hands to Node's TLS;
* fargo: no TLS setting; the program sets the TLS configuration of ``fargo.HttpClient``'s transport
  (``tests/interop/go/main.go``, ``-ca`` / ``-cert`` / ``-key``).

Needs, from the serving layer: HTTPS and client certificates on both servers (EUREKA_TLS_*) of
issue 46. Certificates as API identities and app grants are ``test_tls_grants.py``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from functools import partial
from io import BytesIO

import httpx
import pytest
from py_eureka_client import http_client

from tests.interop import maven
from tests.interop.certificates import STORE_PASSWORD, Pki, make_pki
from tests.interop.conftest import (
    LiveServer,
    client_factory,
    require_toolchain,
    running_server,
    wait_until,
)
from tests.interop.test_eureka_js_client import CLIENT_PACKAGE, JsClient
from tests.interop.test_fargo import Fargo, fargo_binary  # noqa: F401  (the fixture)
from tests.interop.test_java_eureka_client import JavaClient, java_classpath  # noqa: F401
from tests.interop.test_py_eureka_client import PyClient
from tests.interop.tls import TlsSpringApp, client_context, node_tls_env, spring_boot4_jar

pytestmark = [
    pytest.mark.interop,
    pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_node(pki, http_server, tmp_path_factory) -> Iterator[LiveServer]:
    """A node over HTTPS requiring client certificates of the test CA, API accounts off."""
    workdir = tmp_path_factory.mktemp("tls_node")
    context = client_context(pki.ca, pki.server)
    with running_server(workdir, node_tls_env(pki), server=http_server, tls=context) as server:
        yield server


class Reader:
    """The test's own view of a TLS node, with the server certificate (the peer identity)."""

    def __init__(self, server: LiveServer, pki: Pki):
        self.http = httpx.Client(
            base_url=server.url,
            headers={"Accept": "application/json"},
            timeout=5.0,
            verify=client_context(pki.ca, pki.server),
        )

    def instance(self, app: str, instance_id: str) -> dict | None:
        response = self.http.get(f"apps/{app}/{instance_id}")
        if response.status_code == 404:
            return None
        assert response.status_code == 200, f"GET {app}/{instance_id}: {response.status_code} {response.text}"
        return response.json()["instance"]

    def ids(self) -> set[str]:
        response = self.http.get("apps/")
        assert response.status_code == 200, response.text
        return {
            instance["instanceId"]
            for application in response.json()["applications"]["application"]
            for instance in application["instance"]
        }

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def reader(tls_node, pki) -> Iterator[Reader]:
    reader = Reader(tls_node, pki)
    yield reader
    reader.close()


@pytest.fixture(scope="module")
def java() -> str:
    return maven.require_java()


def test_the_node_refuses_a_connection_without_a_client_certificate(tls_node, pki, http_server):
    assert httpx.get(f"{tls_node.url}apps/", verify=client_context(pki.ca, pki.orders)).status_code == 200
    for identity in (None, pki.stranger):
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{tls_node.url}apps/", verify=client_context(pki.ca, identity), timeout=5)
    # Plain HTTP on the HTTPS port gets no registry: gunicorn answers 400 (as Tomcat does) and closes,
    # granian closes at once.
    plain_url = f"http://127.0.0.1:{tls_node.port}/eureka/apps/"
    if http_server == "gunicorn":
        assert httpx.get(plain_url, timeout=5).status_code == 400
    else:
        with pytest.raises(httpx.TransportError):
            httpx.get(plain_url, timeout=5)


# ------------------------------------------------------------------------------------ Spring Boot 4


def test_a_spring_boot_4_app_over_mtls_registers_heartbeats_fetches_and_cancels(
    tls_node, reader, java, pki, tmp_path
):
    app = TlsSpringApp(java, spring_boot4_jar(), "tls-orders", tls_node.url, tmp_path, pki.orders, pki.ca)
    path = f"/eureka/apps/{app.app}/{app.instance_id}"
    try:
        app.start()
        app.wait_up()
        tls_node.wait_for_requests("POST", f"/eureka/apps/{app.app}", status=204, timeout=30)
        tls_node.wait_for_requests("PUT", path, status=200, at_least=2, timeout=15)
        wait_until(
            lambda: app.peer_ids(app.name) == [app.instance_id],
            20,
            lambda: f"{app} never fetched itself:\n{app.log_tail()}",
        )
        assert reader.instance(app.app, app.instance_id)["status"] == "UP"
        since = tls_node.mark()
        assert app.stop() in (0, 143), app.log_tail()
        tls_node.wait_for_requests("DELETE", path, since=since, status=200, timeout=10)
        assert reader.instance(app.app, app.instance_id) is None
    finally:
        app.stop()
    assert "SSLHandshakeException" not in app.log_text(), app.log_tail()


# ------------------------------------------------------------------------------------ Netflix client


def test_the_netflix_java_client_registers_and_fetches_over_mtls(tls_node, reader, java_classpath, pki):  # noqa: F811
    properties = {
        "javax.net.ssl.keyStore": str(pki.orders.keystore),
        "javax.net.ssl.keyStoreType": "PKCS12",
        "javax.net.ssl.keyStorePassword": STORE_PASSWORD,
        "javax.net.ssl.trustStore": str(pki.ca.truststore),
        "javax.net.ssl.trustStoreType": "PKCS12",
        "javax.net.ssl.trustStorePassword": STORE_PASSWORD,
        # eureka-client 1.10 (Jersey 1 on Apache HttpClient 4) takes its TLS from the properties above
        # only when told to; otherwise it trusts the JVM's default store and presents no certificate.
        "com.netflix.eureka.shouldSSLConnectionsUseSystemSocketFactory": "true",
    }
    # One app per generation: the node runs for the whole module.
    app = f"javatls-{java_classpath.generation.transport}"
    since = tls_node.mark()
    with client_factory(partial(JavaClient, java_classpath, tls_node), JavaClient.wait_ready) as start:
        client = start("service", app, 8201, system_properties=properties)
        tls_node.wait_for_requests("POST", client.register_path, since=since, status=204, timeout=15)
        client.wait_for_http("SendHeartBeat", status=200, timeout=15)
        wait_until(
            lambda: client.instance_id in client.ids_by_app(app.upper()),
            15,
            lambda: f"the Java client never fetched itself:\n{client.tail()}",
        )
        assert reader.instance(app.upper(), client.instance_id) is not None
        assert not client.client_problems(), client.client_problems()


# ------------------------------------------------------------------------------------ py-eureka-client


class TlsHttpClient(http_client.HttpClient):
    """py-eureka-client's own ``urlopen`` (0.13.3), with an SSL context: its hook for custom transports."""

    def __init__(self, context):
        self.context = context

    async def urlopen(self, request=None, data=None, timeout=None) -> http_client.HttpResponse:
        request = (
            request if isinstance(request, http_client.HttpRequest) else http_client.HttpRequest(request)
        )
        if data is not None:
            request.content = data
        request.add_header("Connection", "close")
        request.add_header("Accept-Encoding", "gzip, deflate")
        try:
            async with httpx.AsyncClient(
                timeout=timeout, follow_redirects=True, verify=self.context
            ) as client:
                response = await client.send(request._to_httpx_request())
                response.raise_for_status()
                return http_client.HttpResponse(response)
        except httpx.HTTPStatusError as e:
            raise http_client.HTTPError(
                str(e.request.url),
                e.response.status_code,
                str(e),
                e.response.headers,
                BytesIO(e.response.content),
            ) from e
        except httpx.RequestError as e:
            raise http_client.URLError(str(e)) from e


@pytest.fixture
def tls_http_client(pki) -> Iterator[None]:
    """py-eureka-client's transport (a module global) with the ``orders`` certificate, for one test."""
    default = http_client.http_client
    http_client.set_http_client(TlsHttpClient(client_context(pki.ca, pki.orders)))
    yield
    http_client.set_http_client(default)


def test_py_eureka_client_registers_and_fetches_over_mtls(tls_node, reader, tls_http_client):
    with client_factory(partial(PyClient, tls_node), PyClient.start) as start:
        client = start("pytls", 9201)
        tls_node.wait_for_requests("POST", "/eureka/apps/PYTLS", status=204)
        assert reader.instance("PYTLS", client.instance_id) is not None
        wait_until(
            lambda: client.instance_id in client.up_ids("PYTLS"),
            10,
            "py-eureka-client never fetched its own instance",
        )
        assert not client.errors, client.errors


# ------------------------------------------------------------------------------------ eureka-js-client


@pytest.fixture(scope="module")
def node_binary() -> str:
    node = shutil.which("node")
    require_toolchain("node", node is not None, "install Node.js 18+ (e.g. `apt-get install nodejs npm`)")
    require_toolchain(
        "eureka-js-client (tests/interop/js/node_modules)",
        CLIENT_PACKAGE.is_file(),
        "run `make test`, or `npm ci` in tests/interop/js",
    )
    assert node is not None
    return node


def test_eureka_js_client_registers_and_fetches_over_mtls(tls_node, reader, node_binary, pki):
    tls = [
        "--ca",
        str(pki.ca.cert_file),
        "--cert",
        str(pki.orders.cert_file),
        "--key",
        str(pki.orders.key_file),
    ]
    with client_factory(partial(JsClient, node_binary, tls_node)) as start:
        client = start("JSTLS", "jstls-host", 8202, *tls)
        client.wait_for("registered", timeout=15)
        client.wait_for("registryUpdated", timeout=15)
        wait_until(
            lambda: {i["hostName"] for i in client.state(apps=("JSTLS",))["apps"]["JSTLS"]} == {"jstls-host"},
            10,
            "the JS client never fetched itself",
        )
        assert reader.instance("JSTLS", "jstls-host") is not None
        assert not client.named("log", level="error"), client.tail()
        assert client.stop()["error"] is None


# ------------------------------------------------------------------------------------ fargo


def test_fargo_registers_and_fetches_over_mtls(tls_node, fargo_binary, pki):  # noqa: F811
    tls = ("-ca", str(pki.ca.cert_file), "-cert", str(pki.orders.cert_file), "-key", str(pki.orders.key_file))
    run = Fargo(fargo_binary, tls_node).run("register", "json", "-tag", "tls", *tls)
    run.ok("register")
    run.ok("get_app")
    run.assert_all_as_expected()
