"""The test certificates of the TLS suites (``tests/interop/certificates.py``) are what those suites take
them for: Java reads the trust stores as trusted entries and the key stores as a key with its chain,
and each certificate names the identity the suites map to an account.

No server runs here, so the module does not run once per HTTP server.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from tests.interop import maven
from tests.interop.certificates import (
    KEY_ALIAS,
    ORDERS_URI,
    PAYMENTS_CN,
    PEER_URI,
    STORE_PASSWORD,
    Pki,
    make_pki,
)
from tests.interop.conftest import require_toolchain

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module", autouse=True)
def http_server() -> str:
    """One run (replaces the conftest's parameter): nothing here depends on the HTTP server."""
    return "none"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def keytool() -> str:
    maven.require_java()
    keytool = shutil.which("keytool")
    require_toolchain("keytool", keytool is not None, "install a JDK 17+ (it ships keytool)")
    assert keytool is not None
    return keytool


def _list(keytool: str, store, password: str = STORE_PASSWORD) -> str:
    done = subprocess.run(
        [keytool, "-list", "-v", "-storetype", "PKCS12", "-keystore", str(store), "-storepass", password],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_java_reads_each_trust_store_as_one_trusted_certificate_entry(pki, keytool):
    for authority in (pki.ca, pki.other_ca):
        listing = _list(keytool, authority.truststore)
        assert "Your keystore contains 1 entry" in listing, listing
        assert "Entry type: trustedCertEntry" in listing, listing


def test_a_pkcs12_of_the_bare_certificate_is_an_empty_trust_store_to_java(pki, keytool, tmp_path):
    """Why certificates.py uses serialize_java_truststore (docs/tls.md says so to users)."""
    bare = tmp_path / "bare.p12"
    bare.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"ca",
            None,
            None,
            [pki.ca.certificate],
            serialization.BestAvailableEncryption(STORE_PASSWORD.encode()),
        )
    )
    assert "Your keystore contains 0 entries" in _list(keytool, bare)


def test_java_reads_each_key_store_as_a_key_with_its_chain(pki, keytool):
    for identity in (pki.server, pki.orders, pki.payments, pki.stranger):
        listing = _list(keytool, identity.keystore)
        assert f"Alias name: {KEY_ALIAS}" in listing, listing
        assert "Entry type: PrivateKeyEntry" in listing, listing
        assert "Certificate chain length: 2" in listing, listing


def _uris_and_dns(certificate: x509.Certificate) -> tuple[list[str], list[str]]:
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return (
        names.get_values_for_type(x509.UniformResourceIdentifier),
        names.get_values_for_type(x509.DNSName),
    )


def test_each_certificate_names_the_identity_the_suites_map(pki):
    assert _uris_and_dns(pki.server.certificate) == ([PEER_URI], ["localhost"])
    assert _uris_and_dns(pki.orders.certificate) == ([ORDERS_URI], [])
    assert _uris_and_dns(pki.payments.certificate) == ([], [])
    cn = pki.payments.certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
    assert [a.value for a in cn] == [PAYMENTS_CN]
    # Issued by their CA, and the stranger by the other one.
    for identity in (pki.server, pki.orders, pki.payments):
        identity.certificate.verify_directly_issued_by(pki.ca.certificate)
    pki.stranger.certificate.verify_directly_issued_by(pki.other_ca.certificate)
    with pytest.raises(ValueError):
        pki.stranger.certificate.verify_directly_issued_by(pki.ca.certificate)
    assert pki.server.der == pki.server.certificate.public_bytes(serialization.Encoding.DER)
