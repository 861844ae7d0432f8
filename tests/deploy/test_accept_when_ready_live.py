"""A starting node refuses connections until its worker can answer them (issue 35, point 4), live.

gunicorn's master listens about a second before its worker serves; heartbeats sent meanwhile waited
in the kernel's backlog (290-799 ms in the fault test) instead of being refused and going on to the
client's next service URL. deploy/gunicorn.conf.py takes the listeners out of LISTEN before each fork
and the worker listens again once its node has started (registry/serving/listening.py). Here a real
node is probed from launch: once the master has bound its port (its "Listening at" line), every
connection is refused at once until one is answered at once; after a kill -9 of the worker, the same
until the master's new worker serves.
"""

from __future__ import annotations

import errno
import logging
import socket
import subprocess
import time
from dataclasses import dataclass

import psutil
import pytest

from tests.interop.conftest import (
    PROJECT_ROOT,
    STARTUP_TIMEOUT_S,
    _gunicorn,
    _stop,
    require_toolchain,
    server_env,
)
from tests.ports import free_port

pytestmark = pytest.mark.live

logger = logging.getLogger(__name__)

HOST = "127.0.0.1"
# A refused connection is answered by the kernel (an RST) in well under a millisecond on loopback.
REFUSED_WITHIN_S = 0.1
# An accepted connection's request, once the worker listens, is answered at once (first request of a
# fresh process included); a connection left in the backlog waits for the whole worker start (~1 s).
ANSWERED_WITHIN_S = 0.35


@dataclass
class Probe:
    outcome: str  # "refused" (ECONNREFUSED, or reset while queued), "answered", "silent"
    took_s: float  # refused: the connect; answered: from connected to the answer's first byte
    after_bind: bool  # made once the master had logged that it listens


def probe(port: int, after_bind: bool) -> Probe:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(5)
    started = time.perf_counter()
    try:
        sock.connect((HOST, port))
    except OSError as exc:
        if exc.errno != errno.ECONNREFUSED:
            raise
        return Probe("refused", time.perf_counter() - started, after_bind)
    connected = time.perf_counter()
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
        first = sock.recv(1)
    except ConnectionResetError:
        # Queued in the backlog of a worker that died, and reset when the master paused listening.
        return Probe("refused", time.perf_counter() - connected, after_bind)
    except TimeoutError:
        return Probe("silent", time.perf_counter() - connected, after_bind)
    finally:
        sock.close()
    return Probe("answered" if first else "refused", time.perf_counter() - connected, after_bind)


def probe_until_answered(port: int, bound, deadline_s: float) -> list[Probe]:
    probes: list[Probe] = []
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        result = probe(port, bound())
        probes.append(result)
        if result.outcome == "answered":
            return probes
        time.sleep(0.01)
    pytest.fail(f"no answer within {deadline_s} s: {probes[-5:]}")


def check(probes: list[Probe], phase: str) -> None:
    after = [p for p in probes if p.after_bind]
    waited = [p for p in probes if p.outcome != "refused"]
    summary = f"{phase}: {len(after)} probes after the bind, " + ", ".join(
        f"{p.outcome} {p.took_s * 1000:.0f} ms" for p in after[-8:]
    )
    logger.info(summary)
    assert sum(p.outcome == "refused" for p in after) >= 3, summary
    assert all(p.took_s < REFUSED_WITHIN_S for p in probes if p.outcome == "refused"), summary
    # One answer, the last probe, and at once: no connection was left waiting for the worker.
    assert len(waited) == 1 and waited[0] is probes[-1], summary
    assert probes[-1].took_s < ANSWERED_WITHIN_S, summary


def test_connections_are_refused_until_the_worker_serves_at_start_and_after_a_worker_crash(tmp_path):
    gunicorn = _gunicorn()
    require_toolchain("gunicorn", gunicorn.exists(), f"expected {gunicorn}; run `make install`")
    port = free_port(HOST)
    log_path = tmp_path / "server.log"
    env = server_env(tmp_path, {"EUREKA_WARM_RESTART": "false"})
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [str(gunicorn), "-c", "deploy/gunicorn.conf.py", "--bind", f"{HOST}:{port}"],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:

        def bound() -> bool:
            return "Listening at" in log_path.read_text(errors="replace")

        check(probe_until_answered(port, bound, STARTUP_TIMEOUT_S), "start")

        # A worker that dies: the master forks another, which needs its start again.
        workers = psutil.Process(process.pid).children()
        assert len(workers) == 1
        workers[0].kill()
        workers[0].wait(5)
        check(probe_until_answered(port, lambda: True, STARTUP_TIMEOUT_S), "after kill -9 of the worker")
        assert process.poll() is None
    finally:
        _stop(process)
    assert process.returncode == 0, log_path.read_text(errors="replace")[-3000:]
