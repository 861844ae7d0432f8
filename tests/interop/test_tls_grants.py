"""Client certificates as API identities, and app grants, with a real Spring app over mTLS.

A node over HTTPS requiring client certificates of the test CA, with API accounts on
(``EUREKA_API_AUTH=true``), whose accounts are known by their certificates (``manage.py eureka_account
NAME --role client --certificate-name spiffe://interop.test/orders --apps ORDERS``): the ``orders``
certificate signs in as a client account granted ``ORDERS`` alone, the servers' certificate as a peer
account (the test's own reads). The ORDERS certificate registers ORDERS; a certificate that names no
account is refused 401; the Spring Boot 4 interop app named ``payments`` holding the ORDERS certificate
(``eureka.client.tls.*``) is refused 403 on every attempt and the registry is unchanged.

These run on gunicorn only: granian verifies client certificates but cannot hand them to the
application (its RSGI/WSGI bridge exposes no peer certificate), so with granian a certificate
identifies no one and the node refuses to start with EUREKA_TLS_CLIENT_AUTH=optional; identity by
certificate there comes from a TLS-terminating proxy's header (``test_tls_nginx.py``).

Needs HTTPS with client certificates on gunicorn (EUREKA_TLS_*, the serving part of issue 46) and the
certificate-to-account mapping and app grants (``eureka_account --certificate-name --apps``).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.factories import instance_body
from tests.interop import maven
from tests.interop.certificates import ORDERS_URI, PEER_URI, Pki, make_pki
from tests.interop.conftest import AUTH_ENV, LiveServer, running_server
from tests.interop.test_tls_clients import Reader
from tests.interop.tls import TlsSpringApp, client_context, create_accounts, node_tls_env, spring_boot4_jar

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module", autouse=True)
def http_server() -> str:
    """gunicorn alone (replaces the conftest's gunicorn-and-granian parameter): see the docstring."""
    return "gunicorn"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def java() -> str:
    return maven.require_java()


# The ORDERS app's account, known by its certificate's SAN URI and granted ORDERS alone, and a peer
# account known by the servers' certificate (the test's own reads). Their passwords are never used.
ACCOUNTS = [
    {
        "username": "orders-app",
        "password": "orders-Secret-42",
        "role": "client",
        "certificate_names": [ORDERS_URI],
        "apps": "ORDERS",
    },
    {"username": "tls-peer", "password": "peer-Secret-42", "role": "peer", "certificate_names": [PEER_URI]},
]


@pytest.fixture(scope="module")
def grants_node(pki, http_server, tmp_path_factory) -> Iterator[LiveServer]:
    """A node over mTLS with API accounts on, whose accounts are known by their certificates."""
    workdir = tmp_path_factory.mktemp("grants_node")
    create_accounts(workdir, ACCOUNTS)
    env = {**node_tls_env(pki), **AUTH_ENV}
    context = client_context(pki.ca, pki.server)
    with running_server(workdir, env, server=http_server, tls=context) as server:
        yield server


class TestGrants:
    def test_the_orders_certificate_may_register_orders(self, grants_node, pki):
        with httpx.Client(
            base_url=grants_node.url, verify=client_context(pki.ca, pki.orders), timeout=5
        ) as orders:
            body = loopback_instance("ORDERS", "orders-1", 9301)
            assert orders.post("apps/ORDERS", json=body).status_code == 204
            assert orders.delete("apps/ORDERS/orders-1").status_code == 200
            # Another app is not its to write.
            refused = orders.post("apps/PAYMENTS", json=loopback_instance("PAYMENTS", "p-1", 9302))
            assert refused.status_code == 403, refused.text
        # A certificate that names no account is refused like bad credentials.
        with httpx.Client(
            base_url=grants_node.url, verify=client_context(pki.ca, pki.payments), timeout=5
        ) as unknown:
            assert (
                unknown.post("apps/PAYMENTS", json=loopback_instance("PAYMENTS", "p-1", 9302)).status_code
                == 401
            )

    def test_a_spring_app_whose_certificate_is_granted_orders_cannot_register_payments(
        self, grants_node, java, pki, tmp_path
    ):
        reader = Reader(grants_node, pki)
        before = reader.ids()
        since = grants_node.mark()
        app = TlsSpringApp(
            java, spring_boot4_jar(), "payments", grants_node.url, tmp_path, pki.orders, pki.ca
        )
        try:
            app.start()
            app.wait_up()
            # It registers (403), then heartbeats (403 too: not its app, whether or not it exists).
            grants_node.wait_for_requests(
                "POST", "/eureka/apps/PAYMENTS", since=since, status=403, timeout=30
            )
            grants_node.wait_for_requests(
                "PUT", f"/eureka/apps/PAYMENTS/{app.instance_id}", since=since, at_least=2
            )
            own = [r for r in grants_node.requests(since=since) if r.path.startswith("/eureka/apps/PAYMENTS")]
            assert own and all(r.status in (403, 404) for r in own), own
            assert not [r for r in own if r.method == "POST" and r.status != 403], own
            assert reader.instance("PAYMENTS", app.instance_id) is None
            assert reader.ids() == before
            assert app.peer_ids(app.name) == []
        finally:
            app.stop()
            reader.close()
        # Not even its shutdown's cancel changed anything.
        assert Reader(grants_node, pki).ids() == before


def loopback_instance(app: str, instance_id: str, port: int) -> dict:
    return instance_body(app, "127.0.0.1", port, instance_id=instance_id)
