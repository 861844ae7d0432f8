"""The outbound TLS contexts (registry/domain/outbound_tls.py): what they verify, what they present,
how they follow their files, and the reasons read from a failed handshake."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest
import trustme

from registry.domain.outbound_tls import (
    CA_VARIABLE,
    CERT_VARIABLE,
    CHECK_INTERVAL_S,
    KEY_VARIABLE,
    OutboundTls,
    OutboundTlsError,
    build_context,
    check_files,
    tls_failure,
)
from tests.tls_servers import node_files, write_pem


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(tmp_path, ca) -> str:
    return write_pem(tmp_path, "ca.pem", ca.cert_pem.bytes())


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_context_wants_tls_1_2_or_later_a_verified_certificate_and_its_host_name(ca_file):
    context = build_context(ca_file)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    # Only the named CA: the system's roots are not added beside it.
    assert len(context.get_ca_certs()) == 1


def test_without_a_ca_file_the_system_trust_store_is_used():
    context = build_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] == len(ssl.create_default_context().get_ca_certs())


@pytest.mark.parametrize(
    ("files", "variable", "words"),
    [
        (("missing-ca.pem", "", ""), CA_VARIABLE, "cannot read"),
        (("empty.pem", "", ""), CA_VARIABLE, "holds no PEM certificate"),
        (("", "node-cert.pem", ""), KEY_VARIABLE, f"required with {CERT_VARIABLE}"),
        (("", "", "node-key.pem"), CERT_VARIABLE, f"required with {KEY_VARIABLE}"),
        (("", "missing-cert.pem", "node-key.pem"), CERT_VARIABLE, "cannot read"),
        (("", "node-cert.pem", "missing-key.pem"), KEY_VARIABLE, "cannot read"),
        (("", "node-cert.pem", "other-key.pem"), KEY_VARIABLE, "does not match the certificate"),
        (("", "node-key.pem", "node-key.pem"), CERT_VARIABLE, "holds no PEM certificate"),
        (("", "node-cert.pem", "node-cert.pem"), KEY_VARIABLE, "holds no PEM private key"),
    ],
)
def test_files_that_cannot_be_used_are_refused_naming_the_variable(tmp_path, ca, files, variable, words):
    node_files(tmp_path, ca, "node-a")
    node_files(tmp_path, ca, "node-b", prefix="other")
    (tmp_path / "empty.pem").write_text("")
    paths = [str(tmp_path / name) if name else "" for name in files]
    with pytest.raises(OutboundTlsError) as refused:
        check_files(*paths)
    assert refused.value.variable == variable
    assert words in str(refused.value)
    assert str(refused.value).startswith(f"{variable}: ")


def test_an_encrypted_key_is_refused_rather_than_asking_for_a_pass_phrase(tmp_path, ca):
    from cryptography.hazmat.primitives import serialization

    cert_file, key_file = node_files(tmp_path, ca, "node-a")
    key = serialization.load_pem_private_key(Path(key_file).read_bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    with pytest.raises(OutboundTlsError, match="encrypted") as refused:
        check_files("", cert_file, write_pem(tmp_path, "encrypted.pem", encrypted))
    assert refused.value.variable == KEY_VARIABLE


def test_nothing_named_needs_no_check():
    check_files("", "", "")


def test_the_client_certificate_is_in_the_context_that_asks_for_it_only(tmp_path, ca, ca_file):
    cert_file, key_file = node_files(tmp_path, ca, "node-a")
    tls = OutboundTls(ca_file, cert_file, key_file)
    with_cert, without = tls.context(client_cert=True), tls.context(client_cert=False)
    assert with_cert is not without
    assert tls.context(client_cert=True) is with_cert  # built once, shared


def test_changed_files_make_a_new_context_at_the_next_check_and_a_broken_change_keeps_the_old(
    tmp_path, ca, ca_file, caplog
):
    cert_file, key_file = node_files(tmp_path, ca, "node-a")
    clock = Clock()
    tls = OutboundTls(ca_file, cert_file, key_file, clock=clock)
    first_generation, first = tls.current(client_cert=True)

    # A rotation half done: the new certificate is there, its key not yet.
    new_cert = ca.issue_cert("node-a.example", common_name="node-a")
    write_pem(tmp_path, "node-cert.pem", b"".join(blob.bytes() for blob in new_cert.cert_chain_pems))
    assert tls.current(client_cert=True) == (first_generation, first)  # not looked at before the interval
    clock.now += CHECK_INTERVAL_S
    with caplog.at_level(logging.WARNING, "registry.domain.outbound_tls"):
        assert tls.current(client_cert=True) == (first_generation, first)
    assert "the previous ones stay in use" in caplog.text
    assert KEY_VARIABLE in caplog.text

    # The key comes: the next check builds a new context.
    write_pem(tmp_path, "node-key.pem", new_cert.private_key_pem.bytes())
    clock.now += CHECK_INTERVAL_S
    generation, context = tls.current(client_cert=True)
    assert generation == first_generation + 1
    assert context is not first
    # Unchanged files: the same context.
    clock.now += CHECK_INTERVAL_S
    assert tls.current(client_cert=True) == (generation, context)


def test_a_failed_handshakes_reason_is_read_through_the_exceptions_that_wrap_it():
    unknown = ssl.SSLCertVerificationError(1, "certificate verify failed")
    unknown.verify_message = "unable to get local issuer certificate"
    wrapper = ConnectionError("connect failed")
    wrapper.__cause__ = unknown
    assert tls_failure(wrapper) == "certificate verify failed: unable to get local issuer certificate"
    alert = ssl.SSLError(1, "tlsv13 alert certificate required")
    alert.reason = "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    assert tls_failure(alert) == "tlsv13 alert certificate required"
    assert tls_failure(ConnectionRefusedError(111, "refused")) is None
