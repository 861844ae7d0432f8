"""nginx terminating TLS in front of a node: the client certificate it verified identifies the caller,
and the same header from anyone but the proxy is not believed.

nginx listens for HTTPS on 127.0.0.1, requires a client certificate of the test CA
(``ssl_verify_client on``) and passes it to the node, over plain HTTP on loopback from 127.0.0.1
(``proxy_bind``), in ``X-Forwarded-Client-Cert`` as ``$ssl_client_escaped_cert`` (the url-encoded PEM).
The node has API accounts on (``EUREKA_API_AUTH=true``), trusts 127.0.0.1 alone as a proxy
(``EUREKA_TRUSTED_PROXIES``) and knows the ``orders`` certificate's SAN URI as a client account granted
``ORDERS``.

* Through nginx, the ORDERS certificate registers ORDERS (no password anywhere) and is refused PAYMENTS
  (403: the node knows who it is); without a certificate nginx refuses the request itself.
* The same header sent straight to the node from 127.0.0.5, an address that is no proxy, is ignored: the
  request has no identity and is refused 401, and the registry is unchanged. Sent from 127.0.0.1 (the
  proxy's address) the very same request is believed, so the header itself is well formed.

The node runs plain HTTP here, so this runs on both servers (identity comes from the header, not from
the server's TLS). Needs the trusted-proxy certificate header and app grants of issue 46.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.factories import instance_body
from tests.interop.certificates import ORDERS_URI, Pki, make_pki
from tests.interop.conftest import (
    API_ACCOUNTS,
    AUTH_ENV,
    LiveServer,
    require_toolchain,
    running_server,
    wait_until,
)
from tests.interop.tls import client_context, create_accounts
from tests.ports import free_port

pytestmark = pytest.mark.interop

PROXY_HOST = "127.0.0.1"
STRANGER_HOST = "127.0.0.5"
HEADER = "X-Forwarded-Client-Cert"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def proxied_node(http_server, tmp_path_factory) -> Iterator[LiveServer]:
    """A node on 127.0.0.1 with API accounts (the conftest's, and ORDERS' known by its certificate)
    and 127.0.0.1 as its only trusted proxy."""
    workdir = tmp_path_factory.mktemp("proxied_node")
    accounts = [
        {"username": a.username, "password": a.password, "role": a.role} for a in API_ACCOUNTS.values()
    ]
    accounts.append(
        {
            "username": "orders-app",
            "password": "orders-Secret-42",
            "role": "client",
            "certificate_names": [ORDERS_URI],
            "apps": "ORDERS",
        }
    )
    create_accounts(workdir, accounts)
    env = {**AUTH_ENV, "EUREKA_TRUSTED_PROXIES": PROXY_HOST, "EUREKA_CLIENT_CERT_HEADER": HEADER}
    with running_server(workdir, env, host=PROXY_HOST, accounts=API_ACCOUNTS, server=http_server) as server:
        yield server


def _nginx_site(pki: Pki, port: int, upstream: int) -> str:
    return f"""
server {{
    listen {PROXY_HOST}:{port} ssl;
    ssl_certificate {pki.server.cert_file};
    ssl_certificate_key {pki.server.key_file};
    ssl_client_certificate {pki.ca.cert_file};
    ssl_verify_client on;
    location / {{
        proxy_pass http://{PROXY_HOST}:{upstream};
        proxy_bind {PROXY_HOST};
        proxy_set_header {HEADER} $ssl_client_escaped_cert;
    }}
}}
"""


@pytest.fixture(scope="module")
def nginx(pki, proxied_node, tmp_path_factory) -> Iterator[str]:
    """nginx in the foreground in front of ``proxied_node``; its https base URL."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    require_toolchain("nginx", os.path.exists(binary), "install it with `sudo apt-get install nginx`")
    tmp = tmp_path_factory.mktemp("nginx")
    port = free_port(PROXY_HOST)
    (tmp / "site.conf").write_text(_nginx_site(pki, port, proxied_node.port))
    temp = " ".join(
        f"{kind}_temp_path {tmp / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (tmp / "nginx.conf").write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"daemon off;\npid {tmp / 'nginx.pid'};\nerror_log {tmp / 'error.log'};\nevents {{}}\n"
        + f"http {{\n  access_log {tmp / 'access.log'};\n  {temp}\n  include {tmp / 'site.conf'};\n}}\n"
    )
    checked = subprocess.run(
        [binary, "-t", "-c", str(tmp / "nginx.conf"), "-p", str(tmp)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    process = subprocess.Popen(
        [binary, "-c", str(tmp / "nginx.conf"), "-p", str(tmp)], stderr=subprocess.DEVNULL
    )
    base_url = f"https://{PROXY_HOST}:{port}"
    context = client_context(pki.ca, pki.orders)

    def answers() -> bool:
        try:
            httpx.get(f"{base_url}/healthz", verify=context, timeout=1)
            return True
        except httpx.TransportError:
            return False

    try:
        error_log = tmp / "error.log"
        wait_until(
            answers, 15, lambda: f"nginx did not start: {error_log.read_text() if error_log.exists() else ''}"
        )
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _peer_view(node: LiveServer) -> httpx.Client:
    return httpx.Client(
        base_url=node.url,
        auth=API_ACCOUNTS["peer"].auth,
        headers={"Accept": "application/json"},
        timeout=10,
    )


def test_through_nginx_the_client_certificate_identifies_the_caller(nginx, proxied_node, pki):
    with httpx.Client(
        base_url=f"{nginx}/eureka/", verify=client_context(pki.ca, pki.orders), timeout=10
    ) as orders:
        assert (
            orders.post("apps/ORDERS", json=loopback_instance("ORDERS", "via-nginx", 9401)).status_code == 204
        )
        refused = orders.post("apps/PAYMENTS", json=loopback_instance("PAYMENTS", "via-nginx", 9402))
        assert refused.status_code == 403, refused.text
        with _peer_view(proxied_node) as peer:
            assert peer.get("apps/ORDERS/via-nginx").status_code == 200
            assert peer.get("apps/PAYMENTS/via-nginx").status_code == 404
        assert orders.delete("apps/ORDERS/via-nginx").status_code == 200
    # Without a client certificate nginx itself refuses (400: "No required SSL certificate was sent").
    anonymous = httpx.post(
        f"{nginx}/eureka/apps/ORDERS",
        json=loopback_instance("ORDERS", "anonymous", 9403),
        verify=client_context(pki.ca),
        timeout=10,
    )
    assert anonymous.status_code == 400
    assert proxied_node.count("POST", "/eureka/apps/ORDERS", status=204) == 1


def _forged(node: LiveServer, source: str, pem: bytes, instance_id: str) -> httpx.Response:
    """A registration of ORDERS straight to the node from ``source``, carrying the header nginx sets."""
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=10) as client:
        return client.post(
            f"{node.url}apps/ORDERS",
            json=loopback_instance("ORDERS", instance_id, 9404),
            headers={HEADER: quote(pem.decode(), safe="")},
        )


def test_the_certificate_header_from_a_non_proxy_address_is_not_believed(proxied_node, pki):
    pem = Path(pki.orders.cert_file).read_bytes()
    with _peer_view(proxied_node) as peer:
        forged = _forged(proxied_node, STRANGER_HOST, pem, "forged")
        assert forged.status_code == 401, forged.text
        assert peer.get("apps/ORDERS/forged").status_code == 404
        # The very same request from the proxy's address is believed: the header is well formed.
        believed = _forged(proxied_node, PROXY_HOST, pem, "believed")
        assert believed.status_code == 204, believed.text
        assert peer.get("apps/ORDERS/believed").status_code == 200
        assert peer.delete("apps/ORDERS/believed").status_code == 200


def loopback_instance(app: str, instance_id: str, port: int) -> dict:
    return instance_body(app, "127.0.0.1", port, instance_id=instance_id)
