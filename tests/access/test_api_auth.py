"""API accounts (EUREKA_API_AUTH): who may read, write and replicate, and what a refusal leaves behind."""

from __future__ import annotations

import base64
import json

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from rest_framework.test import APIClient

from registry.access import accounts
from registry.access.credentials import CredentialCache
from registry.domain.refusals import RefusalLines
from tests.conftest import FakeClock
from tests.factories import instance_body

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("auth_on"),
]

FAST_HASHER = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def auth_clock() -> FakeClock:
    return FakeClock(0)


@pytest.fixture
def auth_on(auth_clock):
    cache = CredentialCache(auth_clock, recheck_ms=5_000, refused_ms=2_000)
    accounts.reset_credential_cache(cache)
    with override_settings(
        EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER
    ):
        yield cache
    accounts.reset_credential_cache(None)


def account(name: str, role: str | None, password: str = "pw") -> object:
    user = get_user_model().objects.create_user(name, password=password)
    if role:
        user.groups.add(Group.objects.get(name=f"eureka-{role}"))
    return user


def basic(name: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{name}:{password}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}


def register(api, creds, app="ORDERS", instance_id="o-1", **extra):
    body = json.dumps(instance_body(app=app, instance_id=instance_id)).encode()
    return api.post(f"/eureka/apps/{app}", data=body, content_type="application/json", **creds, **extra)


def listed(node) -> set[tuple[str, str]]:
    return {(app, info.instance_id) for app, infos in node.registry.reads.instances() for info in infos}


@pytest.fixture
def api(node) -> APIClient:
    return APIClient()


def test_a_request_without_credentials_gets_401_with_a_basic_challenge_and_changes_nothing(api, node):
    response = register(api, {})
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith('Basic realm="eureka"')
    assert response.content == b""
    assert listed(node) == set()
    assert api.get("/eureka/apps", HTTP_ACCEPT="application/json").status_code == 401


@pytest.mark.parametrize(
    "header",
    [
        None,  # a wrong password
        "Bearer abc",
        "Basic !!!not-base64",
        "Basic " + base64.b64encode(b"no-colon").decode(),
    ],
)
def test_wrong_or_malformed_credentials_get_401_and_change_nothing(api, node, header):
    account("svc", "client")
    creds = basic("svc", "wrong") if header is None else {"HTTP_AUTHORIZATION": header}
    response = register(api, creds)
    assert response.status_code == 401
    assert "WWW-Authenticate" in response
    assert listed(node) == set()


def test_an_unknown_account_gets_401(api, node):
    assert register(api, basic("nobody", "pw")).status_code == 401


def test_a_client_registers_renews_overrides_updates_metadata_reads_and_cancels(api, node):
    account("svc", "client")
    creds = basic("svc", "pw")
    assert register(api, creds).status_code == 204
    assert listed(node) == {("ORDERS", "o-1")}
    assert api.put("/eureka/apps/ORDERS/o-1", **creds).status_code == 200
    assert api.put("/eureka/apps/ORDERS/o-1/status?value=OUT_OF_SERVICE", **creds).status_code == 200
    assert api.delete("/eureka/apps/ORDERS/o-1/status", **creds).status_code == 200
    assert api.put("/eureka/apps/ORDERS/o-1/metadata?zone=a", **creds).status_code == 200
    assert api.get("/eureka/apps", HTTP_ACCEPT="application/json", **creds).status_code == 200
    assert api.get("/eureka/v2/apps/delta", HTTP_ACCEPT="application/json", **creds).status_code == 200
    assert api.delete("/eureka/apps/ORDERS/o-1", **creds).status_code == 200
    assert listed(node) == set()


def test_a_reader_reads_but_every_write_is_403_and_changes_nothing(api, node):
    account("svc", "client")
    account("dash", "reader")
    assert register(api, basic("svc", "pw")).status_code == 204
    before = node.registry.reads.get_instance("ORDERS", "o-1", node.now())
    reader = basic("dash", "pw")
    assert api.get("/eureka/apps/ORDERS", HTTP_ACCEPT="application/json", **reader).status_code == 200
    refused = [
        register(api, reader, instance_id="o-2"),
        api.put("/eureka/apps/ORDERS/o-1", **reader),
        api.put("/eureka/apps/ORDERS/o-1/status?value=DOWN", **reader),
        api.put("/eureka/apps/ORDERS/o-1/metadata?zone=b", **reader),
        api.delete("/eureka/apps/ORDERS/o-1", **reader),
    ]
    assert [r.status_code for r in refused] == [403] * 5
    # No body (Java clients would try to decode it); the reason goes to the log.
    assert all(r.content == b"" and "Content-Type" not in r for r in refused)
    assert listed(node) == {("ORDERS", "o-1")}
    after = node.registry.reads.get_instance("ORDERS", "o-1", node.now())
    assert after.instance == before.instance


def test_an_account_without_a_role_may_not_even_read(api, node):
    account("nobody-role", None)
    response = api.get("/eureka/apps", HTTP_ACCEPT="application/json", **basic("nobody-role", "pw"))
    assert response.status_code == 403


def test_only_peers_send_replication_batches_or_replicated_writes(api, node):
    account("svc", "client")
    account("peer", "peer")
    batch = {
        "replicationList": [
            {
                "appName": "ORDERS",
                "id": "o-9",
                "action": "Register",
                "instanceInfo": instance_body(app="ORDERS", instance_id="o-9")["instance"],
            }
        ]
    }
    data = json.dumps(batch).encode()

    def send(creds):
        return api.post("/eureka/peerreplication/batch/", data=data, content_type="application/json", **creds)

    assert send(basic("svc", "pw")).status_code == 403
    replicated = register(api, basic("svc", "pw"), HTTP_X_NETFLIX_DISCOVERY_REPLICATION="true")
    assert replicated.status_code == 403
    assert listed(node) == set()
    answer = send(basic("peer", "pw"))
    assert answer.status_code == 200
    assert json.loads(answer.content)["responseList"][0]["statusCode"] == 200
    assert listed(node) == {("ORDERS", "o-9")}


def test_a_superuser_may_do_everything(api, node):
    get_user_model().objects.create_superuser("root", password="pw")
    assert register(api, basic("root", "pw")).status_code == 204


def test_verified_credentials_are_remembered_so_the_password_is_hashed_once(api, node, monkeypatch):
    account("svc", "client")
    checks = []
    real = accounts.check_password
    monkeypatch.setattr(accounts, "check_password", lambda *a: checks.append(1) or real(*a))
    creds = basic("svc", "pw")
    assert register(api, creds).status_code == 204
    for _ in range(20):
        assert api.put("/eureka/apps/ORDERS/o-1", **creds).status_code == 200
    assert len(checks) == 1


def test_an_account_disabled_elsewhere_is_refused_after_the_recheck_interval(api, node, auth_clock):
    user = account("svc", "client")
    creds = basic("svc", "pw")
    assert register(api, creds).status_code == 204
    # As another process would (a manage.py shell, another node's admin): no signal reaches us.
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)
    auth_clock.advance(4_000)
    assert api.put("/eureka/apps/ORDERS/o-1", **creds).status_code == 200
    auth_clock.advance(1_500)
    assert api.put("/eureka/apps/ORDERS/o-1", **creds).status_code == 401


def test_a_password_changed_elsewhere_retires_the_old_one_after_the_recheck_interval(api, node, auth_clock):
    user = account("svc", "client")
    assert register(api, basic("svc", "pw")).status_code == 204
    user.set_password("new")
    get_user_model().objects.filter(pk=user.pk).update(password=user.password)
    auth_clock.advance(5_000)
    assert api.put("/eureka/apps/ORDERS/o-1", **basic("svc", "pw")).status_code == 401
    assert api.put("/eureka/apps/ORDERS/o-1", **basic("svc", "new")).status_code == 200


def test_changes_made_in_this_process_apply_at_once(api, node):
    user = account("svc", "client")
    creds = basic("svc", "pw")
    assert register(api, creds).status_code == 204
    user.groups.clear()  # the admin taking the role away
    assert api.put("/eureka/apps/ORDERS/o-1", **creds).status_code == 403
    user.groups.add(Group.objects.get(name="eureka-client"))
    assert api.put("/eureka/apps/ORDERS/o-1", **creds).status_code == 200
    user.is_active = False
    user.save()
    assert api.put("/eureka/apps/ORDERS/o-1", **creds).status_code == 401


def test_a_refusal_is_remembered_briefly_then_checked_again(api, node, auth_clock):
    creds = basic("late", "pw")
    assert register(api, creds).status_code == 401
    get_user_model().objects.filter(username="late").delete()
    # Created elsewhere (no signal here): the remembered refusal holds for up to 2 s.
    user = get_user_model()(username="late")
    user.set_password("pw")
    get_user_model().objects.bulk_create([user])
    get_user_model().objects.get(username="late").groups.through.objects.bulk_create(
        [
            get_user_model().groups.through(
                user_id=get_user_model().objects.get(username="late").pk,
                group_id=Group.objects.get(name="eureka-client").pk,
            )
        ]
    )
    assert register(api, creds).status_code == 401
    auth_clock.advance(2_000)
    assert register(api, creds).status_code == 204


def test_auth_off_keeps_the_open_api(api, node):
    with override_settings(EUREKA=settings.EUREKA.with_changes(access__api_auth=False)):
        assert register(api, {}).status_code == 204


def test_refusals_are_logged_at_most_once_a_minute_per_reason_with_the_count(caplog):
    lines = RefusalLines(interval_s=60, clock=FakeClock(0))
    accounts.reset_refusal_lines(lines)
    before = dict(accounts.REFUSALS)
    try:
        with caplog.at_level("WARNING", logger="registry.access"):
            accounts.note_refusal("forbidden", "'a' lacks x")
            accounts.note_refusal("forbidden", "'b' lacks x")
            accounts.note_refusal("forbidden", "'c' lacks x")
            accounts.note_refusal("unauthenticated", "no credentials")
            lines.clock.advance(60)
            accounts.note_refusal("forbidden", "'d' lacks x")
    finally:
        accounts.reset_refusal_lines()
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 3
    assert logged[2] == "API request refused (forbidden): 'd' lacks x (2 more since the last such line)"
    assert caplog.records[2].refusals == 3
    assert accounts.REFUSALS["forbidden"] == before["forbidden"] + 4


def test_no_password_reaches_the_log(api, node, caplog):
    account("svc", "client", password="s3cret-pw")
    with caplog.at_level("DEBUG"):
        accounts.reset_refusal_lines()
        register(api, basic("svc", "wrong-s3cret"))
        register(api, basic("svc", "s3cret-pw"), HTTP_X_NETFLIX_DISCOVERY_REPLICATION="true")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "svc" in text
    assert "s3cret" not in text
    assert base64.b64encode(b"svc:wrong-s3cret").decode() not in text


# ------------------------------------------------------------------------------- the command


def test_the_account_command_creates_and_updates_an_account_with_one_role(api, node, capsys, monkeypatch):
    monkeypatch.setenv("EUREKA_ACCOUNT_PASSWORD", "from-env")
    call_command("eureka_account", "gw", role="client")
    user = get_user_model().objects.get(username="gw")
    assert [g.name for g in user.groups.all()] == ["eureka-client"]
    assert register(api, basic("gw", "from-env")).status_code == 204
    call_command("eureka_account", "gw", role="reader")
    assert [g.name for g in user.groups.all()] == ["eureka-reader"]
    assert api.put("/eureka/apps/ORDERS/o-1", **basic("gw", "from-env")).status_code == 403
    call_command("eureka_account", "gw", role="reader", disable=True)
    assert api.get("/eureka/apps", **basic("gw", "from-env")).status_code == 401


def test_the_account_command_generates_a_password_when_given_none(api, node, capsys, monkeypatch):
    monkeypatch.delenv("EUREKA_ACCOUNT_PASSWORD", raising=False)
    call_command("eureka_account", "peer-b", role="peer")
    out = capsys.readouterr().out
    password = out.split("Generated password (shown once): ")[1].strip()
    assert len(password) >= 24
    assert api.get("/eureka/apps", **basic("peer-b", password)).status_code == 200


def test_the_account_command_refuses_a_name_with_a_colon_and_an_empty_password(tmp_path):
    with pytest.raises(CommandError, match="':'"):
        call_command("eureka_account", "a:b", role="client")
    empty = tmp_path / "pw"
    empty.write_text("\n")
    with pytest.raises(CommandError, match="empty"):
        call_command("eureka_account", "ab", role="client", password_file=empty)
    assert not get_user_model().objects.filter(username__in=["a:b", "ab"]).exists()


def test_the_migration_creates_the_three_roles():
    held = {
        group.name: sorted(group.permissions.values_list("codename", flat=True))
        for group in Group.objects.filter(name__startswith="eureka-")
    }
    assert held == {
        "eureka-client": ["read_registry", "write_instances"],
        "eureka-reader": ["read_registry"],
        "eureka-peer": ["read_registry", "replicate_registry", "write_instances"],
    }


def test_probes_stay_open_and_the_control_endpoint_keeps_its_own_secret(api, node, settings):
    settings.EUREKA = settings.EUREKA.with_changes(control_secret="control-secret")
    assert api.get("/healthz").status_code == 200
    assert api.get("/readyz").status_code == 200
    account("svc", "peer")
    # API credentials do not open the control endpoint; its secret does, without API credentials.
    assert api.post("/control/jobs/evict", **basic("svc", "pw")).status_code == 403
    assert api.post("/control/jobs/evict", HTTP_X_EUREKA_CONTROL_SECRET="control-secret").status_code == 200


def test_requests_with_the_same_unseen_credentials_share_one_password_check(monkeypatch):
    import threading
    import time

    from registry.access.credentials import Principal

    checks = []

    def slow_check(password, encoded):
        checks.append(password)
        time.sleep(0.2)  # a real hash takes ~0.5 s; the other requests arrive meanwhile
        return password == "pw"

    monkeypatch.setattr(accounts, "check_password", slow_check)
    found = accounts._Account(7, "svc", "stored-hash", True, frozenset({"read_registry"}))
    monkeypatch.setattr(accounts, "_account", lambda **lookup: found)
    header = basic("svc", "pw")["HTTP_AUTHORIZATION"]
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(accounts.authenticate(header))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == [Principal(7, "svc", frozenset({"read_registry"}))] * 8
    assert len(checks) == 1


def test_with_api_accounts_on_metrics_need_a_reader_account(api, node):
    account("prom", "reader")
    account("nobody-role", None)
    assert api.get("/metrics").status_code == 401
    assert "Basic" in api.get("/metrics")["WWW-Authenticate"]
    assert api.get("/metrics", **basic("prom", "wrong")).status_code == 401
    assert api.get("/metrics", **basic("nobody-role", "pw")).status_code == 401
    scraped = api.get("/metrics", **basic("prom", "pw"))
    assert scraped.status_code == 200
    assert b'eureka_auth_refusals_total{reason="unauthenticated"}' in scraped.content


def test_an_account_check_closes_the_database_connection_it_used(monkeypatch):
    """The protocol handler never sends request_finished: the check closes what it opened (outside a
    transaction). An in-memory SQLite test database ignores close(), so the call itself is watched."""

    class WatchedConnection:
        in_atomic_block = False
        closed = 0

        def close(self):
            self.closed += 1

    watched = WatchedConnection()
    monkeypatch.setattr(accounts, "connection", watched)
    account("svc", "client")
    assert accounts.authenticate(basic("svc", "pw")["HTTP_AUTHORIZATION"]).username == "svc"
    assert watched.closed == 1
    assert accounts.authenticate(basic("svc", "pw")["HTTP_AUTHORIZATION"]).username == "svc"
    assert watched.closed == 1  # remembered: no database at all


def test_a_body_is_read_only_once_its_credentials_open_the_api(auth_on, node, db):
    """Issue 34, item 1: with accounts on, the routing application asks before reading a protocol
    request's body. No credentials: 401 at once, without Django; wrong ones: the body stays unread and
    the view answers 401; a client's: read and applied."""
    import io

    from registry.access.drf import credentials_open_the_api
    from registry.wire.handlers import RoutingApplication
    from tests.deploy.test_wsgi_routing import call

    account("writer", "client", password="right")
    app = RoutingApplication(trust_forwarded_prefix=False, may_read_body=credentials_open_the_api)
    body = json.dumps(instance_body(app="PAY", instance_id="pay-1")).encode()

    class Untouchable(io.BytesIO):
        def read(self, *args):
            raise AssertionError("the body of a refused request was read")

    def post(**headers):
        return call(
            app,
            "POST",
            "/eureka/apps/PAY",
            stream=Untouchable(),
            CONTENT_TYPE="application/json",
            CONTENT_LENGTH=str(len(body)),
            **headers,
        )

    before = dict(accounts.REFUSALS)
    status, headers, content = post()
    assert (status, content) == (401, b"") and headers["WWW-Authenticate"].startswith('Basic realm="eureka"')
    assert accounts.REFUSALS["unauthenticated"] == before["unauthenticated"] + 1

    wrong = "Basic " + base64.b64encode(b"writer:wrong").decode()
    status, headers, _ = post(HTTP_AUTHORIZATION=wrong)
    assert status == 401 and "WWW-Authenticate" in headers

    right = "Basic " + base64.b64encode(b"writer:right").decode()
    status, _, _ = call(
        app, "POST", "/eureka/apps/PAY", body, CONTENT_TYPE="application/json", HTTP_AUTHORIZATION=right
    )
    assert status == 204
    assert call(app, "GET", "/eureka/apps/PAY/pay-1", HTTP_AUTHORIZATION=right)[0] == 200
