"""The one way the benchmarks start servers: a node of ours, its Redis and Celery, a reader, ``make stack``,
and the stock Spring Cloud Eureka Server they are compared with.

Every server runs on a free loopback port, in a session of its own (so Ctrl-C reaches the benchmark,
which then stops it in order), and gets SIGTERM should the benchmark die, even by SIGKILL (Linux), so
none outlives a run. A node gets a data directory of its own (warm restart stays on, as deployed, but
never restores another node's or an earlier run's registry) with a migrated SQLite database in it.

    with Node(workdir, env={"EUREKA_HEALTH_CHECKS": "true"}) as node:   # started, answering /healthz
        node.url          # http://127.0.0.1:PORT/eureka/, the serviceUrl clients configure
        node.base         # http://127.0.0.1:PORT
        node.worker_pid() # gunicorn's worker: where the lease map lives
        node.rss_mb()     # resident memory of the tree; worker_rss_mb(), pss_mb()
    # stopped: SIGTERM, then SIGKILL to the whole session after a bound

Production mode (``Node(..., redis=Redis(...).start())``) adds the node's own Celery worker and beat;
``reader(node, workers)`` starts a reader beside such a node; ``Stack`` runs ``deploy/stack.sh``;
``spring_eureka(jar, workdir)`` the stock Spring Cloud Eureka Server (built by ``compare.sh``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import http.client
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
GUNICORN = BIN / "gunicorn"
LOADGEN = ROOT / "bench" / "bin" / "loadgen"
HOST = "127.0.0.1"

NODE_CONF = "deploy/gunicorn.conf.py"
READER_CONF = "deploy/gunicorn_reader.conf.py"
GRANIAN_MODULE = "registry.serving.granian_server"
# The HTTP servers a node of ours can run on (``Node(server=...)``), the default first.
HTTP_SERVERS = ("gunicorn", "granian")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((HOST, port)) == 0


def die_with_parent() -> None:
    """In the child before exec: SIGTERM when the benchmark dies, even by SIGKILL (Linux). Our own few
    lines rather than tests.interop.maven's, which would import pytest."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def rss_mb(pid: int) -> float:
    """VmRSS of one process, MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# ------------------------------------------------------------------------------------ database


_template: Path | None = None


def _migrated_template() -> Path:
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="bench-db-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        template = folder / "db.sqlite3"
        env = {**os.environ, "DATABASE_URL": f"sqlite:///{template}", "LOG_LEVEL": "WARNING"}
        env.pop("REDIS_URL", None)  # migrating needs no Redis (nor, then, a control secret)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
        )
        _template = template
    return _template


def node_database_url(folder: Path) -> str:
    """``DATABASE_URL`` of a migrated database in ``folder`` (kept if there is one already: a node
    restarted on its folder keeps its data).

    A node on an empty database serves the protocol, but everything kept in the database fails over and
    over (the webhook relay's inserts, Celery's webhook tasks): work that a real deployment, which
    migrates first, never does. Migrating takes a while (bench/README.md, "Running"), so one run
    migrates a template once and copies it for each node."""
    database = folder / "db.sqlite3"
    if not database.exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_migrated_template(), database)
    return f"sqlite:///{database}"


# ------------------------------------------------------------------------------------ load generator


def build_loadgen() -> Path:
    """bench/bin/loadgen, built when missing or older than its sources."""
    sources = list((ROOT / "bench" / "loadgen").glob("*.go"))
    if LOADGEN.exists() and all(LOADGEN.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return LOADGEN
    if shutil.which("go") is None:
        raise SystemExit("needs Go 1.22+ to build bench/bin/loadgen")
    LOADGEN.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", str(LOADGEN), "."], cwd=ROOT / "bench" / "loadgen", check=True)
    return LOADGEN


def loadgen_metrics(stdout: str) -> dict[str, float]:
    """The load generator's ``phase metric value`` lines as {metric: value} (numbers only)."""
    metrics: dict[str, float] = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and not line.startswith("#"):
            with contextlib.suppress(ValueError):
                metrics[parts[1]] = float(parts[2])
    return metrics


# ------------------------------------------------------------------------------------ processes


class Process:
    """One server process in a session of its own, its output in ``log``."""

    def __init__(
        self,
        name: str,
        command: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        cpus: set[int] | None = None,
    ):
        self.name = name
        self.command = command
        self.log = log
        self.env = env
        self.cwd = cwd
        self.cpus = cpus
        self.process: subprocess.Popen | None = None
        # A file that holds the pid (= session id) while the process runs: compare.sh's EXIT trap reads
        # it, should the benchmark die before its own clean-up.
        self.pid_file: Path | None = None

    def start(self, wait: bool = False) -> Process:
        """Spawn it (``wait`` is for servers that know when they are ready: ``Node``)."""
        cpus = self.cpus

        def in_child() -> None:
            die_with_parent()
            if cpus:
                os.sched_setaffinity(0, cpus)

        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=in_child,
            )
        if self.pid_file:
            self.pid_file.write_text(f"{self.process.pid}\n")
        return self

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError(f"{self.name} is not started")
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tree(self) -> list[psutil.Process]:
        """The process and its children (gunicorn's worker, Celery's pool)."""
        if not self.alive():
            return []
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def pids(self) -> list[int]:
        return [p.pid for p in self.tree()]

    def rss_mb(self) -> float:
        """Resident memory summed over the tree."""
        return self._tree_mb(lambda p: p.memory_info().rss)

    def pss_mb(self) -> float:
        """Proportional set size over the tree: a page that a gunicorn master and its worker share (the
        interpreter, what the master loaded before forking) counts once, where RSS summed over the tree
        counts it twice. For one process (a JVM) the two are the same."""
        return self._tree_mb(lambda p: p.memory_full_info().pss)

    def _tree_mb(self, read: Callable[[psutil.Process], int]) -> float:
        total = 0
        for p in self.tree():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
                total += read(p)
        return total / 2**20

    def terminate(self) -> None:
        """SIGTERM, without waiting (``stop_all`` signals several servers, then waits for each)."""
        self._sigterm()

    def _sigterm(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, up to ``timeout`` for a clean exit (a node writes its warm-restart snapshot then),
        then SIGKILL to the whole session: no gunicorn worker outlives its master."""
        if self.process is None:
            return
        self._sigterm()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.pid_file:
            self.pid_file.write_text("")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def stop_all(servers: Iterable[Process | None], timeout: float = STOP_TIMEOUT_S) -> None:
    """Stop several servers at once: all get SIGTERM first, so their shutdowns overlap."""
    started = [server for server in servers if server is not None]
    for server in started:
        server.terminate()
    for server in started:
        server.stop(timeout)


def http_status(base: str, path: str, timeout: float = 2.0) -> int | None:
    """Status of ``GET base+path`` (no Accept header), None when nothing answers."""
    host, _, port = base.removeprefix("http://").partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


class Server(Process):
    """A process that serves HTTP on ``port`` of the loopback address."""

    def __init__(self, name: str, command: list[str], log: Path, port: int, **kwargs):
        super().__init__(name, command, log, **kwargs)
        self.port = port

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """The serviceUrl, as Eureka clients configure it."""
        return f"{self.base}/eureka/"

    def wait_ready(
        self,
        ready: Callable[[], bool] | None = None,
        timeout: float = START_TIMEOUT_S,
        path: str = "/healthz",
    ) -> float:
        """Wait until ``ready()`` (default: ``GET path`` answers 200); seconds waited. Exits the benchmark
        with the log's tail if the server dies or does not answer in time."""
        started = time.monotonic()
        check = ready or (lambda: http_status(self.base, path) == 200)
        while time.monotonic() - started < timeout:
            if not self.alive():
                raise SystemExit(f"{self.name} exited during start-up; {self.log}:\n{self.log_tail()}")
            with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
                if check():
                    return time.monotonic() - started
            time.sleep(0.05)
        self.stop()
        raise SystemExit(f"{self.name} did not start within {timeout:.0f} s; {self.log}:\n{self.log_tail()}")


# ------------------------------------------------------------------------------------ our node


class Redis(Server):
    """A redis-server for production mode: loopback, no snapshots, its files in ``workdir``."""

    def __init__(self, workdir: Path, port: int | None = None):
        server = shutil.which("redis-server")
        if server is None:
            raise SystemExit("production mode needs redis-server (sudo apt-get install redis-server)")
        port = port or free_port()
        command = [server, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no"]
        super().__init__("redis", command, workdir / "redis.log", port, cwd=workdir)
        workdir.mkdir(parents=True, exist_ok=True)

    def redis_url(self, db: int = 0) -> str:
        return f"redis://{HOST}:{self.port}/{db}"

    def start(self, wait: bool = True) -> Redis:
        super().start()
        self.wait_ready(self.answers, timeout=10)
        return self

    def answers(self) -> bool:
        with socket.create_connection((HOST, self.port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")


class Node(Server):
    """A node of ours: gunicorn with deploy/gunicorn.conf.py (as ``make run`` starts it), or granian
    (``server="granian"``: registry/serving/granian_server.py), embedded mode, or production mode with
    its own Celery worker and beat when ``redis`` (or ``redis_url``) is given.

    ``env`` overrides the environment (this process's, then the node's data directory, database and
    ``LOG_LEVEL=WARNING``). ``gunicorn_args`` go after the conf (``--worker-class gevent`` ...).
    ``start()`` waits until ``GET /healthz`` answers 200 unless told otherwise."""

    def __init__(
        self,
        workdir: Path,
        env: dict[str, str] | None = None,
        *,
        name: str = "node",
        port: int | None = None,
        conf: str = NODE_CONF,
        gunicorn_args: Iterable[str] = (),
        redis: Redis | None = None,
        redis_url: str | None = None,
        redis_db: int = 0,
        celery_worker_args: Iterable[str] = ("--concurrency=2",),
        cpus: set[int] | None = None,
        log: Path | None = None,
        server: str = HTTP_SERVERS[0],
    ):
        workdir.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        self.workdir = workdir
        self.redis_url = redis_url or (redis.redis_url(redis_db) if redis is not None else None)
        base_env = {
            **os.environ,
            "DATABASE_URL": node_database_url(workdir),
            "EUREKA_DATA_DIR": str(workdir),
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
        base_env.pop("REDIS_URL", None)
        if self.redis_url:
            base_env |= {
                "REDIS_URL": self.redis_url,
                "EUREKA_EMBEDDED": "false",
                "EUREKA_CONTROL_SECRET": "bench-control-secret",
                "EUREKA_CONTROL_URL": f"http://{HOST}:{port}",
                "SECRET_KEY": "bench-" + "x" * 50,
            }
        if server == "granian":
            # registry/serving/granian_server.py; ``gunicorn_args`` are then its options (--threads ...).
            command = [str(BIN / "python"), "-m", GRANIAN_MODULE, "--bind", f"{HOST}:{port}", *gunicorn_args]
        else:
            command = [str(GUNICORN), "-c", conf, "--bind", f"{HOST}:{port}", *gunicorn_args]
        node_env = {**base_env, **(env or {})}
        super().__init__(name, command, log or workdir / "node.log", port, env=node_env, cpus=cpus)
        self.helpers: list[Process] = []
        if self.redis_url and conf == NODE_CONF:
            celery = [str(BIN / "celery"), "-A", "eureka_site"]
            schedule = f"--schedule={workdir / 'celerybeat-schedule'}"
            for role, args in (
                ("worker", ["worker", "--loglevel=WARNING", *celery_worker_args]),
                ("beat", ["beat", "--loglevel=WARNING", schedule]),
            ):
                log = workdir / f"celery-{role}.log"
                self.helpers.append(
                    Process(f"{name} celery {role}", [*celery, *args], log, self.env, cpus=cpus)
                )

    def manage(self, *args: str) -> None:
        """``manage.py ARGS`` with the node's environment (e.g. ``eureka_account`` before ``start``)."""
        subprocess.run(
            [str(BIN / "python"), "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def start(self, wait: bool = True, ready: Callable[[], bool] | None = None) -> Node:
        super().start()
        if wait:
            self.wait_ready(ready)
        for helper in self.helpers:
            helper.start()
        return self

    def worker_pids(self) -> list[int]:
        """gunicorn's workers: where the lease map lives."""
        return [p.pid for p in self.tree()[1:]]

    def worker_pid(self) -> int:
        """The one gunicorn worker (the deploy conf runs one)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            workers = self.worker_pids()
            if len(workers) == 1:
                return workers[0]
            time.sleep(0.1)
        raise SystemExit(f"{self.name}: expected one gunicorn worker, found {self.worker_pids()}")

    def worker_rss_mb(self) -> float:
        return rss_mb(self.worker_pid())

    def helper_pids(self) -> list[int]:
        """Production mode: the Celery worker (with its pool) and beat."""
        return [pid for helper in self.helpers for pid in helper.pids()]

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        # The node and its Celery processes get SIGTERM together, so their shutdowns overlap.
        self.terminate()
        for helper in self.helpers:
            helper.stop(timeout)
        super().stop(timeout)

    def terminate(self) -> None:
        for helper in self.helpers:
            helper.terminate()
        super().terminate()


class Mesh(Process):
    """``manage.py mesh`` beside ``node`` (docs/mesh.md): xDS and DNS on free loopback ports, with no
    per-address stream cap and no DNS rate limit (the benchmark's clients all come from 127.0.0.1).
    ``wait_ready(ready)`` waits until ``ready()`` (the caller's check that it serves)."""

    def __init__(self, node: Node, workdir: Path):
        self.xds_port = free_port()
        self.dns_port = free_port()
        env = {
            **(node.env or {}),
            "EUREKA_MESH_NODE_URL": node.base,
            "EUREKA_XDS_PORT": str(self.xds_port),
            "EUREKA_XDS_BIND": HOST,
            "EUREKA_XDS_STREAMS_PER_ADDRESS_MAX": "0",
            "EUREKA_DNS_PORT": str(self.dns_port),
            "EUREKA_DNS_RATE_PER_ADDRESS": "0",
        }
        super().__init__("mesh", [str(BIN / "python"), "manage.py", "mesh"], workdir / "mesh.log", env=env)

    def wait_ready(self, ready: Callable[[], bool], timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise SystemExit(f"the mesh process exited; {self.log}:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                if ready():
                    return
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"the mesh process did not serve within {timeout:.0f} s; {self.log}")

    def usage(self) -> tuple[float, float]:
        """(resident MiB, CPU seconds so far)."""
        process = psutil.Process(self.process.pid)
        times = process.cpu_times()
        return process.memory_info().rss / 2**20, times.user + times.system


def reader(node: Node, workers: int, workdir: Path | None = None) -> Node:
    """A reader (deploy/gunicorn_reader.conf.py) with ``workers`` processes beside a production-mode
    node, serving from its Redis; started and answering /healthz."""
    if not node.redis_url:
        raise SystemExit("a reader needs a node in production mode")
    reader_node = Node(
        workdir or node.workdir,
        {key: node.env[key] for key in ("EUREKA_CONTROL_URL", "EUREKA_CONTROL_SECRET", "SECRET_KEY")},
        name=f"reader x{workers}",
        conf=READER_CONF,
        gunicorn_args=["--workers", str(workers)],
        redis_url=node.redis_url,
        log=(workdir or node.workdir) / f"reader-{workers}.log",
    )
    return reader_node.start()


class Stack(Server):
    """``deploy/stack.sh`` (``make stack``: migrations, gunicorn, Celery worker and beat) on free loopback
    ports, with a redis-server of its own (no snapshots) and files in ``workdir``."""

    def __init__(self, workdir: Path, env: dict[str, str] | None = None):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        # Redis here, not stack.sh's (which keeps its data in the tree's var/redis); stack.sh finds it
        # answering at REDIS_URL and uses it.
        self.redis = Redis(workdir)
        port = free_port()
        stack_env = {
            **os.environ,
            "PORT": str(port),
            "REDIS_URL": self.redis.redis_url(0),
            "EUREKA_DATA_DIR": str(workdir),
            "EUREKA_ENV_FILE": str(workdir / "no.env"),  # not the developer's deploy/.env
            # Its own secret key, so stack.sh does not create var/stack-secret-key in the tree.
            "SECRET_KEY": secrets.token_urlsafe(50),
            "LOG_LEVEL": os.environ.get("LOG_LEVEL", "WARNING"),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        stack_env.pop("SECRET_KEY_FILE", None)
        stack_env.pop("EUREKA_CONTROL_URL", None)
        super().__init__(
            "make stack", ["bash", "deploy/stack.sh"], workdir / "stack.log", port, env=stack_env
        )
        self.started: list[psutil.Process] = []

    def start(self, wait: bool = True, timeout: float = 120.0) -> Stack:
        self.redis.start()
        super().start()
        if wait:
            self.wait_ready(timeout=timeout, path="/readyz")
        # Everything under stack.sh, so that the stop can make sure nothing is left.
        with contextlib.suppress(psutil.Error):
            self.started = psutil.Process(self.process.pid).children(recursive=True)
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        # stack.sh stops its processes on SIGTERM; its session may outlive it, so each is made sure of.
        super().stop(timeout)
        for process in self.started:
            with contextlib.suppress(psutil.Error):
                if process.is_running():
                    process.kill()
        self.redis.stop(10)


def spring_eureka(jar: Path, workdir: Path, heap: str = "1g", java: str | None = None) -> Server:
    """The stock Spring Cloud Eureka Server (the jar tests/interop/sce builds; ``compare.sh`` builds it),
    standalone with Spring Cloud's documented settings: its own address and port,
    ``register-with-eureka=false``, ``fetch-registry=false``, and its own URL as ``defaultZone`` with
    ``eureka.instance.hostname=127.0.0.1``. That last pair is what makes it standalone: left at the
    default (``http://localhost:8761/eureka/``), it would take that URL for a peer and replicate every
    write to whatever listens there."""
    port = free_port()
    command = [
        java or shutil.which("java") or "java",
        f"-Xmx{heap}",
        "-jar",
        str(jar),
        f"--server.address={HOST}",
        f"--server.port={port}",
        f"--eureka.instance.hostname={HOST}",
        f"--eureka.client.service-url.defaultZone=http://{HOST}:{port}/eureka/",
        "--eureka.client.register-with-eureka=false",
        "--eureka.client.fetch-registry=false",
    ]
    return Server("SCE", command, workdir / "sce.log", port, cwd=workdir)
