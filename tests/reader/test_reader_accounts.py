"""With EUREKA_API_AUTH on, a reader applies the node's API accounts itself to what it serves (it
shares the node's database) and forwards the rest with the client's credentials, for the node to judge."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import httpx
import pytest

from tests.factories import instance_body
from tests.integration.conftest import BIN, ROOT
from tests.interop.conftest import wait_until
from tests.reader.conftest import ReaderStack, start_stack

pytestmark = pytest.mark.integration

VIA = "1.1 eureka-reader"
APPS_JSON = {"Accept": "application/json", "Accept-Encoding": "identity"}
ACCOUNTS = {"grafana": ("reader", "grafana-pw"), "orders": ("client", "orders-pw")}


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[ReaderStack]:
    started = start_stack(tmp_path_factory.mktemp("reader-accounts"), migrate=True, EUREKA_API_AUTH="true")
    try:
        # Both accounts in one process (each manage.py start costs seconds on a busy machine).
        script = (
            "import os, django; django.setup()\n"
            "from django.core.management import call_command\n"
            f"for name, (role, password) in {ACCOUNTS!r}.items():\n"
            "    os.environ['EUREKA_ACCOUNT_PASSWORD'] = password\n"
            "    call_command('eureka_account', name, role=role)\n"
        )
        subprocess.run(
            [str(BIN / "python"), "-c", script],
            cwd=ROOT,
            env={**started.env, "DJANGO_SETTINGS_MODULE": "eureka_site.settings"},
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield started
    finally:
        started.stop_all()


def auth(name: str, password: str | None = None) -> httpx.BasicAuth:
    return httpx.BasicAuth(name, password or ACCOUNTS[name][1])


def test_without_credentials_the_reader_itself_answers_401_with_the_challenge(stack):
    refused = httpx.get(f"{stack.reader_url}/eureka/apps", headers=APPS_JSON, timeout=10)
    assert refused.status_code == 401 and "Via" not in refused.headers
    assert refused.headers["WWW-Authenticate"].startswith('Basic realm="eureka"')
    wrong = httpx.get(f"{stack.reader_url}/eureka/apps", auth=auth("grafana", "nope"), timeout=30)
    assert wrong.status_code == 401 and "Via" not in wrong.headers


def test_a_reader_account_reads_from_the_reader_as_from_the_node(stack):
    grafana = auth("grafana")
    # The first answer may be the node's (a miss); then the reader serves the key itself.
    httpx.get(f"{stack.url}/eureka/apps", headers=APPS_JSON, auth=grafana, timeout=30)
    served = wait_until(
        lambda: (
            (
                r := httpx.get(f"{stack.reader_url}/eureka/apps", headers=APPS_JSON, auth=grafana, timeout=30)
            ).headers.get("Via")
            is None
            and r
        ),
        15,
        "the reader never served GET apps to an account itself",
    )
    direct = httpx.get(f"{stack.url}/eureka/apps", headers=APPS_JSON, auth=grafana, timeout=30)
    assert (
        (served.status_code, served.content) == (direct.status_code, direct.content) == (200, direct.content)
    )


def test_writes_through_the_reader_are_judged_by_the_node(stack):
    body = instance_body(app="SECURED", host="10.6.0.1")
    refused = httpx.post(
        f"{stack.reader_url}/eureka/apps/SECURED", json=body, auth=auth("grafana"), timeout=30
    )
    assert refused.status_code == 403 and refused.headers["Via"] == VIA
    direct = httpx.post(f"{stack.url}/eureka/apps/SECURED", json=body, auth=auth("grafana"), timeout=30)
    assert (refused.status_code, refused.content) == (direct.status_code, direct.content)
    instance = f"{stack.url}/eureka/apps/SECURED/10.6.0.1:secured:8080"
    assert httpx.get(instance, auth=auth("orders"), timeout=30).status_code == 404

    accepted = httpx.post(
        f"{stack.reader_url}/eureka/apps/SECURED", json=body, auth=auth("orders"), timeout=30
    )
    assert accepted.status_code == 204 and accepted.headers["Via"] == VIA
    assert httpx.get(instance, auth=auth("orders"), timeout=30).status_code == 200
    anonymous = httpx.post(f"{stack.reader_url}/eureka/apps/SECURED", json=body, timeout=30)
    assert anonymous.status_code == 401 and anonymous.headers["Via"] == VIA
