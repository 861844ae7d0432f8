"""Maven builds and JVM processes of the Java-based interop suites.

Used by ``test_java_eureka_client.py`` (Maven projects ``java/`` and ``java1/``, both around
``java-shared/``), ``test_spring_cloud.py`` (``spring/sc-*`` around ``spring/app/``) and
``test_sce_cluster.py`` (``sce/``). Plain functions: outside pytest they raise pytest's skip and fail
exceptions all the same.

Toolchain
    ``require_java()`` (a ``java`` of at least ``MIN_JAVA_MAJOR``, i.e. 17) and ``require_mvn()`` return
    the binaries' paths, or skip the calling test through ``require_toolchain`` (a failure under
    ``EUREKA_REQUIRE_ALL_SUITES=1``). ``java_major(java)`` is the major version a ``java`` reports.

Builds
    ``build(project, goal, sources, product=..., needs=...)`` runs ``mvn -B -q -o <goal>`` in
    ``project`` (the local repository usually holds everything), then, if that failed, ``mvn -B -q
    <goal>`` online (Maven Central). Each attempt's output goes to ``target/mvn-offline.log`` /
    ``target/mvn-online.log`` of the project. The build is skipped altogether while
    ``target/build.stamp`` holds the digest of ``sources`` and the JDK's major version
    (``sources_digest``) and the product is there; a build that runs rewrites the stamp only once it
    has succeeded. One process builds a project at a time (``target/build.lock``, a file lock): the
    pytest-xdist workers that need the same build wait for the first one's and then reuse it. When
    the online attempt fails because Maven could not reach or find an artifact
    (``RESOLUTION_FAILURE`` in its output's tail), the test is skipped through ``require_toolchain``
    ("Maven Central (<needs>)"); any other failure, a timeout (``BUILD_TIMEOUT_S`` per attempt) or a
    build that leaves no usable product fails it.

The SCE jar
    ``build_sce()`` builds (or reuses) the stock Spring Cloud Netflix Eureka Server of
    ``test_sce_cluster.py`` and returns the jar's path, ``SCE_JAR``. The SCE-vs-node benchmark builds it
    the same way from the command line, from the project's root::

        .venv/bin/python -m tests.interop.maven sce

    which prints the jar's absolute path on stdout and exits 0; when the toolchain is missing (no
    ``java`` 17+, no ``mvn``, Maven Central out of reach) it exits 2 (1 under
    ``EUREKA_REQUIRE_ALL_SUITES=1``), when the build fails 1, with the reason on stderr.

JVM processes
    ``jvm_options(heap)`` is the quick-start JVM flags with a heap limit. ``JvmProcess`` is a JVM
    whose stdout and stderr are appended to a log file, which gets SIGTERM if the test process dies
    (Linux, ``die_with_parent``), and which is stopped with SIGTERM (killed when it outstays its stop
    timeout); it reads its log back by byte offsets (``log_mark``, ``log_text``, ``log_tail``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pytest
from filelock import FileLock

from tests.interop.conftest import require_toolchain

INTEROP_DIR = Path(__file__).resolve().parent
MIN_JAVA_MAJOR = 17
# One Maven attempt (offline or online) at the most.
BUILD_TIMEOUT_S = 900
# The lines of a failed build's output that are searched and shown.
OUTPUT_TAIL_LINES = 60
# What Maven prints when it cannot reach or find an artifact (as opposed to a compile error).
RESOLUTION_FAILURE = re.compile(
    r"Could not (?:resolve|transfer)|Cannot access .* in offline mode|Unknown host|"
    r"Connection (?:refused|timed out)|Network is unreachable|Plugin .* could not be resolved"
)

SCE_DIR = INTEROP_DIR / "sce"
SCE_JAR = SCE_DIR / "target" / "sce-server.jar"

PR_SET_PDEATHSIG = 1


# ------------------------------------------------------------------------------------------ toolchain


@functools.cache
def java_major(java: str) -> int:
    """The major version ``java -version`` reports (8 for "1.8.0_..."), 0 when it cannot be told."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return 0
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def require_java() -> str:
    """The ``java`` on PATH, if it is Java 17 or later; otherwise the calling test is skipped."""
    java = shutil.which("java")
    require_toolchain(
        "java", java is not None, "install a JDK 17+ (e.g. `apt-get install openjdk-17-jdk-headless`)"
    )
    assert java is not None
    require_toolchain(
        f"java >= {MIN_JAVA_MAJOR}",
        java_major(java) >= MIN_JAVA_MAJOR,
        f"{java} is older than Java {MIN_JAVA_MAJOR}; install JDK {MIN_JAVA_MAJOR}+",
    )
    return java


def require_mvn() -> str:
    """The ``mvn`` on PATH; otherwise the calling test is skipped."""
    mvn = shutil.which("mvn")
    require_toolchain("mvn", mvn is not None, "install Maven 3.8+ (e.g. `apt-get install maven`)")
    assert mvn is not None
    return mvn


# -------------------------------------------------------------------------------------------- builds


def project_sources(project: Path) -> list[Path]:
    """A Maven project's own inputs: its ``pom.xml`` and every file under its ``src/``."""
    return [project / "pom.xml", *sorted(p for p in (project / "src").rglob("*") if p.is_file())]


def sources_digest(sources: Iterable[Path], java: str) -> str:
    """What a build depends on: each source's name (below ``tests/interop/``) and bytes, and the JDK's
    major version."""
    digest = hashlib.sha256(f"java {java_major(java)}\n".encode())
    for path in sources:
        digest.update(f"{path.relative_to(INTEROP_DIR)}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-OUTPUT_TAIL_LINES:])


def _mvn(mvn: str, project: Path, goal: str, offline: bool) -> tuple[bool, Path]:
    """One ``mvn <goal>`` in ``project`` (``-o``: from the local repository only): (succeeded, its log)."""
    log = project / "target" / f"mvn-{'offline' if offline else 'online'}.log"
    command = [mvn, "-B", "-q", *(["-o"] if offline else []), goal]
    with log.open("wb") as out:
        try:
            result = subprocess.run(
                command,
                cwd=project,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=BUILD_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"`{' '.join(command)}` in {project} ran over {BUILD_TIMEOUT_S}s; log: {log}", pytrace=False
            )
    return result.returncode == 0, log


def build(
    project: Path,
    goal: str,
    sources: Iterable[Path],
    *,
    product: Path,
    needs: str,
    complete: Callable[[], bool] | None = None,
) -> Path:
    """Build ``project`` with ``mvn <goal>`` (offline, then online) unless its stamp says it is up to date.

    ``sources`` are what the build depends on (its digest goes into ``target/build.stamp``),
    ``product`` the file it must leave, and ``complete`` a stricter check of what it left (by default,
    that ``product`` exists). ``needs`` names what Maven Central must supply, for the skip message when
    it cannot. Returns ``product``.
    """
    java = require_java()
    is_complete = complete or product.is_file
    stamp = project / "target" / "build.stamp"
    digest = sources_digest(sources, java)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    # Both attempts and the checks around them, at the most.
    with FileLock(stamp.with_name("build.lock"), timeout=2 * BUILD_TIMEOUT_S + 60):
        if is_complete() and stamp.is_file() and stamp.read_text().strip() == digest:
            return product

        mvn = require_mvn()
        stamp.unlink(missing_ok=True)
        ok, log = _mvn(mvn, project, goal, offline=True)
        if not ok:
            # Not everything is in the local repository yet: resolve it from Maven Central.
            ok, log = _mvn(mvn, project, goal, offline=False)
        tail = _tail(log)
        if not ok:
            require_toolchain(
                f"Maven Central ({needs})",
                not RESOLUTION_FAILURE.search(tail),
                f"`mvn {goal}` in {project} could not resolve its dependencies; log: {log}\n{tail}",
            )
            pytest.fail(f"`mvn {goal}` in {project} failed; log: {log}\n{tail}", pytrace=False)
        if not is_complete():
            pytest.fail(
                f"`mvn {goal}` in {project} left no usable {product}; log: {log}\n{tail}", pytrace=False
            )
        stamp.write_text(digest + "\n")
        return product


def build_sce() -> Path:
    """The stock Spring Cloud Netflix Eureka Server jar (``sce/``), built or reused; its path."""
    return build(
        SCE_DIR,
        "package",
        project_sources(SCE_DIR),
        product=SCE_JAR,
        needs="spring-cloud-starter-netflix-eureka-server and its dependencies",
    )


# ----------------------------------------------------------------------------------------------- JVMs


def jvm_options(heap: str) -> tuple[str, ...]:
    """Flags for a quick JVM start on a small, shared machine (C1 only, serial GC, small stacks), with
    ``-Xmx<heap>``."""
    return (f"-Xmx{heap}", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def die_with_parent() -> None:
    """In the child before exec: get SIGTERM if pytest dies, so no JVM outlives the run (Linux only)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class JvmProcess:
    """One JVM (``command``), its stdout and stderr appended to ``log_path``; it runs in the log's folder.

    ``stop()`` sends SIGTERM (a graceful shutdown) and waits ``stop_timeout``, then kills.
    """

    def __init__(self, command: Sequence[str], log_path: Path, stop_timeout: float):
        self.command = list(command)
        self.log_path = log_path
        self.stop_timeout = stop_timeout
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.log_path.parent,
                preexec_fn=die_with_parent,
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def fail_if_exited(self) -> None:
        """Fail the test, with the log's tail, when the JVM is not running."""
        if not self.alive():
            pytest.fail(
                f"{self} exited with {self.process.returncode if self.process else '?'}:\n{self.log_tail()}",
                pytrace=False,
            )

    def stop(self) -> int | None:
        """SIGTERM and wait (kill after ``stop_timeout``); the exit code, None if it never started."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=self.stop_timeout)
        return self.process.returncode

    def log_text(self, since: int = 0, until: int | None = None) -> str:
        """The log from byte offset ``since`` (a ``log_mark()``) up to ``until`` (the end by default)."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(since)
                data = log.read() if until is None else log.read(max(0, until - since))
                return data.decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_mark(self) -> int:
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


# ----------------------------------------------------------------------------------- the command line

TARGETS: dict[str, Callable[[], Path]] = {"sce": build_sce}


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or argv[0] not in TARGETS:
        sys.stderr.write(f"usage: python -m tests.interop.maven {{{','.join(TARGETS)}}}\n")
        return 64
    try:
        path = TARGETS[argv[0]]()
    except pytest.skip.Exception as missing:
        sys.stderr.write(f"{missing.msg}\n")
        return 2
    except pytest.fail.Exception as failure:
        sys.stderr.write(f"{failure.msg}\n")
        return 1
    sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
