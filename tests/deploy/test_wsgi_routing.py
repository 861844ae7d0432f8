"""The WSGI application sends /eureka/ to the lean protocol handler and the rest to the full site."""

from __future__ import annotations

import gc
import io
import json
import re
from urllib.parse import urlencode
from wsgiref.util import setup_testing_defaults

from registry.wire.handlers import RoutingApplication
from tests.factories import instance_body


def call(app, method: str, path: str, body: bytes = b"", chunked: bool = False, stream=None, **headers: str):
    """One request through the WSGI application. ``chunked`` presents the body as gunicorn does for
    ``Transfer-Encoding: chunked``: decoded, with no ``CONTENT_LENGTH``; ``stream`` replaces the body."""
    environ: dict = {}
    setup_testing_defaults(environ)
    environ.update(
        {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "wsgi.input": stream or io.BytesIO(body),
            **({"HTTP_TRANSFER_ENCODING": "chunked"} if chunked else {"CONTENT_LENGTH": str(len(body))}),
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


# --------------------------------------------------------------------------- chunked request bodies


class BrokenChunkedStream(io.RawIOBase):
    """What gunicorn's decoded chunked input does on bad framing: some body, then an exception."""

    def __init__(self, first: bytes):
        self.first = first

    def read(self, size=-1):
        if self.first:
            data, self.first = self.first, b""
            return data
        raise ValueError("Invalid chunk size: 'zz'")


def test_a_chunked_registration_reaches_the_protocol_views(node):
    app = RoutingApplication()
    body = json.dumps(instance_body()).encode()
    for prefix in ("/eureka/", "/eureka/v2/"):
        status, _, content = call(
            app, "POST", f"{prefix}apps/ORDERS", body, chunked=True, CONTENT_TYPE="application/json"
        )
        assert (status, content) == (204, b"")
    status, _, content = call(app, "GET", "/eureka/apps/ORDERS", HTTP_ACCEPT="application/json")
    assert status == 200
    assert json.loads(content)["application"]["instance"][0]["instanceId"] == "10.0.0.1:orders:8080"


def test_a_chunked_body_over_the_limit_is_413_whatever_the_handler(node, settings):
    settings.EUREKA = settings.EUREKA.with_changes(connections__max_body_bytes=2048)
    app = RoutingApplication()
    body = json.dumps(instance_body()).encode()
    body = body[:-1] + b" " * 4000 + b"}"
    for path in ("/eureka/apps/ORDERS", "/admin/login/"):
        stream = io.BytesIO(body)
        status, headers, content = call(
            app, "POST", path, chunked=True, stream=stream, CONTENT_TYPE="application/json"
        )
        assert status == 413, (path, content)
        assert content == b"Request body is larger than 2048 bytes\n"
        assert stream.tell() == 2049, "reading stops one byte past the limit"
    assert node.registry.reads.get_instance("ORDERS", "10.0.0.1:orders:8080", node.now()) is None


def test_chunked_body_at_the_limit_is_accepted(node, settings):
    settings.EUREKA = settings.EUREKA.with_changes(connections__max_body_bytes=2048)
    body = json.dumps(instance_body()).encode()
    body = body[:-1] + b" " * (2048 - len(body)) + b"}"
    app = RoutingApplication()
    status, _, content = call(
        app, "POST", "/eureka/apps/ORDERS", body, chunked=True, CONTENT_TYPE="application/json"
    )
    assert (status, content) == (204, b"")


def test_broken_chunk_framing_is_400_and_changes_nothing(node):
    body = json.dumps(instance_body()).encode()
    status, headers, content = call(
        RoutingApplication(),
        "POST",
        "/eureka/apps/ORDERS",
        stream=BrokenChunkedStream(body),
        chunked=True,
        CONTENT_TYPE="application/json",
    )
    assert status == 400
    assert content == b"Malformed chunked request body: Invalid chunk size: 'zz'\n"
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert node.registry.reads.get_instance("ORDERS", "10.0.0.1:orders:8080", node.now()) is None


def test_the_site_stack_reads_chunked_form_posts_too(node, db, django_user_model):
    django_user_model.objects.create_user("operator", password="s3cret-pass", is_staff=True)
    app = RoutingApplication()
    status, headers, page = call(app, "GET", "/admin/login/")
    assert status == 200
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1).decode()
    cookie = headers["Set-Cookie"].split(";")[0]
    form = urlencode(
        {"csrfmiddlewaretoken": token, "username": "operator", "password": "s3cret-pass", "next": "/admin/"}
    )
    status, headers, _ = call(
        app,
        "POST",
        "/admin/login/",
        form.encode(),
        chunked=True,
        CONTENT_TYPE="application/x-www-form-urlencoded",
        HTTP_COOKIE=cookie,
        HTTP_HOST="testserver",
    )
    # Logged in: the form's fields (and the CSRF token among them) were read from the chunked body.
    assert status == 302 and headers["Location"] == "/admin/"


def test_the_protocol_checks_the_host_against_allowed_hosts_as_the_site_does(node, settings):
    """A page reached by DNS rebinding sends its own name as Host: with ALLOWED_HOSTS set, the registry
    is not read for it (issue 34, item 4). A reader's handler is this one with another URLconf."""
    from registry.wire.handlers import ProtocolHandler

    class ReaderHandler(ProtocolHandler):  # as eureka_site/reader_wsgi.py's, which refuses a node
        urlconf = "eureka_site.reader_urls"

    settings.ALLOWED_HOSTS = ["registry.internal", ".example.org"]
    app = RoutingApplication()

    status, _, content = call(app, "GET", "/eureka/apps", HTTP_HOST="evil.example")
    assert status == 400 and b"ALLOWED_HOSTS" in content and b"applications" not in content
    assert call(app, "GET", "/eureka/apps", HTTP_HOST="registry.internal:8761")[0] == 200
    assert call(app, "GET", "/eureka/apps", HTTP_HOST="eureka.example.org")[0] == 200
    assert call(app, "PUT", "/eureka/apps/ORDERS/10.0.0.1:orders:8080", HTTP_HOST="evil.example")[0] == 400
    assert call(ReaderHandler(), "GET", "/eureka/apps", HTTP_HOST="evil.example")[0] == 400

    settings.ALLOWED_HOSTS = ["*"]
    assert call(app, "GET", "/eureka/apps", HTTP_HOST="evil.example")[0] == 200


def test_every_path_refuses_a_host_not_in_allowed_hosts_before_django_and_logs_it_once(
    node, settings, caplog
):
    """Django logs a traceback for each request with a bad Host: a client sending them as fast as it can
    filled the disk (issue 44, item 6). The refusal comes before Django, counted for /metrics and logged
    once an interval with a count (tests/deploy/test_log_floods_live.py floods a live node)."""
    from registry.wire.handlers import BAD_REQUESTS

    settings.ALLOWED_HOSTS = ["registry.internal"]
    app = RoutingApplication()
    before = BAD_REQUESTS["host"]
    paths = ["/", "/admin/", "/admin/login/", "/healthz", "/readyz", "/metrics", "/static/x.css", "/nope"]

    with caplog.at_level("INFO"):
        for _ in range(50):
            for path in paths + ["/eureka/apps"]:
                status, _, content = call(app, "GET", path, HTTP_HOST="evil.example", REMOTE_ADDR="10.1.2.3")
                assert status == 400 and b"ALLOWED_HOSTS" in content
            status, _, _ = call(app, "POST", "/admin/login/", b"a=b", HTTP_HOST="evil.example")
            assert status == 400

    assert BAD_REQUESTS["host"] == before + 50 * (len(paths) + 2)
    [line] = caplog.records
    assert line.name == "django.security.DisallowedHost" and line.exc_info is None
    assert line.getMessage() == (
        "GET '/' from 10.1.2.3 refused with 400: Invalid HTTP_HOST header: 'evil.example'. "
        "You may need to add 'evil.example' to ALLOWED_HOSTS."
    )
    # An allowed host is served.
    assert call(app, "GET", "/eureka/apps", HTTP_HOST="registry.internal")[0] == 200


def test_a_protocol_request_leaves_no_reference_cycle_behind(node):
    """What a request made (Django's and DRF's request, the view, the WSGI environ, and through it the
    connection's objects and the answer's bytes) goes when the request is done with it, not at the next
    collection: a request whose connection outlived a collection or two would be in the old generation
    by then, where the node's GC policy freezes it until its hourly full collection."""
    app = RoutingApplication()
    body = json.dumps(instance_body()).encode()
    requests = [
        ("POST", "/eureka/apps/ORDERS", body, {"CONTENT_TYPE": "application/json"}),
        ("GET", "/eureka/apps", b"", {"HTTP_ACCEPT": "application/json"}),
        ("GET", "/eureka/apps/delta", b"", {}),
        ("GET", "/eureka/apps/ORDERS", b"", {"HTTP_ACCEPT": "application/json"}),
        ("PUT", "/eureka/apps/ORDERS/10.0.0.1:orders:8080", b"", {}),
        ("PUT", "/eureka/apps/ORDERS/10.0.0.1:orders:8080/status?value=OUT_OF_SERVICE", b"", {}),
        ("PUT", "/eureka/apps/ORDERS/unknown", b"", {}),
        ("POST", "/eureka/apps/ORDERS", b"{", {"CONTENT_TYPE": "application/json"}),
        ("DELETE", "/eureka/apps/ORDERS/10.0.0.1:orders:8080", b"", {}),
    ]
    for method, path, content, headers in requests:
        call(app, method, path, content, **headers)  # anything made once (caches) is made now
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for method, path, content, headers in requests:
            call(app, method, path, content, **headers)
        gc.collect()
        left = sorted({type(thing).__qualname__ for thing in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()

    assert left == []
