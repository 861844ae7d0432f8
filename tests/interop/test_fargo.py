"""The unmodified Go client github.com/hudl/fargo (v1.4.0, pinned by go/go.sum) against a live node.

``tests/interop/go`` is a small program of ours (module ``eureka-interop/fargo``) that makes fargo's own
calls, one scenario per invocation, and prints one JSON line per call: whether fargo returned an error,
which kind (``HTTPResponseStatusCode`` / ``AppNotFoundError``) and what fargo parsed. The session builds it
once (``go build`` is skipped while the binary is newer than its sources) and every scenario runs in both
of fargo's wire modes: XML (its default) and JSON (``UseJson``).

fargo speaks through ``/eureka/v2`` (its documented service URL, no trailing slash); the test checks the
server through ``/eureka/`` with JSON, so the access log tells the two apart.

fargo behaviour these tests rely on (eureka-clients.md section 5, and fargo's net.go / marshal.go):

* ``RegisterInstance`` GETs the instance first and POSTs only when that is not a 200;
  ``ReregisterInstance`` always POSTs and then overwrites the caller's struct with the server's copy.
* ``HeartBeatInstance`` never re-registers by itself: a 404 comes back as an error carrying the code.
* In XML mode fargo reads metadata with mxj and does not undo XStream's name escaping (``_`` is written
  ``__`` in element names, by Eureka and by us), and it marshals only metadata it parsed or was given:
  re-registering the struct ``ReregisterInstance`` read back sends an empty ``<metadata>``.

With API accounts on (``auth_live_server``) fargo's credentials go in its service URL
(``http://user:password@host:port/eureka/v2``): fargo builds every request URL from it, and Go's
``net/http`` client sends the URL's user info as Basic credentials with each request, unasked.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.interop.conftest import (
    LiveServer,
    RegistryAdmin,
    assert_challenge,
    assert_refused,
    wait_until,
)
from tests.interop.go_build import go_program

pytestmark = pytest.mark.interop

GO_DIR = Path(__file__).resolve().parent / "go"
BINARY = GO_DIR / "bin" / "fargo-interop"
FARGO_VERSION = "v1.4.0"
MIN_GO = (1, 21)
RUN_TIMEOUT_S = 60
# fargo's service URL: the /eureka/v2 prefix its README and tests use, without a trailing slash.
FARGO_PREFIX = "/eureka/v2"
# The test's own requests (``admin``) go through /eureka/.
ADMIN_PREFIX = "eureka/"
MODES = ("xml", "json")

PORT = 9090  # what the program registers (its -port default); the explicit-id instance gets PORT + 1
SECURE_PORT = PORT + 443
EMPTY_METADATA = {"@class": "java.util.Collections$EmptyMap"}
DEFAULT_DATA_CENTER = {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"}
OWN_METADATA = {"registered.by": "fargo-interop"}


# ---------------------------------------------------------------------------------------- build


@pytest.fixture(scope="session")
def fargo_binary() -> Path:
    """The driver, built once per session (tests/interop/go_build.py)."""
    how = "install Go 1.21+ (e.g. `apt-get install golang-go`); fargo comes from the Go module proxy"
    return go_program(GO_DIR, BINARY, MIN_GO, how)


# ---------------------------------------------------------------------------------------- runs


@dataclass
class FargoRun:
    """One invocation of the driver: its JSON lines, split into the setup names and the steps."""

    command: list[str]
    returncode: int
    lines: list[dict]
    stderr: str
    names: dict = field(init=False)
    steps: dict[str, dict] = field(init=False)

    def __post_init__(self):
        setups = [line for line in self.lines if line.get("event") == "setup"]
        self.names = setups[0]["names"] if setups else {}
        # Keyed by step name; "scenario:step" when the run holds several scenarios ("all").
        several = len(setups) > 1
        self.steps = {}
        for line in self.lines:
            if line.get("event") == "step":
                key = f"{line['scenario']}:{line['step']}" if several else line["step"]
                assert key not in self.steps, f"step {key} reported twice:\n{self.describe()}"
                self.steps[key] = line

    def describe(self) -> str:
        body = "\n".join(json.dumps(line)[:600] for line in self.lines)
        return f"$ {' '.join(self.command)}\n(exit {self.returncode})\n{body}\nstderr:\n{self.stderr[-3000:]}"

    def step(self, name: str) -> dict:
        assert name in self.steps, f"no step {name!r}:\n{self.describe()}"
        return self.steps[name]

    def ok(self, name: str):
        """The result of a step that must have succeeded (fargo returned no error)."""
        step = self.step(name)
        assert step["ok"], f"fargo call {name!r} failed: {step['error']}\n{self.describe()}"
        return step["result"]

    def http_error(self, name: str) -> int:
        """The HTTP status fargo attached to the error of a step that must have failed."""
        step = self.step(name)
        error = step["error"]
        assert error is not None, f"fargo call {name!r} succeeded, an error was expected\n{self.describe()}"
        assert error["kind"] == "http_status", f"{name!r}: {error}\n{self.describe()}"
        return error["http_status"]

    def assert_all_as_expected(self) -> None:
        wrong = [s for s in self.steps.values() if not s["as_expected"]]
        assert not wrong and self.returncode == 0, (
            "steps not as expected: "
            + ", ".join(f"{s['step']} (expected {s['expect']}, got {s['error']})" for s in wrong)
            + f"\n{self.describe()}"
        )


class Fargo:
    def __init__(self, binary: Path, server: LiveServer):
        self.binary = binary
        self.server = server
        self.service_url = f"{server.base_url}{FARGO_PREFIX}"

    def run(self, scenario: str, mode: str, *flags: str, service_url: str | None = None) -> FargoRun:
        command = [
            str(self.binary),
            "-url",
            service_url or self.service_url,
            "-mode",
            mode,
            "-scenario",
            scenario,
            "-port",
            str(PORT),
            *flags,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{' '.join(command)} ran over {RUN_TIMEOUT_S}s: {exc.stdout!r}", pytrace=False)
        lines = []
        for text in done.stdout.splitlines():
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError:
                lines.append({"event": "output", "line": text})
        return FargoRun(command, done.returncode, lines, done.stderr)


@pytest.fixture(scope="module")
def fargo(fargo_binary, live_server) -> Fargo:
    return Fargo(fargo_binary, live_server)


@pytest.fixture(scope="module")
def auth_fargo(fargo_binary, auth_live_server) -> Fargo:
    return Fargo(fargo_binary, auth_live_server)


@pytest.fixture(params=MODES)
def mode(request) -> str:
    return request.param


def fargo_path(app: str, *parts: str) -> str:
    return "/".join([f"{FARGO_PREFIX}/apps/{app}", *parts])


def logged(
    server: LiveServer,
    method: str | None,
    path: str | re.Pattern[str] | None,
    since: int,
    at_least: int,
    status: int | None = None,
) -> list:
    """The matching access-log records, once ``at_least`` are there.

    gunicorn logs a request after answering it, so the driver may have exited a moment before its
    last requests reach the log: wait (bounded) for them instead of reading the log at once.
    """
    server.wait_for_requests(method, path, since=since, status=status, at_least=at_least, timeout=5)
    return server.requests(method, path, since, status)


def by_id(instances: list[dict]) -> dict[str, dict]:
    return {instance["id"]: instance for instance in instances}


def server_lists(admin: RegistryAdmin, app: str, ids: set[str]) -> None:
    wait_until(
        lambda: admin.listed_ids(app) == ids,
        timeout=5,
        message=lambda: f"the full registry lists {admin.listed_ids(app)} for {app}, expected {ids}",
    )


# ---------------------------------------------------------------------------------------- tests


def test_the_client_under_test_is_the_pinned_release(fargo_binary):
    done = subprocess.run([str(fargo_binary), "-version"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fargo"] == FARGO_VERSION
    assert f"github.com/hudl/fargo {FARGO_VERSION}" in (GO_DIR / "go.mod").read_text()


def test_register_then_read_back(live_server, fargo, admin, mode):
    since = live_server.mark()
    run = fargo.run("register", mode)
    n = run.names
    app, instance_id, explicit_id = n["app"], n["id"], n["explicit_id"]

    assert run.http_error("get_instance_before") == 404
    # ReregisterInstance replaced fargo's struct with the server's copy: fargo parsed it, and the
    # server applied its defaults to fargo's zero lease settings.
    registered = run.ok("register")
    assert registered["id"] == instance_id == n["host"]
    assert registered["instanceId"] == instance_id  # fargo sent "", the server used the hostName
    assert registered["app"] == app
    assert registered["status"] == "UP"
    assert registered["overriddenStatus"] == "UNKNOWN"
    assert (registered["port"], registered["portEnabled"]) == (PORT, True)
    assert (registered["securePort"], registered["securePortEnabled"]) == (SECURE_PORT, False)
    assert registered["dataCenterName"] == "MyOwn"
    assert registered["leaseInfo"]["renewalIntervalInSecs"] == 30
    assert registered["leaseInfo"]["durationInSecs"] == 90
    assert registered["leaseInfo"]["registrationTimestamp"] > 0
    assert registered["metadata"] == OWN_METADATA
    run.ok("register_again")
    assert run.ok("get_instance")["vipAddress"] == n["vip"]

    explicit = run.ok("register_with_instance_id")
    assert explicit["id"] == explicit["instanceId"] == explicit_id
    assert explicit["port"] == PORT + 1
    assert run.ok("get_instance_with_instance_id")["id"] == explicit_id
    listed = by_id(run.ok("get_app")["instances"])
    assert set(listed) == {instance_id, explicit_id}
    assert listed[instance_id]["metadata"] == OWN_METADATA
    empty = run.ok("read_empty_metadata")
    assert empty["value"] == ""
    # Real Eureka writes empty metadata as this marker; fargo's JSON reader keeps it as an entry.
    assert empty["map"] == ({} if mode == "xml" else EMPTY_METADATA)
    run.assert_all_as_expected()

    # RegisterInstance found the first instance already there and did not POST it again.
    posts = logged(live_server, "POST", fargo_path(app), since, 2)
    assert [r.status for r in posts] == [204, 204], posts
    probes = live_server.requests("GET", fargo_path(app, instance_id), since=since)
    assert [r.status for r in probes][:2] == [404, 404], probes  # get_instance_before, RegisterInstance

    server = admin.instance(app, instance_id)
    assert server is not None
    assert server["instanceId"] == instance_id
    assert server["hostName"] == n["host"]
    assert server["app"] == app
    assert server["ipAddr"] == "127.0.0.1"
    assert server["status"] == "UP"
    assert server["overriddenStatus"] == "UNKNOWN"
    assert server["port"] == {"$": PORT, "@enabled": "true"}
    assert server["securePort"] == {"$": SECURE_PORT, "@enabled": "false"}
    assert server["dataCenterInfo"] == DEFAULT_DATA_CENTER
    assert server["leaseInfo"]["renewalIntervalInSecs"] == 30
    assert server["leaseInfo"]["durationInSecs"] == 90
    assert server["metadata"] == OWN_METADATA
    assert server["vipAddress"] == server["secureVipAddress"] == n["vip"]
    assert server["homePageUrl"] == f"http://{n['host']}:{PORT}/"
    assert server["healthCheckUrl"] == f"http://{n['host']}:{PORT}/health"
    assert admin.instance(app, explicit_id)["metadata"] == EMPTY_METADATA
    server_lists(admin, app, {instance_id, explicit_id})


def test_heartbeats_and_the_404_of_an_unknown_instance(live_server, fargo, admin, mode):
    since = live_server.mark()
    run = fargo.run("heartbeat", mode)
    n = run.names

    # fargo reports the 404 as an error that carries the code, which is how applications decide to
    # re-register (fargo does not do it by itself).
    assert run.http_error("heartbeat_unknown") == 404
    registered = run.ok("register")
    for beat in ("heartbeat_1", "heartbeat_2", "heartbeat_3"):
        assert run.ok(beat) is None
    renewed = run.ok("get_instance")
    assert renewed["leaseInfo"]["lastRenewalTimestamp"] > registered["leaseInfo"]["lastRenewalTimestamp"]
    assert renewed["leaseInfo"]["registrationTimestamp"] == registered["leaseInfo"]["registrationTimestamp"]
    assert renewed["status"] == "UP"
    run.ok("forget")
    assert run.http_error("heartbeat_forgotten") == 404
    run.ok("reregister_after_404")
    run.ok("heartbeat_recovered")
    run.assert_all_as_expected()

    beats = logged(live_server, "PUT", fargo_path(n["app"], n["id"]), since, 6)
    assert [r.status for r in beats] == [404, 200, 200, 200, 404, 200], beats
    assert all(r.query == "" for r in beats), "fargo's heartbeat carries no query"
    server = admin.instance(n["app"], n["id"])
    assert server is not None and server["status"] == "UP"


def test_get_apps_and_get_app(live_server, fargo, admin, mode):
    peer_app, peer_id = f"FARGO-PEER-{mode.upper()}", f"peer-{mode}-1"
    admin.register(peer_app, peer_id, port=9201, vip=f"fargo-peer-{mode}")
    since = live_server.mark()
    run = fargo.run("apps", mode, "-peer-app", peer_app)
    n = run.names

    run.ok("register")
    apps = run.ok("get_apps")["apps"]
    assert apps[n["app"]] == [n["id"]]
    assert apps[peer_app] == [peer_id]
    own = run.ok("get_app")
    assert own["name"] == n["app"]
    assert [i["id"] for i in own["instances"]] == [n["id"]]

    # An instance another client registered (JSON, Java-shaped), as fargo parses it.
    peer = run.ok("get_app_peer")
    assert peer["name"] == peer_app
    [parsed] = peer["instances"]
    assert parsed["id"] == peer_id
    assert parsed["app"] == peer_app
    assert parsed["status"] == "UP"
    assert (parsed["port"], parsed["portEnabled"]) == (9201, True)
    assert (parsed["securePort"], parsed["securePortEnabled"]) == (443, False)
    assert parsed["countryId"] == 1
    assert parsed["dataCenterName"] == "MyOwn"
    assert parsed["vipAddress"] == f"fargo-peer-{mode}"
    assert parsed["metadata"] == {"registered.by": "interop-test"}
    assert parsed["leaseInfo"]["durationInSecs"] == 90

    # App names in paths are case-insensitive.
    lowercase = run.ok("get_app_lowercase")
    assert lowercase == {"name": n["app"], "ids": [n["id"]]}
    unknown = run.step("get_app_unknown")
    assert unknown["error"]["kind"] == "app_not_found", run.describe()
    run.assert_all_as_expected()

    assert logged(live_server, "GET", f"{FARGO_PREFIX}/apps", since, 1, status=200)
    assert len(logged(live_server, "GET", fargo_path(n["unknown_app"]), since, 1, status=404)) == 1
    # fargo's listing agrees with the server's.
    listing = admin.applications()
    assert admin.listed_ids(n["app"], listing) == {n["id"]}
    assert admin.listed_ids(peer_app, listing) == {peer_id}


def test_vip_lookups(live_server, fargo, admin, mode):
    vip = f"fargo-shared-{mode}.vip"
    peer_app, peer_id = f"FARGO-VIPPEER-{mode.upper()}", f"vippeer-{mode}-1"
    admin.register(peer_app, peer_id, port=9202, vip=vip)
    since = live_server.mark()
    run = fargo.run("vip", mode, "-vip", vip)
    n = run.names
    own_id = n["id"]

    run.ok("register")
    # One VIP across two apps: fargo concatenates the apps' instances.
    assert run.ok("vip")["ids"] == sorted([own_id, peer_id])
    assert run.ok("svip")["ids"] == sorted([own_id, peer_id])
    assert run.ok("vip_up")["ids"] == sorted([own_id, peer_id])
    # A VIP that matches nothing is an empty list, not an error (fargo errors on any non-200).
    for step in ("vip_unknown", "svip_unknown"):
        assert run.ok(step)["ids"] == [], run.describe()
    run.ok("status_out_of_service")
    out_of_service = run.ok("vip_out_of_service")
    assert out_of_service["ids"] == [own_id]
    assert out_of_service["instances"][0]["status"] == "OUT_OF_SERVICE"
    assert run.ok("vip_up_after_override")["ids"] == [peer_id]
    run.assert_all_as_expected()

    assert logged(live_server, "GET", f"{FARGO_PREFIX}/vips/{n['unknown_vip']}", since, 1, status=200)
    assert logged(live_server, "GET", f"{FARGO_PREFIX}/svips/{n['unknown_vip']}", since, 1, status=200)
    response = admin.http.get(f"vips/{vip}")
    assert response.status_code == 200
    statuses = {
        i["instanceId"]: i["status"]
        for a in response.json()["applications"]["application"]
        for i in a["instance"]
    }
    assert statuses == {own_id: "OUT_OF_SERVICE", peer_id: "UP"}


def test_status_updates(live_server, fargo, admin, mode):
    since = live_server.mark()
    run = fargo.run("status", mode)
    n = run.names
    path = fargo_path(n["app"], n["id"], "status")

    run.ok("register")
    assert run.http_error("status_unknown_instance") == 404
    run.ok("status_out_of_service")
    overridden = run.ok("get_instance_out_of_service")
    assert (overridden["status"], overridden["overriddenStatus"]) == ("OUT_OF_SERVICE", "OUT_OF_SERVICE")
    # fargo's bodiless heartbeat does not undo the override.
    run.ok("heartbeat")
    after_beat = run.ok("get_instance_after_heartbeat")
    assert (after_beat["status"], after_beat["overriddenStatus"]) == ("OUT_OF_SERVICE", "OUT_OF_SERVICE")
    run.ok("status_up")
    assert run.ok("get_instance_up")["status"] == "UP"
    run.ok("status_final")
    [listed] = [i for i in run.ok("get_app")["instances"] if i["id"] == n["id"]]
    assert listed["status"] == "OUT_OF_SERVICE"
    run.assert_all_as_expected()

    # fargo sends only ?value= (no lastDirtyTimestamp).
    updates = logged(live_server, "PUT", path, since, 3)
    assert [(r.query, r.status) for r in updates] == [
        ("value=OUT_OF_SERVICE", 200),
        ("value=UP", 200),
        ("value=OUT_OF_SERVICE", 200),
    ]
    ghost = fargo_path(n["app"], n["ghost"], "status")
    assert len(logged(live_server, "PUT", ghost, since, 1, status=404)) == 1
    server = admin.instance(n["app"], n["id"])
    assert (server["status"], server["overriddenStatus"]) == ("OUT_OF_SERVICE", "OUT_OF_SERVICE")
    overrides = admin.http.get("serverinfo/statusoverrides").json()
    assert overrides.get(n["id"]) == "OUT_OF_SERVICE"


def test_metadata_updates(live_server, fargo, admin, mode):
    since = live_server.mark()
    run = fargo.run("metadata", mode)
    n = run.names

    run.ok("register")
    for step in ("add_metadata", "add_metadata_dotted", "add_metadata_underscore"):
        run.ok(step)
    assert run.http_error("add_metadata_unknown_instance") == 404
    # XML element names escape "_" as "__" (XStream, as Eureka writes them); fargo does not unescape.
    build_key = "build__id" if mode == "xml" else "build_id"
    expected = {**OWN_METADATA, "color": "deep blue & green", "zone.name": "eu-west-1a", build_key: "abc-def"}
    assert run.ok("get_instance")["metadata"] == expected
    [listed] = [i for i in run.ok("get_app")["instances"] if i["id"] == n["id"]]
    assert listed["metadata"] == expected
    run.assert_all_as_expected()

    updates = logged(live_server, "PUT", fargo_path(n["app"], n["id"], "metadata"), since, 3)
    assert [r.status for r in updates] == [200, 200, 200], updates
    # The "&" of the value went encoded in the query. (granian logs each request from the thread that
    # answered it, so the three lines may come in any order.)
    assert "color=deep+blue+%26+green" in [r.query for r in updates]
    server = admin.instance(n["app"], n["id"])
    assert server["metadata"] == {
        **OWN_METADATA,
        "color": "deep blue & green",
        "zone.name": "eu-west-1a",
        "build_id": "abc-def",
    }


def test_reregistration(live_server, fargo, admin, mode):
    since = live_server.mark()
    run = fargo.run("reregister", mode)
    n = run.names

    first = run.ok("register")
    assert first["metadata"] == OWN_METADATA
    run.ok("register_bare")
    run.ok("reregister_bare_read_back")
    run.ok("reregister_read_back")
    changed = run.ok("reregister_changed")
    assert changed["port"] == PORT + 2
    assert changed["homePageUrl"] == f"http://{n['host']}:{PORT + 2}/"
    assert run.ok("get_instance")["port"] == PORT + 2
    run.assert_all_as_expected()

    posts = logged(live_server, "POST", fargo_path(n["app"]), since, 5)
    assert [r.status for r in posts] == [204] * 5, posts
    server = admin.instance(n["app"], n["id"])
    assert server["port"] == {"$": PORT + 2, "@enabled": "true"}
    assert server["homePageUrl"] == f"http://{n['host']}:{PORT + 2}/"
    assert server["status"] == "UP"
    # A re-registration keeps the time the instance first came up.
    assert server["leaseInfo"]["serviceUpTimestamp"] == first["leaseInfo"]["serviceUpTimestamp"]
    # The record is replaced by what fargo sent: in JSON mode fargo echoes the metadata it read back,
    # in XML mode it sends an empty <metadata> (see the module docstring), as Eureka would store too.
    assert server["metadata"] == (OWN_METADATA if mode == "json" else EMPTY_METADATA)
    # In JSON mode fargo echoed the server's {"@class": ...EmptyMap} marker: it is not a metadata key.
    bare = admin.instance(n["app"], n["explicit_id"])
    assert bare["metadata"] == EMPTY_METADATA
    xml = httpx.get(
        f"{live_server.base_url}/eureka/apps/{n['app']}/{n['explicit_id']}",
        headers={"Accept": "application/xml"},
        timeout=5,
    )
    assert xml.status_code == 200
    assert '<metadata class="java.util.Collections$EmptyMap"/>' in xml.text


def test_deregistration(live_server, fargo, admin, mode):
    since = live_server.mark()
    run = fargo.run("deregister", mode)
    n = run.names

    run.ok("register")
    run.ok("heartbeat")
    run.ok("deregister")
    assert run.http_error("get_instance_after") == 404
    assert run.http_error("heartbeat_after") == 404
    assert run.http_error("status_after") == 404
    assert run.http_error("deregister_again") == 404
    assert run.step("get_app_after")["error"]["kind"] == "app_not_found", run.describe()
    assert n["app"] not in run.ok("get_apps_after")["apps"]
    run.assert_all_as_expected()

    deletes = logged(live_server, "DELETE", fargo_path(n["app"], n["id"]), since, 2)
    assert [r.status for r in deletes] == [200, 404], deletes
    assert admin.instance(n["app"], n["id"]) is None
    assert n["app"] not in {a["name"] for a in admin.applications()["application"]}


def test_an_amazon_instance_is_known_by_its_instance_id(live_server, fargo, admin, mode):
    run = fargo.run("amazon", mode)
    n = run.names
    [names] = [line for line in run.lines if line.get("event") == "names"]
    amazon_id = names["amazon_id"]

    assert run.http_error("get_instance_before") == 404
    registered = run.ok("register")
    assert registered["id"] == registered["instanceId"] == amazon_id
    assert registered["dataCenterName"] == "Amazon"
    meta = registered["dataCenterMetadata"]
    assert meta["instance-id"] == amazon_id
    assert meta["availability-zone"] == "us-east-1c"
    assert meta["local-ipv4"] == "10.0.1.7"
    run.ok("heartbeat")
    assert run.ok("get_instance")["dataCenterMetadata"]["instance-type"] == "m5.large"
    [listed] = run.ok("get_app")["instances"]
    assert listed["dataCenterMetadata"]["public-hostname"] == "ec2-54-0-0-7.compute-1.amazonaws.com"
    run.assert_all_as_expected()

    server = admin.instance(n["app"], amazon_id)
    assert server is not None
    assert server["instanceId"] == amazon_id
    assert server["hostName"] == n["host"]
    info = server["dataCenterInfo"]
    assert info["@class"] == "com.netflix.appinfo.AmazonInfo"
    assert info["name"] == "Amazon"
    # fargo sends every Amazon key, the unset ones empty: those count as absent.
    assert info["metadata"] == {
        "instance-id": amazon_id,
        "availability-zone": "us-east-1c",
        "local-ipv4": "10.0.1.7",
        "public-hostname": "ec2-54-0-0-7.compute-1.amazonaws.com",
        "instance-type": "m5.large",
    }


def test_a_service_url_with_a_trailing_slash(live_server, fargo, admin, mode):
    """fargo joins serviceUrl + "/" + "apps": a configured trailing slash gives ``//apps``."""
    since = live_server.mark()
    run = fargo.run("heartbeat", mode, "-tag", f"{mode}-slash", service_url=f"{fargo.service_url}/")
    n = run.names
    run.assert_all_as_expected()

    doubled_path = re.compile(re.escape(f"{FARGO_PREFIX}//apps/") + ".*")
    # The scenario's requests: 6 heartbeats, 2 POSTs, 3 GETs of the instance, 1 DELETE.
    doubled = logged(live_server, None, doubled_path, since, 12)
    seen = {(r.method, r.status) for r in doubled}
    assert seen >= {("POST", 204), ("PUT", 200), ("PUT", 404), ("GET", 200), ("DELETE", 200)}, doubled
    assert admin.instance(n["app"], n["id"])["status"] == "UP"


def test_every_scenario_in_one_invocation(fargo, mode):
    run = fargo.run("all", mode, "-tag", f"all-{mode}")
    run.assert_all_as_expected()
    ends = [line for line in run.lines if line.get("event") == "end"]
    assert [e["scenario"] for e in ends] == [
        "register",
        "heartbeat",
        "apps",
        "vip",
        "status",
        "metadata",
        "reregister",
        "deregister",
        "amazon",
    ]
    assert all(e["ok"] for e in ends)


# --- with API accounts (EUREKA_API_AUTH) --------------------------------------------------------------


def fargo_requests(server: LiveServer, since: int) -> list:
    return [r for r in server.requests(since=since) if r.path.startswith(f"{FARGO_PREFIX}/")]


def test_with_api_accounts_every_scenario_runs(auth_live_server, auth_fargo, mode):
    """Registration, heartbeats, reads (apps, app, instance, vips), status, metadata, re-registration
    and deregistration, all with the credentials of the service URL."""
    server = auth_live_server
    since = server.mark()
    url = server.service_url("client", FARGO_PREFIX)
    run = auth_fargo.run("all", mode, "-tag", f"auth-{mode}", service_url=url)
    run.assert_all_as_expected()

    requests = fargo_requests(server, since)
    assert requests and [r for r in requests if r.status in (401, 403)] == [], requests
    names = {line["scenario"]: line["names"] for line in run.lines if line.get("event") == "setup"}
    # Its deregistration (a cancel) was acknowledged, its second one a 404.
    gone = names["deregister"]
    deletes = logged(server, "DELETE", fargo_path(gone["app"], gone["id"]), since, 2)
    assert [r.status for r in deletes] == [200, 404], deletes
    # The node lists what the "register" scenario left registered, to a reader.
    kept = names["register"]
    with RegistryAdmin(server, prefix="eureka/", role="reader") as reader:
        wait_until(
            lambda: reader.listed_ids(kept["app"]) == {kept["id"], kept["explicit_id"]},
            timeout=5,
            message="the full registry never listed fargo's instances",
        )
        assert reader.instance(gone["app"], gone["id"]) is None


def test_with_api_accounts_a_client_without_credentials_is_refused(
    auth_live_server, auth_fargo, auth_admin, mode
):
    server = auth_live_server
    since = server.mark()
    url = server.service_url(None, FARGO_PREFIX)
    run = auth_fargo.run("register", mode, "-tag", f"noauth-{mode}", service_url=url)
    n = run.names

    # fargo reports each refusal as an error carrying the code; the scenario stops at the registration.
    assert run.http_error("get_instance_before") == 401
    assert run.http_error("register") == 401
    assert run.returncode == 1
    # RegisterInstance GETs the instance, then POSTs it (whatever the GET's code short of 200).
    logged(server, "POST", fargo_path(n["app"]), since, 1, status=401)
    refused = assert_refused(server, since, re.compile(re.escape(FARGO_PREFIX) + "/.*"))
    assert [(r.method, r.path) for r in refused] == [
        ("GET", fargo_path(n["app"], n["id"])),
        ("GET", fargo_path(n["app"], n["id"])),
        ("POST", fargo_path(n["app"])),
    ], refused
    assert_challenge(server, "v2/apps/")
    assert auth_admin.instance(n["app"], n["id"]) is None
    assert n["app"] not in {a["name"] for a in auth_admin.applications()["application"]}
