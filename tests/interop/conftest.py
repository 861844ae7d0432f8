"""Fixtures of the interoperability suites: a live node on loopback, the test's own view of it, and
toolchain checks.

The suites drive real, unmodified Eureka clients over HTTP, so they need a real server process (not
Django's test client): ``live_server`` starts ``gunicorn -c deploy/gunicorn.conf.py`` or ``python -m
registry.serving.granian_server`` on a free 127.0.0.1 port with one-second jobs and an access log the
tests read to count requests. Every test of ``tests/interop`` runs once on each of the two servers
(``http_server``); ``EUREKA_TEST_SERVER=gunicorn`` (or ``granian``) runs it on that one alone.

``auth_live_server`` is the same node with API accounts on (``EUREKA_API_AUTH=true``): its database is
migrated and holds one account per role (``API_ACCOUNTS``, made with ``manage.py eureka_account``), and
``LiveServer.service_url(role)`` is the service URL with that account's credentials in it, as a client's
users configure it. ``RegistryAdmin`` speaks to such a node with the peer account.

``admin`` and ``auth_admin`` are the test's own ``RegistryAdmin`` of ``live_server`` and
``auth_live_server``, through the prefix its module names in ``ADMIN_PREFIX`` (and ``AUTH_ADMIN_PREFIX``
where the node with API accounts is read through another one): the prefix its client does not use, so
the access log tells the client's requests from the test's. ``client_factory`` starts a suite's clients
and closes them all when the test ends; ``DriverProcess`` is a client program driven through JSON lines.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ParamSpec, Protocol, Self, TypeVar
from urllib.parse import quote

import httpx
import pytest

from tests.factories import instance_body
from tests.ports import free_port

PROJECT_ROOT = Path(__file__).resolve().parents[2]

STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0

# One request per line, tab-separated: method, path (percent-decoded, as Django routes it), query, status.
ACCESS_LOG_FORMAT = "\t".join(["%(m)s", "%(U)s", "%(q)s", "%(s)s"])

# The HTTP servers of the nodes the tests start: gunicorn (deploy/gunicorn.conf.py, as ``make run``) and
# granian (registry/serving/granian_server.py). The suites of tests/interop run on both (``http_server``),
# or on the one EUREKA_TEST_SERVER names; a node started elsewhere runs on SERVER unless its test says.
SERVERS = ("gunicorn", "granian")
SERVER = os.environ.get("EUREKA_TEST_SERVER", "gunicorn")
if SERVER not in SERVERS:
    raise ValueError(f"EUREKA_TEST_SERVER must be gunicorn or granian, not {SERVER!r}")
INTEROP_SERVERS = (SERVER,) if "EUREKA_TEST_SERVER" in os.environ else SERVERS

# Jobs every second so a change is visible to readers (read-only cache) within ~1 s. Delta entries
# live 4 s: several client polls (1 s), yet short enough that a test can wait for an instance to leave
# the delta window and check that apps__hashcode still covers the whole registry.
DELTA_RETENTION_MS = 4000
SERVER_ENV = {
    "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": "1000",
    "EUREKA_USE_READ_ONLY_RESPONSE_CACHE": "true",
    "EUREKA_EVICTION_INTERVAL_MS": "1000",
    "EUREKA_DELTA_RETENTION_TIMER_INTERVAL_MS": "1000",
    "EUREKA_RETENTION_TIME_IN_DELTA_QUEUE_MS": str(DELTA_RETENTION_MS),
    "EUREKA_EMBEDDED_SCHEDULER": "true",
    "LOG_LEVEL": "WARNING",
}


# API accounts (registry/access/): with EUREKA_API_AUTH on, every /eureka/ request needs HTTP Basic
# credentials of one of them. A missing or wrong one gets 401 with this challenge, a write of a reader 403.
AUTH_ENV = {"EUREKA_API_AUTH": "true"}
BASIC_CHALLENGE = 'Basic realm="eureka", charset="UTF-8"'


@dataclass(frozen=True)
class Account:
    role: str
    username: str
    password: str

    @property
    def auth(self) -> tuple[str, str]:
        """For httpx's ``auth=`` (preemptive Basic)."""
        return (self.username, self.password)


API_ACCOUNTS = {
    role: Account(role, f"interop-{role}", f"{role}-Secret-42") for role in ("client", "reader", "peer")
}


def require_toolchain(name: str, ok: bool, how_to_install: str) -> None:
    """Skip the calling test when a toolchain is missing; fail instead when CI demands every suite."""
    if ok:
        return
    message = f"{name} is not available: {how_to_install}"
    if os.environ.get("EUREKA_REQUIRE_ALL_SUITES") == "1":
        pytest.fail(f"{message} (EUREKA_REQUIRE_ALL_SUITES=1 forbids skipping this suite)", pytrace=False)
    pytest.skip(message)


class DriverProcess:
    """A client driver (the JS and Java suites' programs): a process that prints one JSON object a line,
    its events (other lines come as ``{"event": "output", "line": ...}``, and ``{"event": "eof"}``
    ends them), collected by a reader thread, and reads commands as JSON lines on stdin. Closing its
    stdin tells it to stop its client and exit. ``label`` names it in failures ("the JS client");
    ``env``, when given, is its whole environment (else the test process's)."""

    def __init__(
        self,
        command: list[str],
        cwd: Path,
        label: str,
        close_timeout: float,
        env: dict[str, str] | None = None,
    ):
        self.label = label
        self.close_timeout = close_timeout
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env=env,
        )
        self.events: list[dict] = []
        self._cond = threading.Condition()
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, name=label, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            text = line.rstrip("\n")
            try:
                event = json.loads(text)
                if not isinstance(event, dict):
                    raise ValueError
            except ValueError:
                event = {"event": "output", "line": text}
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self.events.append({"event": "eof"})
            self._cond.notify_all()

    def mark(self) -> int:
        with self._cond:
            return len(self.events)

    def events_since(self, since: int = 0) -> list[dict]:
        with self._cond:
            return self.events[since:]

    def named(self, name: str, since: int = 0, **fields) -> list[dict]:
        """The events called ``name`` after ``since`` whose fields match."""
        return [
            e
            for e in self.events_since(since)
            if e.get("event") == name and all(e.get(k) == v for k, v in fields.items())
        ]

    def tail(self, lines: int = 30) -> str:
        with self._cond:
            return "\n".join(json.dumps(e) for e in self.events[-lines:])

    def wait_for(self, name: str, since: int = 0, at_least: int = 1, timeout: float = 10.0, **fields) -> list:
        """Wait (bounded) for ``at_least`` events called ``name`` whose fields match, after ``since``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = self.named(name, since, **fields)
                if len(found) >= at_least:
                    return found
                left = deadline - time.monotonic()
                ended = bool(self.events) and self.events[-1].get("event") == "eof"
                if left <= 0 or ended:
                    pytest.fail(
                        f"no {at_least} x {name!r} {fields or ''} from {self.label} "
                        f"{'(process ended) ' if ended else ''}within {timeout}s; "
                        f"last events:\n{self.tail()}",
                        pytrace=False,
                    )
                self._cond.wait(min(left, 0.2))

    def send(self, command: dict) -> int:
        """Write ``command`` with a new ``id`` (its reply carries it back); that id."""
        self._next_id += 1
        command["id"] = self._next_id
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._next_id

    def close(self) -> None:
        """End of stdin makes the driver stop its client and exit; kill it if it hangs."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
            except OSError:
                pass
            try:
                self.process.wait(timeout=self.close_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._reader.join(timeout=5)


def wait_until(
    predicate: Callable[[], object],
    timeout: float,
    message: str | Callable[[], str],
    interval: float = 0.1,
):
    """Poll ``predicate`` until it returns something truthy and return that; fail at the deadline.

    ``message`` may be a callable, evaluated only on failure (to report the state at that moment).
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            pytest.fail(f"timed out after {timeout:.1f}s: {text}", pytrace=False)
        time.sleep(interval)


@dataclass(frozen=True)
class AccessRecord:
    method: str
    path: str
    query: str
    status: int


PathMatcher = str | re.Pattern[str]


def _matches(record: AccessRecord, method: str | None, path: PathMatcher | None, status: int | None) -> bool:
    if method is not None and record.method != method:
        return False
    if status is not None and record.status != status:
        return False
    if path is None:
        return True
    if isinstance(path, re.Pattern):
        return path.fullmatch(record.path) is not None
    return record.path == path


@dataclass
class LiveServer:
    """A running registry node. ``url`` is the client service URL (``http://127.0.0.1:PORT/eureka/``)."""

    url: str
    base_url: str
    port: int
    access_log_path: Path
    server_log_path: Path
    process: subprocess.Popen
    # The API accounts of a node with EUREKA_API_AUTH on, by role (empty: the open API).
    accounts: dict[str, Account] = field(default_factory=dict)
    # httpx's ``verify=`` for this node: a node serving HTTPS (EUREKA_TLS_CERT_FILE) is reached with the
    # client context its test gave ``running_server`` (the test CA trusted, a client certificate maybe).
    verify: ssl.SSLContext | bool = True

    def service_url(
        self, role: str | None = None, prefix: str = "/eureka/", password: str | None = None
    ) -> str:
        """The service URL with the ``role`` account's credentials in it, ``http://user:pw@host:port/eureka/``
        as users configure a client; without ``role``, the plain URL. ``password`` replaces the account's."""
        if role is None:
            return f"{self.base_url}{prefix}"
        account = self.accounts[role]
        secret = account.password if password is None else password
        scheme, _, host = self.base_url.partition("://")
        return f"{scheme}://{quote(account.username, safe='')}:{quote(secret, safe='')}@{host}{prefix}"

    def records(self) -> list[AccessRecord]:
        """Every request the server logged so far, in order."""
        try:
            text = self.access_log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            parts = line.split("\t")
            if len(parts) != 4 or not parts[3].isdigit():
                continue
            method, path, query, status = parts
            out.append(AccessRecord(method, path, "" if query == "-" else query, int(status)))
        return out

    def mark(self) -> int:
        """A checkpoint in the access log: pass it as ``since`` to look only at later requests."""
        return len(self.records())

    def requests(
        self,
        method: str | None = None,
        path: PathMatcher | None = None,
        since: int = 0,
        status: int | None = None,
    ) -> list[AccessRecord]:
        return [r for r in self.records()[since:] if _matches(r, method, path, status)]

    def count(
        self,
        method: str | None = None,
        path: PathMatcher | None = None,
        since: int = 0,
        status: int | None = None,
    ) -> int:
        """How many logged requests match ``method`` and ``path`` (exact string or full-match regex)."""
        return len(self.requests(method, path, since, status))

    def wait_for_requests(
        self,
        method: str | None,
        path: PathMatcher | None,
        since: int = 0,
        status: int | None = None,
        at_least: int = 1,
        timeout: float = 10.0,
    ) -> list[AccessRecord]:
        """Wait (bounded) until ``at_least`` matching requests are logged after ``since``."""

        def found() -> list[AccessRecord]:
            matching = self.requests(method, path, since, status)
            return matching if len(matching) >= at_least else []

        return wait_until(
            found,
            timeout,
            lambda: (
                f"{at_least} x {method} {path} (status {status}) in the access log after line {since}; "
                f"last requests: {self.records()[-15:]}"
            ),
        )

    def server_log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.server_log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no server log)"


class RegistryAdmin:
    """The test's own view of the server, over plain httpx with JSON (``Accept: application/json``).

    ``prefix`` is the protocol prefix the test uses (``eureka/`` or ``eureka/v2/``): pick the one the client
    under test does *not* use, so the access log tells the client's requests from the test's.
    Instances it registers are cancelled by ``cleanup()``, which a ``with`` block calls at its end. On a
    node with API accounts it sends the credentials of the ``role`` account (the peer's unless told: it
    may do everything).
    """

    def __init__(self, server: LiveServer, prefix: str, role: str = "peer"):
        self.server = server
        self.prefix = prefix
        account = server.accounts.get(role)
        self.http = httpx.Client(
            base_url=f"{server.base_url}/{prefix}",
            headers={"Accept": "application/json"},
            timeout=5.0,
            auth=account.auth if account else None,
            verify=server.verify,
        )
        self._registered: list[tuple[str, str]] = []

    @staticmethod
    def _path(app: str, instance_id: str, suffix: str = "") -> str:
        return f"apps/{quote(app, safe='')}/{quote(instance_id, safe='')}{suffix}"

    def register(
        self,
        app: str,
        instance_id: str,
        port: int,
        vip: str | None = None,
        status: str = "UP",
        host: str = "127.0.0.1",
    ) -> None:
        """POST a registration shaped like the Java client's (and py-eureka-client's) JSON."""
        now = int(time.time() * 1000)
        body = instance_body(
            app=app.upper(),
            host=host,
            port=port,
            instance_id=instance_id,
            status=status,
            vip=vip,
            last_dirty=now,
            ipAddr="127.0.0.1",
            metadata={"registered.by": "interop-test"},
            statusPageUrl=f"http://{host}:{port}/info",
            healthCheckUrl=f"http://{host}:{port}/health",
            lastUpdatedTimestamp=str(now),
        )
        response = self.http.post(f"apps/{quote(app, safe='')}", json=body)
        assert response.status_code == 204, (
            f"register {app}/{instance_id}: {response.status_code} {response.text}"
        )
        self._registered.append((app, instance_id))

    def instance(self, app: str, instance_id: str) -> dict | None:
        """The live record from ``GET apps/{app}/{id}`` (not cached), or None on 404."""
        response = self.http.get(self._path(app, instance_id))
        if response.status_code == 404:
            return None
        assert response.status_code == 200, f"GET {app}/{instance_id}: {response.status_code} {response.text}"
        return response.json()["instance"]

    def applications(self) -> dict:
        """``GET apps/`` (served from the read-only cache, so up to ~1 s behind)."""
        response = self.http.get("apps/")
        assert response.status_code == 200, response.text
        return response.json()["applications"]

    def delta(self) -> dict:
        response = self.http.get("apps/delta")
        assert response.status_code == 200, response.text
        return response.json()["applications"]

    def delta_queue_length(self) -> int:
        """How many changes the server's delta queue holds (``GET status``, computed live)."""
        response = self.http.get("status")
        assert response.status_code == 200, response.text
        return response.json()["status"]["registry"]["delta_queue_length"]

    def listed_ids(self, app: str, listing: dict | None = None) -> set[str]:
        """Instance ids of ``app`` in the full registry (or in ``listing``, e.g. a delta)."""
        listing = self.applications() if listing is None else listing
        return {
            instance["instanceId"]
            for application in listing["application"]
            if application["name"] == app.upper()
            for instance in application["instance"]
        }

    def set_status(self, app: str, instance_id: str, value: str) -> int:
        return self.http.put(self._path(app, instance_id, "/status"), params={"value": value}).status_code

    def delete_status_override(self, app: str, instance_id: str) -> int:
        return self.http.delete(self._path(app, instance_id, "/status")).status_code

    def put_metadata(self, app: str, instance_id: str, entries: dict[str, str]) -> int:
        return self.http.put(self._path(app, instance_id, "/metadata"), params=entries).status_code

    def cancel(self, app: str, instance_id: str) -> int:
        return self.http.delete(self._path(app, instance_id)).status_code

    def cleanup(self) -> None:
        for app, instance_id in self._registered:
            try:
                self.cancel(app, instance_id)
            except httpx.HTTPError:
                pass
        self._registered.clear()
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()


def raw_request(
    port: int, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """One request to 127.0.0.1:``port`` with its target and headers sent exactly as given (no
    normalised path, no added Accept-Encoding, unlike httpx); (status, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest(method, target, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        if body or method in ("POST", "PUT"):
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body or None)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _gunicorn() -> Path:
    # The gunicorn of the interpreter running the tests (the project's virtualenv).
    return Path(sys.executable).with_name("gunicorn")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=SHUTDOWN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=SHUTDOWN_TIMEOUT_S)


def server_env(workdir: Path, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a live node whose database lives in ``workdir``."""
    return {
        **os.environ,
        **SERVER_ENV,
        "DATABASE_URL": f"sqlite:///{workdir / 'db.sqlite3'}",
        # The node's files too (its warm-restart snapshot): a node never starts from another test's map.
        "EUREKA_DATA_DIR": str(workdir),
        **(extra_env or {}),
    }


def _start(
    workdir: Path,
    extra_env: dict[str, str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    accounts: dict[str, Account] | None = None,
    server: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> LiveServer:
    port = port or free_port(host)
    access_log = workdir / "access.log"
    server_log = workdir / "server.log"
    env = server_env(workdir, extra_env)
    if (server or SERVER) == "granian":
        serve = [sys.executable, "-m", "registry.serving.granian_server"]
    else:
        serve = [str(_gunicorn()), "-c", "deploy/gunicorn.conf.py"]
    command = [
        *serve,
        "--bind",
        f"{host}:{port}",
        "--access-logfile",
        str(access_log),
        "--access-logformat",
        ACCESS_LOG_FORMAT,
    ]
    with server_log.open("ab") as log:
        process = subprocess.Popen(
            command, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    https = bool((extra_env or {}).get("EUREKA_TLS_CERT_FILE"))
    base_url = f"{'https' if https else 'http'}://{host}:{port}"
    verify: ssl.SSLContext | bool = tls if https and tls is not None else True
    server = LiveServer(
        url=f"{base_url}/eureka/",
        base_url=base_url,
        port=port,
        access_log_path=access_log,
        server_log_path=server_log,
        process=process,
        accounts=dict(accounts or {}),
        verify=verify,
    )
    # With API accounts on, the readiness probe reads with the reader's credentials.
    probe_auth = server.accounts["reader"].auth if server.accounts else None
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"the node exited with {process.returncode} before answering:\n{server.server_log_tail()}"
            )
        try:
            answer = httpx.get(f"{base_url}/eureka/apps", timeout=1.0, auth=probe_auth, verify=verify)
            if answer.status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if time.monotonic() >= deadline:
            _stop(process)
            raise RuntimeError(
                f"the node did not answer GET /eureka/apps within {STARTUP_TIMEOUT_S:.0f}s:\n"
                f"{server.server_log_tail()}"
            )
        time.sleep(0.1)


@pytest.fixture(autouse=True)
def _live_server_helper():
    """Shadow pytest-django's autouse helper of the same name.

    pytest-django has its own ``live_server`` (an in-process Django server) and an autouse helper that,
    whenever a test uses a fixture called ``live_server``, asks for ``transactional_db`` and toggles that
    server's settings. Ours is a separate gunicorn process that needs neither, so the helper does nothing
    for the tests under this directory.
    """
    yield


@contextmanager
def running_server(
    workdir: Path,
    extra_env: dict[str, str] | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    accounts: dict[str, Account] | None = None,
    server: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> Iterator[LiveServer]:
    """A node with its files in ``workdir``, stopped (TERM, then KILL) on exit: gunicorn, or granian
    with ``server="granian"`` (unless given: ``EUREKA_TEST_SERVER``, gunicorn by default).

    It listens on ``host`` (another loopback address such as ``127.0.0.3`` lets a node and a Java Eureka
    server tell each other apart by host) and on ``port``, a free one unless given. ``accounts``: the API
    accounts its database holds (see ``auth_live_server``), for the readiness probe and the tests.
    A node whose ``extra_env`` sets EUREKA_TLS_CERT_FILE serves HTTPS: its URLs are https://, and the
    readiness probe (and ``RegistryAdmin``, through ``LiveServer.verify``) reach it with ``tls``, a
    client context that trusts its certificate (tests/serving/tls_files.py makes both).
    """
    gunicorn = _gunicorn()
    require_toolchain("gunicorn", gunicorn.exists(), f"expected {gunicorn}; run `make install`")
    try:
        node = _start(workdir, extra_env, host, port, accounts, server, tls)
    except RuntimeError as first_error:
        # The free port may have been taken between probing and binding: one more try (on a new port
        # unless the caller chose it).
        try:
            node = _start(workdir, extra_env, host, port, accounts, server, tls)
        except RuntimeError as second_error:
            pytest.fail(f"could not start the node: {first_error}\n---\n{second_error}", pytrace=False)
    try:
        yield node
    finally:
        _stop(node.process)


@pytest.fixture(scope="module", autouse=True, params=INTEROP_SERVERS)
def http_server(request) -> str:
    """The HTTP server of the nodes the test starts: each test of tests/interop runs on gunicorn and on
    granian (module by module), or on the one ``EUREKA_TEST_SERVER`` names."""
    return request.param


@pytest.fixture(scope="module")
def live_server(http_server, tmp_path_factory) -> Iterator[LiveServer]:
    """A registry node for one test module."""
    with running_server(tmp_path_factory.mktemp("live_server"), server=http_server) as server:
        yield server


# Run in one Python process (one Django start instead of four): ``manage.py migrate``, then
# ``manage.py eureka_account NAME --role ROLE`` per account with its password in EUREKA_ACCOUNT_PASSWORD,
# as an operator runs them.
_CREATE_ACCOUNTS = """
import json, os, sys
import django
from django.core.management import call_command
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")
django.setup()
call_command("migrate", interactive=False, verbosity=0)
for username, role, password in json.loads(sys.argv[1]):
    os.environ["EUREKA_ACCOUNT_PASSWORD"] = password
    call_command("eureka_account", username, role=role)
"""


@pytest.fixture(scope="session")
def api_accounts_database(tmp_path_factory) -> Path:
    """A migrated SQLite database holding ``API_ACCOUNTS``, made once per session; each auth node
    gets a copy."""
    workdir = tmp_path_factory.mktemp("api_accounts")
    accounts = json.dumps([[a.username, a.role, a.password] for a in API_ACCOUNTS.values()])
    done = subprocess.run(
        [sys.executable, "-c", _CREATE_ACCOUNTS, accounts],
        cwd=PROJECT_ROOT,
        env=server_env(workdir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        pytest.fail(f"could not create the API accounts:\n{done.stdout}{done.stderr}", pytrace=False)
    return workdir / "db.sqlite3"


@pytest.fixture(scope="module")
def auth_live_server(http_server, tmp_path_factory, api_accounts_database) -> Iterator[LiveServer]:
    """A registry node with API accounts on (``EUREKA_API_AUTH=true``) for one test module.

    Each account reads once before the tests: the node hashes a password the first time it sees it
    (about half a second of CPU, more on a busy machine), then remembers the verdict.
    """
    workdir = tmp_path_factory.mktemp("auth_live_server")
    shutil.copyfile(api_accounts_database, workdir / "db.sqlite3")
    with running_server(workdir, AUTH_ENV, accounts=API_ACCOUNTS, server=http_server) as server:
        for account in server.accounts.values():
            response = httpx.get(f"{server.url}apps/", auth=account.auth, timeout=60)
            assert response.status_code == 200, f"{account.username}: {response.status_code} {response.text}"
        yield server


@pytest.fixture
def admin(request, live_server) -> Iterator[RegistryAdmin]:
    """The test's view of ``live_server``, through its module's ``ADMIN_PREFIX``."""
    with RegistryAdmin(live_server, prefix=request.module.ADMIN_PREFIX) as admin:
        yield admin


@pytest.fixture
def auth_admin(request, auth_live_server) -> Iterator[RegistryAdmin]:
    """The test's view of ``auth_live_server`` with the peer account, through its module's
    ``AUTH_ADMIN_PREFIX`` (``ADMIN_PREFIX`` if it names none)."""
    prefix = getattr(request.module, "AUTH_ADMIN_PREFIX", request.module.ADMIN_PREFIX)
    with RegistryAdmin(auth_live_server, prefix=prefix) as admin:
        yield admin


class Closeable(Protocol):
    def close(self) -> None: ...


Client = TypeVar("Client", bound=Closeable)
Arguments = ParamSpec("Arguments")


@contextmanager
def client_factory(
    make: Callable[Arguments, Client], ready: Callable[[Client], object] | None = None
) -> Iterator[Callable[Arguments, Client]]:
    """``start(...)``: a client made by ``make(...)``, then made ready by ``ready(client)`` if given
    (started, or waited for). Every client it made is closed on exit, one that never got ready too."""
    clients: list[Client] = []

    def start(*args: Arguments.args, **kwargs: Arguments.kwargs) -> Client:
        client = make(*args, **kwargs)
        clients.append(client)
        if ready is not None:
            ready(client)
        return client

    try:
        yield start
    finally:
        for client in clients:
            client.close()


def assert_refused(
    server: LiveServer, since: int, path: PathMatcher, status: int = 401
) -> list[AccessRecord]:
    """Every request to ``path`` logged after ``since`` (at least one) got ``status``: the node refused
    the client each time, and never answered it otherwise."""
    server.wait_for_requests(None, path, since=since, timeout=10)
    records = server.requests(None, path, since)
    assert records and all(r.status == status for r in records), records
    return records


def assert_challenge(server: LiveServer, path: str = "apps/") -> None:
    """A request without credentials gets 401 with the Basic challenge that tells clients to send them."""
    response = httpx.get(f"{server.url}{path}", headers={"Accept": "application/json"}, timeout=5)
    assert response.status_code == 401, response.text
    assert response.headers.get("WWW-Authenticate") == BASIC_CHALLENGE, response.headers
