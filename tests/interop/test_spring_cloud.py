"""Real Spring Boot apps with ``spring-cloud-starter-netflix-eureka-client`` against a live node.

``tests/interop/spring/`` holds one small app (``app/src``) built against three Spring Cloud trains
(one Maven module each, built by ``tests/interop/maven.py`` and reused while its ``target/build.stamp``
matches its sources), which together cover the HTTP transports users run:

* ``restclient``: Spring Cloud 2025.1.4 on Boot 4.0.7 (Netflix 5.0.x), whose default is RestClient;
* ``webclient``: the same jar with ``eureka.client.webclient.enabled=true``;
* ``resttemplate`` on ``sc-2025.0``: Spring Cloud 2025.0.0 on Boot 3.5.7 (Netflix 4.3.x), whose default
  is RestTemplate (Apache HttpClient 5);
* ``resttemplate`` on ``sc-2021.0``: Spring Cloud 2021.0.9 on Boot 2.7.18 (Netflix 3.1.8, Netflix
  eureka-client 1.10.18), the last ``javax.*`` generation. Its starter excludes Jersey 1, so its default
  is RestTemplate on Apache HttpClient 4, which sends every body with a ``Content-Length`` (no chunking);
  Jersey 1 only runs if an app puts ``jersey-client`` 1.x back on its classpath.

The same jar runs as "service" or "consumer" (``interop.role``). Both register and expose
``GET /peers/{service}`` (what ``DiscoveryClient.getInstances`` returns); the consumer also logs each
change of what it discovers. The module starts one service and one consumer per transport (eight JVMs;
with ``-k``, only those of the selected transports) and keeps them running for every test, so the soak
test runs every transport at once.

The apps use the ``/eureka/`` prefix; the test checks the server through ``/eureka/v2/`` so the access
log tells the two apart. The apps log ``com.netflix.discovery.DiscoveryClient`` at DEBUG, so every
delta fetch, full fetch, hashcode mismatch and heartbeat of each app is in its own log.

Every test fails on any ``Exception`` or ``ERROR`` in an app's log: Spring's transports decode with a
strict Jackson mapper and log decoding failures with a stack trace.

``TestWithApiAccounts`` runs, per transport, two more apps against a node with API accounts on
(``auth_live_server``), side by side: one with the client account's credentials in
``eureka.client.service-url.defaultZone`` (``http://user:password@host:port/eureka/``, which every Spring
transport turns into a Basic ``Authorization`` header on each request, unasked), and one without, which
the node refuses.
"""

from __future__ import annotations

import re
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.interop import maven
from tests.interop.conftest import (
    LiveServer,
    RegistryAdmin,
    assert_challenge,
    assert_refused,
    wait_until,
)
from tests.ports import free_port

pytestmark = pytest.mark.interop

# The test's own requests (``admin``) go through /eureka/v2/, the apps' through /eureka/.
ADMIN_PREFIX = "eureka/v2/"
SPRING_DIR = Path(__file__).resolve().parent / "spring"
# Eight JVMs started one after the other on a 2-core machine that also runs the server.
APP_START_TIMEOUT_S = 120.0
APP_STOP_TIMEOUT_S = 30.0
SOAK_S = 180.0
SOAK_CHECK_EVERY_S = 5.0
# Heap and JIT settings that keep eight JVMs cheap on two cores.
JVM_OPTIONS = maven.jvm_options("256m")
# A line of an app log that fails the suite.
PROBLEM = re.compile(r"Exception|\bERROR\b")
# The one problem tolerated, and only while the apps are starting: TimedSupervisorTask gives each
# heartbeat / fetch run one interval (1 s) and logs a TimeoutException when the JVM got too little CPU
# while the next JVM booted. It is the client's scheduler timing out, never an HTTP or decoding error.
STARTUP_STALL_WARNING = "TimedSupervisorTask  : task supervisor timed out"
STARTUP_STALL_EXCEPTION = "java.util.concurrent.TimeoutException"
# Pause after the last app is up, so the startup window covers the stalls the last boot caused.
SETTLE_S = 3.0
FULL_FETCH = re.compile(r"/eureka/apps/?")
DELTA = "/eureka/apps/delta"
# DiscoveryClient DEBUG/INFO lines the tests count (the same in Netflix eureka-client 1.10.x and 2.0.x).
DELTA_LINE = "Got delta update with apps hashcode"
FULL_FETCH_LINE = "Getting all instance registry info from the eureka server"
MISMATCH_LINE = "The Reconcile hashcodes do not match"


@dataclass(frozen=True)
class Transport:
    name: str
    train: str  # the Maven module, i.e. the Spring Cloud train
    log_line: str  # what DiscoveryClientOptionalArgsConfiguration logs at startup
    args: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.name}-{self.train}"


TRANSPORTS = (
    Transport("restclient", "sc-2025.1", "Eureka HTTP Client uses RestClient."),
    Transport(
        "webclient",
        "sc-2025.1",
        "Eureka HTTP Client uses WebClient.",
        ("--eureka.client.webclient.enabled=true",),
    ),
    Transport("resttemplate", "sc-2025.0", "Eureka HTTP Client uses RestTemplate."),
    Transport("resttemplate", "sc-2021.0", "Eureka HTTP Client uses RestTemplate."),
)
# Every line a transport choice logs, Jersey's included (Spring Cloud Netflix 3.1.x logs it when Jersey 1
# is on the classpath): an app that logs any other than its own runs the wrong transport.
TRANSPORT_LOG_LINES = {t.log_line for t in TRANSPORTS} | {"Eureka HTTP Client uses Jersey"}
TRAINS = sorted({t.train for t in TRANSPORTS})
# The jars (name prefixes under BOOT-INF/lib/) that pin each train's generation: Spring Boot, Spring Cloud
# Netflix's eureka client, and the Netflix eureka-client it wraps.
TRAIN_JARS = {
    "sc-2025.1": ("spring-boot-4.0.", "spring-cloud-netflix-eureka-client-5.0.", "eureka-client-2.0."),
    "sc-2025.0": ("spring-boot-3.5.", "spring-cloud-netflix-eureka-client-4.3.", "eureka-client-2.0."),
    "sc-2021.0": ("spring-boot-2.7.", "spring-cloud-netflix-eureka-client-3.1.", "eureka-client-1.10."),
}


# --------------------------------------------------------------------------------------------- build


def _jar(train: str) -> Path:
    return SPRING_DIR / train / "target" / f"interop-{train}.jar"


@pytest.fixture(scope="session")
def java() -> str:
    return maven.require_java()


@pytest.fixture(scope="session")
def spring_jars() -> dict[str, Path]:
    """One jar per train (``maven.build``), rebuilt only when its stamp does not match its sources'
    digest: the train's pom and the shared app source (``app/``)."""
    app_sources = sorted(p for p in (SPRING_DIR / "app").rglob("*") if p.is_file())
    return {
        train: maven.build(
            SPRING_DIR / train,
            "package",
            [SPRING_DIR / train / "pom.xml", *app_sources],
            product=_jar(train),
            needs=f"the {train} dependencies",
        )
        for train in TRAINS
    }


# ---------------------------------------------------------------------------------------------- apps


class SpringApp(maven.JvmProcess):
    """One ``java -jar`` of the interop app, logging to a file; stopped with SIGTERM (a graceful shutdown)."""

    def __init__(
        self,
        java: str,
        jar: Path,
        transport: Transport,
        role: str,
        server: LiveServer,
        workdir: Path,
        watch: str = "",
        service_url: str | None = None,
    ):
        self.transport = transport
        self.role = role
        self.server = server
        # e.g. interop-resttemplate-sc-2021-0-service: unique per transport and train.
        self.name = f"interop-{transport}-{role}".replace(".", "-")
        self.app = self.name.upper()
        self.port = free_port()
        # The app's instance id: host:app:port (Spring's default format, host pinned to 127.0.0.1).
        self.instance_id = f"127.0.0.1:{self.name}:{self.port}"
        self.app_path = f"/eureka/apps/{self.app}"
        self.path = f"{self.app_path}/{self.instance_id}"
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            java,
            *JVM_OPTIONS,
            "-jar",
            str(jar),
            f"--server.port={self.port}",
            f"--spring.application.name={self.name}",
            f"--interop.role={role}",
            f"--eureka.client.service-url.defaultZone={service_url or server.url}",
            *([f"--interop.watch={watch}"] if watch else []),
            *transport.args,
        ]
        super().__init__(command, workdir / f"{self.name}.log", APP_STOP_TIMEOUT_S)
        # Log offset where the startup window ends (see ``problems``); 0 until every app is up.
        self.settled = 0
        self.http = httpx.Client(base_url=self.url, timeout=10.0)

    def __repr__(self) -> str:
        return f"<{self.name} :{self.port}>"

    def ready(self) -> bool:
        """Up (actuator health answers) and registered (the server answered its POST with 204)."""
        self.fail_if_exited()
        try:
            if self.http.get("/actuator/health").status_code != 200:
                return False
        except httpx.TransportError:
            return False
        return self.server.count("POST", self.app_path, status=204) > 0

    def stop(self) -> int | None:
        """SIGTERM and wait: Spring deregisters (DOWN, then DELETE) during its graceful shutdown."""
        self.http.close()
        return super().stop()

    # ------------------------------------------------------------------------------ what it shows

    def peers(self, service: str) -> list[dict]:
        """``DiscoveryClient.getInstances(service)`` inside the app."""
        response = self.http.get(f"/peers/{service}")
        assert response.status_code == 200, (
            f"{self} GET /peers/{service}: {response.status_code} {response.text}"
        )
        return response.json()

    def peer_ids(self, service: str) -> list[str]:
        return sorted(p["instanceId"] for p in self.peers(service))

    def registry_status(self) -> dict:
        """``GET /actuator/serviceregistry``: the app's own record read back with ``GET apps/{APP}/{id}``."""
        response = self.http.get("/actuator/serviceregistry")
        assert response.status_code == 200, (
            f"{self} GET serviceregistry: {response.status_code} {response.text}"
        )
        return response.json()

    def set_registry_status(self, status: str) -> httpx.Response:
        """``POST /actuator/serviceregistry {"status": ...}``, as a user (or a deploy tool) does."""
        return self.http.post("/actuator/serviceregistry", json={"status": status})

    # ------------------------------------------------------------------------------------- its log

    def problems(self, since: int = 0) -> list[str]:
        """Lines with ``Exception`` or ``ERROR`` after ``since``, each with its stack trace.

        Before ``settled`` (the end of the startup window, set by the fixture) the scheduler timeouts of
        ``STARTUP_STALL_WARNING`` are left out; after it, nothing is.
        """
        out = []
        if since < self.settled:
            out += [
                block
                for previous, block in _problem_blocks(self.log_text(since, self.settled))
                if not (STARTUP_STALL_WARNING in previous and block.startswith(STARTUP_STALL_EXCEPTION))
            ]
        out += [block for _, block in _problem_blocks(self.log_text(max(since, self.settled)))]
        return out


def _problem_blocks(text: str) -> list[tuple[str, str]]:
    """(the last non-blank line before it, the block): each run of problem lines with 25 lines of trace."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if PROBLEM.search(line) and (i == 0 or not PROBLEM.search(lines[i - 1])):
            previous = next((p for p in reversed(lines[:i]) if p.strip()), "")
            out.append((previous, "\n".join(lines[i : i + 25])))
    return out


def assert_clean_logs(apps: list[SpringApp], marks: dict[str, int] | None = None) -> None:
    found = {str(app): app.problems((marks or {}).get(app.name, 0)) for app in apps}
    found = {name: problems for name, problems in found.items() if problems}
    assert not found, "Exception/ERROR in app logs:\n" + "\n----\n".join(
        f"{name}:\n" + "\n..\n".join(problems[:3]) for name, problems in found.items()
    )


@dataclass
class Pair:
    transport: Transport
    service: SpringApp
    consumer: SpringApp

    @property
    def apps(self) -> list[SpringApp]:
        return [self.service, self.consumer]


def _transports_in_use(session: pytest.Session) -> list[Transport]:
    """The transports the selected tests of this module run on (``-k sc-2021.0`` boots two JVMs, not eight).

    A test parametrized with ``pair`` needs its transport; one that takes ``spring_apps`` whole (the
    soak) needs them all.
    """
    wanted = set()
    for item in session.items:
        if item.module is None or item.module.__name__ != __name__:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "pair" in callspec.params:
            wanted.add(callspec.params["pair"])
        elif "spring_apps" in getattr(item, "fixturenames", ()):
            return list(TRANSPORTS)
    return [t for t in TRANSPORTS if t in wanted]


@pytest.fixture(scope="module")
def spring_apps(request, java, spring_jars, live_server, tmp_path_factory) -> Iterator[dict[str, Pair]]:
    """A service and a consumer per transport in use, all running for the whole module, stopped at its end.

    They start one at a time (each until it answers and is registered): eight JVMs booting at once on
    two cores would stall the 1-second heartbeat and fetch tasks of the running ones for long. The
    stalls one boot can still cause are tolerated until every app is up (``SpringApp.problems``).
    """
    workdir = tmp_path_factory.mktemp("spring_apps")
    pairs: dict[str, Pair] = {}
    for transport in _transports_in_use(request.session):
        jar = spring_jars[transport.train]
        service = SpringApp(java, jar, transport, "service", live_server, workdir)
        consumer = SpringApp(java, jar, transport, "consumer", live_server, workdir, watch=service.name)
        pairs[str(transport)] = Pair(transport, service, consumer)
    apps = [app for pair in pairs.values() for app in pair.apps]
    try:
        for app in apps:
            app.start()
            wait_until(
                app.ready,
                APP_START_TIMEOUT_S,
                lambda app=app: f"{app} never became ready:\n{app.log_tail()}",
                interval=0.5,
            )
        time.sleep(SETTLE_S)
        for app in apps:
            app.settled = app.log_mark()
        yield pairs
    finally:
        for app in apps:
            app.stop()


def status_overrides(admin: RegistryAdmin) -> dict[str, str]:
    response = admin.http.get("serverinfo/statusoverrides")
    assert response.status_code == 200, response.text
    return response.json()


def spring_requests(server: LiveServer, since: int = 0) -> list:
    """Requests made by the apps (``/eureka/``), not by the test's admin client (``/eureka/v2/``)."""
    return [r for r in server.requests(since=since) if not r.path.startswith("/eureka/v2/")]


@pytest.fixture(params=TRANSPORTS, ids=str)
def pair(request, spring_apps) -> Pair:
    return spring_apps[str(request.param)]


# --------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("train", TRAINS)
def test_each_train_ships_the_expected_spring_cloud_netflix(spring_jars, train):
    with zipfile.ZipFile(spring_jars[train]) as jar:
        libs = [Path(name).name for name in jar.namelist() if name.startswith("BOOT-INF/lib/")]
    missing = [prefix for prefix in TRAIN_JARS[train] if not any(lib.startswith(prefix) for lib in libs)]
    assert not missing, f"{train} ships no {missing}: {sorted(libs)}"
    assert not [lib for lib in libs if lib.startswith("jersey-")], (
        "Jersey would replace the Spring transports"
    )


# --- with API accounts (EUREKA_API_AUTH) --------------------------------------------------------------
# Two more apps per transport, booted side by side by ``auth_apps`` (the module's eight are not used).


@dataclass
class AuthApps:
    transport: Transport
    # With the client account's credentials in its service URL, and with none.
    with_credentials: SpringApp
    without_credentials: SpringApp


@pytest.fixture(scope="class", params=TRANSPORTS, ids=str)
def auth_apps(request, java, spring_jars, auth_live_server, tmp_path_factory) -> Iterator[AuthApps]:
    """Per transport, the two apps against the node with API accounts, booted side by side."""
    transport: Transport = request.param
    server = auth_live_server
    workdir = tmp_path_factory.mktemp("spring_auth_apps")
    jar = spring_jars[transport.train]
    apps = AuthApps(
        transport,
        SpringApp(java, jar, transport, "auth", server, workdir, service_url=server.service_url("client")),
        SpringApp(java, jar, transport, "noauth", server, workdir, service_url=server.service_url()),
    )

    def refused_once_up() -> bool:
        app = apps.without_credentials
        app.fail_if_exited()
        try:
            if app.http.get("/actuator/health").status_code != 200:
                return False
        except httpx.TransportError:
            return False
        return server.count("POST", app.app_path) > 0

    try:
        apps.with_credentials.start()
        apps.without_credentials.start()
        for app, ready in (
            (apps.with_credentials, apps.with_credentials.ready),
            (apps.without_credentials, refused_once_up),
        ):
            wait_until(
                ready,
                APP_START_TIMEOUT_S,
                lambda app=app: f"{app} never became ready:\n{app.log_tail()}",
                interval=0.5,
            )
        time.sleep(SETTLE_S)
        for app in (apps.with_credentials, apps.without_credentials):
            app.settled = app.log_mark()
        yield apps
    finally:
        apps.with_credentials.stop()
        apps.without_credentials.stop()


class TestWithApiAccounts:
    def test_a_client_with_credentials_registers_heartbeats_fetches_and_cancels(
        self, auth_apps, auth_live_server, auth_admin
    ):
        server, app = auth_live_server, auth_apps.with_credentials
        log = app.log_text()
        assert {line for line in TRANSPORT_LOG_LINES if line in log} == {auth_apps.transport.log_line}
        assert [r.status for r in server.requests("POST", app.app_path)] == [204]
        since = server.mark()
        server.wait_for_requests("PUT", app.path, since=since, status=200, at_least=2, timeout=10)
        # Its registry (a full fetch, then deltas) holds itself; its actuator reads its own record.
        wait_until(
            lambda: app.peer_ids(app.name) == [app.instance_id],
            timeout=10,
            message=lambda: f"{app} never discovered itself:\n{app.log_tail()}",
        )
        wait_until(
            lambda: DELTA_LINE in app.log_text(), timeout=10, message="no delta fetch in the app's log"
        )
        assert app.registry_status() == {"status": "UP", "overriddenStatus": "UNKNOWN"}
        # The node lists it, to a reader.
        with RegistryAdmin(server, prefix="eureka/v2/", role="reader") as reader:
            assert app.instance_id in reader.listed_ids(app.app)
        # Nothing it sent was refused: the credentials went with each request, the first one too.
        own = [r for r in server.requests() if r.path.startswith(app.app_path)]
        assert own and all(r.status < 400 for r in own), own
        assert_clean_logs([app])

        # A graceful shutdown cancels the lease.
        since = server.mark()
        returncode = app.stop()
        assert returncode in (0, 143), f"{app} exited with {returncode}:\n{app.log_tail()}"
        server.wait_for_requests("DELETE", app.path, since=since, status=200, timeout=5)
        assert auth_admin.instance(app.app, app.instance_id) is None

    def test_a_client_without_credentials_is_refused(self, auth_apps, auth_live_server, auth_admin):
        server, app = auth_live_server, auth_apps.without_credentials
        since = server.mark()
        # It keeps trying (registration, heartbeats), and each time the node answers 401.
        server.wait_for_requests("POST", app.app_path, since=since, timeout=10)
        assert_refused(server, 0, re.compile(re.escape(app.app_path) + "(/.*)?"))
        assert_challenge(server)
        assert auth_admin.instance(app.app, app.instance_id) is None
        assert app.app not in {a["name"] for a in auth_admin.applications()["application"]}
        # The app runs on, empty-handed, and its log says why: its registration got a 401.
        assert app.peers(app.name) == []
        log = app.log_text()
        assert "Request execution failure with status code 401" in log, app.log_tail()
        assert "registration failed" in log, app.log_tail()


def test_each_app_runs_the_transport_under_test(pair):
    for app in pair.apps:
        log = app.log_text()
        used = {line for line in TRANSPORT_LOG_LINES if line in log}
        assert used == {pair.transport.log_line}, f"{app}: {used or 'no transport line'}\n{app.log_tail()}"


def test_it_registers_with_the_server(pair, live_server, admin):
    for app in pair.apps:
        posts = live_server.requests("POST", app.app_path)
        assert posts and all(r.status == 204 for r in posts), posts
        instance = admin.instance(app.app, app.instance_id)
        assert instance is not None, f"the server has no {app.instance_id}"
        assert instance["instanceId"] == app.instance_id
        assert instance["app"] == app.app
        assert instance["hostName"] == "127.0.0.1"
        assert instance["ipAddr"] == "127.0.0.1"
        assert instance["status"] == "UP"
        assert instance["overriddenStatus"] == "UNKNOWN"
        assert instance["port"] == {"$": app.port, "@enabled": "true"}
        assert instance["securePort"]["@enabled"] == "false"
        assert instance["vipAddress"] == app.name
        assert instance["secureVipAddress"] == app.name
        assert instance["dataCenterInfo"]["name"] == "MyOwn"
        assert instance["leaseInfo"]["renewalIntervalInSecs"] == 1
        assert instance["leaseInfo"]["durationInSecs"] == 5
        assert instance["metadata"]["management.port"] == str(app.port)
        assert instance["metadata"]["interop.role"] == app.role
        assert instance["healthCheckUrl"] == f"{app.url}/actuator/health"
        assert instance["statusPageUrl"] == f"{app.url}/actuator/info"
        assert app.instance_id in admin.listed_ids(app.app)

        since = live_server.mark()
        beats = live_server.wait_for_requests(
            "PUT", app.path, since=since, status=200, at_least=2, timeout=10
        )
        assert all("status=UP" in r.query and "lastDirtyTimestamp=" in r.query for r in beats), beats
        assert live_server.count("PUT", app.path, since=since, status=404) == 0
        assert "Heartbeat status: 200" in app.log_text()
    assert_clean_logs(pair.apps)


def test_the_consumer_discovers_the_service(pair, live_server):
    service, consumer = pair.service, pair.consumer
    peers = wait_until(
        lambda: consumer.peers(service.name),
        timeout=10,
        message=lambda: f"{consumer} never discovered {service.name}:\n{consumer.log_tail()}",
    )
    assert len(peers) == 1, peers
    peer = peers[0]
    assert peer["instanceId"] == service.instance_id
    assert peer["serviceId"] in (service.name, service.app)
    assert peer["host"] == "127.0.0.1"
    assert peer["port"] == service.port
    assert peer["uri"] == service.url
    assert peer["status"] == "UP"
    assert peer["vipAddress"] == service.name
    assert peer["metadata"]["management.port"] == str(service.port)
    assert peer["metadata"]["interop.role"] == "service"
    # Both ways, and through the service list.
    assert service.peer_ids(consumer.name) == [consumer.instance_id]
    services = {s.lower() for s in consumer.http.get("/services").json()}
    assert {service.name, consumer.name} <= services, services
    # The consumer role logs what it discovers.
    line = f"discovered {service.name}: [{service.instance_id}@127.0.0.1:{service.port}]"
    wait_until(lambda: line in consumer.log_text(), timeout=5, message=f"the consumer never logged {line!r}")
    # The client reached that state on deltas after its first full fetch.
    assert DELTA_LINE in consumer.log_text()
    assert MISMATCH_LINE not in consumer.log_text()
    # The actuator reads the app's own record back (GET apps/{APP}/{id}, strict Jackson decoding).
    since = live_server.mark()
    assert service.registry_status() == {"status": "UP", "overriddenStatus": "UNKNOWN"}
    lookup = live_server.wait_for_requests("GET", service.path, since=since, timeout=5)
    assert lookup[0].status == 200
    assert_clean_logs(pair.apps)


def test_a_status_override_through_the_actuator_and_its_cancel_override(pair, live_server, admin):
    service, consumer = pair.service, pair.consumer
    wait_until(
        lambda: consumer.peers(service.name), timeout=10, message="precondition: service not discovered"
    )
    log_marks = {app.name: app.log_mark() for app in pair.apps}

    # OUT_OF_SERVICE: PUT apps/{APP}/{id}/status?value=OUT_OF_SERVICE&lastDirtyTimestamp=...
    since = live_server.mark()
    response = service.set_registry_status("OUT_OF_SERVICE")
    assert response.status_code in (200, 204), f"{response.status_code} {response.text}"
    (put,) = live_server.wait_for_requests("PUT", f"{service.path}/status", since=since, timeout=10)
    assert put.status == 200, put
    assert "value=OUT_OF_SERVICE" in put.query and "lastDirtyTimestamp=" in put.query, put
    instance = admin.instance(service.app, service.instance_id)
    assert instance["status"] == "OUT_OF_SERVICE"
    assert instance["overriddenStatus"] == "OUT_OF_SERVICE"
    assert status_overrides(admin).get(service.instance_id) == "OUT_OF_SERVICE"

    # Clients only use UP instances: the consumer drops the service, on deltas.
    wait_until(
        lambda: consumer.peers(service.name) == [],
        timeout=15,
        message=lambda: (
            f"{consumer} still discovers the OUT_OF_SERVICE service: {consumer.peers(service.name)}"
        ),
    )
    wait_until(
        lambda: f"discovered {service.name}: []" in consumer.log_text(log_marks[consumer.name]),
        timeout=5,
        message="the consumer never logged that it lost the service",
    )
    wait_until(
        lambda: (
            service.registry_status() == {"status": "OUT_OF_SERVICE", "overriddenStatus": "OUT_OF_SERVICE"}
        ),
        timeout=10,
        message=lambda: f"the service's own view: {service.registry_status()}",
    )
    # The app keeps heartbeating status=UP; the override must hold.
    after = live_server.mark()
    live_server.wait_for_requests("PUT", service.path, since=after, status=200, at_least=3, timeout=15)
    instance = admin.instance(service.app, service.instance_id)
    assert (instance["status"], instance["overriddenStatus"]) == ("OUT_OF_SERVICE", "OUT_OF_SERVICE")
    assert consumer.peers(service.name) == []

    # CANCEL_OVERRIDE: DELETE apps/{APP}/{id}/status?lastDirtyTimestamp=... (no value).
    since = live_server.mark()
    response = service.set_registry_status("CANCEL_OVERRIDE")
    assert response.status_code in (200, 204), f"{response.status_code} {response.text}"
    (delete,) = live_server.wait_for_requests("DELETE", f"{service.path}/status", since=since, timeout=10)
    assert delete.status == 200, delete
    assert "lastDirtyTimestamp=" in delete.query and "value=" not in delete.query, delete
    assert service.instance_id not in status_overrides(admin)
    # Without a value the server leaves UNKNOWN: the next heartbeat gets 404 and the app re-registers UP.
    live_server.wait_for_requests("PUT", service.path, since=since, status=404, timeout=10)
    live_server.wait_for_requests("POST", service.app_path, since=since, status=204, timeout=10)
    wait_until(
        lambda: (
            (i := admin.instance(service.app, service.instance_id)) is not None
            and (i["status"], i["overriddenStatus"]) == ("UP", "UNKNOWN")
        ),
        timeout=10,
        message=lambda: (
            f"server record after CANCEL_OVERRIDE: {admin.instance(service.app, service.instance_id)}"
        ),
    )
    wait_until(
        lambda: consumer.peer_ids(service.name) == [service.instance_id],
        timeout=15,
        message=lambda: f"{consumer} never rediscovered the service: {consumer.peers(service.name)}",
    )
    assert consumer.peers(service.name)[0]["status"] == "UP"
    wait_until(
        lambda: service.registry_status() == {"status": "UP", "overriddenStatus": "UNKNOWN"},
        timeout=10,
        message=lambda: f"the service's own view: {service.registry_status()}",
    )
    # Only the expected non-2xx: the one 404 heartbeat that triggers the re-registration.
    unexpected = [r for r in spring_requests(live_server, since) if r.status >= 400 and r.status != 404]
    assert not unexpected, unexpected
    assert_clean_logs(pair.apps, log_marks)


def test_every_transport_soaks_for_three_minutes(spring_apps, live_server, admin):
    """Heartbeats and delta fetches of all eight apps at once, for SOAK_S seconds, with nothing going wrong.

    Every train soaks in the same three minutes: one more pair costs CPU, not wall time.
    """
    pairs = list(spring_apps.values())
    apps = [app for pair in pairs for app in pair.apps]
    since = live_server.mark()
    log_marks = {app.name: app.log_mark() for app in apps}
    started = time.monotonic()
    checks = 0
    while True:
        for pair in pairs:
            for app in pair.apps:
                assert app.alive(), f"{app} died:\n{app.log_tail()}"
            assert pair.consumer.peer_ids(pair.service.name) == [pair.service.instance_id], pair
            assert pair.service.peer_ids(pair.consumer.name) == [pair.consumer.instance_id], pair
        checks += 1
        elapsed = time.monotonic() - started
        if elapsed >= SOAK_S:
            break
        time.sleep(min(SOAK_CHECK_EVERY_S, SOAK_S - elapsed))
    elapsed = time.monotonic() - started

    records = spring_requests(live_server, since)
    failed = [r for r in records if r.status >= 400]
    assert not failed, f"non-2xx answers to the apps during the soak: {failed[:20]}"
    # At least 60% of the nominal one heartbeat and one fetch per second per app (the CPU is shared).
    at_least = int(elapsed * 0.6)
    summary = {}
    for app in apps:
        log = app.log_text(log_marks[app.name])
        summary[app.name] = {
            "heartbeats": live_server.count("PUT", app.path, since=since, status=200),
            "deltas": log.count(DELTA_LINE),
            "full_fetches": log.count(FULL_FETCH_LINE),
            "hash_mismatches": log.count(MISMATCH_LINE),
        }
    for name, counts in summary.items():
        assert counts["heartbeats"] >= at_least, (name, summary)
        assert counts["deltas"] >= at_least, (name, summary)
        assert counts["full_fetches"] == 0 and counts["hash_mismatches"] == 0, (name, summary)
    assert live_server.count("GET", DELTA, since=since) >= at_least * len(apps)
    assert live_server.count("GET", FULL_FETCH, since=since) == 0
    assert all(r.method in ("GET", "PUT") for r in records), {(r.method, r.path) for r in records}
    assert checks >= SOAK_S / SOAK_CHECK_EVERY_S
    assert_clean_logs(apps)


def test_a_graceful_shutdown_cancels_the_lease(pair, live_server, admin):
    """Stops the consumer (the last test to use it): DOWN re-registration, then DELETE, then gone."""
    service, consumer = pair.service, pair.consumer
    assert_clean_logs(pair.apps)
    since = live_server.mark()
    returncode = consumer.stop()
    assert returncode in (0, 143), f"{consumer} exited with {returncode}:\n{consumer.log_tail()}"
    records = spring_requests(live_server, since)
    deletes = [i for i, r in enumerate(records) if r.method == "DELETE" and r.path == consumer.path]
    assert deletes and records[deletes[0]].status == 200, records
    assert admin.instance(consumer.app, consumer.instance_id) is None
    wait_until(
        lambda: service.peers(consumer.name) == [],
        timeout=10,
        message=lambda: f"{service} still discovers the stopped consumer: {service.peers(consumer.name)}",
    )
    assert_clean_logs([service])
    # Shutting down interrupts a registry fetch that may be in flight (WebClient blocks in Mono.block):
    # the client logs that InterruptedException; anything else after the stop is still a failure.
    after_stop = [block for block in consumer.problems() if "InterruptedException" not in block]
    assert not after_stop, "Exception/ERROR in the stopped consumer's log:\n" + "\n..\n".join(after_stop[:3])
