"""Console and admin: sign-in when asked, security headers, `check --deploy` with production values."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from tests.factories import instance_body

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


# The console's pages and the admin's (staff), with an instance whose URLs are javascript: ones.
STAFF_PAGES = [
    "/",
    "/live",
    "/lastn",
    "/instances/ORDERS/10.0.0.1:orders:8080/",
    "/admin/",
    "/admin/registry/instances/",
    "/admin/registry/instances/ORDERS/10.0.0.1:orders:8080/",
    "/admin/auth/user/",
    "/admin/auth/user/add/",
]


@pytest.fixture
def hostile_instance(node, admin_client):
    body = instance_body(
        host="10.0.0.1",
        homePageUrl="javascript:alert(document.cookie)",
        statusPageUrl="javascript:alert(document.cookie)",
        healthCheckUrl="javascript:alert(document.cookie)",
        metadata={"note": "<script>alert(1)</script>"},
    )
    response = admin_client.post("/eureka/apps/ORDERS", body, content_type="application/json")
    assert response.status_code == 204


@pytest.mark.django_db
@pytest.mark.parametrize("path", [*STAFF_PAGES, "/admin/login/"])
def test_console_and_admin_pages_carry_a_content_security_policy(admin_client, hostile_instance, path):
    client = Client() if path == "/admin/login/" else admin_client
    response = client.get(path)
    assert response.status_code == 200
    policy = dict(
        directive.strip().split(" ", 1) for directive in response["Content-Security-Policy"].split(";")
    )
    assert policy["default-src"] == policy["script-src"] == policy["style-src"] == "'self'"
    assert policy["object-src"] == policy["base-uri"] == "'none'"
    assert policy["frame-ancestors"] == "'none'" and policy["form-action"] == "'self'"
    assert "unsafe" not in response["Content-Security-Policy"]


@pytest.mark.django_db
@pytest.mark.parametrize("path", STAFF_PAGES)
def test_pages_need_nothing_the_policy_forbids(admin_client, hostile_instance, path):
    """No inline script, style or event handler, and no javascript: link: what the policy allows is
    enough (tests/browser runs the pages under it in Chromium)."""
    page = BeautifulSoup(admin_client.get(path).content.decode(), "html.parser")
    inline = [str(tag)[:80] for tag in page.find_all("script") if not tag.get("src")]
    assert inline == [], "inline scripts"
    assert page.find_all("style") == [], "inline style sheets"
    for tag in page.find_all(True):
        handlers = [name for name in tag.attrs if name.lower().startswith("on") or name.lower() == "style"]
        assert handlers == [], f"{tag.name} has {handlers}"
    hrefs = [a["href"].strip().lower() for a in page.find_all(["a", "link"], href=True)]
    assert not [href for href in hrefs if href.startswith(("javascript:", "data:"))]


@pytest.mark.django_db
@override_settings(EUREKA=settings.EUREKA.with_changes(dashboard__login_required=True))
@pytest.mark.parametrize("path", CONSOLE_PAGES)
def test_with_login_required_the_console_sends_strangers_to_the_sign_in_form(node, path):
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")
    assert b"ORDERS" not in response.content


@pytest.mark.django_db
@override_settings(EUREKA=settings.EUREKA.with_changes(dashboard__login_required=True))
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
