"""TLS for the requests this node sends: to peers, remote regions, health-check targets and webhook
receivers. Plain Python: no Django, no HTTP client.

One ``OutboundTls`` per set of files (``EUREKA_OUTBOUND_CA_FILE``, ``EUREKA_OUTBOUND_CERT_FILE``,
``EUREKA_OUTBOUND_KEY_FILE``) builds the ``ssl.SSLContext`` every outbound client uses: TLS 1.2 at
least, the server's certificate verified and its host name checked, against the CA file when one is
named, else against the system's trust store. With ``client_cert`` the context also presents the node's
own certificate: to peers and remote regions only, never to health-check targets or webhook receivers.

The files are watched: at most once every ``CHECK_INTERVAL_S`` a context is asked for, their sizes,
times and inodes are compared with those it was built from, and a change builds a new context (a
new ``generation``). Connections opened from then on present the new certificate; those already
open finish on the old one. A change that does not load (a certificate written before its key) keeps
the last good context and is logged, at most once a minute with a count; the next check tries again.

``check_files`` is the start-up check (registry/config/eureka.py): a missing or unreadable file, a file
that holds no certificate, or a key that does not match the certificate raise ``OutboundTlsError``
naming the variable.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable

from registry.domain.refusals import RefusalLines, since_last_line

logger = logging.getLogger(__name__)

CA_VARIABLE = "EUREKA_OUTBOUND_CA_FILE"
CERT_VARIABLE = "EUREKA_OUTBOUND_CERT_FILE"
KEY_VARIABLE = "EUREKA_OUTBOUND_KEY_FILE"
# How often the files are looked at, at most: a rotated certificate is presented within this long.
CHECK_INTERVAL_S = 1.0

_reload_lines = RefusalLines()


class OutboundTlsError(ValueError):
    """A file of the outbound TLS settings that cannot be used; ``variable`` names the setting."""

    def __init__(self, variable: str, message: str):
        super().__init__(f"{variable}: {message}")
        self.variable = variable
        self.message = message


def _no_password() -> bytes:
    # Without a callback OpenSSL would ask for the pass phrase on the terminal.
    raise OutboundTlsError(KEY_VARIABLE, "the key is encrypted; give the key unencrypted")


def _readable(variable: str, path: str, marker: bytes, what: str) -> None:
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise OutboundTlsError(variable, f"cannot read {path}: {exc.strerror or exc}") from None
    if marker not in data:
        raise OutboundTlsError(variable, f"{path} holds no PEM {what}")


def build_context(ca_file: str = "", cert_file: str = "", key_file: str = "") -> ssl.SSLContext:
    """A client context: TLS 1.2 or later, the peer's certificate verified against ``ca_file`` (the
    system's trust store when empty) and its host name checked; ``cert_file`` and ``key_file``, when
    given, presented as this node's certificate. Raises OutboundTlsError naming the variable."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file:
        _readable(CA_VARIABLE, ca_file, b"-----BEGIN CERTIFICATE-----", "certificate")
        try:
            context.load_verify_locations(cafile=ca_file)
        except ssl.SSLError as exc:
            raise OutboundTlsError(CA_VARIABLE, f"{ca_file}: {exc.reason or exc}") from None
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if cert_file or key_file:
        if not cert_file:
            raise OutboundTlsError(CERT_VARIABLE, f"required with {KEY_VARIABLE}")
        if not key_file:
            raise OutboundTlsError(KEY_VARIABLE, f"required with {CERT_VARIABLE}")
        _readable(CERT_VARIABLE, cert_file, b"-----BEGIN CERTIFICATE-----", "certificate")
        _readable(KEY_VARIABLE, key_file, b"PRIVATE KEY-----", "private key")
        try:
            context.load_cert_chain(cert_file, key_file, password=_no_password)
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                raise OutboundTlsError(
                    KEY_VARIABLE, f"the key does not match the certificate in {cert_file}"
                ) from None
            raise OutboundTlsError(
                CERT_VARIABLE, f"{cert_file} with the key {key_file}: {exc.reason or exc}"
            ) from None
    return context


def check_files(ca_file: str, cert_file: str, key_file: str) -> None:
    """The start-up check: raises OutboundTlsError, naming the variable, for a file that cannot be used.
    Nothing to check when none is named (the system's trust store is read when first needed)."""
    if ca_file or cert_file or key_file:
        build_context(ca_file, cert_file, key_file)


def file_signature(paths: tuple[str, ...]) -> tuple:
    """What tells that certificate files changed: each one's size, time, inode and device, followed
    through symbolic links (a Kubernetes Secret is swapped by a link); None for one that is missing.
    The server's certificate (registry/serving/tls.py) is watched the same way."""
    found = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            found.append(None)
        else:
            found.append((stat.st_mtime_ns, stat.st_size, stat.st_ino, stat.st_dev))
    return tuple(found)


class _Watched:
    """One context and the files it is built from, rebuilt when they change."""

    def __init__(self, files: tuple[str, str, str], clock: Callable[[], float]):
        self.files = files
        self.paths = tuple(path for path in files if path)
        self.clock = clock
        self.signature = file_signature(self.paths)
        self.context = build_context(*files)
        self.generation = 1
        self.checked_at = clock()

    def current(self, lock: threading.Lock) -> tuple[int, ssl.SSLContext]:
        if not self.paths or self.clock() - self.checked_at < CHECK_INTERVAL_S:
            return self.generation, self.context
        with lock:
            now = self.clock()
            if now - self.checked_at >= CHECK_INTERVAL_S:
                self.checked_at = now
                signature = file_signature(self.paths)
                if signature != self.signature:
                    self._reload(signature)
            return self.generation, self.context

    def _reload(self, signature: tuple) -> None:
        try:
            context = build_context(*self.files)
        except OutboundTlsError as exc:
            # Tried again at the next check: a rotation may write the certificate before its key.
            count = _reload_lines.note("outbound TLS reload")
            if count:
                logger.warning(
                    "outbound TLS: the changed files do not load, the previous ones stay in use: %s%s",
                    exc,
                    since_last_line(count),
                    extra={"event": "outbound_tls_reload_failed", "error": str(exc)},
                )
            return
        self.signature = signature
        self.context = context
        self.generation += 1
        logger.info(
            "outbound TLS: files changed, new connections use them",
            extra={"event": "outbound_tls_reloaded", "generation": self.generation},
        )


class OutboundTls:
    """The contexts for this node's outbound connections, as ``build_context`` makes them, kept up to
    date with their files. ``verifies_by_default``: a CA file is named (health checks verify only then)."""

    def __init__(
        self,
        ca_file: str = "",
        cert_file: str = "",
        key_file: str = "",
        clock: Callable[[], float] = time.monotonic,
    ):
        self.ca_file = ca_file
        self.cert_file = cert_file
        self.key_file = key_file
        self._clock = clock
        self._lock = threading.Lock()
        self._contexts: dict[bool, _Watched] = {}

    @property
    def has_client_cert(self) -> bool:
        return bool(self.cert_file)

    def current(self, client_cert: bool) -> tuple[int, ssl.SSLContext]:
        """The context to open a connection with now, and its generation (it grows at each reload).
        ``client_cert``: present the node's certificate (peers and remote regions)."""
        present = client_cert and self.has_client_cert
        watched = self._contexts.get(present)
        if watched is None:
            with self._lock:
                watched = self._contexts.get(present)
                if watched is None:
                    files = (
                        (self.ca_file, self.cert_file, self.key_file) if present else (self.ca_file, "", "")
                    )
                    watched = self._contexts[present] = _Watched(files, self._clock)
        return watched.current(self._lock)

    def context(self, client_cert: bool = False) -> ssl.SSLContext:
        return self.current(client_cert)[1]

    def health_check_context(self) -> tuple[ssl.SSLContext, bool]:
        """What an https:// health check connects with, and whether it verifies: with a CA file named,
        ``context()`` (no client certificate); without one, a context that checks nothing (a probe
        asks whether the target answers, not who it is)."""
        if self.ca_file:
            return self.context(client_cert=False), True
        return _unverified(), False


_unverified_context: ssl.SSLContext | None = None


def _unverified() -> ssl.SSLContext:
    global _unverified_context
    if _unverified_context is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        _unverified_context = context
    return _unverified_context


_shared: dict[tuple[str, str, str], OutboundTls] = {}
_shared_lock = threading.Lock()


def shared(ca_file: str = "", cert_file: str = "", key_file: str = "") -> OutboundTls:
    """The process's one ``OutboundTls`` for these files: every client shares its contexts and reloads."""
    key = (ca_file, cert_file, key_file)
    with _shared_lock:
        found = _shared.get(key)
        if found is None:
            found = _shared[key] = OutboundTls(*key)
        return found


def tls_failure(exc: BaseException) -> str | None:
    """Why a connection's TLS handshake failed, read from an exception and its causes (an HTTP client
    wraps the ``ssl`` error): ``certificate verify failed: unable to get local issuer certificate``,
    ``certificate verify failed: Hostname mismatch, ...``; None when TLS is not what failed."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if isinstance(current, ssl.SSLCertVerificationError):
            return (
                f"certificate verify failed: {current.verify_message}"
                if current.verify_message
                else str(current)
            )
        if isinstance(current, ssl.SSLError):
            return current.reason.replace("_", " ").lower() if current.reason else str(current)
        current = current.__cause__ or current.__context__
        seen += 1
    return None
