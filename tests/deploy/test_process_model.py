"""One node is one process: gunicorn must refuse a second worker; settings refuse malformed values."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).with_name("gunicorn")


def test_gunicorn_refuses_to_start_more_than_one_worker():
    result = subprocess.run(
        [str(GUNICORN), "-c", "deploy/gunicorn.conf.py", "--workers", "2", "--bind", "127.0.0.1:0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "refusing to start with workers=2" in result.stdout + result.stderr


def _django_setup(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_overrides, "DJANGO_SETTINGS_MODULE": "eureka_site.settings"}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_malformed_settings_fail_at_start_with_the_variable_named():
    result = _django_setup({"EUREKA_EVICTION_INTERVAL_MS": "soon"})
    assert result.returncode != 0
    assert "EUREKA_EVICTION_INTERVAL_MS" in result.stderr
    result = _django_setup({"EUREKA_LEASE_EXPIRY": "forever"})
    assert result.returncode != 0
    assert "EUREKA_LEASE_EXPIRY" in result.stderr


def test_production_mode_requires_a_secret_key():
    result = _django_setup({"EUREKA_EMBEDDED": "false", "DEBUG": "false", "SECRET_KEY": ""})
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr
    assert _django_setup({"EUREKA_EVICTION_INTERVAL_MS": "1000"}).returncode == 0


def test_a_bad_dashboard_path_fails_at_start_with_the_variable_named():
    result = _django_setup({"EUREKA_DASHBOARD_PATH": "/eureka/ui"})
    assert result.returncode != 0
    assert "EUREKA_DASHBOARD_PATH" in result.stderr and "collides with /eureka/" in result.stderr


def test_every_setting_read_from_the_environment_is_listed_in_env_example():
    # Django's own settings (read in eureka_site/settings.py), and every variable the registry's typed
    # config declares (registry/domain/config.py and registry/config/, parsed by parse_config).
    from registry.config.docs import config_variables

    settings_py = (ROOT / "eureka_site" / "settings.py").read_text()
    read = set(
        re.findall(
            r"""env(?:_int|_bool|_float|_secret|\.str|\.list|\.db_url|\.int|\.bool|\.float)\(\s*["']([A-Z_]+)""",
            settings_py,
        )
    ) | {variable.name for _, _, variable in config_variables()}
    listed = set(
        re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", (ROOT / "deploy" / ".env.example").read_text(), re.M)
    )
    assert len(read) > 100
    assert read - listed == set(), (
        "read in settings.py or declared in a settings section but not listed in deploy/.env.example"
    )
