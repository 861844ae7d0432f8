"""``manage.py eureka_account``'s certificate names and app grants (issue 46)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from registry.access.models import ApiAccess
from tests.access.test_api_auth import FAST_HASHER

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_hashes(settings):
    settings.PASSWORD_HASHERS = FAST_HASHER


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv("EUREKA_ACCOUNT_PASSWORD", "pw")


def access_of(name: str) -> ApiAccess:
    return ApiAccess.objects.get(user__username=name)


def test_it_sets_several_certificate_names_and_the_app_grants(capsys):
    call_command(
        "eureka_account",
        "orders",
        role="client",
        certificate_names=["spiffe://shop/orders", "orders.example"],
        apps="orders, PAYMENTS-*",
    )
    access = access_of("orders")
    assert access.names() == ("spiffe://shop/orders", "orders.example")
    assert access.grants() == ("ORDERS", "PAYMENTS-*")
    out = capsys.readouterr().out
    assert "certificate names: spiffe://shop/orders, orders.example, apps: ORDERS,PAYMENTS-*" in out


def test_left_out_they_stay_given_they_are_replaced_and_cleared_on_demand():
    call_command("eureka_account", "orders", role="client", certificate_names=["a.example"], apps="ORDERS")
    call_command("eureka_account", "orders", role="client")
    assert (access_of("orders").names(), access_of("orders").apps) == (("a.example",), "ORDERS")
    call_command("eureka_account", "orders", role="client", certificate_names=["b.example"], apps="PAY-*")
    assert (access_of("orders").names(), access_of("orders").apps) == (("b.example",), "PAY-*")
    call_command("eureka_account", "orders", role="client", clear_apps=True)
    assert (access_of("orders").names(), access_of("orders").apps) == (("b.example",), "")
    call_command("eureka_account", "orders", role="client", clear_certificate_names=True)
    assert (access_of("orders").names(), access_of("orders").apps) == ((), "")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"apps": "ORDERS,,X"}, "empty"),
        ({"apps": "*"}, "matches every app"),
        ({"apps": ""}, "--clear-apps"),
        ({"apps": "ORDERS", "role": "peer"}, "client accounts only"),
        ({"certificate_names": [" "]}, "empty"),
        ({"certificate_names": ["two words"]}, "whitespace"),
        ({"certificate_names": ["Taken.Example"]}, "already held by account 'other'"),
    ],
)
def test_a_bad_pattern_or_name_is_refused_and_changes_nothing(options, message):
    call_command("eureka_account", "other", role="client", certificate_names=["taken.example"])
    call_command("eureka_account", "orders", role="client", apps="ORDERS")
    with pytest.raises(CommandError, match=message):
        call_command("eureka_account", "orders", **{"role": "client", **options})
    assert access_of("orders").apps == "ORDERS"
    assert access_of("orders").names() == ()
    assert get_user_model().objects.get(username="orders").groups.get().name == "eureka-client"


def test_the_listing_shows_each_accounts_role_names_and_grants(capsys):
    call_command("eureka_account", "orders", role="client", certificate_names=["o.example"], apps="ORDERS")
    call_command("eureka_account", "legacy", role="client")
    call_command("eureka_account", "node-b", role="peer", certificate_names=["node-b.example"])
    call_command("eureka_account", "dash", role="reader", disable=True)
    capsys.readouterr()
    call_command("eureka_account", list=True)
    assert capsys.readouterr().out.splitlines() == [
        "'dash': role reader, disabled, certificate names: none, apps: not scoped",
        "'legacy': role client, enabled, certificate names: none, apps: every app",
        "'node-b': role peer, enabled, certificate names: node-b.example, apps: not scoped",
        "'orders': role client, enabled, certificate names: o.example, apps: ORDERS",
    ]


def test_it_needs_a_name_and_a_role_unless_it_lists():
    with pytest.raises(CommandError, match="--role"):
        call_command("eureka_account", "orders")
    with pytest.raises(CommandError, match="no account name"):
        call_command("eureka_account", "orders", list=True)
