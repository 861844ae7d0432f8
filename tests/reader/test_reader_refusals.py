"""What a reader must not pass on to its node: a path that climbs out of ``/eureka/`` with dot
segments, and what a web page makes a browser send (the forwarder does not pass ``Origin`` or
``Sec-Fetch-*`` on, so the node could not refuse it). A live reader beside a live node; requests go
out with ``http.client`` so that paths and headers are sent exactly as written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from registry.reader.forwarding import leaves_the_protocol
from tests.factories import instance_body
from tests.interop.conftest import raw_request
from tests.reader.conftest import JSON, ReaderStack, start_stack

pytestmark = pytest.mark.integration

APP = "PATHS"


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[ReaderStack]:
    # Forwarding needs no cache sync: no Celery.
    started = start_stack(tmp_path_factory.mktemp("reader_refusals"), celery=False)
    try:
        yield started
    finally:
        started.stop_all()


def node_lookup(stack: ReaderStack, host: str) -> int:
    instance_id = quote(f"{host}:{APP.lower()}:8080", safe="")
    return httpx.get(f"{stack.url}/eureka/apps/{APP}/{instance_id}", headers=JSON, timeout=5).status_code


CLIMBING_PATHS = [
    "/eureka/../metrics",
    "/eureka/apps/../../metrics",
    "/eureka/v2/%2e%2e/%2E%2E/metrics",
    "/eureka/..%2f..%2fmetrics",
    "/eureka/%252e%252e/metrics",
    "/eureka/apps/..%5c..%5cmetrics",
    "/eureka/./../admin/",
    "/eureka/../api/v1/changes",
]


@pytest.mark.parametrize("target", CLIMBING_PATHS)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_path_climbing_out_of_the_protocol_is_400_at_the_reader(stack, target, method):
    # The node's metrics are open here: reaching them through the reader would answer 200 with them.
    assert b"eureka_" in httpx.get(f"{stack.url}/metrics", timeout=5).content

    status, body = raw_request(
        stack.reader_port, method, target, headers={"Content-Type": "application/json"}
    )

    assert status == 400, body[:300]
    assert b"leaves /eureka/" in body and b"eureka_" not in body


@pytest.mark.parametrize(
    "target",
    [
        "/eureka/../metrics",
        "/eureka/%2e%2e/metrics",
        "/eureka/..%2fmetrics",
        "/eureka/apps/../../admin/",
    ],
)
def test_the_node_itself_routes_such_paths_as_protocol_paths(stack, target):
    # No dot-segment removal on the node: the path stays under /eureka/ and finds no route there.
    status, body = raw_request(stack.port, "GET", target)

    assert status == 404 and body == b""


def test_paths_with_dots_inside_their_segments_are_still_forwarded(stack):
    host = "10.7.0.1"
    instance = f"/eureka/apps/{APP}/{quote(f'{host}:{APP.lower()}:8080', safe='')}"
    body = json.dumps(instance_body(app=APP, host=host)).encode()
    try:
        assert (
            raw_request(
                stack.reader_port, "POST", f"/eureka/apps/{APP}", body, {"Content-Type": "application/json"}
            )[0]
            == 204
        )
        assert raw_request(stack.reader_port, "PUT", f"{instance}?status=UP")[0] == 200
        status, found = raw_request(stack.reader_port, "GET", instance, headers=JSON)
        assert status == 200 and json.loads(found)["instance"]["ipAddr"] == host
    finally:
        assert raw_request(stack.reader_port, "DELETE", instance)[0] == 200


@pytest.mark.parametrize(
    "page",
    [
        pytest.param({"Origin": "http://evil.example"}, id="origin"),
        pytest.param({"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, id="cross-site"),
    ],
)
@pytest.mark.parametrize("prefix", ["/eureka/", "/eureka/v2/"])
def test_a_web_page_cannot_write_through_a_reader(stack, page, prefix):
    host = "10.7.0.2"
    body = json.dumps(instance_body(app=APP, host=host)).encode()

    status, answer = raw_request(
        stack.reader_port, "POST", f"{prefix}apps/{APP}", body, {"Content-Type": "application/json"} | page
    )

    assert status == 403, answer
    assert node_lookup(stack, host) == 404


def test_a_body_typed_as_a_browser_can_is_refused_by_the_node_through_a_reader(stack):
    host = "10.7.0.3"
    body = json.dumps(instance_body(app=APP, host=host)).encode()

    status, answer = raw_request(
        stack.reader_port, "POST", f"/eureka/apps/{APP}", body, {"Content-Type": "text/plain; a=json"}
    )

    assert status == 415 and b"Content-Type" in answer
    assert node_lookup(stack, host) == 404


def test_a_browser_tab_still_reads_through_a_reader(stack):
    tab = {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}

    status, body = raw_request(stack.reader_port, "GET", "/eureka/apps/", headers=tab)

    assert status == 200 and b"<applications>" in body


@pytest.mark.parametrize(
    "target,leaves",
    [
        ("/eureka/apps/", False),
        ("/eureka/v2/apps/ORDERS/10.0.0.1%3Aorders%3A8080?status=UP&lastDirtyTimestamp=1", False),
        ("/eureka/apps/X/test%231.%5B3.%3F%5D!", False),
        ("/eureka/apps/X/a..b/metadata?k=../..", False),
        ("/eureka//apps", False),
        ("/%65ureka/apps/", False),
        ("/eureka/../metrics", True),
        ("/eureka/.", True),
        ("/eureka/%2e%2e%2fmetrics", True),
        ("/eureka/%25252e%25252e/metrics", True),
        ("/eureka/apps/..\\metrics", True),
        ("/metrics", True),
    ],
)
def test_which_paths_leave_the_protocol(target, leaves):
    assert leaves_the_protocol(target) is leaves
