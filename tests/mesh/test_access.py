"""Who the mesh serves (registry/mesh/access.py): the networks DNS answers, and the xDS access check
with the node's accounts and rules (its verdicts; live: tests/mesh/test_mesh_access_live.py)."""

from __future__ import annotations

import asyncio
import base64
from importlib import import_module

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from django.apps import apps as django_apps
from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.test import override_settings

from registry.access import accounts
from registry.access.credentials import CredentialCache
from registry.access.models import ApiAccess
from registry.mesh.access import NO_CREDENTIALS, dns_allowed, xds_authorizer
from registry.mesh.xds import Forbidden
from tests.access.test_api_auth import FAST_HASHER, account
from tests.conftest import FakeClock

# ---------------------------------------------------------------------------- DNS: which networks


def test_dns_answers_everyone_when_no_network_is_set_and_accounts_are_off():
    assert dns_allowed((), api_auth=False) is None


@pytest.mark.parametrize(
    ("address", "answered"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("2001:db8::1", False),
        ("fe80::1%eth0", False),
    ],
)
def test_dns_answers_loopback_alone_when_accounts_are_on_and_no_network_is_set(address, answered):
    allowed = dns_allowed((), api_auth=True)
    assert allowed is not None and allowed(address) is answered


@pytest.mark.parametrize("api_auth", [False, True])
def test_dns_answers_the_networks_named_and_no_loopback_unless_named(api_auth):
    allowed = dns_allowed(("10.0.0.0/8", "fe80::/10", "192.168.1.7"), api_auth=api_auth)
    assert allowed is not None
    assert allowed("10.1.2.3")
    assert allowed("::ffff:10.1.2.3")  # an IPv4 client of a dual-stack socket
    assert allowed("fe80::1%eth0")  # a link-local client, its scope named
    assert allowed("192.168.1.7")
    assert not allowed("192.168.1.8")
    assert not allowed("127.0.0.1")
    assert not allowed("::1")


def test_an_ipv4_mapped_network_named_holds_its_mapped_clients():
    allowed = dns_allowed(("::ffff:10.0.0.0/104",), api_auth=True)
    assert allowed is not None
    assert allowed("::ffff:10.9.8.7")
    assert not allowed("::ffff:11.0.0.1")


@pytest.mark.parametrize("address", ["", "localhost", "999.1.1.1", "::1::2", "%eth0", "127.0.0.1/8", "\x00"])
def test_dns_refuses_an_address_it_cannot_read(address):
    allowed = dns_allowed((), api_auth=True)
    assert allowed is not None and allowed(address) is False


def test_a_network_that_is_no_network_is_refused_by_name():
    with pytest.raises(ValueError, match="'banana' is not a network"):
        dns_allowed(("banana",), api_auth=True)


# ---------------------------------------------------------------------------- xDS: the node's accounts


@pytest.fixture
def roles():
    """The role groups the migrations make, made again: a transactional test starts from tables an
    earlier one may have emptied (and ends by emptying them)."""
    ContentType.objects.clear_cache()
    import_module("registry.migrations.0002_api_roles").create_roles(django_apps, None)


@pytest.fixture
def authorize(roles):
    accounts.reset_credential_cache(CredentialCache(FakeClock(0), recheck_ms=5_000, refused_ms=2_000))
    accounts.reset_signin_throttle(None)
    with override_settings(
        EUREKA=settings.EUREKA.with_changes(access__api_auth=True), PASSWORD_HASHERS=FAST_HASHER
    ):
        check = xds_authorizer(True)
        assert check is not None
        yield lambda authorization=None, der=None, address="10.0.0.1": asyncio.run(
            check(authorization, der, address)
        )
    accounts.reset_credential_cache(None)
    accounts.reset_signin_throttle(None)


# The check runs on a worker thread, as in the mesh: it reads committed rows, not a transaction of the
# test's thread.
DB = pytest.mark.django_db(transaction=True)


def basic(name: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def der_of(ca: trustme.CA, name: str) -> bytes:
    pem = ca.issue_cert(name).cert_chain_pems[0].bytes()
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def test_xds_is_open_when_accounts_are_off():
    assert xds_authorizer(False) is None


@DB
def test_a_reader_by_password_is_served_and_wrong_or_missing_credentials_are_not(authorize):
    account("mesh-reader", "reader", password="pw")
    assert authorize(basic("mesh-reader", "pw")) is None
    assert authorize() == NO_CREDENTIALS
    refused = authorize(basic("mesh-reader", "wrong"))
    assert refused == "wrong user name or password" and not isinstance(refused, Forbidden)
    assert not isinstance(authorize("Bearer abc"), Forbidden)


@DB
@pytest.mark.parametrize("role", ["client", "peer"])
def test_every_role_may_read(authorize, role):
    account("someone", role, password="pw")
    assert authorize(basic("someone", "pw")) is None


@DB
def test_an_account_without_a_role_is_forbidden_by_name(authorize):
    account("nobody", None, password="pw")
    refused = authorize(basic("nobody", "pw"))
    assert isinstance(refused, Forbidden)
    assert "'nobody' may not read the registry" in refused


@DB
def test_certificates_follow_the_node_rules(authorize, ca):
    reader = account("by-cert", "reader", password="pw")
    ApiAccess.objects.create(user=reader, certificate_names="reader.mesh.example")
    account("other", "reader", password="pw2")
    known, unknown = der_of(ca, "reader.mesh.example"), der_of(ca, "stranger.mesh.example")
    assert authorize(der=known) is None
    assert authorize(basic("by-cert", "pw"), known) is None
    # A certificate of no account adds nothing to credentials that hold, and opens nothing alone.
    assert authorize(basic("other", "pw2"), unknown) is None
    assert "names no account" in authorize(der=unknown)
    # Both, naming two accounts: refused, as the node refuses such a request.
    refused = authorize(basic("other", "pw2"), known)
    assert "names 'by-cert'" in refused and not isinstance(refused, Forbidden)
    assert authorize(der=b"not a certificate").startswith("unreadable client certificate")


@DB
def test_failed_sign_ins_lock_out_the_address_that_failed_not_every_xds_client(authorize):
    account("mesh-reader", "reader", password="pw")
    for attempt in range(settings.EUREKA.access.signin_max_failures):
        assert authorize(basic(f"guess-{attempt}", "x"), address="10.6.6.6") == "wrong user name or password"
    assert authorize(basic("mesh-reader", "pw"), address="10.6.6.6").startswith("too many failed sign-ins")
    assert authorize(basic("mesh-reader", "pw"), address="10.0.0.2") is None
