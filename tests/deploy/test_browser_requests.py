"""Drive-by writes: no web page may write to an open registry through its visitors' browsers.

With API accounts off, any page a user of the network opens could make the browser send a register
or a replication batch to the node, as a form post or a ``no-cors`` fetch does (a CORS "simple
request": no preflight, and a type of text/plain or a form type). Such requests carry ``Origin`` or a
cross-site ``Sec-Fetch-Site``, which Eureka clients never send, and a body whose media type is not
JSON or XML. The node refuses them (403 and 415) under every prefix it serves the protocol on; a
browser tab reading the registry by its URL keeps working. These tests speak raw HTTP/1.1
(``http.client``) to a live gunicorn node, so headers and paths go out exactly as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from registry.wire.http import browser_refusal
from tests.factories import instance_body
from tests.interop.conftest import LiveServer, raw_request, running_server

pytestmark = pytest.mark.live

CONTROL_SECRET = "browser-test-control-secret"
APP = "DRIVEBY"


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[LiveServer]:
    env = {"EUREKA_TRUST_FORWARDED_PREFIX": "true", "EUREKA_CONTROL_SECRET": CONTROL_SECRET}
    with running_server(tmp_path_factory.mktemp("browser_requests"), env) as server:
        yield server


def send(
    server: LiveServer, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    return raw_request(server.port, method, path, body, headers)


def registration(host: str) -> bytes:
    return json.dumps(instance_body(app=APP, host=host)).encode()


def instance_id(host: str) -> str:
    return f"{host}:{APP.lower()}:8080"


def listed(server: LiveServer, host: str) -> bool:
    status, _ = send(server, "GET", f"/eureka/apps/{APP}/{quote(instance_id(host), safe='')}")
    assert status in (200, 404), status
    return status == 200


@pytest.fixture
def cleanup(node) -> Iterator[list[str]]:
    hosts: list[str] = []
    yield hosts
    for host in hosts:
        send(node, "DELETE", f"/eureka/apps/{APP}/{quote(instance_id(host), safe='')}")


JSON_TYPE = {"Content-Type": "application/json"}


# -------------------------------------------------------------------------------- media types


@pytest.mark.parametrize("prefix", ["/eureka/", "/eureka/v2/"])
@pytest.mark.parametrize("content_type", ["text/plain; a=json", "text/plain;charset=UTF-8", ""])
def test_a_register_sent_as_a_browser_can_is_415_and_not_listed(node, cleanup, prefix, content_type):
    host = "10.1.0.1"
    cleanup.append(host)
    headers = {"Content-Type": content_type} if content_type else {}

    status, body = send(node, "POST", f"{prefix}apps/{APP}", registration(host), headers)

    assert status == 415, body
    assert b"Content-Type" in body
    assert not listed(node, host)
    # The same body with a JSON type is a good registration: the type alone was refused.
    assert send(node, "POST", f"{prefix}apps/{APP}", registration(host), JSON_TYPE)[0] == 204
    assert listed(node, host)


def batch(host: str) -> bytes:
    item = {
        "appName": APP,
        "id": instance_id(host),
        "action": "Register",
        "instanceInfo": instance_body(app=APP, host=host)["instance"],
    }
    return json.dumps({"replicationList": [item]}).encode()


def test_a_replication_batch_sent_as_a_browser_can_is_415_and_applies_nothing(node, cleanup):
    host = "10.1.0.2"
    cleanup.append(host)

    status, body = send(
        node, "POST", "/eureka/peerreplication/batch/", batch(host), {"Content-Type": "text/plain; a=json"}
    )

    assert status == 415, body
    assert not listed(node, host)
    status, body = send(node, "POST", "/eureka/peerreplication/batch/", batch(host), JSON_TYPE)
    assert (status, json.loads(body)) == (200, {"responseList": [{"statusCode": 200}]})
    assert listed(node, host)


# ----------------------------------------------------------------------- Origin, Sec-Fetch-Site


# Every way the node serves the protocol: both prefixes, the doubled slash fargo sends, and behind a
# proxy that strips its own prefix and says so (EUREKA_TRUST_FORWARDED_PREFIX is on for this node).
PROTOCOL_PREFIXES = [
    pytest.param("/eureka/", {}, id="eureka"),
    pytest.param("/eureka/v2/", {}, id="eureka-v2"),
    pytest.param("/eureka//", {}, id="doubled-slash"),
    pytest.param("/eureka/", {"X-Forwarded-Prefix": "/registry"}, id="forwarded-prefix"),
]
FROM_A_PAGE = [
    pytest.param({"Origin": "http://evil.example"}, id="origin"),
    pytest.param({"Origin": "null"}, id="origin-null"),
    # What a same-origin fetch sends after DNS rebinding: the page's origin is "this" host.
    pytest.param({"Origin": "http://127.0.0.1", "Sec-Fetch-Site": "same-origin"}, id="origin-same-origin"),
    pytest.param({"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, id="cross-site"),
    pytest.param({"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}, id="same-site"),
    # A form posted cross-site is a navigation: only reads are let through as navigations.
    pytest.param({"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, id="cross-site-form"),
]


@pytest.mark.parametrize("prefix,proxy", PROTOCOL_PREFIXES)
@pytest.mark.parametrize("page", FROM_A_PAGE)
def test_a_register_a_web_page_sends_is_403_and_not_listed(node, cleanup, prefix, proxy, page):
    host = "10.1.0.3"
    cleanup.append(host)

    status, body = send(node, "POST", f"{prefix}apps/{APP}", registration(host), JSON_TYPE | proxy | page)

    assert status == 403, body
    assert b"web page" in body or b"another site" in body
    assert not listed(node, host)


@pytest.mark.parametrize("page", FROM_A_PAGE)
def test_a_replication_batch_a_web_page_sends_is_403_and_applies_nothing(node, cleanup, page):
    host = "10.1.0.4"
    cleanup.append(host)

    status, body = send(node, "POST", "/eureka/v2/peerreplication/batch", batch(host), JSON_TYPE | page)

    assert status == 403, body
    assert not listed(node, host)


def test_other_writes_a_web_page_sends_are_403_and_change_nothing(node, cleanup):
    host = "10.1.0.5"
    cleanup.append(host)
    assert send(node, "POST", f"/eureka/apps/{APP}", registration(host), JSON_TYPE)[0] == 204
    path = f"/eureka/apps/{APP}/{quote(instance_id(host), safe='')}"
    page = {"Origin": "http://evil.example"}

    assert send(node, "PUT", f"{path}/status?value=OUT_OF_SERVICE", headers=page)[0] == 403
    assert send(node, "PUT", f"{path}/metadata?owner=evil", headers=page)[0] == 403
    assert send(node, "DELETE", path, headers=page)[0] == 403

    status, body = send(node, "GET", path, headers={"Accept": "application/json"})
    assert status == 200
    served = json.loads(body)["instance"]
    assert served["status"] == "UP" and "owner" not in served["metadata"]


def test_the_control_endpoint_refuses_a_web_page_even_with_the_secret(node):
    secret = {"X-Eureka-Control-Secret": CONTROL_SECRET}
    # The secret is right: without a page's headers the endpoint answers (an unknown job: 404).
    assert send(node, "POST", "/control/jobs/no-such-job", headers=secret)[0] == 404

    status, body = send(
        node, "POST", "/control/jobs/no-such-job", headers=secret | {"Origin": "http://evil.example"}
    )

    assert status == 403 and b"web page" in body
    status, body = send(
        node, "POST", "/control/jobs/no-such-job", headers=secret | {"Sec-Fetch-Site": "cross-site"}
    )
    assert status == 403 and b"another site" in body


# ------------------------------------------------------------------------------------- reading


BROWSER_TAB = {
    "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "Sec-Fetch-Mode": "navigate",
    "Sec-Fetch-Dest": "document",
    "Sec-Fetch-User": "?1",
}


@pytest.mark.parametrize(
    "site",
    [
        pytest.param("none", id="typed-in-the-address-bar"),
        pytest.param("same-origin", id="link-on-the-console"),
        pytest.param("cross-site", id="link-on-a-wiki"),
    ],
)
@pytest.mark.parametrize("prefix,proxy", PROTOCOL_PREFIXES)
def test_a_browser_tab_still_reads_the_registry(node, site, prefix, proxy):
    status, body = send(node, "GET", f"{prefix}apps/", headers=BROWSER_TAB | proxy | {"Sec-Fetch-Site": site})

    assert status == 200, body
    assert b"<applications>" in body


@pytest.mark.parametrize(
    "page",
    [
        pytest.param({"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, id="cors-fetch"),
        pytest.param({"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, id="img-or-no-cors"),
    ],
)
def test_a_page_of_another_site_fetching_the_registry_is_403(node, page):
    # Such a page could not read the answer anyway (no CORS headers): it would only add load and keys.
    status, _ = send(node, "GET", "/eureka/apps/", headers=page)

    assert status == 403


def test_eureka_clients_and_the_console_are_unaffected(node):
    # What every Eureka client sends: none of the headers above.
    assert send(node, "GET", "/eureka/apps/", headers={"Accept": "application/json"})[0] == 200
    # The console and the admin have their own defences (CSRF) and are not refused here.
    assert send(node, "GET", "/", headers={"Origin": "http://evil.example"})[0] == 200


# ---------------------------------------------------------------------------------- dot segments


@pytest.mark.parametrize(
    "path",
    [
        "/eureka/../metrics",
        "/eureka/apps/../../metrics",
        "/eureka/%2e%2e/metrics",
        "/eureka/..%2fmetrics",
        "/control/../metrics",
    ],
)
def test_a_dot_segment_never_takes_a_protocol_path_out_of_its_prefix(node, path):
    # The node routes the path as sent (no dot-segment removal): a protocol 404, not the metrics.
    assert b"eureka_" in send(node, "GET", "/metrics")[1], "the metrics are open on this node"

    status, body = send(node, "GET", path)

    assert status == 404 and b"eureka_" not in body


# ---------------------------------------------------------------------------------- the policy


@pytest.mark.parametrize(
    "method,path,headers,refused",
    [
        ("POST", "/eureka/apps/X", {}, False),
        ("PUT", "/eureka/apps/X/1", {"HTTP_SEC_FETCH_SITE": "none"}, False),
        ("POST", "/eureka/apps/X", {"HTTP_SEC_FETCH_SITE": "same-origin"}, False),
        ("POST", "/eureka/apps/X", {"HTTP_ORIGIN": ""}, True),
        ("POST", "/eureka/apps/X", {"HTTP_SEC_FETCH_SITE": "Cross-Site"}, True),
        ("POST", "/eureka/apps/X", {"HTTP_SEC_FETCH_SITE": "something-new"}, True),
        (
            "HEAD",
            "/eureka/apps/",
            {"HTTP_SEC_FETCH_SITE": "cross-site", "HTTP_SEC_FETCH_MODE": "navigate"},
            False,
        ),
        ("GET", "/eureka/apps/", {"HTTP_SEC_FETCH_SITE": "same-site", "HTTP_SEC_FETCH_MODE": "cors"}, True),
        ("POST", "/control/jobs/evict", {"HTTP_ORIGIN": "https://a.example"}, True),
        # Elsewhere the site's own defences apply (the admin's CSRF check reads Origin itself).
        ("POST", "/admin/login/", {"HTTP_ORIGIN": "https://a.example"}, False),
        ("GET", "/metrics", {"HTTP_SEC_FETCH_SITE": "cross-site"}, False),
    ],
)
def test_which_requests_count_as_sent_by_a_web_page(method, path, headers, refused):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, **headers}

    assert (browser_refusal(environ) is not None) == refused
