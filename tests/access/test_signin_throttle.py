"""Failed sign-ins throttled per client address and per user name: the throttle on a fake clock, then
through API Basic credentials and the admin's sign-in form (which the console uses)."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password, make_password
from django.contrib.auth.models import Group
from django.test import Client, override_settings
from rest_framework.test import APIClient

from registry.access import accounts
from registry.access.clients import client_address
from registry.access.credentials import CredentialCache
from registry.access.hashers import OffloadedPBKDF2PasswordHasher
from registry.access.throttle import SignInThrottle
from tests.conftest import FakeClock

LOCKOUT_MS = 60_000


@pytest.fixture
def throttle_clock() -> FakeClock:
    return FakeClock(0)


def make_throttle(clock, per_address=3, per_user=5, max_tracked=10_000) -> SignInThrottle:
    return SignInThrottle(
        clock, per_address=per_address, per_user=per_user, lockout_ms=LOCKOUT_MS, max_tracked=max_tracked
    )


# --- the throttle itself -------------------------------------------------------------------------


def test_an_address_is_locked_after_its_failures_and_other_addresses_are_not(throttle_clock):
    throttle = make_throttle(throttle_clock)
    for n in range(3):
        assert throttle.wait("10.0.0.1", f"user-{n}") == 0
        throttle.failed("10.0.0.1", f"user-{n}")
    assert throttle.wait("10.0.0.1", "anyone") == 60
    assert throttle.wait("10.0.0.2", "user-0") == 0


def test_a_user_name_is_locked_after_failures_from_many_addresses_but_not_by_one_address(throttle_clock):
    throttle = make_throttle(throttle_clock)
    for _ in range(2):
        throttle.failed("10.0.0.1", "admin")
    # Two failures from one address: neither that address (3) nor the name (5) is locked yet.
    assert throttle.wait("10.0.0.1", "admin") == 0
    for n in range(3):
        throttle.failed(f"10.0.1.{n}", "admin")
    assert throttle.wait("10.9.9.9", "admin") == 60
    assert throttle.wait("10.9.9.9", "someone-else") == 0


def test_the_lockout_ends_after_its_time_and_counting_starts_again(throttle_clock):
    throttle = make_throttle(throttle_clock)
    for _ in range(3):
        throttle.failed("10.0.0.1", "admin")
    throttle_clock.advance(LOCKOUT_MS - 1_500)
    assert throttle.wait("10.0.0.1", "admin") == 2  # whole seconds, rounded up
    throttle_clock.advance(1_500)
    assert throttle.wait("10.0.0.1", "admin") == 0
    throttle.failed("10.0.0.1", "admin")
    assert throttle.wait("10.0.0.1", "admin") == 0, "one failure after the lockout does not lock again"


def test_failures_older_than_the_window_are_not_counted(throttle_clock):
    throttle = make_throttle(throttle_clock)
    throttle.failed("10.0.0.1", "a")
    throttle.failed("10.0.0.1", "b")
    throttle_clock.advance(LOCKOUT_MS)
    throttle.failed("10.0.0.1", "c")
    assert throttle.wait("10.0.0.1", "d") == 0


def test_a_success_forgets_the_users_failures_but_not_the_addresss(throttle_clock):
    throttle = make_throttle(throttle_clock)
    for n in range(2):
        throttle.failed(f"10.0.0.{n}", "admin")
    throttle.failed("10.0.0.9", "admin")
    throttle.failed("10.0.0.9", "admin")
    throttle.succeeded("admin")
    for n in range(2):
        throttle.failed(f"10.0.2.{n}", "admin")
    assert throttle.wait("10.0.3.1", "admin") == 0, "the name's count started again at the success"
    throttle.failed("10.0.0.9", "other")
    assert throttle.wait("10.0.0.9", "other") == 60, "the address kept its two failures"


def test_a_limit_of_zero_never_locks(throttle_clock):
    throttle = make_throttle(throttle_clock, per_address=0, per_user=0)
    for _ in range(100):
        throttle.failed("10.0.0.1", "admin")
    assert throttle.wait("10.0.0.1", "admin") == 0
    assert throttle.tracked() == (0, 0)


def test_a_spray_from_many_addresses_and_names_keeps_memory_bounded(throttle_clock):
    throttle = make_throttle(throttle_clock, max_tracked=1_000)
    for n in range(50_000):
        throttle.failed(f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}", f"user-{n}" + "x" * 500)
    assert throttle.tracked() == (1_000, 1_000)
    # The latest are remembered; a user name is kept cut to a bounded length.
    assert throttle.wait("10.0.195.79", "user-49999" + "x" * 500) == 0
    throttle.failed("10.0.195.79", "x")
    throttle.failed("10.0.195.79", "y")
    assert throttle.wait("10.0.195.79", "z") == 60


# --- the client's address -----------------------------------------------------------------------


def address_of(remote: str, forwarded: str | None = None) -> str:
    meta = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    return client_address(SimpleNamespace(META=meta))


def test_a_clients_own_x_forwarded_for_is_not_believed():
    assert address_of("203.0.113.7", "10.1.1.1") == "203.0.113.7"


def test_behind_a_trusted_proxy_the_last_hop_it_did_not_write_is_the_client():
    # nginx on the same host appends the address it was reached from to what the client sent.
    assert address_of("127.0.0.1", "6.6.6.6, 203.0.113.7") == "203.0.113.7"
    assert address_of("::1", "203.0.113.8") == "203.0.113.8"
    assert address_of("127.0.0.1") == "127.0.0.1"
    # A chain of trusted proxies (nginx in front of a reader): each one's hop is skipped.
    with override_settings(
        EUREKA=settings.EUREKA.with_changes(access__trusted_proxies=("127.0.0.1", "10.0.0.0/8"))
    ):
        assert address_of("10.0.0.5", "6.6.6.6, 203.0.113.7, 10.0.0.4") == "203.0.113.7"
    with override_settings(EUREKA=settings.EUREKA.with_changes(access__trusted_proxies=())):
        assert address_of("127.0.0.1", "203.0.113.7") == "127.0.0.1"


# --- the hasher ----------------------------------------------------------------------------------


def test_the_offloaded_hasher_reads_and_writes_djangos_pbkdf2_hashes():
    hasher = OffloadedPBKDF2PasswordHasher()
    hasher.iterations = 1_000  # the format is the point here, not the cost
    encoded = hasher.encode("s3cret", "somesalt")
    assert encoded.startswith("pbkdf2_sha256$1000$somesalt$")
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.PBKDF2PasswordHasher"]):
        assert check_password("s3cret", encoded)
        stock = make_password("s3cret")
    assert hasher.verify("s3cret", stock)
    assert not hasher.verify("wrong", stock)


# --- through API Basic credentials ---------------------------------------------------------------

FAST_HASHER = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def throttled(throttle_clock):
    throttle = make_throttle(throttle_clock)
    accounts.reset_signin_throttle(throttle)
    accounts.reset_credential_cache(CredentialCache(throttle_clock, recheck_ms=5_000, refused_ms=2_000))
    yield throttle
    accounts.reset_credential_cache(None)
    accounts.reset_signin_throttle(None)


def basic(name: str, password: str, address: str) -> dict[str, str]:
    token = base64.b64encode(f"{name}:{password}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}", "REMOTE_ADDR": address}


def reader_account(name: str, password: str = "pw"):
    user = get_user_model().objects.create_user(name, password=password)
    user.groups.add(Group.objects.get(name="eureka-reader"))
    return user


def read(api: APIClient, creds: dict[str, str]):
    return api.get("/eureka/apps", HTTP_ACCEPT="application/json", **creds)


@pytest.mark.django_db
@override_settings(EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER)
def test_api_basic_auth_is_throttled_per_address_with_429_and_retry_after(node, throttled, throttle_clock):
    reader_account("dash")
    # Made now: saving an account forgets every verified credential (registry/access/accounts.py).
    reader_account("ops", "right")
    api = APIClient()
    # A client already verified keeps reading from the attacker's address throughout.
    assert read(api, basic("dash", "pw", "10.0.0.1")).status_code == 200
    for n in range(3):
        assert read(api, basic("dash", f"guess-{n}", "10.0.0.1")).status_code == 401
    refused = read(api, basic("dash", "guess-3", "10.0.0.1"))
    assert refused.status_code == 429
    assert refused["Retry-After"] == "60"
    assert refused.content == b""
    # Unseen credentials from that address are not even checked, right or wrong.
    assert read(api, basic("ops", "right", "10.0.0.1")).status_code == 429
    # Another address is not locked, nor is a user with fewer failures than its own limit.
    assert read(api, basic("ops", "right", "10.0.0.2")).status_code == 200
    assert read(api, basic("dash", "pw", "10.0.0.1")).status_code == 200
    assert accounts.REFUSALS["throttled"] >= 2
    throttle_clock.advance(LOCKOUT_MS)
    assert read(api, basic("dash", "guess-4", "10.0.0.1")).status_code == 401


@pytest.mark.django_db
@override_settings(EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER)
def test_behind_a_proxy_each_client_is_counted_by_its_forwarded_address(node, throttled):
    reader_account("dash")
    api = APIClient()
    # Through nginx on the node's host (loopback is a trusted proxy by default).
    for n in range(3):
        creds = basic("dash", f"guess-{n}", "127.0.0.1") | {"HTTP_X_FORWARDED_FOR": "203.0.113.66"}
        assert read(api, creds).status_code == 401
    attacker = basic("dash", "pw", "127.0.0.1") | {"HTTP_X_FORWARDED_FOR": "203.0.113.66"}
    assert read(api, attacker).status_code == 429
    # Another client through the same proxy is not locked with it.
    neighbour = basic("dash", "pw", "127.0.0.1") | {"HTTP_X_FORWARDED_FOR": "203.0.113.77"}
    assert read(api, neighbour).status_code == 200


@pytest.mark.django_db
@override_settings(EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER)
def test_api_basic_auth_is_throttled_per_user_across_addresses(node, throttled):
    reader_account("dash")
    api = APIClient()
    for n in range(5):
        assert read(api, basic("dash", f"guess-{n}", f"10.0.1.{n}")).status_code == 401
    assert read(api, basic("dash", "pw", "10.0.2.1")).status_code == 429
    # A repeated wrong password is answered from the credential cache: refused, but no new guess.
    reader_account("svc")
    for _ in range(5):
        assert read(api, basic("svc", "same-wrong", "10.0.3.1")).status_code == 401
    assert read(api, basic("svc", "pw", "10.0.3.1")).status_code == 200


@pytest.mark.django_db
@override_settings(EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER)
def test_the_change_feed_answers_a_throttled_client_429_with_retry_after(node, throttled):
    reader_account("dash")
    api = APIClient()
    for n in range(3):
        assert api.get("/api/v1/changes", **basic("dash", f"guess-{n}", "10.0.0.1")).status_code == 401
    refused = api.get("/api/v1/changes", **basic("dash", "pw", "10.0.0.1"))
    assert refused.status_code == 429
    assert refused["Retry-After"] == "60"
    assert refused.json()["error"] == "throttled"


# --- through the admin's sign-in form ------------------------------------------------------------


def sign_in(client: Client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(
        "/admin/login/?next=/admin/", {"username": username, "password": password}, REMOTE_ADDR=address
    )


@pytest.fixture
def staff():
    with override_settings(PASSWORD_HASHERS=FAST_HASHER):
        return get_user_model().objects.create_user("boss", password="right-pw", is_staff=True)


@pytest.mark.django_db
@override_settings(PASSWORD_HASHERS=FAST_HASHER)
def test_the_admin_sign_in_refuses_an_address_after_its_failures_and_says_to_wait(
    node, throttled, throttle_clock, staff, monkeypatch
):
    web = Client()
    for n in range(3):
        response = sign_in(web, "boss", f"guess-{n}")
        assert response.status_code == 200
        assert b"Please enter the correct username and password" in response.content
    checks = []
    monkeypatch.setattr(
        "django.contrib.auth.backends.ModelBackend.authenticate", lambda *a, **k: checks.append(a)
    )
    refused = sign_in(web, "boss", "right-pw")
    assert refused.status_code == 429
    assert refused["Retry-After"] == "60"
    assert b"Too many failed sign-ins" in refused.content
    assert b"Wait 60 seconds" in refused.content
    assert checks == [], "a refused sign-in checks no password"
    monkeypatch.undo()
    # From another address the staff user signs in.
    assert sign_in(Client(), "boss", "right-pw", address="10.0.0.2").status_code == 302
    throttle_clock.advance(LOCKOUT_MS)
    assert sign_in(web, "boss", "right-pw").status_code == 302


@pytest.mark.django_db
@override_settings(PASSWORD_HASHERS=FAST_HASHER)
def test_the_admin_sign_in_refuses_a_user_name_guessed_from_many_addresses(node, throttled, staff):
    for n in range(5):
        assert sign_in(Client(), "boss", f"guess-{n}", address=f"10.0.1.{n}").status_code == 200
    assert sign_in(Client(), "boss", "right-pw", address="10.0.2.1").status_code == 429
    assert sign_in(Client(), "someone", "whatever", address="10.0.2.1").status_code == 200


@pytest.mark.django_db
@override_settings(
    EUREKA=settings.EUREKA.with_changes(dashboard__login_required=True), PASSWORD_HASHERS=FAST_HASHER
)
def test_the_console_signs_in_through_the_throttled_form(node, throttled, staff):
    web = Client()
    to_sign_in = web.get("/", REMOTE_ADDR="10.0.0.1")
    assert to_sign_in.status_code == 302
    form_url = to_sign_in["Location"]
    for n in range(3):
        web.post(form_url, {"username": "boss", "password": f"guess-{n}"}, REMOTE_ADDR="10.0.0.1")
    refused = web.post(form_url, {"username": "boss", "password": "right-pw"}, REMOTE_ADDR="10.0.0.1")
    assert refused.status_code == 429
    signed_in = web.post(form_url, {"username": "boss", "password": "right-pw"}, REMOTE_ADDR="10.0.0.5")
    assert signed_in.status_code == 302
    assert web.get("/", REMOTE_ADDR="10.0.0.5").status_code == 200
