"""The server's TLS context and its rotation, and the checks of the EUREKA_TLS_* files at start.

Subject: registry/serving/tls.py, registry/config/site.py (TlsConfig). Certificates are made at test
time (tests/serving/tls_files.py); handshakes run over socket pairs in this process. The live
behaviour (a gunicorn node serving HTTPS, its refusals) is tests/deploy/test_tls_live.py.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from registry.config.eureka import parse_config
from registry.config.site import TlsConfig
from registry.domain.config import BadSetting
from registry.serving import tls
from registry.serving.tls import RotatingContext, TlsFiles, server_context
from tests.serving.tls_files import NodeTls, write_leaf


@pytest.fixture
def node_tls(tmp_path) -> NodeTls:
    return NodeTls.make(tmp_path / "certs")


def files_of(node_tls: NodeTls, client_auth: str = "none") -> TlsFiles:
    ca = str(node_tls.ca_file) if client_auth != "none" else ""
    return TlsFiles(str(node_tls.cert_file), str(node_tls.key_file), "", client_auth, ca)


def handshake(
    server: ssl.SSLContext, client: ssl.SSLContext
) -> tuple[ssl.SSLSocket | None, ssl.SSLSocket | None, BaseException | None]:
    """Both ends of one handshake over a socket pair: (server side, client side, the server's error)."""
    left, right = socket.socketpair()
    left.settimeout(5)
    right.settimeout(5)
    outcome: dict = {}

    def serve() -> None:
        try:
            outcome["server"] = server.wrap_socket(left, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            outcome["error"] = exc
            left.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        client_side = client.wrap_socket(right, server_hostname="localhost")
    except (ssl.SSLError, OSError):
        client_side = None
        right.close()
    thread.join(5)
    return outcome.get("server"), client_side, outcome.get("error")


def serial_of(sock: ssl.SSLSocket) -> int:
    return x509.load_der_x509_certificate(sock.getpeercert(binary_form=True)).serial_number


def leaf_serial(cert) -> int:
    return x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).serial_number


def oversized_client_cert(node_tls: NodeTls):
    names = [f"host-{number}.orders.example" for number in range(5000)]
    return write_leaf(node_tls.ca.issue_cert(*names), node_tls.directory, "oversized")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# The context's policy.


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
def test_the_server_context_speaks_tls_1_2_and_1_3_only_without_renegotiation_or_compression(node_tls):
    context = server_context(files_of(node_tls))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.options & ssl.OP_NO_RENEGOTIATION
    assert context.options & ssl.OP_NO_COMPRESSION
    assert context.verify_mode == ssl.CERT_NONE
    tls12 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12, "some TLS 1.2 suites"
    assert all(name.startswith("ECDHE-") and ("GCM" in name or "CHACHA20" in name) for name in tls12), tls12

    old_client = node_tls.client_context()
    old_client.maximum_version = ssl.TLSVersion.TLSv1_1
    old_client.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    server_side, client_side, error = handshake(context, old_client)
    assert server_side is None and client_side is None, "TLS 1.1 is refused"

    server_side, client_side, error = handshake(context, node_tls.client_context())
    assert error is None and client_side is not None
    assert client_side.version() in ("TLSv1.2", "TLSv1.3")


def test_client_certificates_are_verified_per_mode(node_tls):
    client_files = node_tls.client_cert_files("orders.example")
    stranger = NodeTls.make(node_tls.directory / "stranger")
    stranger_files = stranger.client_cert_files("orders.example")

    optional = server_context(files_of(node_tls, "optional"))
    served, _, _ = handshake(optional, node_tls.client_context())
    assert served is not None and served.getpeercert(binary_form=True) is None, "optional: none sent, served"
    served, _, _ = handshake(optional, node_tls.client_context(client_files))
    sent = x509.load_pem_x509_certificate(client_files[0].read_bytes()).public_bytes(Encoding.DER)
    assert served is not None and served.getpeercert(binary_form=True) == sent
    served, _, error = handshake(optional, node_tls.client_context(stranger_files))
    assert served is None and tls.refusal_kind(error) == tls.UNKNOWN_CA

    required = server_context(files_of(node_tls, "required"))
    served, _, error = handshake(required, node_tls.client_context())
    assert served is None and tls.refusal_kind(error) == tls.NO_CERTIFICATE
    served, _, _ = handshake(required, node_tls.client_context(client_files))
    assert served is not None


def test_an_expired_client_certificate_is_refused_as_expired(node_tls):
    yesterday = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    expired = node_tls.client_cert_files(
        "orders.example", not_before=yesterday - datetime.timedelta(days=30), not_after=yesterday
    )
    optional = server_context(files_of(node_tls, "optional"))
    served, _, error = handshake(optional, node_tls.client_context(expired))
    assert served is None and tls.refusal_kind(error) == tls.EXPIRED


def test_an_oversized_certificate_chain_is_refused_as_such(node_tls):
    # Over 100 KiB (OpenSSL's limit for a certificate message), valid otherwise: thousands of names.
    cert_path, key_path = oversized_client_cert(node_tls)
    served, _, error = handshake(
        server_context(files_of(node_tls, "optional")), node_tls.client_context((cert_path, key_path))
    )
    assert served is None and tls.refusal_kind(error) == tls.OVERSIZED_CHAIN, error


# Rotation.


def test_new_connections_get_the_new_certificate_once_the_files_change(node_tls):
    clock = Clock()
    rotating = RotatingContext(files_of(node_tls), clock=clock)
    first = rotating.current()
    before, client_before, _ = handshake(first, node_tls.client_context())
    old_serial = serial_of(client_before)

    new_cert = node_tls.rotate()
    assert rotating.current() is first, "not looked at again within the second"
    clock.now += 1.0
    second = rotating.current()
    assert second is not first and rotating.reloads == 1

    _, client_after, _ = handshake(second, node_tls.client_context())
    assert serial_of(client_after) == leaf_serial(new_cert) != old_serial
    # The connection made before keeps its certificate and still carries data.
    client_before.sendall(b"ping")
    assert before.recv(4) == b"ping"
    assert serial_of(client_before) == old_serial

    clock.now += 1.0
    assert rotating.current() is second, "unchanged files are not loaded again"


def test_files_that_do_not_load_keep_the_old_certificate_and_are_logged_once(node_tls, caplog):
    clock = Clock()
    rotating = RotatingContext(files_of(node_tls), clock=clock)
    first = rotating.current()
    # A new certificate whose key has not been written yet: they do not match.
    write_leaf(node_tls.ca.issue_cert("localhost"), node_tls.directory, "next")
    os.replace(node_tls.directory / "next.crt", node_tls.cert_file)

    with caplog.at_level(logging.WARNING, logger="registry.serving.tls"):
        for _ in range(3):
            clock.now += 1.0
            assert rotating.current() is first
    assert len([r for r in caplog.records if "do not load" in r.getMessage()]) == 1
    _, client_side, error = handshake(rotating.current(), node_tls.client_context())
    assert error is None and client_side is not None, "the old certificate still serves"

    # The key arrives: loaded at the next look.
    os.replace(node_tls.directory / "next.key", node_tls.key_file)
    clock.now += 1.0
    assert rotating.current() is not first and rotating.reloads == 1


def test_a_new_client_ca_bundle_is_loaded_too(node_tls):
    clock = Clock()
    rotating = RotatingContext(files_of(node_tls, "required"), clock=clock)
    other = NodeTls.make(node_tls.directory / "other")
    client_files = other.client_cert_files("orders.example")
    served, _, _ = handshake(rotating.current(), node_tls.client_context(client_files))
    assert served is None, "a CA not in the bundle"

    node_tls.ca_file.write_bytes(node_tls.ca.cert_pem.bytes() + other.ca.cert_pem.bytes())
    clock.now += 1.0
    served, _, _ = handshake(rotating.current(), node_tls.client_context(client_files))
    assert served is not None


def test_the_plain_listener_is_bound_beside_the_first_tcp_address(node_tls):
    config = TlsConfig(cert_file=str(node_tls.cert_file), key_file=str(node_tls.key_file), plain_port=8080)
    assert tls.plain_bind(["unix:/run/x.sock", "10.0.0.5:8761"], config) == "10.0.0.5:8080"
    assert tls.plain_bind(["[::]:8761"], config) == "[::]:8080"
    off = TlsConfig(cert_file=str(node_tls.cert_file), key_file=str(node_tls.key_file))
    assert tls.plain_bind(["0.0.0.0:8761"], off) is None


# The settings' checks at start.


def tls_env(node_tls: NodeTls, **changes: str) -> dict[str, str]:
    return node_tls.env() | changes


@pytest.mark.parametrize(
    ("changes", "variable", "words"),
    [
        ({"EUREKA_TLS_CERT_FILE": "/nonexistent/server.crt"}, "EUREKA_TLS_CERT_FILE", "cannot read"),
        ({"EUREKA_TLS_KEY_FILE": ""}, "EUREKA_TLS_KEY_FILE", "must be set"),
        ({"EUREKA_TLS_CERT_FILE": "KEY"}, "EUREKA_TLS_CERT_FILE", "no PEM certificate"),
        ({"EUREKA_TLS_KEY_FILE": "CERT"}, "EUREKA_TLS_KEY_FILE", "no PEM private key"),
        ({"EUREKA_TLS_KEY_FILE": "OTHER_KEY"}, "EUREKA_TLS_KEY_FILE", "does not match"),
        ({"EUREKA_TLS_CLIENT_AUTH": "required"}, "EUREKA_TLS_CLIENT_CA_FILE", "must be set"),
        ({"EUREKA_TLS_CLIENT_AUTH": "sometimes"}, "EUREKA_TLS_CLIENT_AUTH", "must be one of"),
        (
            {"EUREKA_TLS_CLIENT_AUTH": "optional", "EUREKA_TLS_CLIENT_CA_FILE": "KEY"},
            "EUREKA_TLS_CLIENT_CA_FILE",
            "no PEM certificate",
        ),
        ({"EUREKA_TLS_PLAIN_PORT": "70000"}, "EUREKA_TLS_PLAIN_PORT", "65535"),
    ],
)
def test_a_bad_tls_setting_stops_the_start_naming_its_variable(node_tls, changes, variable, words):
    other_key = write_leaf(node_tls.ca.issue_cert("localhost"), node_tls.directory, "other")[1]
    paths = {"KEY": str(node_tls.key_file), "CERT": str(node_tls.cert_file), "OTHER_KEY": str(other_key)}
    env = tls_env(node_tls, **{name: paths.get(value, value) for name, value in changes.items()})
    with pytest.raises(BadSetting) as raised:
        parse_config(env)
    assert raised.value.variable == variable
    assert words in str(raised.value)


def test_client_auth_or_a_plain_port_without_a_certificate_is_refused():
    for variable, value in (("EUREKA_TLS_CLIENT_AUTH", "optional"), ("EUREKA_TLS_PLAIN_PORT", "8080")):
        with pytest.raises(BadSetting) as raised:
            parse_config({variable: value})
        assert raised.value.variable == variable


def test_an_encrypted_key_needs_its_password(node_tls):
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(node_tls.key_file.read_bytes(), None)
    node_tls.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret"),
        )
    )
    with pytest.raises(BadSetting) as raised:
        parse_config(node_tls.env())
    assert raised.value.variable == "EUREKA_TLS_KEY_PASSWORD"
    config = parse_config(node_tls.env() | {"EUREKA_TLS_KEY_PASSWORD": "s3cret"})
    assert config.tls.enabled and "s3cret" not in repr(config.tls)
    handshake_ok = handshake(server_context(TlsFiles.of(config.tls)), node_tls.client_context())
    assert handshake_ok[2] is None


def test_without_tls_settings_nothing_is_served_over_tls():
    assert parse_config({}).tls.enabled is False
