"""A live node with an admin account, real py-eureka-client instances, and Debian's headless Chromium."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.interop.conftest import (
    PROJECT_ROOT,
    LiveServer,
    require_toolchain,
    running_server,
    server_env,
    wait_until,
)

# Where the screenshots go (git-ignored); the test prints the folder.
SCREENSHOTS = PROJECT_ROOT / "var" / "screenshots" / "browser"
CLIENT_SCRIPT = PROJECT_ROOT / "tests" / "integration" / "py_client_process.py"
# The flags this machine's Chromium needs headless, as root, without a network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-dev-shm-usage",
]
ADMIN_USER = "operator"


@dataclass
class Console:
    server: LiveServer
    password: str

    @property
    def url(self) -> str:
        return self.server.base_url

    def applications(self) -> dict:
        response = httpx.get(f"{self.url}/eureka/apps", headers={"Accept": "application/json"}, timeout=5)
        assert response.status_code == 200
        return response.json()["applications"]

    def statuses(self) -> dict[str, str]:
        """instanceId -> status in GET /eureka/apps (the read-only cache clients read)."""
        return {
            instance["instanceId"]: instance["status"]
            for app in self.applications()["application"]
            for instance in app["instance"]
        }


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def chromium() -> str:
    path = chromium_path()
    require_toolchain(
        "Chromium", path is not None, "install Debian's package with `sudo apt-get install chromium`"
    )
    return path


def _manage(workdir: Path, *args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_ROOT,
        env={**server_env(workdir), **(env or {})},
        check=True,
        capture_output=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def console(tmp_path_factory) -> Iterator[Console]:
    """A gunicorn node (console refreshing every second) with a migrated database and one superuser."""
    workdir = tmp_path_factory.mktemp("browser")
    password = secrets.token_urlsafe(16)
    _manage(workdir, "migrate", "--noinput")
    _manage(
        workdir,
        "createsuperuser",
        "--noinput",
        "--username",
        ADMIN_USER,
        "--email",
        "operator@example.org",
        env={"DJANGO_SUPERUSER_PASSWORD": password},
    )
    with running_server(workdir, {"EUREKA_DASHBOARD_REFRESH_SECONDS": "1"}) as server:
        yield Console(server, password)


@pytest.fixture(scope="module")
def clients(console) -> Iterator[dict[str, str]]:
    """Three unmodified py-eureka-client processes (two SHOP-WEB, one BILLING): name -> instanceId."""
    wanted = {
        "shop-web-1": ("shop-web", 18081),
        "shop-web-2": ("shop-web", 18082),
        "billing": ("billing", 18083),
    }
    processes = []
    try:
        for app, port in wanted.values():
            processes.append(
                subprocess.Popen(
                    [sys.executable, str(CLIENT_SCRIPT), console.server.url, app, str(port), "5", "30"],
                    cwd=PROJECT_ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        ids = {name: f"127.0.0.1:{app}:{port}" for name, (app, port) in wanted.items()}
        wait_until(
            lambda: set(ids.values()) <= set(console.statuses()),
            30,
            lambda: f"the clients did not all register: {console.statuses()}",
        )
        yield ids
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


@contextmanager
def launched(chromium: str) -> Iterator[Any]:
    """Headless Chromium driven through Playwright's synchronous API (a dev dependency)."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is a dev dependency: make install"
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def browser(chromium) -> Iterator[Any]:
    """One Chromium for a test module's pages."""
    with launched(chromium) as browser:
        yield browser
