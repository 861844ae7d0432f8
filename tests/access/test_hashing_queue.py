"""The password-hashing queue is bounded (issue 34): checks beyond a few waiters per hashing slot are
refused at once, unhashed, with 503 and Retry-After, and are neither remembered nor counted as failed
sign-ins. The queue on gevent's greenlets (as in the worker), then each caller's answer."""

from __future__ import annotations

import base64

import gevent
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client, override_settings
from gevent.event import Event
from gevent.lock import BoundedSemaphore
from rest_framework.test import APIClient

from registry.access import accounts
from registry.access.credentials import CredentialCache, digest
from registry.access.hashers import HashingBusy, HashingQueue
from registry.access.throttle import SignInThrottle
from tests.conftest import FakeClock

# --- the queue -----------------------------------------------------------------------------------


def run_checks(queue: HashingQueue, count: int) -> tuple[list, Event, list]:
    """``count`` checks spawned at once, each holding its slot until the returned event is set."""
    done = Event()
    seen: list = []

    def check(n: int) -> None:
        try:
            with queue.turn():
                seen.append(n)
                done.wait()
        except HashingBusy:
            seen.append(f"refused {n}")

    greenlets = [gevent.spawn(check, n) for n in range(count)]
    gevent.sleep(0.05)  # every check has reached its slot, its wait or its refusal
    return seen, done, greenlets


def test_checks_beyond_the_waiters_allowed_are_refused_at_once_and_the_waiters_get_their_turn():
    queue = HashingQueue(slots=2, max_waiting=3, semaphore=BoundedSemaphore)

    seen, done, greenlets = run_checks(queue, 8)

    # Two hashing, three waiting, three refused without waiting for anything.
    assert seen == [0, 1, "refused 5", "refused 6", "refused 7"]
    assert (queue.waiting, queue.shed) == (3, 3)
    done.set()
    gevent.joinall(greenlets, timeout=5)
    assert sorted(seen[5:]) == [2, 3, 4]
    assert queue.waiting == 0
    # Room again: the next check gets a slot at once.
    with queue.turn():
        pass


def test_no_waiting_limit_queues_every_check():
    queue = HashingQueue(slots=1, max_waiting=0, semaphore=BoundedSemaphore)

    seen, done, greenlets = run_checks(queue, 20)

    assert seen == [0] and queue.waiting == 19 and queue.shed == 0
    done.set()
    gevent.joinall(greenlets, timeout=5)
    assert sorted(seen) == list(range(20))


def test_only_sign_in_checks_are_refused_other_hashes_wait_their_turn(monkeypatch):
    """A password change in the admin hashes too: refused, it would be a 500 where nothing answers
    HashingBusy. Only the callers that answer it (API credentials, the sign-in form) may be refused."""
    from registry.access import hashers

    queue = HashingQueue(slots=1, max_waiting=1, semaphore=BoundedSemaphore)
    seen, done, greenlets = run_checks(queue, 2)  # one hashing, one waiting: the queue is full

    def hash_outside_sign_in():
        with queue.turn(hashers._may_shed.get()):
            return "hashed"

    def hash_in_sign_in():
        with hashers.sign_in_checks(), queue.turn(hashers._may_shed.get()):
            return "hashed"

    change = gevent.spawn(hash_outside_sign_in)
    sign_in = gevent.spawn(hash_in_sign_in)
    gevent.sleep(0.05)
    assert isinstance(sign_in.exception, HashingBusy)
    assert not change.ready() and queue.waiting == 2  # waiting beyond the limit, not refused
    done.set()
    gevent.joinall([*greenlets, change], timeout=5)
    assert change.value == "hashed" and hashers._may_shed.get() is False


# --- the callers ---------------------------------------------------------------------------------

FAST_HASHER = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def busy(monkeypatch):
    """Every password check finds the queue full, as under a flood of unseen credentials."""

    def full(*args):
        raise HashingBusy

    monkeypatch.setattr(accounts, "off_the_loop", full)
    return monkeypatch


@pytest.fixture
def throttle():
    clock = FakeClock(0)
    throttle = SignInThrottle(clock, per_address=1, per_user=1, lockout_ms=60_000)
    accounts.reset_signin_throttle(throttle)
    accounts.reset_credential_cache(CredentialCache(clock, recheck_ms=5_000, refused_ms=2_000))
    yield throttle
    accounts.reset_credential_cache(None)
    accounts.reset_signin_throttle(None)


def reader(name: str, password: str = "pw"):
    user = get_user_model().objects.create_user(name, password=password)
    user.groups.add(Group.objects.get(name="eureka-reader"))
    return user


def basic(name: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()


@pytest.mark.django_db
@override_settings(PASSWORD_HASHERS=FAST_HASHER)
def test_a_refused_check_is_neither_remembered_nor_a_failed_sign_in(throttle, busy):
    reader("dash")
    for header in (basic("dash", "pw"), basic("dash", "wrong"), basic("nobody", "pw")):
        with pytest.raises(accounts.Busy) as refused:
            accounts.authenticate(header, lambda: "10.0.0.1")
        assert refused.value.retry_after == 1
        assert accounts.credential_cache().lookup(digest(header)) is None
    # A limit of one failure per address and per name: any failure counted would lock both.
    assert throttle.tracked() == (0, 0)
    assert throttle.wait("10.0.0.1", "dash") == 0
    busy.undo()
    assert accounts.authenticate(basic("dash", "pw"), lambda: "10.0.0.1").username == "dash"


@pytest.mark.django_db
@override_settings(EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER)
def test_the_api_answers_a_refused_check_503_with_retry_after_and_counts_it(node, throttle, busy):
    reader("dash")
    api = APIClient()
    before = accounts.REFUSALS["busy"]

    response = api.get("/eureka/apps", HTTP_ACCEPT="application/json", HTTP_AUTHORIZATION=basic("dash", "pw"))

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert response.content == b""  # like the other refusals: Jersey clients would read a body
    assert accounts.REFUSALS["busy"] == before + 1
    feed = api.get("/api/v1/changes", HTTP_AUTHORIZATION=basic("dash", "pw"))
    assert feed.status_code == 503 and feed["Retry-After"] == "1"
    assert feed.json()["error"] == "busy"
    busy.undo()
    scraped = api.get("/metrics", HTTP_AUTHORIZATION=basic("dash", "pw")).content.decode()
    assert f'eureka_auth_refusals_total{{reason="busy"}} {before + 2}.0' in scraped


@pytest.mark.django_db
@override_settings(PASSWORD_HASHERS=FAST_HASHER)
def test_the_admin_sign_in_answers_a_refused_check_503_and_counts_no_failure(node, throttle, monkeypatch):
    get_user_model().objects.create_user("boss", password="right-pw", is_staff=True)

    def full(*args, **kwargs):
        raise HashingBusy

    monkeypatch.setattr("django.contrib.auth.backends.ModelBackend.authenticate", full)
    web = Client()
    form = {"username": "boss", "password": "wrong-pw"}

    refused = web.post("/admin/login/?next=/admin/", form, REMOTE_ADDR="10.0.0.1")

    assert refused.status_code == 503
    assert refused["Retry-After"] == "1"
    assert b"checking too many sign-ins" in refused.content
    assert throttle.tracked() == (0, 0)
    monkeypatch.undo()
    signed_in = web.post(
        "/admin/login/?next=/admin/", {**form, "password": "right-pw"}, REMOTE_ADDR="10.0.0.1"
    )
    assert signed_in.status_code == 302


@pytest.mark.django_db
@override_settings(EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER)
def test_a_refused_check_is_answered_before_the_body_is_read(node, throttle, monkeypatch):
    """The routing application asks before reading a protocol request's body: a check that could
    not be made is answered there, so that the view's own check cannot pass later on an unread body."""
    import io

    from django.contrib.auth.hashers import check_password

    checks = []

    def busy_once(function, *args):
        checks.append(args)
        if len(checks) == 1:
            raise HashingBusy
        return function(*args)

    monkeypatch.setattr(accounts, "off_the_loop", busy_once)
    assert accounts.check_password is check_password

    from registry.access.drf import credentials_open_the_api
    from registry.wire.handlers import RoutingApplication
    from tests.deploy.test_wsgi_routing import call

    reader("writer")
    app = RoutingApplication(trust_forwarded_prefix=False, may_read_body=credentials_open_the_api)

    class Untouchable(io.BytesIO):
        def read(self, *args):
            raise AssertionError("the body of a request not let in was read")

    status, headers, content = call(
        app,
        "POST",
        "/eureka/apps/PAY",
        stream=Untouchable(),
        CONTENT_TYPE="application/json",
        CONTENT_LENGTH="100",
        HTTP_AUTHORIZATION=basic("writer", "pw"),
    )

    assert (status, content) == (503, b"")
    assert headers["Retry-After"] == "1"
    assert len(checks) == 1, "the view made no check of its own on a request with an unread body"
