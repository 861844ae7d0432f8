"""Fixtures of the deployment tests' own processes."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from tests.interop.conftest import require_toolchain, wait_until
from tests.ports import free_port


@pytest.fixture
def redis_url(tmp_path):
    """A redis-server of the test's own on a free port (production mode, `make stack`: a stack uses
    one that answers rather than starting its own), stopped when the test ends."""
    redis_server = shutil.which("redis-server")
    require_toolchain(
        "redis-server", redis_server is not None, "install it with `sudo apt-get install redis-server`"
    )
    port = free_port()
    process = subprocess.Popen(
        [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        from redis import Redis

        client = Redis.from_url(url, socket_timeout=1)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except Exception:
                time.sleep(0.1)
                return False

        wait_until(answers, 10, "redis-server did not start")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
