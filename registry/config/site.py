"""The settings of the site around the registry, as typed, frozen objects: how it is served (the
connections one client may hold, the serving process) and to whom (API accounts and sign-ins, HTTPS,
the status console, /metrics).

Each is a section of ``EurekaConfig`` (registry/config/eureka.py), its fields declared with
``setting()`` as Eureka's own are (registry/domain/config.py); eureka_site/settings.py derives the
Django settings it needs (security headers, the request size limit) from them.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from registry.domain.config import BadSetting, comma_list, setting

# Embedded mode (make run, tests) signs the console's sessions and CSRF tokens with this key when
# SECRET_KEY is not set, and anyone can read it here. Production mode (REDIS_URL) refuses it whatever
# EUREKA_EMBEDDED says (eureka_site/settings.py), and `check --deploy` flags it anywhere
# (registry/runtime/checks.py).
EMBEDDED_SECRET_KEY = "embedded-mode-insecure-key-set-SECRET_KEY-in-production"
# Paths the console may not take (the protocol, the admin, static files, the control endpoint, probes,
# the change feed).
RESERVED_DASHBOARD_PATHS = ("eureka", "admin", "static", "control", "healthz", "readyz", "metrics", "api")


def _proxies(raw: str, _: Mapping[str, Any]) -> tuple[str, ...]:
    proxies = tuple(comma_list(raw))
    for proxy in proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise ValueError(f"{proxy!r} is not an IP address or network") from None
    return proxies


def _header_name(raw: str, _: Mapping[str, Any]) -> str:
    name = raw.strip()
    if name and not re.fullmatch(r"[A-Za-z0-9-]+", name):
        raise ValueError(f"{raw!r} is not an HTTP header name (letters, digits and '-')")
    return name


def dashboard_prefix(path: str) -> str:
    """``/`` → ``""``, ``/console`` or ``/console/`` → ``"console/"`` (a URL pattern prefix). Raises
    BadSetting for a path that is not plain or that the registry serves itself."""
    clean = path.strip().strip("/")
    if clean and not re.fullmatch(r"[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*", clean):
        raise BadSetting("EUREKA_DASHBOARD_PATH", f"{path!r} is not a plain URL path like /console")
    if clean.split("/")[0] in RESERVED_DASHBOARD_PATHS:
        raise BadSetting(
            "EUREKA_DASHBOARD_PATH",
            f"{path!r} collides with /{clean.split('/')[0]}/, which the registry serves",
        )
    return f"{clean}/" if clean else ""


def _dashboard_path(raw: str, _: Mapping[str, Any]) -> str:
    dashboard_prefix(raw)
    return raw


@dataclass(frozen=True, slots=True)
class ProcessConfig:
    """The serving process: garbage collection, the event loop's watch, refusals in the log, the
    in-process scheduler."""

    # registry/runtime/gc_policy.py; 0 switches the freezing off.
    gc_freeze_interval_ms: int = setting(
        60_000,
        "EUREKA_GC_FREEZE_INTERVAL_MS",
        "How often young garbage is collected and the survivors frozen; 0: off.",
        minimum=0,
    )
    gc_full_collection_interval_ms: int = setting(
        3_600_000,
        "EUREKA_GC_FULL_COLLECTION_INTERVAL_MS",
        "How often one full collection reclaims frozen garbage.",
        minimum=1,
    )
    # registry/runtime/loop_watch.py; 0 switches the watch off.
    loop_stall_threshold_ms: int = setting(
        100,
        "EUREKA_LOOP_STALL_THRESHOLD_MS",
        "A turn of the event loop later than this is logged and counted; 0: off.",
        minimum=0,
    )
    # registry/domain/refusals.py: connections, requests and credentials refused, malformed requests.
    refusal_log_interval_seconds: int = setting(
        60,
        "EUREKA_REFUSAL_LOG_INTERVAL_SECONDS",
        "Refusals (and malformed requests) are logged at most once in this time per kind, with a count.",
        minimum=1,
    )
    embedded_scheduler: bool = setting(
        True,
        "EUREKA_EMBEDDED_SCHEDULER",
        "Run the periodic jobs in-process (with REDIS_URL: only those Celery beat left overdue).",
    )


@dataclass(frozen=True, slots=True)
class IdentityConfig:
    """What the console shows about this node (Spring Cloud's eureka.environment / datacenter)."""

    environment: str = setting("test", "EUREKA_ENVIRONMENT", "Shown as the console's Environment.")
    datacenter: str = setting("default", "EUREKA_DATACENTER", "Shown as the console's Data center.")
    # Empty: the address of the interface that routes outwards.
    instance_ip_address: str = setting(
        "",
        "EUREKA_INSTANCE_IP_ADDRESS",
        "This node's address on the console; empty: the outward interface's.",
    )


@dataclass(frozen=True, slots=True)
class AccessConfig:
    """API accounts and sign-ins (registry/access/)."""

    # With it on, every /eureka/ request needs HTTP Basic credentials of a Django user holding a role
    # (client, reader, peer). Off keeps Eureka's open API.
    api_auth: bool = setting(
        False, "EUREKA_API_AUTH", "Every /eureka/ request needs Basic credentials of an account with a role."
    )
    # A disabled account or a new password is refused within this time (changes made in the admin at once).
    api_auth_recheck_seconds: int = setting(
        5,
        "EUREKA_API_AUTH_RECHECK_SECONDS",
        "Verified credentials are trusted this long before the account is read again.",
        minimum=1,
    )
    # Failed sign-ins (the admin's form, which the console uses, and API Basic credentials): past these
    # within the lockout, an address or a user name is refused without a password check (429,
    # Retry-After; registry/access/throttle.py). Verified API credentials are never refused.
    signin_max_failures: int = setting(
        10,
        "EUREKA_SIGNIN_MAX_FAILURES",
        "Failed sign-ins from one address before it is locked out; 0: no limit.",
        minimum=0,
    )
    signin_max_failures_per_user: int = setting(
        30,
        "EUREKA_SIGNIN_MAX_FAILURES_PER_USER",
        "Failed sign-ins for one user name, from anywhere, before it is locked out; 0: no limit.",
        minimum=0,
    )
    signin_lockout_seconds: int = setting(
        60,
        "EUREKA_SIGNIN_LOCKOUT_SECONDS",
        "Seconds failures are counted over, and a lockout lasts.",
        minimum=1,
    )
    # Behind them, the client is the last address in X-Forwarded-For that is not a proxy. Default:
    # loopback (a proxy or reader on the same host), as gunicorn's forwarded_allow_ips.
    trusted_proxies: tuple[str, ...] = setting(
        ("127.0.0.1", "::1"),
        "EUREKA_TRUSTED_PROXIES",
        "Proxies (IPs or CIDRs) whose X-Forwarded-For gives the client address.",
        read=_proxies,
    )
    # Behind a TLS-terminating proxy, the header that carries the client's certificate: Envoy's XFCC
    # or nginx's $ssl_client_escaped_cert (registry/access/certificates.py). Believed only from an
    # address in trusted_proxies; from anyone else it is ignored (and logged).
    client_cert_header: str = setting(
        "X-Forwarded-Client-Cert",
        "EUREKA_CLIENT_CERT_HEADER",
        "Header a TLS proxy in EUREKA_TRUSTED_PROXIES puts the client certificate in (Envoy XFCC, "
        "nginx's $ssl_client_escaped_cert); empty: none.",
        read=_header_name,
    )
    # Password checks that may wait for a hashing slot, per slot (registry/access/hashers.py); more
    # are refused at once with 503. 0: no limit.
    signin_waiting_per_core: int = setting(
        4,
        "EUREKA_SIGNIN_WAITING_PER_CORE",
        "Password checks that may wait per hashing core (more answer 503); 0: no limit.",
        minimum=0,
    )


@dataclass(frozen=True, slots=True)
class ConnectionsConfig:
    """What one client may hold of a node's connections, and for how long (docs "Security model").

    The gunicorn worker (registry/serving/gunicorn_worker.py) counts open connections per client
    address and in all, and refuses a new one past either cap with a 503 before reading anything; the
    total stays below gunicorn's ``worker_connections`` so that the worker always accepts, and a
    refused client gets an answer instead of waiting in the kernel's queue. Addresses in
    EUREKA_TRUSTED_PROXIES (a proxy or reader in front carries many clients) are not capped per
    address. The timeouts are Tomcat's and nginx's: the request line and headers of a new connection,
    and a request body (no byte for ``body_idle_timeout_s``, or not all of it within
    ``body_timeout_s``), are given that long and then the connection is closed; so is a connection
    whose client takes no byte of its answer for ``write_timeout_s`` (nginx's ``send_timeout``), and
    the answers clients that stopped reading hold are bounded by ``slow_readers_max_bytes``
    (registry/serving/connections.py, SlowReaders). 0 switches one off."""

    max_per_address: int = setting(
        256,
        "EUREKA_MAX_CONNECTIONS_PER_ADDRESS",
        "Connections one client address may hold open (more get 503); 0: no cap.",
        minimum=0,
    )
    max_total: int = setting(
        9_000,
        "EUREKA_MAX_CONNECTIONS",
        "Connections open in all (kept below gunicorn's worker_connections); 0: no cap.",
        minimum=0,
    )
    header_timeout_s: float = setting(
        20.0,
        "EUREKA_HEADER_TIMEOUT_SECONDS",
        "A new connection's request line and headers must arrive within this; 0: off.",
        minimum=0,
    )
    body_idle_timeout_s: float = setting(
        20.0,
        "EUREKA_BODY_IDLE_TIMEOUT_SECONDS",
        "A request body may pause this long at most; 0: off.",
        minimum=0,
    )
    body_timeout_s: float = setting(
        60.0,
        "EUREKA_BODY_TIMEOUT_SECONDS",
        "A request body must arrive whole within this; 0: off.",
        minimum=0,
    )
    # A client that reads, however slowly, takes bytes: only one that takes none this long is cut.
    write_timeout_s: float = setting(
        20.0,
        "EUREKA_WRITE_TIMEOUT_SECONDS",
        "A client that takes no byte of its answer for this long is disconnected; 0: off.",
        minimum=0,
    )
    slow_readers_max_bytes: int = setting(
        64 * 1024 * 1024,
        "EUREKA_SLOW_READERS_MAX_BYTES",
        "Answers held for clients that stopped reading, in all; past it the oldest go; 0: no bound.",
        minimum=0,
    )
    # Also the limit after gunzip; Django's DATA_UPLOAD_MAX_MEMORY_SIZE is this too.
    max_body_bytes: int = setting(
        1024 * 1024,
        "EUREKA_MAX_BODY_BYTES",
        "Larger request bodies (also after gunzip) are refused with 413.",
        minimum=1024,
    )


CLIENT_AUTH_MODES = ("none", "optional", "required")
_PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
_PEM_KEY = re.compile(rb"-----BEGIN [A-Z ]*PRIVATE KEY-----")


def _pem_file(variable: str, path: str, what: str, pattern: re.Pattern[bytes] | bytes) -> None:
    """Raises BadSetting naming ``variable`` when ``path`` cannot be read or holds no PEM ``what``."""
    try:
        with open(path, "rb") as file:
            text = file.read()
    except OSError as exc:
        raise BadSetting(variable, f"cannot read {path!r}: {exc.strerror or exc}") from None
    found = pattern.search(text) if isinstance(pattern, re.Pattern) else pattern in text
    if not found:
        raise BadSetting(variable, f"{path!r} holds no PEM {what}")


def _encrypted(path: str) -> bool:
    with open(path, "rb") as file:
        return b"ENCRYPTED" in file.read()


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """HTTPS on the node's own port (registry/serving/tls.py builds the server's context from these
    files and loads them again when they change; docs/tls.md).

    With a certificate and its key the port given to the server (``--bind``) speaks HTTPS only; a plain
    port beside it serves HTTP for a migration window. Client certificates are asked for (optional) or
    demanded (required) and verified against the CA bundle; the verified one reaches the application as
    ``environ["eureka.client_cert"]`` (DER). The files are checked when the settings are read, so a
    missing, unreadable or mismatched file stops the start with the variable's name."""

    cert_file: str = setting(
        "",
        "EUREKA_TLS_CERT_FILE",
        "PEM file of the server's certificate chain (its own first); set, the port speaks HTTPS only.",
    )
    key_file: str = setting("", "EUREKA_TLS_KEY_FILE", "PEM file of the certificate's private key.")
    key_password: str = setting(
        "", "EUREKA_TLS_KEY_PASSWORD", "Password of an encrypted EUREKA_TLS_KEY_FILE.", secret=True
    )
    # Beside the HTTPS port, on the same address: clients move to HTTPS one by one.
    plain_port: int = setting(
        0,
        "EUREKA_TLS_PLAIN_PORT",
        "A plain-HTTP port served beside the HTTPS one (a migration window); 0: none.",
        minimum=0,
    )
    client_auth: str = setting(
        "none",
        "EUREKA_TLS_CLIENT_AUTH",
        "Client certificates: none, optional (verified when sent) or required (else no connection).",
        choices=CLIENT_AUTH_MODES,
    )
    client_ca_file: str = setting(
        "",
        "EUREKA_TLS_CLIENT_CA_FILE",
        "PEM bundle of the CAs client certificates chain to; required unless EUREKA_TLS_CLIENT_AUTH=none.",
    )

    def __post_init__(self) -> None:
        if self.cert_file or self.key_file:
            self._check_files()
        else:
            if self.plain_port:
                raise BadSetting(
                    "EUREKA_TLS_PLAIN_PORT", "needs EUREKA_TLS_CERT_FILE and EUREKA_TLS_KEY_FILE (HTTPS)"
                )
            if self.client_auth != "none":
                raise BadSetting(
                    "EUREKA_TLS_CLIENT_AUTH", "needs EUREKA_TLS_CERT_FILE and EUREKA_TLS_KEY_FILE (HTTPS)"
                )
        if self.plain_port > 65535:
            raise BadSetting("EUREKA_TLS_PLAIN_PORT", f"must be <= 65535, got {self.plain_port}")

    @property
    def enabled(self) -> bool:
        return bool(self.cert_file)

    def _check_files(self) -> None:
        if not self.cert_file:
            raise BadSetting("EUREKA_TLS_CERT_FILE", "must be set with EUREKA_TLS_KEY_FILE")
        if not self.key_file:
            raise BadSetting("EUREKA_TLS_KEY_FILE", "must be set with EUREKA_TLS_CERT_FILE")
        _pem_file("EUREKA_TLS_CERT_FILE", self.cert_file, "certificate", _PEM_CERTIFICATE)
        _pem_file("EUREKA_TLS_KEY_FILE", self.key_file, "private key", _PEM_KEY)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        password = self.key_password.encode()
        try:
            # A callable, also without a password: OpenSSL would otherwise ask for one on the terminal.
            context.load_cert_chain(self.cert_file, self.key_file, lambda: password)
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                raise BadSetting(
                    "EUREKA_TLS_KEY_FILE", "the key does not match EUREKA_TLS_CERT_FILE's certificate"
                ) from None
            if exc.reason in ("BAD_DECRYPT", "BAD_PASSWORD_READ") or _encrypted(self.key_file):
                raise BadSetting(
                    "EUREKA_TLS_KEY_PASSWORD", f"cannot decrypt EUREKA_TLS_KEY_FILE with it: {exc}"
                ) from None
            raise BadSetting("EUREKA_TLS_CERT_FILE", f"cannot load it with its key: {exc}") from None
        if self.client_auth == "none":
            return
        if not self.client_ca_file:
            raise BadSetting(
                "EUREKA_TLS_CLIENT_CA_FILE", f"must be set with EUREKA_TLS_CLIENT_AUTH={self.client_auth}"
            )
        _pem_file("EUREKA_TLS_CLIENT_CA_FILE", self.client_ca_file, "certificate", _PEM_CERTIFICATE)
        try:
            context.load_verify_locations(cafile=self.client_ca_file)
        except ssl.SSLError as exc:
            raise BadSetting("EUREKA_TLS_CLIENT_CA_FILE", f"cannot load it: {exc}") from None


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """The site around the protocol (eureka_site/settings.py turns these into Django's settings)."""

    # Without SECRET_KEY, embedded mode (make run, tests) signs sessions with a public development key;
    # production mode (REDIS_URL) refuses that key whatever this says.
    embedded: bool = setting(
        True, "EUREKA_EMBEDDED", "Without SECRET_KEY, sign sessions with the public development key."
    )
    # Over HTTPS through a TLS proxy that sets X-Forwarded-Proto: Secure cookies, HSTS, plain-HTTP
    # console and admin requests redirected (never the protocol, the probes or /metrics).
    https: bool = setting(
        False, "EUREKA_HTTPS", "The site is reached over HTTPS through a TLS proxy (Secure cookies, HSTS)."
    )
    hsts_seconds: int = setting(
        31_536_000, "EUREKA_HSTS_SECONDS", "Strict-Transport-Security max-age, with EUREKA_HTTPS.", minimum=0
    )
    hsts_include_subdomains: bool = setting(
        False, "EUREKA_HSTS_INCLUDE_SUBDOMAINS", "HSTS includeSubDomains, with EUREKA_HTTPS."
    )
    hsts_preload: bool = setting(False, "EUREKA_HSTS_PRELOAD", "HSTS preload, with EUREKA_HTTPS.")
    # Set it only behind a proxy that sets or strips that header itself.
    trust_forwarded_prefix: bool = setting(
        False,
        "EUREKA_TRUST_FORWARDED_PREFIX",
        "Honour X-Forwarded-Prefix (a proxy mounts the site under a path).",
    )


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    """The status console (dashboard/)."""

    enabled: bool = setting(True, "EUREKA_DASHBOARD_ENABLED", "Serve the status console.")
    # Instance metadata often holds secrets, and a closed API should not leave them on an open page.
    login_required: bool = setting(
        False,
        "EUREKA_DASHBOARD_LOGIN_REQUIRED",
        "The console, /lastn and the instance pages only for signed-in staff users.",
        derived="EUREKA_API_AUTH",
    )
    path: str = setting(
        "/",
        "EUREKA_DASHBOARD_PATH",
        "Where the console lives, e.g. /console (not a path the registry serves).",
        read=_dashboard_path,
    )
    refresh_seconds: int = setting(
        10,
        "EUREKA_DASHBOARD_REFRESH_SECONDS",
        "Seconds between refreshes while the tab is visible (backing off when hidden); 0: off.",
        minimum=0,
    )
    page_size: int = setting(
        500, "EUREKA_DASHBOARD_PAGE_SIZE", "Instances per page of the console's table.", minimum=10
    )
    # A console view reads the whole registry: viewers of one page share its render for this long
    # (dashboard/shared_pages.py), so its cost does not grow with the number of viewers.
    cache_ms: int = setting(
        2_000,
        "EUREKA_DASHBOARD_CACHE_MS",
        "How long every viewer of a console page gets the same render (what it shows is at most "
        "this old); 0: each view renders.",
        minimum=0,
    )
    # The console's last-hour charts keep 3,600,000 / this many samples (360 at 10 s).
    history_interval_ms: int = setting(
        10_000,
        "EUREKA_DASHBOARD_HISTORY_INTERVAL_MS",
        "How often the node samples itself for the console's last-hour charts; 0: no charts.",
        minimum=0,
    )

    @property
    def prefix(self) -> str:
        """The console's URL pattern prefix: ``""`` or ``"console/"``."""
        return dashboard_prefix(self.path)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """GET /metrics in Prometheus' text format (registry/protocol/metrics.py)."""

    enabled: bool = setting(
        True, "EUREKA_METRICS_ENABLED", "Serve /metrics and time protocol requests; false: 404."
    )
    token: str = setting(
        "",
        "EUREKA_METRICS_TOKEN",
        "Set: scrapers send it as Bearer credentials (else 401); empty: /metrics is open.",
        secret=True,
    )
