"""Live readers beside a live node: redis-server, the gunicorn node in production mode, Celery worker
and beat (the cache sync), and a reader gunicorn (deploy/gunicorn_reader.conf.py), on free loopback
ports. Built on tests/integration/conftest.py's processes; skipped without redis-server (a failure
under EUREKA_REQUIRE_ALL_SUITES=1)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import (
    BIN,
    CONTROL_SECRET,
    ROOT,
    Processes,
    _answers,
    stop,
)
from tests.interop.conftest import require_toolchain, wait_until
from tests.ports import free_port

SYNC_MS = 1000
MAX_STALENESS_MS = 3000
JSON = {"Accept": "application/json"}


class ReaderStack(Processes):
    """The integration topology plus a reader; the node, Celery and the reader can be stopped and
    started again by tests."""

    def __init__(self, tmp: Path, env: dict[str, str], node_port: int, reader_port: int, workers: int):
        super().__init__(tmp, free_port(), node_port, env)
        self.reader_port = reader_port
        self.reader_url = f"http://127.0.0.1:{reader_port}"
        self.workers = workers
        self.node: subprocess.Popen | None = None
        self.reader: subprocess.Popen | None = None
        self._logs: list = []

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 (closed in stop_all)
        self._logs.append(log)
        return subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def start_node(self) -> None:
        conf = ["-c", "deploy/gunicorn.conf.py", "--bind", f"127.0.0.1:{self.port}"]
        self.node = self._spawn("node", [str(BIN / "gunicorn"), *conf])
        wait_until(
            lambda: _answers(f"{self.url}/healthz"),
            30,
            lambda: f"the node did not start:\n{self.log('node')}",
        )

    def stop_node(self) -> None:
        if self.node is not None:
            stop(self.node)
            self.node = None

    def start_reader(self) -> None:
        conf = ["-c", "deploy/gunicorn_reader.conf.py", "--bind", f"127.0.0.1:{self.reader_port}"]
        self.reader = self._spawn("reader", [str(BIN / "gunicorn"), *conf, "--workers", str(self.workers)])
        wait_until(
            lambda: _answers(f"{self.reader_url}/healthz"),
            30,
            lambda: f"the reader did not start:\n{self.log('reader')}",
        )

    def stop_reader(self) -> None:
        if self.reader is not None:
            stop(self.reader)
            self.reader = None

    def stop_all(self) -> None:
        self.stop_reader()
        self.stop_celery()
        self.stop_node()
        self.stop_redis()
        for log in self._logs:
            log.close()

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def reader_ready(self) -> dict:
        return httpx.get(f"{self.reader_url}/readyz", timeout=5).json()


def reader_env(tmp: Path, node_port: int, **overrides: str) -> dict[str, str]:
    import os

    return {
        **os.environ,
        "EUREKA_CONTROL_SECRET": CONTROL_SECRET,
        "EUREKA_CONTROL_URL": f"http://127.0.0.1:{node_port}",
        "EUREKA_EMBEDDED": "false",
        "SECRET_KEY": "reader-test-secret-key",
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": str(SYNC_MS),
        "EUREKA_READER_MAX_STALENESS_MS": str(MAX_STALENESS_MS),
        # Celery beat alone drives the cache sync: stopping Celery stops it (no watchdog in the node).
        "EUREKA_EMBEDDED_SCHEDULER": "false",
        "LOG_LEVEL": "WARNING",
        **overrides,
    }


def start_stack(
    tmp: Path, *, celery: bool = True, migrate: bool = False, workers: int = 2, **overrides: str
) -> ReaderStack:
    require_toolchain(
        "redis-server",
        shutil.which("redis-server") is not None,
        "install it with `sudo apt-get install redis-server`",
    )
    node_port, reader_port = free_port(), free_port()
    stack = ReaderStack(tmp, reader_env(tmp, node_port, **overrides), node_port, reader_port, workers)
    stack.env["REDIS_URL"] = stack.redis_url
    try:
        stack.start_redis()
        if migrate:
            subprocess.run(
                [str(BIN / "python"), "manage.py", "migrate", "--noinput"],
                cwd=ROOT,
                env=stack.env,
                check=True,
                capture_output=True,
                timeout=120,
            )
        stack.start_node()
        if celery:
            stack.start_celery()
        stack.start_reader()
    except BaseException:
        stack.stop_all()
        raise
    return stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[ReaderStack]:
    started = start_stack(tmp_path_factory.mktemp("readers"))
    try:
        yield started
    finally:
        started.stop_all()
