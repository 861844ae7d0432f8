"""The unmodified py-eureka-client (PyPI 0.13.3) against a live node.

The client speaks through ``/eureka/`` (its default context) and reads XML; the test checks the
server through ``/eureka/v2/`` with JSON, so the access log tells the two apart.

py-eureka-client quirks these tests work around (client bugs, not server behaviour):

* ``stop()`` cancels the heartbeat ``Timer`` only before its first tick. Afterwards its thread loops
  forever and, as the instance is no longer "alive", re-registers it one interval later. The
  harness therefore stops the client right after a tick and then idles the leaked loop.
* ``Applications.get_application`` never returns None, so instances of an app that is new to the
  client are dropped from a delta (a hash mismatch and a full fetch repair it). The delta test
  therefore adds instances to the client's own app, which the client merges in place.

With API accounts on (``auth_live_server``) the client takes its credentials from the service URL
(``http://user:password@host:port/eureka/``, its README's way) and sends them with every request,
unasked (preemptive Basic); it reports a refused call through its ``on_error`` callback.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from functools import partial
from importlib.metadata import version

import httpx
import pytest
from py_eureka_client import ERROR_DISCOVER, ERROR_REGISTER
from py_eureka_client.eureka_client import EurekaClient, WalkNodeException

from tests.interop.conftest import (
    DELTA_RETENTION_MS,
    LiveServer,
    RegistryAdmin,
    assert_challenge,
    assert_refused,
    client_factory,
    wait_until,
)

pytestmark = [
    pytest.mark.interop,
    # The client logs through the deprecated Logger.warn on every failed call (e.g. the expected 404s).
    pytest.mark.filterwarnings("ignore:The 'warn' method is deprecated:DeprecationWarning"),
]

# The test's own requests (``admin``) go through /eureka/v2/, the client's through /eureka/.
ADMIN_PREFIX = "eureka/v2/"
RENEWAL_SECS = 1
# A client that has a registry switches to deltas; one more GET apps/ means it gave up on them.
FULL_FETCH = re.compile(r"/eureka/apps/?")
DELTA = "/eureka/apps/delta"


def reconcile_hashcode(statuses: Counter) -> str:
    """Eureka's ``STATUS_count_`` hash, to check the server's hashcode against its own listing."""
    return "".join(f"{status}_{statuses[status]}_" for status in sorted(statuses) if statuses[status] > 0)


class PyClient:
    """One EurekaClient with its own event loop, started and stopped the way an application would."""

    def __init__(self, server: LiveServer, app: str, port: int, service_url: str | None = None):
        self.server = server
        self.app = app.upper()
        self.port = port
        # py-eureka-client's default instance id: "{ip}:{app lower-case}:{port}".
        self.instance_id = f"127.0.0.1:{app.lower()}:{port}"
        self.path = f"/eureka/apps/{self.app}/{self.instance_id}"
        self.url = f"http://127.0.0.1:{port}/"
        self.loop = asyncio.new_event_loop()
        # What the client reported through on_error: (ERROR_REGISTER / ERROR_DISCOVER / ..., exception).
        self.errors: list[tuple[str, Exception]] = []
        self.client = EurekaClient(
            eureka_server=service_url or server.url,
            on_error=lambda error_type, exception: self.errors.append((error_type, exception)),
            app_name=app,
            instance_host="127.0.0.1",
            instance_ip="127.0.0.1",
            instance_port=port,
            renewal_interval_in_secs=RENEWAL_SECS,
        )
        self.started = False
        self.stopped = False

    def start(self) -> None:
        self.loop.run_until_complete(self.client.start())
        self.started = True

    def local_instances(self, app: str) -> dict:
        """The client's discovery cache for ``app``: instance id -> Instance."""
        application = self.client.applications.get_application(app)
        return {instance.instanceId: instance for instance in application.instances}

    def up_ids(self, app: str) -> set[str]:
        application = self.client.applications.get_application(app)
        return {instance.instanceId for instance in application.up_instances}

    def choose(self, app: str) -> str | None:
        """The URL the client's load balancer (walk_nodes / do_service) picks, None when nothing is UP."""
        try:
            return self.loop.run_until_complete(self.client.walk_nodes(app_name=app, walker=lambda url: url))
        except WalkNodeException:
            return None

    def computed_hashcode(self) -> str:
        # The client's own reconcile hash over its local registry (what it compares with each delta).
        return self.client._EurekaClient__get_applications_hash()

    def last_delta_hashcode(self) -> str | None:
        delta = self.client._EurekaClient__delta
        return None if delta is None else delta.appsHashcode

    def _wait_for_quiet_moment(self) -> None:
        """Return just after a heartbeat tick (PUT + registry fetch) so stop() cannot race the next one."""
        since = self.server.mark()

        def tick_done() -> bool:
            records = self.server.records()[since:]
            puts = [i for i, r in enumerate(records) if r.method == "PUT" and r.path == self.path]
            return bool(puts) and any(
                r.method == "GET" and (r.path == DELTA or FULL_FETCH.fullmatch(r.path))
                for r in records[puts[0] + 1 :]
            )

        # A tick is due every interval; allow a few, then stop anyway (the client may be failing).
        end = time.monotonic() + 5 * RENEWAL_SECS + 5
        while not tick_done() and time.monotonic() < end:
            time.sleep(0.02)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        # A client the server refuses (API accounts) never registered: stop() has nothing to cancel,
        # and its heartbeat ticks send no PUT to wait for.
        refused = self.errors and not self.client._EurekaClient__alive
        if self.started and not refused:
            self._wait_for_quiet_moment()
            self.loop.run_until_complete(self.client.stop())
        # Idle the leaked heartbeat loop (see the module docstring) so it cannot re-register.
        self.client._EurekaClient__should_register = False
        self.client._EurekaClient__should_discover = False

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.loop.close()


@pytest.fixture
def py_client(live_server):
    """A factory of started clients (on ``service_url`` if given); every client is stopped (deregistered)
    when the test ends."""
    with client_factory(partial(PyClient, live_server), PyClient.start) as start:
        yield start


@pytest.fixture
def auth_py_client(auth_live_server):
    """Clients of the node with API accounts; pass the service URL (with or without credentials)."""
    with client_factory(partial(PyClient, auth_live_server), PyClient.start) as start:
        yield start


def test_the_client_under_test_is_the_pinned_release():
    assert version("py-eureka-client") == "0.13.3"


def test_it_registers_the_instance_with_the_server(live_server, py_client, admin):
    since = live_server.mark()
    client = py_client("pyreg", 9101)

    live_server.wait_for_requests("POST", "/eureka/apps/PYREG", since=since, status=204)
    instance = admin.instance("PYREG", client.instance_id)
    assert instance is not None, "the server does not know the instance right after start()"
    assert instance["app"] == "PYREG"
    assert instance["status"] == "UP"
    assert instance["ipAddr"] == "127.0.0.1"
    assert instance["port"] == {"$": 9101, "@enabled": "true"}
    assert instance["vipAddress"] == "pyreg"
    assert instance["leaseInfo"]["renewalIntervalInSecs"] == RENEWAL_SECS
    assert instance["metadata"]["management.port"] == "9101"
    wait_until(
        lambda: client.instance_id in admin.listed_ids("PYREG"),
        timeout=5,
        message="the full registry never listed the registered instance",
    )


def test_its_heartbeats_advance_the_lease_renewal_timestamp(live_server, py_client, admin):
    client = py_client("pybeat", 9102)
    first = admin.instance("PYBEAT", client.instance_id)
    assert first is not None
    renewed_at = first["leaseInfo"]["lastRenewalTimestamp"]

    since = live_server.mark()
    beats = live_server.wait_for_requests("PUT", client.path, since=since, status=200, at_least=2, timeout=8)
    assert all("status=UP" in r.query and "lastDirtyTimestamp=" in r.query for r in beats)
    later = admin.instance("PYBEAT", client.instance_id)
    assert later is not None
    assert later["leaseInfo"]["lastRenewalTimestamp"] > renewed_at
    assert later["leaseInfo"]["registrationTimestamp"] == first["leaseInfo"]["registrationTimestamp"]
    assert live_server.count("PUT", client.path, status=404) == 0


def test_it_discovers_its_own_and_other_apps(live_server, py_client, admin):
    admin.register("PYPEER", "pypeer-1", port=9201, vip="pypeer.vip")
    client = py_client("pydisc", 9103)

    wait_until(
        lambda: (
            "pypeer-1" in client.local_instances("PYPEER")
            and client.instance_id in client.local_instances("PYDISC")
        ),
        timeout=8,
        message="the client never held both its own instance and PYPEER/pypeer-1",
    )
    peer = client.local_instances("PYPEER")["pypeer-1"]
    assert peer.status == "UP"
    assert peer.vipAddress == "pypeer.vip"
    assert peer.port.port == 9201 and peer.port.enabled
    assert peer.dataCenterInfo.name == "MyOwn"
    assert peer.metadata == {"registered.by": "interop-test"}
    assert client.choose("PYPEER") == "http://127.0.0.1:9201/"
    assert client.choose("pydisc") == client.url
    assert client.choose("NO-SUCH-APP") is None


def test_it_applies_deltas_without_a_full_refetch(live_server, py_client, admin):
    client = py_client("pydelta", 9104)
    # The first full fetch may predate the registration (read-only cache): wait until it holds itself
    # and has moved on to deltas.
    wait_until(
        lambda: client.instance_id in client.local_instances("PYDELTA"),
        timeout=8,
        message="the client never saw its own instance",
    )

    def in_sync() -> bool:
        server_hash = admin.delta()["apps__hashcode"]
        return client.computed_hashcode() == server_hash == client.last_delta_hashcode()

    live_server.wait_for_requests("GET", DELTA, since=live_server.mark(), timeout=5)
    wait_until(in_sync, timeout=5, message="the client's hash never matched the server's before the test")
    # Let the client's own registration age out of the delta queue: from now on a delta holds less
    # than the registry, and its apps__hashcode must still be the hash of the whole registry.
    wait_until(
        lambda: admin.delta_queue_length() == 0,
        timeout=DELTA_RETENTION_MS / 1000 + 8,
        message="the delta queue never emptied",
    )
    checkpoint = live_server.mark()

    # ADDED: a second instance of the client's own app.
    admin.register("PYDELTA", "pydelta-peer", port=9202)
    wait_until(
        lambda: "pydelta-peer" in client.local_instances("PYDELTA"),
        timeout=6,
        message="the ADDED instance never reached the client",
    )
    assert client.local_instances("PYDELTA")["pydelta-peer"].status == "UP"
    wait_until(in_sync, timeout=5, message="client hash, server apps__hashcode and last delta hash differ")
    delta = admin.delta()
    assert admin.listed_ids("PYDELTA", delta) == {"pydelta-peer"}

    def full_listing() -> dict | None:
        listing = admin.applications()
        both = admin.listed_ids("PYDELTA", listing) == {client.instance_id, "pydelta-peer"}
        return listing if both else None

    listing = wait_until(full_listing, timeout=5, message="the full registry never listed both instances")
    statuses = Counter(i["status"] for a in listing["application"] for i in a["instance"])
    assert delta["apps__hashcode"] == listing["apps__hashcode"] == reconcile_hashcode(statuses)

    # A change that leaves the hashcode as it is (metadata): only versions__delta tells it apart.
    hashcode = client.computed_hashcode()
    assert admin.put_metadata("PYDELTA", "pydelta-peer", {"color": "blue"}) == 200
    wait_until(
        lambda: client.local_instances("PYDELTA")["pydelta-peer"].metadata.get("color") == "blue",
        timeout=6,
        message="the metadata change never reached the client (was versions__delta bumped?)",
    )
    assert client.computed_hashcode() == hashcode

    # MODIFIED: a status change of that instance.
    assert admin.set_status("PYDELTA", "pydelta-peer", "OUT_OF_SERVICE") == 200
    wait_until(
        lambda: (
            getattr(client.local_instances("PYDELTA").get("pydelta-peer"), "status", None) == "OUT_OF_SERVICE"
        ),
        timeout=6,
        message="the MODIFIED status never reached the client",
    )
    wait_until(in_sync, timeout=5, message="hashes differ after the MODIFIED delta")
    assert "OUT_OF_SERVICE_1_" in client.computed_hashcode()

    # DELETED: the instance is cancelled.
    assert admin.cancel("PYDELTA", "pydelta-peer") == 200
    wait_until(
        lambda: "pydelta-peer" not in client.local_instances("PYDELTA"),
        timeout=6,
        message="the DELETED instance was never removed from the client",
    )
    wait_until(in_sync, timeout=5, message="hashes differ after the DELETED delta")
    assert client.instance_id in client.local_instances("PYDELTA")

    # The client got there on deltas alone.
    assert live_server.count("GET", DELTA, since=checkpoint) >= 4
    assert live_server.count("GET", FULL_FETCH, since=checkpoint) == 0, live_server.requests(since=checkpoint)


def test_a_status_override_removes_the_instance_from_its_choices(live_server, py_client, admin):
    admin.register("PYOVR", "pyovr-peer", port=9203)
    client = py_client("pyovr", 9105)
    wait_until(
        lambda: client.up_ids("PYOVR") == {client.instance_id, "pyovr-peer"},
        timeout=8,
        message="the client never saw both PYOVR instances UP",
    )

    assert admin.set_status("PYOVR", client.instance_id, "OUT_OF_SERVICE") == 200
    wait_until(
        lambda: client.up_ids("PYOVR") == {"pyovr-peer"},
        timeout=6,
        message="the overridden instance is still among the client's UP instances",
    )
    assert client.local_instances("PYOVR")[client.instance_id].status == "OUT_OF_SERVICE"
    assert {client.choose("PYOVR") for _ in range(20)} == {"http://127.0.0.1:9203/"}

    # The client keeps heartbeating "status=UP"; the override must survive that.
    since = live_server.mark()
    live_server.wait_for_requests("PUT", client.path, since=since, status=200, at_least=2, timeout=8)
    instance = admin.instance("PYOVR", client.instance_id)
    assert instance["status"] == "OUT_OF_SERVICE"
    assert instance["overriddenStatus"] == "OUT_OF_SERVICE"

    # Removing the override without a value (as Java / py clients do) leaves UNKNOWN: the next
    # heartbeat gets 404 and the client re-registers itself UP.
    since = live_server.mark()
    assert admin.delete_status_override("PYOVR", client.instance_id) == 200
    live_server.wait_for_requests("POST", "/eureka/apps/PYOVR", since=since, status=204, timeout=8)
    wait_until(
        lambda: client.instance_id in client.up_ids("PYOVR"),
        timeout=6,
        message="the instance never came back among the client's UP instances",
    )
    assert admin.instance("PYOVR", client.instance_id)["status"] == "UP"


def test_stop_cancels_the_instance_on_the_server(live_server, py_client, admin):
    client = py_client("pycancel", 9106)
    wait_until(
        lambda: client.instance_id in admin.listed_ids("PYCANCEL"),
        timeout=5,
        message="the instance was never listed",
    )

    since = live_server.mark()
    client.stop()

    assert admin.instance("PYCANCEL", client.instance_id) is None
    # stop() re-registers the instance DOWN, then cancels it.
    live_server.wait_for_requests("DELETE", client.path, since=since, timeout=5)
    log = live_server.requests(since=since)
    deletes = [i for i, r in enumerate(log) if r.method == "DELETE" and r.path == client.path]
    downs = [i for i, r in enumerate(log) if r.method == "POST" and r.path == "/eureka/apps/PYCANCEL"]
    assert deletes and log[deletes[0]].status == 200, log
    assert downs and downs[0] < deletes[0] and log[downs[0]].status == 204, log
    wait_until(
        lambda: client.instance_id not in admin.listed_ids("PYCANCEL"),
        timeout=5,
        message="the full registry still lists the cancelled instance",
    )
    assert "PYCANCEL" not in {a["name"] for a in admin.applications()["application"]}


def test_it_re_registers_after_the_server_forgets_it(live_server, py_client, admin):
    client = py_client("pyrereg", 9107)
    live_server.wait_for_requests("PUT", client.path, status=200, timeout=6)

    since = live_server.mark()
    assert admin.cancel("PYREREG", client.instance_id) == 200
    # Gone, unless a heartbeat slipped in between and the client already re-registered.
    assert admin.instance("PYREREG", client.instance_id) is None or live_server.count(
        "POST", "/eureka/apps/PYREREG", since=since
    )

    live_server.wait_for_requests("PUT", client.path, since=since, status=404, timeout=6)
    live_server.wait_for_requests("POST", "/eureka/apps/PYREREG", since=since, status=204, timeout=6)
    records = live_server.requests(since=since)
    first_404 = next(i for i, r in enumerate(records) if r.path == client.path and r.status == 404)
    first_post = next(
        i for i, r in enumerate(records) if r.method == "POST" and r.path == "/eureka/apps/PYREREG"
    )
    assert first_404 < first_post

    instance = wait_until(
        lambda: admin.instance("PYREREG", client.instance_id),
        timeout=5,
        message="the server never listed the re-registered instance",
    )
    assert instance["status"] == "UP"
    after = live_server.mark()
    live_server.wait_for_requests("PUT", client.path, since=after, status=200, timeout=6)


# --- with API accounts (EUREKA_API_AUTH) --------------------------------------------------------------


def own_requests(server: LiveServer, since: int) -> list:
    """The clients' requests (``/eureka/``), not the test's (``/eureka/v2/``)."""
    return [r for r in server.requests(since=since) if not r.path.startswith("/eureka/v2/")]


def test_with_api_accounts_it_registers_heartbeats_fetches_and_cancels(
    auth_live_server, auth_py_client, auth_admin
):
    server = auth_live_server
    auth_admin.register("PYAUTHPEER", "pyauthpeer-1", port=9301)
    since = server.mark()
    client = auth_py_client("pyauth", 9111, server.service_url("client"))

    server.wait_for_requests("POST", "/eureka/apps/PYAUTH", since=since, status=204)
    server.wait_for_requests("PUT", client.path, since=since, status=200, at_least=2, timeout=8)
    # It fetched the registry (in full, then deltas) and holds itself and the other app.
    wait_until(
        lambda: (
            "pyauthpeer-1" in client.local_instances("PYAUTHPEER")
            and client.instance_id in client.local_instances("PYAUTH")
        ),
        timeout=8,
        message="the client never held both its own instance and PYAUTHPEER/pyauthpeer-1",
    )
    server.wait_for_requests("GET", FULL_FETCH, since=since, status=200, timeout=5)
    server.wait_for_requests("GET", DELTA, since=since, status=200, timeout=5)
    # The node lists it, to a reader.
    with RegistryAdmin(server, prefix="eureka/v2/", role="reader") as reader:
        wait_until(
            lambda: client.instance_id in reader.listed_ids("PYAUTH"),
            timeout=5,
            message="the full registry never listed the instance",
        )
    refused = [r for r in own_requests(server, since) if r.status in (401, 403)]
    assert refused == [] and client.errors == [], (refused, client.errors)

    stopped = server.mark()
    client.stop()
    server.wait_for_requests("DELETE", client.path, since=stopped, status=200, timeout=5)
    assert auth_admin.instance("PYAUTH", client.instance_id) is None


@pytest.mark.parametrize("credentials", ["none", "wrong-password"])
def test_with_api_accounts_a_client_without_valid_credentials_is_refused(
    auth_live_server, auth_py_client, auth_admin, credentials
):
    server = auth_live_server
    if credentials == "none":
        url = server.service_url()
    else:
        url = server.service_url("client", password="not-the-password")
    app = f"PYREFUSED-{credentials.upper()}"
    since = server.mark()
    client = auth_py_client(app.lower(), 9112, url)

    # start() does not raise: the client reports its failed registration and fetch, and tries to register
    # again on its next heartbeat tick, refused again. (Its heartbeat thread then hangs: with no registry
    # yet, __fetch_delta calls __pull_full_registry under the asyncio lock that one takes again, a
    # py-eureka-client 0.13.3 deadlock. So it tries no more, even once its credentials would be right.)
    assert {error_type for error_type, _ in client.errors} >= {ERROR_REGISTER, ERROR_DISCOVER}, client.errors
    server.wait_for_requests("POST", f"/eureka/apps/{app}", since=since, at_least=2, timeout=8)
    assert_refused(server, since, re.compile(rf"/eureka/apps/{app}(/.*)?"))
    assert_refused(server, since, FULL_FETCH)
    assert [r for r in own_requests(server, since) if r.status != 401] == []
    assert_challenge(server)
    assert auth_admin.instance(app, client.instance_id) is None
    assert app not in {a["name"] for a in auth_admin.applications()["application"]}


def test_with_api_accounts_a_reader_reads_but_may_not_write(auth_live_server, auth_py_client, auth_admin):
    server = auth_live_server
    auth_admin.register("PYREADPEER", "pyreadpeer-1", port=9302)
    # Listed before the client's first (full) fetch: a client whose first registry is empty deadlocks on
    # its next tick (see above).
    wait_until(
        lambda: auth_admin.listed_ids("PYREADPEER") == {"pyreadpeer-1"},
        timeout=5,
        message="the full registry never listed PYREADPEER/pyreadpeer-1",
    )
    since = server.mark()
    client = auth_py_client("pyreader", 9113, server.service_url("reader"))

    # Its registration is forbidden; its registry fetches are answered.
    assert {error_type for error_type, _ in client.errors} == {ERROR_REGISTER}, client.errors
    assert_refused(server, since, re.compile(r"/eureka/apps/PYREADER(/.*)?"), status=403)
    server.wait_for_requests("GET", FULL_FETCH, since=since, status=200, timeout=5)
    wait_until(
        lambda: "pyreadpeer-1" in client.local_instances("PYREADPEER"),
        timeout=8,
        message="the reader never fetched PYREADPEER/pyreadpeer-1",
    )
    assert auth_admin.instance("PYREADER", client.instance_id) is None

    # Every kind of write by the reader, over plain HTTP: 403, and the map is unchanged.
    before = auth_admin.instance("PYREADPEER", "pyreadpeer-1")
    instance = "apps/PYREADPEER/pyreadpeer-1"
    with httpx.Client(
        base_url=server.url, auth=server.accounts["reader"].auth, headers={"Accept": "application/json"}
    ) as reader:
        body = {"instance": {**before, "instanceId": "pyreadpeer-2", "hostName": "pyreadpeer-2"}}
        writes = {
            "register": reader.post("apps/PYREADPEER", json=body),
            "renew": reader.put(instance, params={"status": "UP"}),
            "status": reader.put(f"{instance}/status", params={"value": "OUT_OF_SERVICE"}),
            "metadata": reader.put(f"{instance}/metadata", params={"color": "red"}),
            "cancel": reader.delete(instance),
        }
        assert {name: r.status_code for name, r in writes.items()} == dict.fromkeys(writes, 403)
        listing = reader.get("apps/")
        assert listing.status_code == 200
        assert reader.get("apps/delta").status_code == 200
    assert auth_admin.listed_ids("PYREADPEER", listing.json()["applications"]) == {"pyreadpeer-1"}
    after = auth_admin.instance("PYREADPEER", "pyreadpeer-1")
    assert (after["status"], after["metadata"], after["lastDirtyTimestamp"]) == (
        before["status"],
        before["metadata"],
        before["lastDirtyTimestamp"],
    )
    assert auth_admin.instance("PYREADPEER", "pyreadpeer-2") is None
