"""The lean protocol handler (registry/wire/handlers.py) as gunicorn calls it: a WSGI environ in, bytes out.

The API tests go through Django's test client and so the site's handler; these call the routing
application itself: flat routes, Django's fallback for 404s, and the protocol's own error answers.
"""

from __future__ import annotations

import json

import pytest
from django.test import RequestFactory
from django.urls import set_urlconf

from registry.protocol import views
from registry.wire.handlers import RoutingApplication
from tests.factories import instance_body


class _Answer:
    def __init__(self, app, request):
        self.status = self.headers = None
        environ = request.environ
        self.body = b"".join(app(environ, self._start))

    def _start(self, status, headers, exc_info=None):
        self.status, self.headers = status, dict(headers)


@pytest.fixture
def app(node):
    return RoutingApplication(trust_forwarded_prefix=False)


def test_a_heartbeat_is_answered_through_the_flat_routes(app, node):
    body = json.dumps(instance_body(instance_id="i-1"))
    registered = _Answer(
        app, RequestFactory().post("/eureka/apps/ORDERS", body, content_type="application/json")
    )
    assert registered.status == "204 No Content", registered.body
    answer = _Answer(app, RequestFactory().put("/eureka/v2/apps/orders/i-1?status=UP"))
    assert answer.status == "200 OK" and answer.body == b""
    assert answer.headers["Content-Length"] == "0"
    unknown = _Answer(app, RequestFactory().put("/eureka/apps/ORDERS/i-2?status=UP"))
    assert unknown.status == "404 Not Found" and unknown.body == b""


def test_a_path_no_route_takes_gets_the_protocols_empty_404(app):
    set_urlconf(None)
    answer = _Answer(app, RequestFactory().get("/eureka/apps/ORDERS/i-1/nothing/here"))
    assert answer.status == "404 Not Found" and answer.body == b""


def test_an_unexpected_error_gets_the_protocols_plain_500_not_the_sites_page(app, node, monkeypatch):
    def broken(self, request, app, instance_id):
        raise RuntimeError("a bug")

    monkeypatch.setattr(views.InstanceView, "put", broken)
    # Whatever URLconf an earlier request left current, the error answer must be the protocol's.
    set_urlconf(None)
    answer = _Answer(app, RequestFactory().put("/eureka/apps/ORDERS/i-1?status=UP"))
    assert answer.status == "500 Internal Server Error"
    assert answer.body == b"Internal server error\n"
    assert answer.headers["Content-Type"].startswith("text/plain")
