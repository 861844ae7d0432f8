"""Building the Go programs of tests/interop (the fargo driver, the xDS programs) once per test run.

``go_program(folder, binary, min_go, how)`` builds ``folder``'s module into ``binary`` unless the
binary is newer than the module's sources; one pytest-xdist worker builds under a file lock beside the
binary while the others wait and find it up to date. Without Go, or with one older than ``min_go``, it
skips (fails under the CI variable, ``require_toolchain``) saying ``how`` to get it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from filelock import FileLock

from tests.interop.conftest import require_toolchain

BUILD_TIMEOUT_S = 600


def go_version(go: str) -> tuple[int, int]:
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return (0, 0)
    match = re.match(r"go(\d+)\.(\d+)", out.strip())
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _sources(folder: Path) -> list[Path]:
    return [folder / "go.mod", folder / "go.sum", *sorted(folder.glob("*.go"))]


def go_program(folder: Path, binary: Path, min_go: tuple[int, int], how: str) -> Path:
    go = shutil.which("go")
    require_toolchain("go", go is not None, how)
    assert go is not None
    require_toolchain(f"go >= {min_go[0]}.{min_go[1]}", go_version(go) >= min_go, how)
    binary.parent.mkdir(exist_ok=True)
    with FileLock(binary.with_name("build.lock"), timeout=BUILD_TIMEOUT_S + 60):
        newest_source = max(path.stat().st_mtime for path in _sources(folder))
        if binary.exists() and binary.stat().st_mtime > newest_source:
            return binary
        partial = binary.with_name(f"{binary.name}.{os.getpid()}.tmp")
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
        try:
            build = subprocess.run(
                [go, "build", "-buildvcs=false", "-o", str(partial), "."],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            partial.unlink(missing_ok=True)
            pytest.fail(f"`go build` in {folder} took more than {BUILD_TIMEOUT_S}s", pytrace=False)
        if build.returncode != 0:
            partial.unlink(missing_ok=True)
            pytest.fail(f"`go build` in {folder} failed:\n{build.stdout}{build.stderr}", pytrace=False)
        partial.replace(binary)
        return binary
