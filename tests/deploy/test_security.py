"""Console and admin: sign-in when asked, security headers, `check --deploy` with production values."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

ROOT = Path(__file__).resolve().parents[2]
CONSOLE_PAGES = ["/", "/lastn", "/live", "/instances/", "/instances/ORDERS/o-1/"]


def env_example() -> dict[str, str]:
    """The uncommented ``KEY=value`` lines of deploy/.env.example."""
    pairs = re.findall(r"^([A-Z][A-Z0-9_]+)=(.*)$", (ROOT / "deploy" / ".env.example").read_text(), re.M)
    return dict(pairs)


def check_deploy(*, deploy: bool = True, **overrides: str) -> subprocess.CompletedProcess:
    """``manage.py check --deploy`` with .env.example's values (and the secrets an operator must set,
    which the file leaves empty); ``deploy=False``: plain ``manage.py check``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EUREKA_", "SECURE_", "DJANGO_"))}
    env |= env_example()
    env |= {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "EUREKA_CONTROL_SECRET": secrets.token_urlsafe(32),
        "DJANGO_SETTINGS_MODULE": "eureka_site.settings",
    }
    env |= overrides
    return subprocess.run(
        [sys.executable, "manage.py", "check", *(["--deploy"] if deploy else []), "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_production_values_of_env_example():
    result = check_deploy()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_names_what_is_missing_without_https():
    # The same check fails when the site is not said to be behind TLS: the test above can fail.
    result = check_deploy(EUREKA_HTTPS="false")
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stdout + result.stderr


# The key embedded mode falls back to without SECRET_KEY (eureka_site/settings.py): public.
BUILT_IN_KEY = "embedded-mode-insecure-key-set-SECRET_KEY-in-production"


@pytest.mark.parametrize("secret_key", ["", BUILT_IN_KEY])
def test_production_mode_refuses_the_built_in_secret_key_though_embedded_mode_is_left_on(secret_key):
    """REDIS_URL set with EUREKA_EMBEDDED=true (the value an older .env.example gave) and no key of its
    own: the node, its Celery processes and `check --deploy` stop at the settings."""
    result = check_deploy(EUREKA_EMBEDDED="true", SECRET_KEY=secret_key, REDIS_URL="redis://127.0.0.1:9/0")
    assert result.returncode != 0
    assert (
        "SECRET_KEY (or SECRET_KEY_FILE) is required with REDIS_URL (production mode), whatever "
        "EUREKA_EMBEDDED says" in result.stderr
    )


def test_check_deploy_flags_the_built_in_secret_key_of_embedded_mode():
    result = check_deploy(EUREKA_EMBEDDED="true", SECRET_KEY="")
    assert result.returncode != 0
    assert "(registry.W001) SECRET_KEY is the built-in development key" in result.stdout + result.stderr
    # make run's configuration (embedded, no key) still starts, and its plain `check` is clean.
    plain = check_deploy(deploy=False, EUREKA_EMBEDDED="true", SECRET_KEY="")
    assert plain.returncode == 0 and "no issues" in plain.stdout, plain.stdout + plain.stderr


def test_env_example_leaves_embedded_mode_off_so_a_missing_key_stops_the_node():
    assert env_example()["EUREKA_EMBEDDED"] == "false"
    result = check_deploy(SECRET_KEY="")
    assert result.returncode != 0
    assert "SECRET_KEY (or SECRET_KEY_FILE) is required" in result.stderr


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/", "/admin/login/"])
def test_pages_carry_the_security_headers(node, path):
    response = Client().get(path)
    assert response.status_code == 200
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"


@pytest.mark.django_db
@override_settings(EUREKA_DASHBOARD_LOGIN_REQUIRED=True)
@pytest.mark.parametrize("path", CONSOLE_PAGES)
def test_with_login_required_the_console_sends_strangers_to_the_sign_in_form(node, path):
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")
    assert b"ORDERS" not in response.content


@pytest.mark.django_db
@override_settings(EUREKA_DASHBOARD_LOGIN_REQUIRED=True)
def test_with_login_required_a_signed_in_user_sees_the_console(node):
    user = get_user_model().objects.create_user("ops", password="pw", is_staff=True)
    web = Client()
    web.force_login(user)
    assert web.get("/").status_code == 200
    assert web.get("/lastn").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/", "/lastn", "/live"])
def test_without_login_required_the_console_stays_open(node, path):
    assert Client().get(path).status_code == 200
