"""HTTPS on granian, without a server: what the EUREKA_TLS_* settings become for granian's worker, the
combinations it cannot serve (refused at start, saying what to use instead), and how the refused
handshakes granian logs become the node's refusal lines (registry/serving/granian_server.py,
granian_limits.py; the live tests are in test_granian_tls_live.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from registry.config.site import TlsConfig
from registry.domain.config import BadSetting
from registry.domain.refusals import RefusalLines
from registry.serving.granian_limits import TLS_CLOSED, Tally, TlsRefusals, tls_refusal_kind
from registry.serving.granian_server import CertificateWatch, tls_settings

PORT = 8761


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A server certificate's chain and key, a CA bundle, the key encrypted both ways (PKCS#8 and
    OpenSSL's legacy form), and another certificate's key."""
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


def test_a_plain_port_that_is_the_https_port_is_refused(files):
    assert "EUREKA_TLS_PLAIN_PORT is the HTTPS port" in refusal(config(files, plain_port=PORT))


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"key_file": ""}, "EUREKA_TLS_KEY_FILE"),
        ({"client_auth": "required"}, "EUREKA_TLS_CLIENT_CA_FILE"),
        ({"key_file": "/nonexistent/key.pem"}, "EUREKA_TLS_KEY_FILE"),
        ({"cert_file": "/nonexistent/chain.pem"}, "EUREKA_TLS_CERT_FILE"),
        ({"client_auth": "required", "client_ca_file": "/nonexistent/ca.pem"}, "EUREKA_TLS_CLIENT_CA_FILE"),
        ({"key_file": "other"}, "EUREKA_TLS_KEY_FILE"),
    ],
)
def test_settings_no_server_can_serve_stop_the_start_when_read(files, changes, named):
    # Before granian is reached: the same refusals as on gunicorn (tests/serving/test_tls.py).
    changes = {key: files.get(value, value) for key, value in changes.items()}
    with pytest.raises(BadSetting) as refused:
        config(files, **changes)
    assert named in str(refused.value)


def test_client_auth_or_a_plain_port_without_a_certificate_are_refused():
    for values in ({"client_auth": "required", "client_ca_file": "ca.pem"}, {"plain_port": 8080}):
        with pytest.raises(BadSetting):
            TlsConfig(**values)


@pytest.mark.parametrize("form", ["pkcs8", "legacy"])
def test_an_encrypted_key_is_refused_saying_what_to_do(files, form):
    # granian 2.8 takes a password, and its worker fails on every encrypted key OpenSSL writes, after
    # the node has started.
    said = refusal(config(files, key_file=files[form], key_password="secret"))
    assert "EUREKA_TLS_KEY_FILE is encrypted" in said
    assert "unencrypted" in said and "gunicorn" in said


def test_granian_is_never_given_a_key_password(files):
    # With one, granian would try to decrypt even a plain key, and fail.
    tls = tls_settings(config(files, key_password="secret"), PORT)
    assert tls.server_options()["ssl_key_password"] is None


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


class FakeListeners:
    """``Listeners`` without granian: records the workers started (what their files held) and retired."""

    def __init__(self):
        self.stopping = False
        self.started: list[tuple] = []
        self.retired: list[list] = []

    def share(self, holder, backlog):
        return (None, holder)

    def start(self, listener, listener_ssl):
        # granian reads the files while its worker starts: so does this.
        with open(listener_ssl[1], "rb") as chain, open(listener_ssl[2], "rb") as key:
            self.started.append((chain.read(), key.read(), listener_ssl[5]))
        entry = [None, None, False]
        return entry

    def retire(self, entry):
        self.retired.append(entry)


def watch_of(tmp_path, files, ca: bool = False) -> tuple[CertificateWatch, FakeListeners, list]:
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    chain.write_bytes(Path(files["chain"]).read_bytes())
    key.write_bytes(Path(files["key"]).read_bytes())
    ca_path = files["ca"] if ca else None
    listeners = FakeListeners()
    first = [None, None, False]
    ssl_ctx = (True, str(chain), str(key), None, "tls1.2", ca_path, [], bool(ca_path))
    return CertificateWatch(listeners, "holder", 128, ssl_ctx, first), listeners, first


def test_unchanged_certificate_files_start_no_worker(tmp_path, files):
    watch, listeners, _ = watch_of(tmp_path, files)
    assert watch.check() is False and listeners.started == []


def test_new_certificate_files_start_a_worker_with_them_and_retire_the_old_one(tmp_path, files):
    watch, listeners, first = watch_of(tmp_path, files, ca=True)
    renewed = trustme.CA().issue_cert("127.0.0.1")
    new_chain = b"".join(pem.bytes() for pem in renewed.cert_chain_pems)
    (tmp_path / "key.pem").write_bytes(renewed.private_key_pem.bytes())
    (tmp_path / "chain.pem").write_bytes(new_chain)
    assert watch.check() is True
    (chain, key, ca_path) = listeners.started[0]
    assert chain == new_chain and key == renewed.private_key_pem.bytes()
    # granian was given a copy in memory of what was checked, not the files' names.
    assert ca_path.startswith("/proc/self/fd/")
    assert listeners.retired == [first]
    assert watch.check() is False and len(listeners.started) == 1


def test_files_that_do_not_load_keep_the_old_certificate_and_are_reported_once(tmp_path, files, caplog):
    watch, listeners, _ = watch_of(tmp_path, files)
    (tmp_path / "key.pem").write_bytes(Path(files["other"]).read_bytes())
    caplog.set_level(logging.ERROR, "registry.serving.granian_server")
    assert watch.check() is False and watch.check() is False
    assert listeners.started == [] and listeners.retired == []
    [line] = [record.getMessage() for record in caplog.records]
    assert "still serving the previous ones" in line and str(tmp_path / "key.pem") in line
    # Put right: taken at the next read.
    (tmp_path / "key.pem").write_bytes(Path(files["key"]).read_bytes())
    (tmp_path / "chain.pem").write_bytes(Path(files["chain"]).read_bytes() + b"\n")
    assert watch.check() is True
