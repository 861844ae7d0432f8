"""The server's TLS: the ``ssl.SSLContext`` of EUREKA_TLS_*'s files, built again when they change.

Django-free (the gunicorn worker builds it; tests build it with certificates made at test time).
``server_context`` is the policy: TLS 1.2 and 1.3 only, Mozilla's "intermediate" cipher list for TLS 1.2
(ECDHE key exchange, AES-GCM or ChaCha20-Poly1305; TLS 1.3's suites are all of that kind), no
renegotiation, no compression, and client certificates verified against the CA bundle when asked for.

``RotatingContext`` holds the context new connections are given. cert-manager, Vault or an operator
replace the files every few days: at most once a second (when a new connection asks), the files'
inode, modification time and size are compared with those of the last load, and when they differ a
fresh context is built from them and replaces the old one for the connections that come next; a
connection keeps the context it was wrapped with, so kept-alive connections finish on the old
certificate. Files that do not load (a key written before its certificate, a broken file) are logged
once and the old context is kept until they change again.

``refusal_kind`` names a failed handshake's cause for the refusal log (registry/domain/refusals.py).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from registry.domain.outbound_tls import file_signature

logger = logging.getLogger(__name__)

# Mozilla's "intermediate" configuration for TLS 1.2 (ssl-config.mozilla.org), ECDHE suites only: the
# DHE ones need DH parameters of the server's own, and every client that speaks TLS 1.2 has ECDHE.
INTERMEDIATE_CIPHERS = ":".join(
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    )
)
CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
# The files are looked at no more often than this.
CHECK_EVERY_S = 1.0


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """What a server context is made of (registry/config/site.py ``TlsConfig`` names them)."""

    cert_file: str
    key_file: str
    key_password: str = ""
    client_auth: str = "none"
    client_ca_file: str = ""

    @classmethod
    def of(cls, config) -> TlsFiles:
        """From ``settings.EUREKA.tls``."""
        return cls(
            config.cert_file, config.key_file, config.key_password, config.client_auth, config.client_ca_file
        )

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(path for path in (self.cert_file, self.key_file, self.client_ca_file) if path)

    @property
    def verifies_clients(self) -> bool:
        return self.client_auth != "none"


def server_context(files: TlsFiles, context_class: type[ssl.SSLContext] = ssl.SSLContext) -> ssl.SSLContext:
    """A server context with the policy of the module docstring and ``files``' certificate. Raises
    OSError or ssl.SSLError when they cannot be loaded. ``context_class``: gevent's, in its worker."""
    context = context_class(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(INTERMEDIATE_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    password = files.key_password.encode()
    # A callable, also without a password: OpenSSL would otherwise ask for one on the terminal.
    context.load_cert_chain(files.cert_file, files.key_file, lambda: password)
    context.verify_mode = CLIENT_AUTH[files.client_auth]
    if files.verifies_clients:
        context.load_verify_locations(cafile=files.client_ca_file)
    return context


class RotatingContext:
    """The context for new connections (``current``), built again from the files once they change."""

    def __init__(
        self,
        files: TlsFiles,
        build: Callable[[TlsFiles], ssl.SSLContext] = server_context,
        clock: Callable[[], float] = time.monotonic,
        check_every_s: float = CHECK_EVERY_S,
    ):
        self.files = files
        self.build = build
        self.clock = clock
        self.check_every_s = check_every_s
        self._loaded = file_signature(files.paths)
        self.context = build(files)  # at start a file that does not load stops the server
        self._failed: tuple | None = None
        self._next_check = clock() + check_every_s
        # How many times the files were loaded again (tests, the log).
        self.reloads = 0

    def current(self) -> ssl.SSLContext:
        now = self.clock()
        if now >= self._next_check:
            self._next_check = now + self.check_every_s
            self.reload_if_changed()
        return self.context

    def reload_if_changed(self) -> bool:
        """Build a new context if the files changed since the last load and load cleanly; True if it did."""
        signature = file_signature(self.files.paths)
        if signature == self._loaded or signature == self._failed:
            return False
        try:
            context = self.build(self.files)
        except (OSError, ValueError, ssl.SSLError) as exc:
            # Once per state of the files: the next change is tried again.
            self._failed = signature
            logger.warning(
                "the TLS files changed but do not load (%s): new connections keep the certificate loaded "
                "before, until the files change again (EUREKA_TLS_CERT_FILE, EUREKA_TLS_KEY_FILE, "
                "EUREKA_TLS_CLIENT_CA_FILE)",
                exc,
            )
            return False
        self.context, self._loaded, self._failed = context, signature, None
        self.reloads += 1
        logger.info("the TLS files changed: new connections get the certificate of %s", self.files.cert_file)
        return True


# Certificate verification errors (X509_V_ERR_*) by the refusal they are logged as.
_UNKNOWN_CA = {2, 18, 19, 20, 21}
_EXPIRED = {9, 10}
_CHAIN_TOO_LONG = 22

PLAIN_HTTP = "plain HTTP on the HTTPS port"
HANDSHAKE_TIMEOUT = "handshake not finished within the header timeout"
UNKNOWN_CA = "client certificate of an unknown CA"
EXPIRED = "expired (or not yet valid) client certificate"
NO_CERTIFICATE = "no client certificate"
OVERSIZED_CHAIN = "oversized certificate chain"
HANDSHAKE_FAILED = "handshake failed"


# What a refusal's log line points the operator to.
HINTS = {
    PLAIN_HTTP: "the client's service URL must be https://",
    HANDSHAKE_TIMEOUT: "EUREKA_HEADER_TIMEOUT_SECONDS",
    UNKNOWN_CA: "EUREKA_TLS_CLIENT_CA_FILE",
    EXPIRED: "EUREKA_TLS_CLIENT_CA_FILE",
    NO_CERTIFICATE: "EUREKA_TLS_CLIENT_AUTH",
    OVERSIZED_CHAIN: "at most 100 KiB of certificates",
    HANDSHAKE_FAILED: "TLS 1.2 or 1.3 with an ECDHE suite; the client must trust EUREKA_TLS_CERT_FILE's CA",
}


def client_left(error: ssl.SSLError) -> bool:
    """A handshake the client ended by closing its connection: not a refusal."""
    return isinstance(error, ssl.SSLEOFError | ssl.SSLZeroReturnError) or getattr(error, "reason", None) in (
        "UNEXPECTED_EOF_WHILE_READING",
    )


def refusal_kind(error: ssl.SSLError) -> str:
    """Which refusal a failed handshake is: one of this module's fixed names, never the client's text."""
    code = getattr(error, "verify_code", None)
    if code in _UNKNOWN_CA:
        return UNKNOWN_CA
    if code in _EXPIRED:
        return EXPIRED
    if code == _CHAIN_TOO_LONG:
        return OVERSIZED_CHAIN
    reason = getattr(error, "reason", None) or ""
    if reason in ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "CERTIFICATE_REQUIRED"):
        return NO_CERTIFICATE
    # OpenSSL refuses a certificate message over its limit (100 KiB) before reading all of it.
    if reason in ("EXCESSIVE_MESSAGE_SIZE", "CERT_LENGTH_MISMATCH"):
        return OVERSIZED_CHAIN
    return HANDSHAKE_FAILED


def plain_http_answer() -> bytes:
    """What a plain HTTP request on the HTTPS port is answered (as Tomcat does), before the close."""
    body = b"This port speaks HTTPS: use an https:// URL.\n"
    return (
        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )


def plain_bind(binds: list[str], config) -> str | None:
    """The address of EUREKA_TLS_PLAIN_PORT's listener (``config``: ``settings.EUREKA.tls``) beside the
    server's ``binds`` (gunicorn's ``--bind``): the first TCP one's host, that port; None without one."""
    if not (config.enabled and config.plain_port):
        return None
    for bind in binds:
        if bind.startswith(("unix:", "fd://")):
            continue
        host, _, _port = bind.rpartition(":")
        return f"{host or '0.0.0.0'}:{config.plain_port}"
    return None
