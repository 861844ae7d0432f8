"""HTTPS on granian, without a server: what the EUREKA_TLS_* settings become for granian's worker, the
combinations it cannot serve (refused at start, saying what to use instead), and how the refused
handshakes granian logs become the node's refusal lines (registry/serving/granian_server.py,
granian_limits.py; the live tests are in test_granian_tls_live.py)."""

from __future__ import annotations

import logging

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from registry.config.site import TlsConfig
from registry.domain.refusals import RefusalLines
from registry.serving.granian_limits import TLS_CLOSED, Tally, TlsRefusals, tls_refusal_kind
from registry.serving.granian_server import tls_settings

PORT = 8761


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A server certificate's chain and key, a CA bundle, and the key encrypted both ways."""
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    paths = {name: folder / f"{name}.pem" for name in ("chain", "key", "ca", "pkcs8", "legacy", "other")}
    paths["chain"].write_bytes(b"".join(pem.bytes() for pem in server.cert_chain_pems))
    server.private_key_pem.write_to_path(paths["key"])
    ca.cert_pem.write_to_path(paths["ca"])
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None)
    paths["pkcs8"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    paths["legacy"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    trustme.CA().issue_cert("127.0.0.1").private_key_pem.write_to_path(paths["other"])
    return {name: str(path) for name, path in paths.items()}


def config(files, **changes) -> TlsConfig:
    values = {"cert_file": files["chain"], "key_file": files["key"], **changes}
    return TlsConfig(**values)


def refusal(tls: TlsConfig) -> str:
    with pytest.raises(SystemExit) as stopped:
        tls_settings(tls, PORT)
    return str(stopped.value)


def test_no_certificate_is_plain_http():
    assert tls_settings(TlsConfig(), PORT) is None


def test_a_certificate_and_key_serve_tls_1_2_and_up_without_client_certificates(files):
    tls = tls_settings(config(files), PORT)
    options = tls.server_options()
    assert str(options["ssl_cert"]) == files["chain"] and str(options["ssl_key"]) == files["key"]
    # granian's own default is TLS 1.3 only, which Java 8 clients and older proxies cannot speak.
    assert str(options["ssl_protocol_min"]) == "tls1.2"
    assert options["ssl_ca"] is None and options["ssl_client_verify"] is False


def test_required_client_certificates_are_verified_against_the_ca(files):
    tls = tls_settings(config(files, client_auth="required", client_ca_file=files["ca"]), PORT)
    options = tls.server_options()
    assert str(options["ssl_ca"]) == files["ca"] and options["ssl_client_verify"] is True


def test_a_ca_without_client_auth_asks_no_certificate(files):
    # granian given a CA without verification would ask for a certificate and let clients without one in.
    tls = tls_settings(config(files, client_ca_file=files["ca"]), PORT)
    assert tls.server_options()["ssl_ca"] is None


def test_optional_client_certificates_are_refused_naming_what_to_use_instead(files):
    said = refusal(config(files, client_auth="optional", client_ca_file=files["ca"]))
    assert "EUREKA_TLS_CLIENT_AUTH=optional" in said
    for alternative in ("EUREKA_TLS_CLIENT_AUTH=required", "gunicorn", "EUREKA_CLIENT_CERT_HEADER"):
        assert alternative in said


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"key_file": ""}, "both EUREKA_TLS_CERT_FILE and EUREKA_TLS_KEY_FILE"),
        ({"cert_file": ""}, "both EUREKA_TLS_CERT_FILE and EUREKA_TLS_KEY_FILE"),
        ({"client_auth": "required"}, "needs EUREKA_TLS_CLIENT_CA_FILE"),
        ({"plain_port": PORT}, "EUREKA_TLS_PLAIN_PORT is the HTTPS port"),
        ({"key_file": "/nonexistent/key.pem"}, "EUREKA_TLS_KEY_FILE: cannot read"),
        ({"cert_file": "/nonexistent/chain.pem"}, "cannot load EUREKA_TLS_CERT_FILE"),
        ({"client_auth": "required", "client_ca_file": "/nonexistent/ca.pem"}, "EUREKA_TLS_CLIENT_CA_FILE"),
    ],
)
def test_settings_granian_cannot_serve_stop_it_with_a_message(files, changes, named):
    assert named in refusal(config(files, **changes))


def test_client_auth_or_a_plain_port_without_a_certificate_are_refused():
    assert "need HTTPS" in refusal(TlsConfig(client_auth="required", client_ca_file="ca.pem"))
    assert "need HTTPS" in refusal(TlsConfig(plain_port=8080))


def test_a_key_that_is_not_the_certificates_is_refused(files):
    assert "cannot load EUREKA_TLS_CERT_FILE" in refusal(config(files, key_file=files["other"]))


def test_an_encrypted_pkcs8_key_is_read_with_its_password(files):
    tls = tls_settings(config(files, key_file=files["pkcs8"], key_password="secret"), PORT)
    assert tls.server_options()["ssl_key_password"] == "secret"
    assert "EUREKA_TLS_KEY_PASSWORD" in refusal(config(files, key_file=files["pkcs8"]))
    assert "cannot load" in refusal(config(files, key_file=files["pkcs8"], key_password="wrong"))


def test_a_key_encrypted_in_openssls_legacy_form_is_refused_with_how_to_convert_it(files):
    # granian's worker decrypts PKCS#8 only, and would fail on this one after the node started.
    said = refusal(config(files, key_file=files["legacy"], key_password="secret"))
    assert "openssl pkcs8 -topk8" in said


# granian 2.8's lines for refused handshakes, as its worker logs them (rustls's errors).
GRANIAN_LINES = {
    "tls_no_certificate": "TCP accept failed: TlsAcceptError { error: Custom { kind: InvalidData, error: "
    "NoCertificatesPresented }, peer_addr: 127.0.0.1:50622 }",
    "tls_unknown_ca": "TCP accept failed: TlsAcceptError { error: Custom { kind: InvalidData, error: "
    "InvalidCertificate(UnknownIssuer) }, peer_addr: 127.0.0.1:50628 }",
    "tls_expired": "TCP accept failed: TlsAcceptError { error: Custom { kind: InvalidData, error: "
    "InvalidCertificate(ExpiredContext { time: UnixTime(1), not_after: UnixTime(0) }) }, "
    "peer_addr: [::1]:50630 }",
    "tls_not_tls": "TCP accept failed: TlsAcceptError { error: Custom { kind: InvalidData, error: "
    "InvalidMessage(InvalidContentType) }, peer_addr: 10.1.2.3:58342 }",
    "tls_timeout": "TCP accept failed: HandshakeTimeout { peer_addr: 127.0.0.1:58348 }",
    "tls_incompatible": "TCP accept failed: TlsAcceptError { error: Custom { kind: InvalidData, error: "
    "PeerIncompatible(NoKxGroupsInCommon) }, peer_addr: 127.0.0.1:46752 }",
    "tls_oversized": "TCP accept failed: TlsAcceptError { error: Custom { kind: InvalidData, error: "
    "InvalidMessage(HandshakePayloadTooLarge) }, peer_addr: 127.0.0.1:46752 }",
    TLS_CLOSED: "TCP accept failed: TlsAcceptError { error: Kind(UnexpectedEof), peer_addr: 127.0.0.1:1 }",
}


@pytest.mark.parametrize(("kind", "line"), GRANIAN_LINES.items())
def test_each_refused_handshake_granian_logs_is_told_apart(kind, line):
    assert tls_refusal_kind(line) == kind


def test_other_granian_lines_are_not_refusals():
    assert tls_refusal_kind("Started worker-1") is None


def granian_record(message: str, level: int = logging.DEBUG) -> logging.LogRecord:
    return logging.LogRecord(TlsRefusals.LOGGER, level, "workers.rs", 1, message, None, None)


def test_refused_handshakes_are_logged_once_an_interval_per_kind_with_their_count(caplog):
    now = [0.0]
    handler = TlsRefusals(Tally(RefusalLines(60, clock=lambda: now[0])))
    caplog.set_level(logging.WARNING, "registry.serving.granian_server")
    for _ in range(500):
        handler.emit(granian_record(GRANIAN_LINES["tls_timeout"]))
    handler.emit(granian_record(GRANIAN_LINES["tls_unknown_ca"]))
    now[0] = 61
    handler.emit(granian_record(GRANIAN_LINES["tls_timeout"]))
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "TLS handshake refused: not finished within granian's handshake timeout (10 s) "
        "(latest from 127.0.0.1)",
        "TLS handshake refused: a client certificate from a CA not in EUREKA_TLS_CLIENT_CA_FILE "
        "(latest from 127.0.0.1)",
        "TLS handshake refused: not finished within granian's handshake timeout (10 s) (latest from "
        "127.0.0.1) (499 more since the last such line)",
    ]
    assert handler.tally.totals == {"tls_timeout": 501, "tls_unknown_ca": 1}


def test_connections_closed_during_the_handshake_are_counted_not_logged(caplog):
    handler = TlsRefusals(Tally())
    caplog.set_level(logging.DEBUG)
    handler.emit(granian_record(GRANIAN_LINES[TLS_CLOSED]))
    assert handler.closed == 1 and not caplog.records


def test_granians_other_lines_go_on_to_its_own_logger():
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record)

    forward = logging.getLogger("tests.granian_forward")
    forward.propagate = False
    forward.addHandler(Keep())
    handler = TlsRefusals(Tally(), forward=forward)
    handler.emit(granian_record("Stopping worker-1", logging.INFO))
    handler.emit(granian_record("some debug detail"))
    assert [record.getMessage() for record in seen] == ["Stopping worker-1"]
