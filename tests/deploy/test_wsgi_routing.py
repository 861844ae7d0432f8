"""The WSGI application sends /eureka/ to the lean protocol handler and the rest to the full site."""

from __future__ import annotations

import io
import json
from wsgiref.util import setup_testing_defaults

from eureka_site.handlers import RoutingApplication
from tests.factories import instance_body


def call(app, method: str, path: str, body: bytes = b"", **headers: str):
    environ: dict = {}
    setup_testing_defaults(environ)
    environ.update(
        {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            **headers,
        }
    )
    captured = {}

    def start_response(status, response_headers, exc_info=None):
        captured["status"] = int(status.split()[0])
        captured["headers"] = dict(response_headers)

    chunks = app(environ, start_response)
    content = b"".join(chunks)
    if hasattr(chunks, "close"):
        chunks.close()
    return captured["status"], captured["headers"], content


def test_protocol_requests_are_served_without_site_middleware(node):
    app = RoutingApplication()
    body = json.dumps(instance_body()).encode()
    status, headers, _ = call(app, "POST", "/eureka/apps/ORDERS", body, CONTENT_TYPE="application/json")
    assert status == 204
    status, headers, content = call(app, "PUT", "/eureka/v2/apps/ORDERS/10.0.0.1:orders:8080")
    assert (status, content) == (200, b"")
    assert headers["Content-Length"] == "0"
    # Site middleware (SecurityMiddleware) would add these; the protocol handler does not run it.
    assert "X-Content-Type-Options" not in headers and "Allow" not in headers
    status, headers, content = call(app, "GET", "/eureka//apps", HTTP_ACCEPT="application/json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(content)["applications"]["apps__hashcode"] == "UP_1_"
    status, headers, content = call(app, "PUT", "/eureka/apps/ORDERS/unknown")
    assert (status, content) == (404, b"")
    assert call(app, "GET", "/eureka/no/such/route")[::2] == (404, b"")


def test_other_requests_go_through_the_full_site(node, db):
    app = RoutingApplication()
    status, headers, content = call(app, "GET", "/")
    assert status == 200 and b"Eureka" in content
    assert headers.get("X-Content-Type-Options") == "nosniff"
    status, _, content = call(app, "GET", "/nothing-here")
    assert status == 404 and b"Not found" in content


def test_a_trusted_forwarded_prefix_keeps_redirects_under_the_proxy_path(node, db):
    status, headers, _ = call(
        RoutingApplication(trust_forwarded_prefix=True), "GET", "/admin/", HTTP_X_FORWARDED_PREFIX="/registry"
    )
    assert status == 302 and headers["Location"].startswith("/registry/admin/login/")
    status, headers, _ = call(
        RoutingApplication(trust_forwarded_prefix=False),
        "GET",
        "/admin/",
        HTTP_X_FORWARDED_PREFIX="/registry",
    )
    assert headers["Location"].startswith("/admin/login/"), "an untrusted header is ignored"
    status, headers, _ = call(
        RoutingApplication(trust_forwarded_prefix=True),
        "GET",
        "/admin/",
        HTTP_X_FORWARDED_PREFIX="/evil\r\nX: y",
    )
    assert headers["Location"].startswith("/admin/login/"), "a malformed prefix is ignored"
