"""The unmodified eureka-js-client (npm 4.5.0) against a live node.

Each test runs ``tests/interop/js/driver.js`` in Node: it starts the client with one-second heartbeats
and registry fetches, forwards the client's events, requests and log lines as JSON lines, and answers
``state`` commands with the client's ``getInstancesByAppId`` / ``getInstancesByVipAddress`` caches.

The client speaks through ``/eureka/v2/apps/`` (its default service path) with JSON; the test checks
the server through ``/eureka/`` so the access log tells the two apart.

Client quirks respected here (eureka-clients.md section 2): ``modifyInstance`` and ``deleteInstance``
splice index 0 of the app's list, so delta assertions use apps holding a single instance and no
multi-instance MODIFIED; ``filterUpInstances`` only applies when instances are added, so the override
test uses full fetches (the default, ``shouldUseDelta: false``).

With API accounts on (``auth_live_server``) the client's credentials go either in its service URL
(``http://user:password@host:port/eureka/v2/``: the ``request`` library it uses takes them from there)
or, as its README shows, into each request's options (``requestOpts.auth``) from its
``requestMiddleware``; both send them unasked (preemptive Basic). A registration it is refused ends
``start()`` with an error: the client then neither heartbeats nor fetches, nor tries again.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from functools import partial
from pathlib import Path

import pytest

from tests.interop.conftest import (
    DriverProcess,
    LiveServer,
    RegistryAdmin,
    assert_challenge,
    assert_refused,
    client_factory,
    require_toolchain,
    wait_until,
)

pytestmark = pytest.mark.interop

# The test's own requests (``admin``) go through /eureka/, the client's through /eureka/v2/.
ADMIN_PREFIX = "eureka/"

JS_DIR = Path(__file__).resolve().parent / "js"
DRIVER = JS_DIR / "driver.js"
CLIENT_PACKAGE = JS_DIR / "node_modules" / "eureka-js-client" / "package.json"
MIN_NODE_MAJOR = 18
# What the client logs when a getInstancesBy* lookup comes back empty (the test's own queries).
EMPTY_LOOKUP_WARNINGS = (
    "Unable to retrieve instances for appId",
    "Unable to retrieves instances for vipAddress",
)


def _node_major(node: str) -> int:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10).stdout
        return int(out.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


@pytest.fixture(scope="module", autouse=True)
def node() -> str:
    """The node binary; skips the module (fails under EUREKA_REQUIRE_ALL_SUITES=1) without the toolchain."""
    node = shutil.which("node")
    require_toolchain("node", node is not None, "install Node.js 18+ (e.g. `apt-get install nodejs npm`)")
    assert node is not None
    require_toolchain(
        f"node >= {MIN_NODE_MAJOR}",
        _node_major(node) >= MIN_NODE_MAJOR,
        f"{node} is too old; install Node.js 18+",
    )
    require_toolchain("npm", shutil.which("npm") is not None, "install npm (e.g. `apt-get install npm`)")
    require_toolchain(
        "eureka-js-client (tests/interop/js/node_modules)",
        CLIENT_PACKAGE.is_file(),
        "run `make test`, or `npm ci` in tests/interop/js",
    )
    return node


class JsClient(DriverProcess):
    """One Node process running the client (``DriverProcess``)."""

    def __init__(
        self,
        node: str,
        server: LiveServer,
        app: str,
        host_name: str,
        port: int,
        *args: str,
        url: str | None = None,
    ):
        self.app = app
        self.host_name = host_name
        # The client's instance id is its hostName (no instanceId configured).
        self.instance_id = host_name
        self.path = f"/eureka/v2/apps/{app}/{host_name}"
        command = [
            node,
            str(DRIVER),
            "--url",
            url or f"{server.url}v2/",
            "--app",
            app,
            "--host-name",
            host_name,
            "--port",
            str(port),
            "--heartbeat-ms",
            "1000",
            "--fetch-ms",
            "1000",
            *args,
        ]
        super().__init__(command, JS_DIR, f"the JS client {app}", close_timeout=10)

    def state(self, apps: tuple[str, ...] = (), vips: tuple[str, ...] = ()) -> dict:
        """The client's caches: ``{"apps": {APP: [instance...]}, "vips": {vip: [...]}, ...}``."""
        since = self.mark()
        request_id = self.send({"cmd": "state", "apps": list(apps), "vips": list(vips)})
        return self.wait_for("state", since=since, timeout=5, id=request_id)[0]

    def ids_by_app(self, app: str) -> set[str]:
        return {i["instanceId"] for i in self.state(apps=(app,))["apps"][app]}

    def ids_by_vip(self, vip: str) -> set[str]:
        return {i["instanceId"] for i in self.state(vips=(vip,))["vips"][vip]}

    def stop(self) -> dict:
        since = self.mark()
        request_id = self.send({"cmd": "stop"})
        return self.wait_for("stopped", since=since, timeout=10, id=request_id)[0]


@pytest.fixture
def js_client(node, live_server):
    """A factory of running JS clients (on ``url`` if given); each is stopped and its process ended when
    the test ends."""
    with client_factory(partial(JsClient, node, live_server)) as start:
        yield start


@pytest.fixture
def auth_js_client(node, auth_live_server):
    """JS clients of the node with API accounts; pass the service URL (with or without credentials)."""
    with client_factory(partial(JsClient, node, auth_live_server)) as start:
        yield start


def test_the_client_under_test_is_the_pinned_release():
    assert json.loads(CLIENT_PACKAGE.read_text())["version"] == "4.5.0"
    lock = json.loads((JS_DIR / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/eureka-js-client"]["version"] == "4.5.0"


def test_it_registers_and_gets_the_registered_event(live_server, js_client, admin):
    client = js_client("jsreg", "jsreg-host", 8101)

    client.wait_for("registered")
    client.wait_for("start-callback", error=None)
    live_server.wait_for_requests("POST", "/eureka/v2/apps/jsreg", status=204, timeout=5)
    assert live_server.count("POST", "/eureka/v2/apps/jsreg") == 1
    instance = admin.instance("JSREG", "jsreg-host")
    assert instance is not None
    assert instance["app"] == "JSREG"
    assert instance["hostName"] == "jsreg-host"
    assert instance["status"] == "UP"
    assert instance["port"] == {"$": 8101, "@enabled": "true"}
    assert instance["vipAddress"] == "jsreg.vip"
    assert instance["dataCenterInfo"] == {
        "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
        "name": "MyOwn",
    }
    # The JS client sends no leaseInfo: the server applies Eureka's defaults.
    assert instance["leaseInfo"]["durationInSecs"] == 90
    wait_until(
        lambda: "jsreg-host" in admin.listed_ids("JSREG"),
        timeout=5,
        message="the full registry never listed the JS instance",
    )


def test_the_upstream_integration_test_passes(live_server, js_client):
    # eureka-js-client's test/integration.test.js: register the minimal "jqservice" instance (bare port,
    # no @class), then expect exactly one instance by app id and by vip, then stop.
    client = js_client("jqservice", "localhost", 8080, "--upstream-shape", "--vip", "jq.test.something.com")
    client.wait_for("registered")
    wait_until(
        lambda: client.ids_by_app("jqservice") == {"localhost"},
        timeout=8,
        message="getInstancesByAppId('jqservice') never returned the one instance",
    )
    assert len(client.state(apps=("jqservice",))["apps"]["jqservice"]) == 1
    assert len(client.state(vips=("jq.test.something.com",))["vips"]["jq.test.something.com"]) == 1
    assert client.stop()["error"] is None
    client.wait_for("deregistered")


def test_its_heartbeats_are_acknowledged_and_renew_the_lease(live_server, js_client, admin):
    client = js_client("jsbeat", "jsbeat-host", 8102)
    client.wait_for("registered")
    first = admin.instance("JSBEAT", "jsbeat-host")
    assert first is not None

    since = client.mark()
    client.wait_for("heartbeat", since=since, at_least=2, timeout=8)
    # The access log line is written just after the response went out: wait for it too.
    beats = live_server.wait_for_requests("PUT", client.path, at_least=2, timeout=5)
    assert all(r.status == 200 and r.query == "" for r in beats), beats
    later = admin.instance("JSBEAT", "jsbeat-host")
    assert later["leaseInfo"]["lastRenewalTimestamp"] > first["leaseInfo"]["lastRenewalTimestamp"]
    assert not [e for e in client.named("log") if "heartbeat FAILED" in e["msg"]]


def test_it_discovers_instances_by_app_id_and_vip(live_server, js_client, admin):
    admin.register("JSPEER", "jspeer-1", port=8201, vip="jspeer.vip,shared.vip")
    client = js_client("jsdisc", "jsdisc-host", 8103)
    client.wait_for("registered")

    def discovered() -> dict | None:
        state = client.state(
            apps=("jsdisc", "JSPEER"), vips=("jsdisc.vip", "jspeer.vip", "shared.vip", "no.such.vip")
        )
        apps = state["apps"]
        if {i["instanceId"] for i in apps["jsdisc"]} != {"jsdisc-host"}:
            return None
        if {i["instanceId"] for i in apps["JSPEER"]} != {"jspeer-1"}:
            return None
        return state

    state = wait_until(discovered, timeout=8, message="the client never discovered both apps")
    peer = state["apps"]["JSPEER"][0]
    assert peer == {
        "app": "JSPEER",
        "instanceId": "jspeer-1",
        "hostName": "127.0.0.1",
        "port": 8201,
        "status": "UP",
        "vipAddress": "jspeer.vip,shared.vip",
        "actionType": "ADDED",
    }
    assert [i["instanceId"] for i in state["vips"]["jsdisc.vip"]] == ["jsdisc-host"]
    assert [i["instanceId"] for i in state["vips"]["jspeer.vip"]] == ["jspeer-1"]
    assert [i["instanceId"] for i in state["vips"]["shared.vip"]] == ["jspeer-1"]
    assert state["vips"]["no.such.vip"] == []


def test_it_applies_deltas_without_a_full_refetch(live_server, js_client, admin):
    client = js_client("jsdelta", "jsdelta-host", 8104, "--delta")
    client.wait_for("registered")
    wait_until(
        lambda: client.state()["hasFullRegistry"] and client.ids_by_app("jsdelta") == {"jsdelta-host"},
        timeout=8,
        message="the client never held a full registry with its own instance",
    )
    client.wait_for("request", since=client.mark(), method="GET", uri="delta")
    checkpoint, events_checkpoint = live_server.mark(), client.mark()

    # ADDED: an app the client has never seen (a single instance: see the module docstring).
    admin.register("JSDELTANEW", "jsdeltanew-1", port=8204, vip="jsdeltanew.vip")
    wait_until(
        lambda: (
            client.ids_by_app("JSDELTANEW") == {"jsdeltanew-1"}
            and client.ids_by_vip("jsdeltanew.vip") == {"jsdeltanew-1"}
        ),
        timeout=6,
        message="the ADDED instance never reached the client by app id and vip",
    )

    # DELETED: the instance is cancelled.
    assert admin.cancel("JSDELTANEW", "jsdeltanew-1") == 200
    wait_until(
        lambda: client.ids_by_app("JSDELTANEW") == set() and client.ids_by_vip("jsdeltanew.vip") == set(),
        timeout=6,
        message="the DELETED instance was never removed from the client",
    )
    assert client.ids_by_app("jsdelta") == {"jsdelta-host"}

    assert live_server.count("GET", "/eureka/v2/apps/delta", since=checkpoint, status=200) >= 2
    assert live_server.count("GET", "/eureka/v2/apps/", since=checkpoint) == 0, live_server.requests(
        since=checkpoint
    )
    # Client side too: every fetch since the checkpoint was a delta, none a full registry.
    fetches = [e["uri"] for e in client.named("request", since=events_checkpoint) if e["method"] == "GET"]
    assert fetches and set(fetches) == {"delta"}
    assert client.named("registryUpdated", since=events_checkpoint) == []
    problems = [
        e
        for e in client.named("log", since=events_checkpoint)
        if e["level"] in ("warn", "error") and not e["msg"].startswith(EMPTY_LOOKUP_WARNINGS)
    ]
    assert problems == []


def test_an_override_removes_the_instance_from_get_instances_by_app_id(live_server, js_client, admin):
    admin.register("JSOVR", "jsovr-peer", port=8205, vip="jsovr.vip")
    client = js_client("jsovr", "jsovr-host", 8105, "--vip", "jsovr.vip")
    client.wait_for("registered")
    wait_until(
        lambda: client.ids_by_app("jsovr") == {"jsovr-host", "jsovr-peer"},
        timeout=8,
        message="the client never saw both JSOVR instances",
    )

    assert admin.set_status("JSOVR", "jsovr-host", "OUT_OF_SERVICE") == 200
    wait_until(
        lambda: (
            client.ids_by_app("jsovr") == {"jsovr-peer"} and client.ids_by_vip("jsovr.vip") == {"jsovr-peer"}
        ),
        timeout=6,
        message="getInstancesByAppId / getInstancesByVipAddress still return the overridden instance",
    )

    # Heartbeats (no status in the query) go on being acknowledged and keep the override.
    since = client.mark()
    client.wait_for("heartbeat", since=since, at_least=2, timeout=8)
    instance = admin.instance("JSOVR", "jsovr-host")
    assert instance["status"] == "OUT_OF_SERVICE"
    assert instance["overriddenStatus"] == "OUT_OF_SERVICE"
    assert client.ids_by_app("jsovr") == {"jsovr-peer"}

    # Clearing the override leaves UNKNOWN: the next heartbeat gets 404, the client re-registers UP.
    since = client.mark()
    assert admin.delete_status_override("JSOVR", "jsovr-host") == 200
    client.wait_for("registered", since=since, timeout=8)
    wait_until(
        lambda: client.ids_by_app("jsovr") == {"jsovr-host", "jsovr-peer"},
        timeout=6,
        message="the instance never came back after the override was cleared",
    )


def test_stop_deregisters_the_instance(live_server, js_client, admin):
    client = js_client("jsstop", "jsstop-host", 8106)
    client.wait_for("registered")
    assert admin.instance("JSSTOP", "jsstop-host") is not None

    stopped = client.stop()
    assert stopped["error"] is None
    client.wait_for("deregistered")
    live_server.wait_for_requests("DELETE", client.path, status=200, timeout=5)
    assert live_server.count("DELETE", client.path) == 1
    assert admin.instance("JSSTOP", "jsstop-host") is None
    wait_until(
        lambda: "JSSTOP" not in {a["name"] for a in admin.applications()["application"]},
        timeout=5,
        message="the full registry still lists the deregistered app",
    )
    # Heartbeats stopped with it: the lease stays gone.
    since = live_server.mark()
    time.sleep(1.5)
    assert live_server.count("PUT", client.path, since=since) == 0
    assert live_server.count("POST", "/eureka/v2/apps/jsstop", since=since) == 0


def test_it_re_registers_when_a_heartbeat_gets_404(live_server, js_client, admin):
    client = js_client("jsrereg", "jsrereg-host", 8107)
    client.wait_for("registered")
    client.wait_for("heartbeat")

    since, events_since = live_server.mark(), client.mark()
    assert admin.cancel("JSREREG", "jsrereg-host") == 200
    # Gone, unless a heartbeat slipped in between and the client already re-registered.
    assert admin.instance("JSREREG", "jsrereg-host") is None or live_server.count(
        "POST", "/eureka/v2/apps/jsrereg", since=since
    )

    client.wait_for("registered", since=events_since, timeout=8)
    # Client side: the re-registration was the answer to a failed heartbeat...
    logs = [e["msg"] for e in client.named("log", since=events_since)]
    assert any("heartbeat FAILED, Re-registering" in msg for msg in logs), logs
    # ...and server side that heartbeat got 404, then the new registration 204.
    assert live_server.wait_for_requests("PUT", client.path, since=since, status=404, timeout=5)
    assert live_server.wait_for_requests("POST", "/eureka/v2/apps/jsrereg", since=since, status=204)

    instance = admin.instance("JSREREG", "jsrereg-host")
    assert instance is not None and instance["status"] == "UP"
    client.wait_for("heartbeat", since=client.mark(), timeout=5)


# --- with API accounts (EUREKA_API_AUTH) --------------------------------------------------------------


@pytest.mark.parametrize("credentials_in", ["service-url", "request-middleware"])
def test_with_api_accounts_it_registers_heartbeats_fetches_deltas_and_deregisters(
    auth_live_server, auth_js_client, auth_admin, credentials_in
):
    server = auth_live_server
    account = server.accounts["client"]
    app = {"service-url": "jsauthurl", "request-middleware": "jsauthmw"}[credentials_in]
    host = f"{app}-host"
    since = server.mark()
    if credentials_in == "service-url":
        client = auth_js_client(app, host, 8111, "--delta", url=server.service_url("client", "/eureka/v2/"))
    else:
        auth = f"{account.username}:{account.password}"
        client = auth_js_client(
            app, host, 8111, "--delta", "--auth", auth, url=server.service_url(None, "/eureka/v2/")
        )

    client.wait_for("registered")
    client.wait_for("start-callback", error=None)
    server.wait_for_requests("POST", f"/eureka/v2/apps/{app}", since=since, status=204, timeout=5)
    client.wait_for("heartbeat", at_least=2, timeout=8)
    server.wait_for_requests("PUT", client.path, since=since, status=200, at_least=2, timeout=5)
    # A full fetch, then deltas, that hold the client's own instance.
    wait_until(
        lambda: client.state()["hasFullRegistry"] and client.ids_by_app(app) == {host},
        timeout=8,
        message="the client never held a full registry with its own instance",
    )
    client.wait_for("request", since=client.mark(), method="GET", uri="delta")
    server.wait_for_requests("GET", "/eureka/v2/apps/delta", since=since, status=200, timeout=5)
    assert server.count("GET", "/eureka/v2/apps/", since=since, status=200) >= 1
    # The node lists it, to a reader.
    with RegistryAdmin(server, prefix="eureka/", role="reader") as reader:
        wait_until(
            lambda: host in reader.listed_ids(app),
            timeout=5,
            message="the full registry never listed the JS instance",
        )
    refused = [
        r for r in server.requests(since=since) if r.path.startswith("/eureka/v2/") and r.status >= 400
    ]
    assert refused == []

    assert client.stop()["error"] is None
    client.wait_for("deregistered")
    server.wait_for_requests("DELETE", client.path, since=since, status=200, timeout=5)
    assert auth_admin.instance(app, host) is None


def test_with_api_accounts_a_client_without_credentials_is_refused(
    auth_live_server, auth_js_client, auth_admin
):
    server = auth_live_server
    since = server.mark()
    client = auth_js_client("jsnoauth", "jsnoauth-host", 8112, url=server.service_url(None, "/eureka/v2/"))

    started = client.wait_for("start-callback", timeout=10)[0]
    assert started["error"] is not None and "eureka registration FAILED: status: 401" in started["error"], (
        started
    )
    assert client.named("registered") == []
    # The client gave up: no heartbeat, no fetch, no second try.
    time.sleep(1.5)
    refused = assert_refused(server, since, re.compile(r"/eureka/v2/apps/jsnoauth(/.*)?"))
    assert [(r.method, r.path) for r in refused] == [("POST", "/eureka/v2/apps/jsnoauth")]
    assert [r for r in server.requests(since=since) if r.path.startswith("/eureka/v2/")] == refused
    assert_challenge(server, "v2/apps/")
    assert auth_admin.instance("JSNOAUTH", "jsnoauth-host") is None
    assert "JSNOAUTH" not in {a["name"] for a in auth_admin.applications()["application"]}
