"""The Go programs of the mesh tests (``tests/interop/xds-go``, module ``eureka-interop/xds-go``): one
binary, ``xds-go``, built once per session, and the helpers that run it.

``xds-go validate`` checks what an xDS server serves (or an Envoy bootstrap) with go-control-plane's
``ValidateAll()``, Envoy's own rules; ``xds-go accepts`` asks grpc-go's xDS client whether it ACKs
what it is served; ``xds-go client`` calls ``/mesh.test.Who/Name`` through grpc-go's
``xds:///`` resolver, one JSON line per call. ``xds-go <command> -h`` documents their flags and lines.

Use in a test module (a fixture, imported by name)::

    from tests.interop.xds_go import xds_go_binary  # noqa: F401 (the fixture)

    def test_x(xds_go_binary):  # noqa: F811
        run = validate(xds_go_binary, "-server", f"127.0.0.1:{port}")
        client = start_client(xds_go_binary, "orders", grpc_bootstrap(tmp_path, port), seconds=8)

``xds_thread(catalog)`` runs the control plane (``registry.mesh.xds.start_xds``) on an event loop of
its own thread (tests/mesh/xds_harness.py's ``XdsThread``), so a test feeds the catalog from its own
thread as the mesh process's follower does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from registry.config.services import MeshConfig
from registry.mesh.catalog import Catalog
from tests.interop.conftest import DriverProcess
from tests.interop.go_build import go_program
from tests.mesh.xds_harness import XdsThread
from tests.ports import free_port

GO_DIR = Path(__file__).resolve().parent / "xds-go"
BINARY = GO_DIR / "bin" / "xds-go"
# go.mod's `go` line: grpc-go and go-control-plane's envoy module need it.
MIN_GO = (1, 24)
VALIDATE_TIMEOUT_S = 120


# ---------------------------------------------------------------------------------------- build


def build_xds_go() -> Path:
    """``xds-go``, built unless newer than its sources (tests/interop/go_build.py)."""
    how = (
        f"install Go {MIN_GO[0]}.{MIN_GO[1]}+ (e.g. `apt-get install golang-go`); grpc-go and "
        "go-control-plane come from the Go module proxy"
    )
    return go_program(GO_DIR, BINARY, MIN_GO, how)


@pytest.fixture(scope="session")
def xds_go_binary() -> Path:
    return build_xds_go()


# ---------------------------------------------------------------------------------------- validate


@dataclass
class Validation:
    """One ``xds-go validate`` (or ``accepts``) run: its exit code and JSON lines (one per resource, and
    per response for ``validate``)."""

    command: list[str]
    returncode: int
    lines: list[dict[str, Any]]
    stderr: str

    def describe(self, limit: int = 40) -> str:
        """The command, its exit code, the lines not ok (the first ``limit``, without their resources)
        and stderr's end: what a failed assertion shows."""
        bad = [line for line in self.lines if not line.get("ok")]
        shown = "\n".join(
            json.dumps({k: v for k, v in line.items() if k != "resource"})[:1500] for line in bad[:limit]
        )
        return (
            f"$ {' '.join(self.command)}\n(exit {self.returncode}; {len(self.lines)} lines, "
            f"{len(bad)} not ok)\n{shown}\nstderr:\n{self.stderr[-3000:]}"
        )

    def resources(self, stream: str, kind: str) -> dict[str, dict[str, Any]]:
        """The last line for each resource of ``kind`` (``Cluster``, ``ClusterLoadAssignment``, ...)
        on ``stream`` (``sotw`` or ``delta``), by name."""
        return {
            line["name"]: line for line in self.lines if line.get("stream") == stream and line["type"] == kind
        }


def validate(binary: Path, *flags: str) -> Validation:
    """``xds-go validate FLAGS`` (e.g. ``-server 127.0.0.1:18000 -dump`` or ``-bootstrap FILE``)."""
    command = [str(binary), "validate", *flags]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=VALIDATE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(command)} ran over {VALIDATE_TIMEOUT_S}s: {exc.stderr!r}", pytrace=False)
    return Validation(command, done.returncode, _json_lines(done.stdout), done.stderr)


def accepts(binary: Path, bootstrap: Path, names: list[str], wait_s: float = 20) -> Validation:
    """``xds-go accepts -names NAMES``: grpc-go's xDS client's own status (CSDS) of every resource it
    subscribed to for ``xds:///NAME``, one line each (``status`` ``ACKED`` when it took it)."""
    command = [str(binary), "accepts", "-names", ",".join(names), "-wait", f"{wait_s}s"]
    env = {**os.environ, "GRPC_XDS_BOOTSTRAP": str(bootstrap)}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=wait_s + 60, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(command)} ran over {wait_s + 60}s: {exc.stderr!r}", pytrace=False)
    return Validation(command, done.returncode, _json_lines(done.stdout), done.stderr)


def _json_lines(stdout: str) -> list[dict[str, Any]]:
    lines = []
    for text in stdout.splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            lines.append({"type": "output", "name": text, "ok": False, "error": "not a JSON line"})
    return lines


# ---------------------------------------------------------------------------------------- client


def grpc_bootstrap(directory: Path, xds_port: int, node_id: str = "xds-go-client") -> Path:
    """A gRPC xDS bootstrap file naming the control plane on 127.0.0.1:``xds_port`` (plain gRPC)."""
    path = directory / f"grpc-bootstrap-{node_id}.json"
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
                "node": {"id": node_id, "cluster": "mesh-tests", "locality": {}},
            }
        )
    )
    return path


def start_client(
    binary: Path,
    name: str,
    bootstrap: Path,
    seconds: float,
    rate: int = 20,
    call_timeout_s: float = 2.0,
) -> DriverProcess:
    """``xds-go client`` calling ``xds:///name``: its ``call`` events (``t`` unix ms, ``backend`` or
    ``error``) arrive in ``events`` as they come; it exits on its own after ``seconds``."""
    command = [
        str(binary),
        "client",
        "-target",
        f"xds:///{name}",
        "-rate",
        str(rate),
        "-duration",
        f"{seconds}s",
        "-call-timeout",
        f"{call_timeout_s}s",
    ]
    env = {**os.environ, "GRPC_XDS_BOOTSTRAP": str(bootstrap)}
    label = f"the grpc-go client of xds:///{name}"
    return DriverProcess(command, GO_DIR, label, close_timeout=seconds + 30, env=env)


# ---------------------------------------------------------------------------------------- server


@contextmanager
def xds_thread(
    catalog: Catalog, start_options: dict[str, Any] | None = None, **config_changes: Any
) -> Iterator[XdsThread]:
    """The control plane (``start_xds``) serving ``catalog`` on 127.0.0.1, on a port handed out by
    ``free_port`` (another process reaches it), with MeshConfig's defaults changed by ``config_changes``
    and ``start_xds``'s keyword arguments (``authorize``, ``tls``) in ``start_options``; on its own
    thread and event loop (``XdsThread``), stopped on exit."""
    try:
        server = _started(catalog, start_options, config_changes)
    except RuntimeError:
        # The free port may have been taken between probing and binding (by a test process of
        # another run): one more try, on another port.
        server = _started(catalog, start_options, config_changes)
    try:
        yield server
    finally:
        server.stop()


def _started(
    catalog: Catalog, start_options: dict[str, Any] | None, config_changes: dict[str, Any]
) -> XdsThread:
    config = dataclasses.replace(MeshConfig(), xds_bind="127.0.0.1", xds_port=free_port(), **config_changes)
    return XdsThread(catalog, config, **(start_options or {}))
