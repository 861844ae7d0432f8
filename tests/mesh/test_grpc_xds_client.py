"""grpcio's own xDS client against the control plane: a proxyless gRPC client (tests/mesh/
grpc_xds_client.py, in a subprocess so that its bootstrap is read before grpc starts) calls
``xds:///orders`` whose three instances (tests/mesh/backend.py processes) are in the catalog. Calls
spread over the three; an instance taken OUT_OF_SERVICE, or removed, stops getting calls within
seconds, and one back UP gets them again."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from registry.mesh.catalog import OUT_OF_SERVICE, UP, Catalog
from tests.mesh.xds_harness import XdsThread, endpoint
from tests.ports import free_port

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
# The stated bound is 1 s from a change in the catalog; a loaded test machine gets this margin.
MOVE_WITHIN_S = 5.0


def bootstrap(path: Path, xds_port: int) -> Path:
    """gRPC's xDS bootstrap naming our control plane (insecure, xDS v3)."""
    path.write_text(
        json.dumps(
            {
                "xds_servers": [
                    {
                        "server_uri": f"127.0.0.1:{xds_port}",
                        "channel_creds": [{"type": "insecure"}],
                        "server_features": ["xds_v3"],
                    }
                ],
                "node": {"id": "grpc-xds-client-test", "locality": {}},
            }
        )
    )
    return path


class Calls:
    """The client's lines as they come, each with the test's clock when it came."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lines: list[tuple[float, dict]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self._lock:
                self.lines.append((time.monotonic(), json.loads(line)))

    def since(self, start: float) -> list[dict]:
        with self._lock:
            return [line for at, line in self.lines if at >= start]

    def wait(self, condition, timeout: float, what: str) -> float:
        """Seconds until ``condition(calls so far)`` held (checked every 20 ms)."""
        started = time.monotonic()
        while not condition():
            if time.monotonic() - started > timeout:
                with self._lock:
                    tail = [line for _, line in self.lines[-10:]]
                raise AssertionError(f"{what}: not within {timeout} s; last calls {tail}")
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the client exited ({self.process.returncode}); its stderr is in client.err"
                )
            time.sleep(0.02)
        return time.monotonic() - started

    def moved_away_from(self, backend: str, start: float, timeout: float) -> float:
        """Seconds from ``start`` to the last call ``backend`` answered, once 1.5 s of calls went by
        without one (what the client's load balancer took to leave it)."""

        def settled() -> bool:
            with self._lock:
                after = [(at, line) for at, line in self.lines if at >= start]
            last = max((at for at, line in after if line.get("backend") == backend), default=start)
            return bool(after) and after[-1][0] - last >= 1.5

        self.wait(settled, timeout + 1.5, f"calls leaving {backend}")
        with self._lock:
            return (
                max(
                    (at for at, line in self.lines if at >= start and line.get("backend") == backend),
                    default=start,
                )
                - start
            )


@pytest.fixture
def backends():
    names = ["b0", "b1", "b2"]
    ports = [free_port() for _ in names]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.mesh.backend", "--name", name, "--port", str(port)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, port in zip(names, ports, strict=True)
    ]
    try:
        for process in processes:
            assert process.stdout.readline().strip() == "ready"
        yield dict(zip(names, ports, strict=True))
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_grpcs_xds_client_follows_the_catalog(backends, tmp_path):
    catalog = Catalog()
    fleet = {name: endpoint("ORDERS", name, ip="127.0.0.1", port=port) for name, port in backends.items()}
    catalog.replace_all(fleet.values())
    server = XdsThread(catalog)
    errors = (tmp_path / "client.err").open("w")
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.mesh.grpc_xds_client",
            "--target",
            "xds:///orders",
            "--bootstrap",
            str(bootstrap(tmp_path / "bootstrap.json", server.port)),
            "--rate",
            "50",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    calls = Calls(client)
    try:
        start = time.monotonic()
        calls.wait(
            lambda: set(Counter(line.get("backend") for line in calls.since(start))) >= set(backends),
            20,
            "calls on all three backends",
        )

        def spread(since: float) -> Counter:
            return Counter(line.get("backend") or "error" for line in calls.since(since))

        steady = time.monotonic()
        time.sleep(1.5)
        counts = spread(steady)
        assert set(counts) == {"b0", "b1", "b2"}, counts
        assert min(counts.values()) >= max(counts.values()) // 2, counts

        # b0 taken out of service: its calls go to the others.
        changed = time.monotonic()
        catalog.apply(puts=[dataclasses.replace(fleet["b0"], status=OUT_OF_SERVICE)])
        moved = calls.moved_away_from("b0", changed, MOVE_WITHIN_S)
        print(f"OUT_OF_SERVICE: calls left b0 {moved * 1000:.0f} ms after the change")  # noqa: T201 (-s)
        assert moved < MOVE_WITHIN_S
        after = time.monotonic()
        time.sleep(1)
        assert set(spread(after)) == {"b1", "b2"}, spread(after)

        # Back UP: it gets calls again.
        changed = time.monotonic()
        catalog.apply(puts=[dataclasses.replace(fleet["b0"], status=UP)])
        back = calls.wait(lambda: "b0" in spread(changed), MOVE_WITHIN_S, "calls on b0 again")
        print(f"UP again: b0 answered {back * 1000:.0f} ms after the change")  # noqa: T201 (-s)

        # b1 removed from the registry: the same.
        changed = time.monotonic()
        catalog.apply(removes=[("ORDERS", "b1")])
        moved = calls.moved_away_from("b1", changed, MOVE_WITHIN_S)
        print(f"removed: calls left b1 {moved * 1000:.0f} ms after the change")  # noqa: T201 (-s)
        assert moved < MOVE_WITHIN_S
        after = time.monotonic()
        time.sleep(1)
        assert set(spread(after)) == {"b0", "b2"}, spread(after)

        # Every call since the three were first reached was answered.
        assert "error" not in spread(steady), [line for line in calls.since(steady) if "error" in line][:5]
        assert server.server.nacks == 0
    finally:
        client.stdin.close()
        try:
            client.wait(10)
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()
        errors.close()
        server.stop()
