"""An API account's certificate names and app grants edited on its user page in the admin (issue 46):
validated, recorded in the admin's history, and applied to the account's next request."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Group, User
from django.test import override_settings

from registry.access import accounts
from registry.access.credentials import CredentialCache
from registry.access.models import ApiAccess
from tests.access.test_api_auth import FAST_HASHER, basic, register
from tests.conftest import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_hashes(settings):
    settings.PASSWORD_HASHERS = FAST_HASHER


@pytest.fixture
def orders() -> User:
    user = User.objects.create_user("orders", password="pw")
    user.groups.add(Group.objects.get(name="eureka-client"))
    return user


def change_form(user: User, names: str, apps: str, existing: ApiAccess | None = None) -> dict:
    """The user change form as the admin page posts it, with the API access inline."""
    return {
        "username": user.username,
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on",
        "groups": [str(group.pk) for group in user.groups.all()],
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "initial-date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "initial-date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "api_access-TOTAL_FORMS": "1",
        "api_access-INITIAL_FORMS": "1" if existing else "0",
        "api_access-MIN_NUM_FORMS": "0",
        "api_access-MAX_NUM_FORMS": "1",
        "api_access-0-id": str(existing.pk) if existing else "",
        "api_access-0-user": str(user.pk),
        "api_access-0-certificate_names": names,
        "api_access-0-apps": apps,
    }


def url(user: User) -> str:
    return f"/admin/auth/user/{user.pk}/change/"


def test_the_user_page_shows_the_api_access_inline(admin_client, orders):
    page = admin_client.get(url(orders))
    assert page.status_code == 200
    assert b"api_access-0-certificate_names" in page.content
    assert b"api_access-0-apps" in page.content


def test_an_inline_edit_is_saved_normalised_and_recorded_in_the_admins_history(admin_client, orders):
    response = admin_client.post(
        url(orders), change_form(orders, "spiffe://shop/orders\n\n  orders.example  \n", "orders, payments-*")
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    access = ApiAccess.objects.get(user=orders)
    assert access.certificate_names == "spiffe://shop/orders\norders.example"
    assert access.apps == "ORDERS,PAYMENTS-*"
    entry = LogEntry.objects.get(object_id=str(orders.pk), action_flag=CHANGE)
    assert entry.user.username == "admin"
    assert "API access" in entry.get_change_message()

    response = admin_client.post(
        url(orders), change_form(orders, "orders.example", "ORDERS", existing=access)
    )
    assert response.status_code == 302
    assert ApiAccess.objects.get(user=orders).apps == "ORDERS"
    changes = [e.get_change_message() for e in LogEntry.objects.filter(object_id=str(orders.pk))]
    assert len(changes) == 2
    assert "Certificate names" in changes[0] and "App grants" in changes[0]


@pytest.mark.parametrize(
    "names, apps, error",
    [
        ("", "ORDERS,,PAYMENTS", "empty"),
        ("", "*", "matches every app"),
        ("", "ORD ERS", "whitespace"),
        ("taken.example", "", "already held by account"),
        ("TAKEN.example", "", "already held by account"),  # names compare without regard to case
    ],
)
def test_a_bad_pattern_or_a_name_held_by_another_account_is_refused_and_nothing_saved(
    admin_client, orders, names, apps, error
):
    other = User.objects.create_user("other", password="pw")
    ApiAccess.objects.create(user=other, certificate_names="taken.example")
    response = admin_client.post(url(orders), change_form(orders, names, apps))
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not ApiAccess.objects.filter(user=orders).exists()
    assert not LogEntry.objects.filter(object_id=str(orders.pk)).exists()


def test_an_admin_change_applies_to_the_accounts_next_request(admin_client, orders, node):
    accounts.reset_credential_cache(CredentialCache(FakeClock(0)))
    from django.conf import settings

    try:
        with override_settings(
            EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER
        ):
            orders.set_password("pw")
            orders.save()
            api_client = type(admin_client)()
            creds = basic("orders", "pw")
            assert register(api_client, creds, app="PAYMENTS", instance_id="p-1").status_code == 204
            response = admin_client.post(url(orders), change_form(orders, "", "ORDERS"))
            assert response.status_code == 302
            assert register(api_client, creds, app="PAYMENTS", instance_id="p-2").status_code == 403
    finally:
        accounts.reset_credential_cache(None)
