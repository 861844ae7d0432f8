"""Real processes of the production topology: redis-server, the gunicorn registry, Celery worker and beat.

Each is started from the project's own configuration (deploy/gunicorn.conf.py, the Celery app in
eureka_site/celery.py) on free loopback ports, and stopped at the end of the module.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.interop.conftest import require_toolchain, wait_until
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CONTROL_SECRET = "integration-control-secret"


def stop(process: subprocess.Popen, timeout: float = 10.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


class Processes:
    """The running topology; tests may stop and restart the Celery processes."""

    def __init__(self, tmp: Path, redis_port: int, port: int, env: dict[str, str]):
        self.tmp = tmp
        self.redis_port = redis_port
        self.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        self.port = port
        self.env = env
        self.url = f"http://127.0.0.1:{port}"
        self.celery: dict[str, subprocess.Popen] = {}
        self.redis: subprocess.Popen | None = None

    def start_redis(self) -> None:
        self.redis = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            cwd=self.tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: _redis_answers(self.redis_url), 10, "redis-server did not start")

    def stop_redis(self) -> None:
        if self.redis is not None:
            stop(self.redis)
            self.redis = None

    def start_celery(self) -> None:
        commands = {
            "worker": ["worker", "--loglevel=INFO", "--concurrency=1", "--pool=solo"],
            "beat": ["beat", "--loglevel=INFO", f"--schedule={self.tmp / 'celerybeat-schedule'}"],
        }
        for name, args in commands.items():
            log = open(self.tmp / f"celery-{name}.log", "ab")  # noqa: SIM115 (closed with the process)
            self.celery[name] = subprocess.Popen(
                [str(BIN / "celery"), "-A", "eureka_site", *args],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def stop_celery(self) -> None:
        for process in self.celery.values():
            stop(process)
        self.celery.clear()

    def ready(self) -> dict:
        return httpx.get(f"{self.url}/readyz", timeout=5).json()


@contextlib.contextmanager
def production_topology(
    tmp: Path, extra_env: dict[str, str], prepare: Callable[[dict[str, str]], None] | None = None
) -> Iterator[Processes]:
    """redis-server, the registry (deploy/gunicorn.conf.py, production mode) and a Celery worker and
    beat, on free loopback ports, with ``extra_env`` on top of the common settings; ``prepare(env)``
    runs before the registry starts (e.g. to put rows in its database). Everything stops at the end."""
    require_toolchain(
        "redis-server",
        shutil.which("redis-server") is not None,
        "install it with `sudo apt-get install redis-server`",
    )
    redis_port, port = free_port(), free_port()
    env = {
        **os.environ,
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "EUREKA_CONTROL_SECRET": CONTROL_SECRET,
        "EUREKA_CONTROL_URL": f"http://127.0.0.1:{port}",
        "EUREKA_EMBEDDED": "false",
        "SECRET_KEY": "integration-test-secret-key",
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "EUREKA_DATA_DIR": str(tmp),
        "LOG_LEVEL": "WARNING",
        **extra_env,
    }
    processes = Processes(tmp, redis_port, port, env)
    processes.database = tmp / "db.sqlite3"
    server = None
    server_log = open(tmp / "gunicorn.log", "ab")  # noqa: SIM115 (closed below)
    processes.start_redis()
    try:
        if prepare is not None:
            prepare(env)
        server = subprocess.Popen(
            [str(BIN / "gunicorn"), "-c", "deploy/gunicorn.conf.py", "--bind", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=server_log,
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: _answers(f"{processes.url}/healthz"), 30, "the registry did not start")
        processes.start_celery()
        yield processes
    finally:
        processes.stop_celery()
        if server is not None:
            stop(server)
        processes.stop_redis()
        server_log.close()


@pytest.fixture(scope="module")
def topology(tmp_path_factory) -> Iterator[Processes]:
    extra_env = {
        "EUREKA_EVICTION_INTERVAL_MS": "1000",
        "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": "1000",
        "EUREKA_DELTA_RETENTION_TIMER_INTERVAL_MS": "1000",
        # Eviction is what these tests watch; self-preservation would (rightly) stop it in a tiny registry.
        "EUREKA_ENABLE_SELF_PRESERVATION": "false",
    }
    with production_topology(tmp_path_factory.mktemp("topology"), extra_env) as processes:
        yield processes


def _redis_answers(url: str) -> bool:
    from redis import Redis
    from redis.exceptions import RedisError

    try:
        return bool(Redis.from_url(url, socket_timeout=1).ping())
    except RedisError:
        time.sleep(0.1)
        return False


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        time.sleep(0.2)
        return False
