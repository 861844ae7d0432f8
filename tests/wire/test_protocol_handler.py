"""The lean protocol handler (registry/wire/handlers.py) as gunicorn calls it: a WSGI environ in, bytes out.

The API tests go through Django's test client and so the site's handler; these call the routing
application itself: flat routes, Django's fallback for 404s, and the protocol's own error answers.
"""

from __future__ import annotations

import gc
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


def _garbage_after(app, request) -> list[str]:
    """What the cyclic collector would have to free of one request: the types of the objects that
    only reference cycles keep once the answer is made."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        _Answer(app, request)
        gc.collect()
        return [type(found).__name__ for found in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_batches_and_refused_bodies_leave_no_reference_cycle_behind(app, node):
    # As tests/deploy/test_wsgi_routing.py's registrations, reads and heartbeats: garbage in a cycle
    # waits for the cyclic collector, and in objects the GC policy froze meanwhile
    # (registry/runtime/gc_policy.py) for the next full collection, with the request's body in it.
    instance = instance_body(instance_id="i-1")
    item = {"action": "Register", "appName": "ORDERS", "id": "i-1", "instanceInfo": instance}
    factory = RequestFactory()
    requests = {
        "batch": json.dumps({"replicationList": [item]}),
        "batch with refused items": json.dumps({"replicationList": [{"action": "Nope"}, 5, item]}),
        "bad batch": "[1]",
    }
    for name, body in requests.items():
        request = factory.post("/eureka/peerreplication/batch/", body, content_type="application/json")
        assert _garbage_after(app, request) == [], name
    assert _garbage_after(app, factory.patch("/eureka/apps/ORDERS")) == [], "method not allowed"
    # A bad XML body: ElementTree's parser stays in a cycle of its own, but not the request.
    bad_xml = factory.post("/eureka/apps/ORDERS", "<instance><a></instance>", content_type="application/xml")
    left = _garbage_after(app, bad_xml)
    assert not {"WSGIRequest", "Request", "frame", "traceback"} & set(left), left
