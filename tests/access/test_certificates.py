"""Client certificates as API identities (issue 46): from the TLS connection (``eureka.client_cert``) or
a trusted proxy's header, matched against the accounts' certificate names."""

from __future__ import annotations

import datetime
import io
import json
from urllib.parse import quote

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.conf import settings
from django.test import override_settings

from registry.access import accounts, certificates
from registry.access.certificates import BadCertificate, names_of_header
from registry.access.credentials import CredentialCache
from registry.access.models import ApiAccess
from registry.domain.refusals import RefusalLines
from tests.access.test_api_auth import FAST_HASHER, account, basic, listed, register
from tests.conftest import FakeClock
from tests.factories import instance_body

pytestmark = [pytest.mark.django_db]

SPIFFE = "spiffe://cluster.local/ns/shop/sa/orders"


@pytest.fixture
def refusal_clock():
    clock = FakeClock(0)
    accounts.reset_refusal_lines(RefusalLines(interval_s=60, clock=lambda: clock.now / 1000))
    yield clock
    accounts.reset_refusal_lines(None)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def leaf(ca: trustme.CA, uris=(), dns=(), cn: str | None = None) -> bytes:
    """A client certificate signed by ``ca``, as DER: trustme issues SAN DNS names only, so SAN URIs
    and CN-only certificates are made here with the CA's own key."""
    issuer_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), password=None)
    issuer = x509.load_pem_x509_certificate(ca.cert_pem.bytes()).subject
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn else [])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    alternatives = [x509.UniformResourceIdentifier(uri) for uri in uris] + [x509.DNSName(d) for d in dns]
    if alternatives:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    return builder.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def trustme_der(ca: trustme.CA, *identities: str) -> bytes:
    pem = ca.issue_cert(*identities).cert_chain_pems[0].bytes()
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


def pem_of(der: bytes) -> str:
    return x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM).decode()


def holder(name: str, *certificate_names: str, role: str = "client", apps: str = ""):
    user = account(name, role)
    ApiAccess.objects.create(user=user, certificate_names="\n".join(certificate_names), apps=apps)
    return user


def tls(der: bytes) -> dict:
    return {certificates.ENVIRON_KEY: der}


# ---------------------------------------------------------------------- from the TLS connection


@pytest.mark.usefixtures("auth_on")
def test_a_certificate_identifies_its_account_by_a_san_uri(api, node, ca):
    holder("orders", SPIFFE)
    der = leaf(ca, uris=[SPIFFE], dns=["orders.other.example"], cn="orders-cn")
    assert register(api, tls(der)).status_code == 204
    assert listed(node) == {("ORDERS", "o-1")}
    assert api.put("/eureka/apps/ORDERS/o-1", **tls(der)).status_code == 200
    assert api.delete("/eureka/apps/ORDERS/o-1", **tls(der)).status_code == 200


@pytest.mark.usefixtures("auth_on")
def test_a_certificate_identifies_its_account_by_a_san_dns_name(api, node, ca):
    holder("orders", "orders.shop.svc.cluster.local")
    assert register(api, tls(trustme_der(ca, "orders.shop.svc.cluster.local"))).status_code == 204
    assert listed(node) == {("ORDERS", "o-1")}


@pytest.mark.usefixtures("auth_on")
def test_a_certificate_identifies_its_account_by_its_subject_cn(api, node, ca):
    holder("orders", "Orders-Client")  # names compare without regard to case
    assert register(api, tls(leaf(ca, cn="orders-client"))).status_code == 204


@pytest.mark.usefixtures("auth_on")
def test_san_uris_come_before_dns_names_and_the_cn(api, node, ca):
    holder("by-dns", "orders.example")
    holder("by-uri", SPIFFE)
    holder("reader-cn", "orders-cn", role="reader")
    der = leaf(ca, uris=["spiffe://nobody/holds/this", SPIFFE], dns=["orders.example"], cn="orders-cn")
    # by-uri is a client: the write is allowed; by-dns would be too, reader-cn would not.
    assert register(api, tls(der)).status_code == 204
    assert accounts.authenticate_certificate(certificates.from_der(der)).username == "by-uri"
    only_dns_and_cn = leaf(ca, dns=["orders.example"], cn="orders-cn")
    assert accounts.authenticate_certificate(certificates.from_der(only_dns_and_cn)).username == "by-dns"
    cn_only = leaf(ca, cn="orders-cn")
    assert register(api, tls(cn_only), instance_id="o-2").status_code == 403  # a reader's


@pytest.mark.usefixtures("auth_on")
def test_a_certificate_naming_no_account_gets_401_with_the_basic_challenge(api, node, ca, caplog):
    holder("orders", SPIFFE)
    accounts.reset_refusal_lines()
    with caplog.at_level("WARNING", logger="registry.access"):
        response = register(api, tls(leaf(ca, uris=["spiffe://cluster.local/ns/shop/sa/intruder"])))
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith('Basic realm="eureka"')
    assert response.content == b""
    assert listed(node) == set()
    assert "names no account" in caplog.text and "intruder" in caplog.text


@pytest.mark.usefixtures("auth_on")
def test_the_role_and_the_grants_of_a_certificates_account_apply(api, node, ca):
    holder("dash", "dash.example", role="reader")
    holder("orders", "orders.example", apps="ORDERS")
    reader = tls(leaf(ca, dns=["dash.example"]))
    assert api.get("/eureka/apps", HTTP_ACCEPT="application/json", **reader).status_code == 200
    assert register(api, reader).status_code == 403
    scoped = tls(leaf(ca, dns=["orders.example"]))
    assert register(api, scoped, app="PAYMENTS", instance_id="p-1").status_code == 403
    assert register(api, scoped, app="ORDERS", instance_id="o-1").status_code == 204
    assert listed(node) == {("ORDERS", "o-1")}


@pytest.mark.usefixtures("auth_on")
def test_basic_credentials_work_beside_a_certificate_of_the_same_account(api, node, ca):
    holder("orders", "orders.example")
    account("other", "client")
    der = leaf(ca, dns=["orders.example"])
    assert register(api, {**tls(der), **basic("orders", "pw")}).status_code == 204
    # A certificate that names no account adds nothing to Basic credentials that verify.
    unknown = leaf(ca, dns=["unknown.example"])
    assert register(api, {**tls(unknown), **basic("other", "pw")}, instance_id="o-2").status_code == 204


@pytest.mark.usefixtures("auth_on")
def test_basic_credentials_and_a_certificate_of_different_accounts_are_refused(api, node, ca, caplog):
    holder("orders", "orders.example")
    account("payments", "client")
    accounts.reset_refusal_lines()
    with caplog.at_level("WARNING", logger="registry.access"):
        response = register(api, {**tls(leaf(ca, dns=["orders.example"])), **basic("payments", "pw")})
    assert response.status_code == 401
    assert listed(node) == set()
    assert "Basic credentials name account 'payments' but the client certificate (TLS) names 'orders'" in (
        caplog.text
    )


@pytest.mark.usefixtures("auth_on")
def test_a_disabled_account_or_a_removed_name_stops_the_certificate_at_once(api, node, ca):
    user = holder("orders", "orders.example", "orders-2.example")
    der = tls(leaf(ca, dns=["orders.example"]))
    assert register(api, der).status_code == 204
    access = user.api_access
    access.certificate_names = "orders-2.example"
    access.save()
    assert api.put("/eureka/apps/ORDERS/o-1", **der).status_code == 401
    other = tls(leaf(ca, dns=["orders-2.example"]))
    assert api.put("/eureka/apps/ORDERS/o-1", **other).status_code == 200
    user.is_active = False
    user.save()
    assert api.put("/eureka/apps/ORDERS/o-1", **other).status_code == 401


@pytest.mark.usefixtures("auth_on")
def test_a_name_removed_elsewhere_is_refused_after_the_recheck(api, node, ca, auth_on):
    user = holder("orders", "orders.example")
    der = tls(leaf(ca, dns=["orders.example"]))
    assert register(api, der).status_code == 204
    ApiAccess.objects.filter(user=user).update(certificate_names="")  # another process: no signal
    assert api.put("/eureka/apps/ORDERS/o-1", **der).status_code == 200
    auth_on.clock.advance(5_000)
    assert api.put("/eureka/apps/ORDERS/o-1", **der).status_code == 401


@pytest.mark.usefixtures("auth_on")
def test_a_name_two_accounts_hold_names_neither(api, node, ca, caplog):
    holder("orders", "orders.example")
    twin = holder("twin", "elsewhere.example")
    # A direct database edit (the admin and the command refuse it).
    ApiAccess.objects.filter(user=twin).update(certificate_names="ORDERS.example")
    accounts.reset_refusal_lines()
    with caplog.at_level("WARNING", logger="registry.access"):
        assert register(api, tls(leaf(ca, dns=["orders.example"]))).status_code == 401
    assert "held by several accounts: 'orders', 'twin'" in caplog.text
    assert listed(node) == set()


@pytest.mark.usefixtures("auth_on")
def test_a_certificate_is_parsed_once_and_its_account_looked_up_once(api, node, ca, monkeypatch):
    holder("orders", "orders.example")
    der = leaf(ca, dns=["orders.example"])
    certificates.parsed_names.clear()
    parsed = certificates.parsed_names.parsed
    lookups = []
    real = accounts._accounts_holding
    monkeypatch.setattr(accounts, "_accounts_holding", lambda names: lookups.append(names) or real(names))
    assert register(api, tls(der)).status_code == 204
    for _ in range(5):
        assert api.put("/eureka/apps/ORDERS/o-1", **tls(der)).status_code == 200
    assert certificates.parsed_names.parsed == parsed + 1
    assert len(lookups) == 1


def test_with_api_accounts_off_a_certificate_changes_nothing(api, node, ca):
    assert register(api, tls(leaf(ca, dns=["nobody.example"]))).status_code == 204


@pytest.mark.usefixtures("auth_on")
def test_a_body_sent_with_only_a_certificate_is_read_and_applied(node, ca):
    """The body gate before the view (registry/wire/handlers.py) lets a certificate's request in, and
    keeps an unknown certificate's body unread."""
    from registry.access.drf import credentials_open_the_api
    from registry.wire.handlers import RoutingApplication
    from tests.deploy.test_wsgi_routing import call

    holder("orders", "orders.example")
    app = RoutingApplication(trust_forwarded_prefix=False, may_read_body=credentials_open_the_api)
    body = json.dumps(instance_body(app="ORDERS", instance_id="o-1")).encode()

    class Untouchable(io.BytesIO):
        def read(self, *args):
            raise AssertionError("the body of a refused request was read")

    unknown = leaf(ca, dns=["unknown.example"])
    status, headers, _ = call(
        app,
        "POST",
        "/eureka/apps/ORDERS",
        stream=Untouchable(),
        CONTENT_TYPE="application/json",
        CONTENT_LENGTH=str(len(body)),
        **tls(unknown),
    )
    assert status == 401 and "WWW-Authenticate" in headers
    der = leaf(ca, dns=["orders.example"])
    status, _, _ = call(app, "POST", "/eureka/apps/ORDERS", body, CONTENT_TYPE="application/json", **tls(der))
    assert status == 204
    assert listed(node) == {("ORDERS", "o-1")}


# ---------------------------------------------------------------------- from a proxy's header


def xfcc(der: bytes, **fields: str) -> str:
    parts = ["By=spiffe://cluster.local/ns/eureka/sa/eureka", "Hash=0123abcd", f'Cert="{quote(pem_of(der))}"']
    parts += [f"{key}={value}" for key, value in fields.items()]
    return ";".join(parts)


def proxied(value: str, address: str = "10.0.0.9") -> dict:
    return {"HTTP_X_FORWARDED_CLIENT_CERT": value, "REMOTE_ADDR": address}


@pytest.fixture
def behind_proxy(auth_on):
    with override_settings(
        EUREKA=settings.EUREKA.with_changes(access__api_auth=True, access__trusted_proxies=("10.0.0.9",))
    ):
        yield


@pytest.mark.usefixtures("behind_proxy")
def test_envoys_xfcc_header_is_believed_from_a_trusted_proxy(api, node, ca):
    holder("orders", SPIFFE)
    der = leaf(ca, uris=[SPIFFE])
    subject = 'Subject="CN=orders,OU=shop;x"'
    assert register(api, proxied(xfcc(der, URI=SPIFFE) + ";" + subject)).status_code == 204
    assert listed(node) == {("ORDERS", "o-1")}


@pytest.mark.usefixtures("behind_proxy")
def test_of_several_xfcc_elements_the_last_one_is_taken(api, node, ca):
    holder("orders", "orders.example")
    holder("payments", "payments.example")
    first = xfcc(leaf(ca, dns=["payments.example"]))
    last = xfcc(leaf(ca, dns=["orders.example"]))
    assert register(api, proxied(f"{first},{last}")).status_code == 204
    header = proxied(f"{first},{last}")
    principal = accounts.authenticate_certificate(
        certificates.from_header(header["HTTP_X_FORWARDED_CLIENT_CERT"], "p")
    )
    assert principal.username == "orders"


@pytest.mark.usefixtures("behind_proxy")
def test_an_xfcc_element_without_the_certificate_gives_its_uri_dns_and_subject_cn(api, node):
    holder("orders", SPIFFE)
    holder("cn-only", "edge-gw")
    assert register(api, proxied(f"By=spiffe://e;Hash=ab;URI={SPIFFE}")).status_code == 204
    assert names_of_header('Hash=ab;Subject="CN=edge-gw,OU=edge,O=acme"') == ("edge-gw",)
    assert names_of_header("Hash=ab;DNS=a.example;DNS=b.example;URI=spiffe://x") == (
        "spiffe://x",
        "a.example",
        "b.example",
    )


@pytest.mark.usefixtures("behind_proxy")
def test_nginxs_escaped_certificate_is_believed_from_a_trusted_proxy(api, node, ca):
    holder("orders", "orders.example")
    der = trustme_der(ca, "orders.example")
    assert register(api, proxied(quote(pem_of(der)))).status_code == 204
    assert listed(node) == {("ORDERS", "o-1")}


@pytest.mark.usefixtures("behind_proxy")
def test_a_certificate_header_from_another_address_is_ignored_and_logged_once_with_a_count(
    api, node, ca, caplog, refusal_clock
):
    holder("orders", "orders.example")
    header = xfcc(leaf(ca, dns=["orders.example"]))
    with caplog.at_level("WARNING", logger="registry.access"):
        for instance_id in ("o-1", "o-2", "o-3"):
            response = register(api, proxied(header, address="10.6.6.6"), instance_id=instance_id)
            assert response.status_code == 401  # the header names nobody: no credentials at all
        refusal_clock.advance(60_000)
        register(api, proxied(header, address="10.6.6.6"), instance_id="o-4")
    assert listed(node) == set()
    ignored = [r.getMessage() for r in caplog.records if "certificate header" in r.getMessage()]
    assert len(ignored) == 2
    assert "sent by 10.6.6.6, which is not in EUREKA_TRUSTED_PROXIES" in ignored[0]
    assert ignored[1].endswith("(2 more since the last such line)")


@pytest.mark.usefixtures("behind_proxy")
def test_an_untrusted_header_does_not_replace_the_connections_own_certificate(api, node, ca):
    holder("orders", "orders.example")
    holder("dash", "dash.example", role="reader")
    forged = xfcc(leaf(ca, dns=["dash.example"]))
    own = tls(leaf(ca, dns=["orders.example"]))
    # Believed, the header would name the reader, whose write is 403; the connection's names orders.
    response = register(api, {**proxied(forged, address="10.6.6.6"), **own})
    assert response.status_code == 204
    assert listed(node) == {("ORDERS", "o-1")}
    # From the trusted proxy, the header names the client (here the reader) rather than the connection.
    assert register(api, {**proxied(forged), **own}, instance_id="o-2").status_code == 403


@pytest.mark.usefixtures("behind_proxy")
def test_an_unreadable_header_from_a_trusted_proxy_gets_401(api, node):
    assert register(api, proxied('Hash=ab;Cert="-----BEGIN%20CERTIFICATE-----%0Agarbage"')).status_code == 401
    assert register(api, proxied("just some text")).status_code == 401
    assert listed(node) == set()


@pytest.mark.parametrize(
    "value",
    ["", "no-equals-sign", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----", "x" * 70_000],
)
def test_what_is_no_certificate_header_is_refused_with_a_reason(value):
    with pytest.raises(BadCertificate):
        names_of_header(value)


@pytest.mark.parametrize("name", ["X-SSL-Client-Cert", ""])
def test_the_headers_name_is_a_setting_and_empty_turns_it_off(api, node, ca, caplog, name):
    holder("orders", "orders.example")
    value = quote(pem_of(leaf(ca, dns=["orders.example"])))
    changes = {"access__api_auth": True, "access__client_cert_header": name}
    accounts.reset_credential_cache(CredentialCache(FakeClock(0)))
    try:
        with (
            override_settings(EUREKA=settings.EUREKA.with_changes(**changes), PASSWORD_HASHERS=FAST_HASHER),
            caplog.at_level("WARNING", logger="registry.access"),
        ):
            named = register(api, {"HTTP_X_SSL_CLIENT_CERT": value}, instance_id="o-1")
            default = register(api, {"HTTP_X_FORWARDED_CLIENT_CERT": value}, instance_id="o-2")
    finally:
        accounts.reset_credential_cache(None)
    assert named.status_code == (204 if name else 401)
    assert default.status_code == 401
    assert "certificate header" not in caplog.text


@pytest.mark.parametrize("conf", ["nginx.conf.example", "nginx-compose.conf"])
def test_deploys_nginx_configurations_never_pass_on_a_clients_certificate_header(conf):
    """nginx passes request headers on by default, and the node trusts its proxies' header: each
    location that proxies to the node sets it (empty: nginx then drops it)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "deploy" / conf).read_text()
    active = [line.strip() for line in text.splitlines() if not line.lstrip().startswith("#")]
    assert active.count("proxy_pass http://$eureka_backend;") >= 1
    assert active.count('proxy_set_header X-Forwarded-Client-Cert "";') == active.count(
        "proxy_pass http://$eureka_backend;"
    )
