"""Settings for the registry. The environment is read here and nowhere else.

Every variable, with its default, is listed in ``deploy/.env.example``. Malformed values raise
ImproperlyConfigured at start-up rather than surfacing later as odd behaviour.
"""

import ipaddress
import re
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from eureka_site.logs import LOG_FORMATS, log_secrets
from registry.cluster.peers import BadPeerUrl, parse_peer_urls
from registry.cluster.regions import BadRegionConfig, parse_region_urls, parse_whitelist, whitelist_to_options
from registry.health.addresses import parse_networks

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def _env(reader, name, default):
    try:
        return reader(name, default=default)
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(f"Environment variable {name} is malformed: {exc}") from exc


def env_int(name, default, minimum=None):
    value = _env(env.int, name, default)
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"Environment variable {name} must be >= {minimum}, got {value}")
    return value


def env_bool(name, default):
    return _env(env.bool, name, default)


def env_float(name, default):
    return _env(env.float, name, default)


def env_secret(name, default=None):
    """A secret from NAME, or from the file named by NAME_FILE (Docker/systemd credentials)."""
    path = env.str(f"{name}_FILE", default="")
    if path:
        return Path(path).read_text().strip()
    return env.str(name, default=default)


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_secret("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG and not env_bool("EUREKA_EMBEDDED", True):
        raise ImproperlyConfigured(
            "SECRET_KEY (or SECRET_KEY_FILE) is required when DEBUG is off in production mode"
        )
    # Embedded mode (make run / tests) gets a fixed development key; production sets its own.
    SECRET_KEY = "embedded-mode-insecure-key-set-SECRET_KEY-in-production"

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["*"])
# Honour X-Forwarded-Prefix (set it only behind a proxy that sets or strips that header itself).
EUREKA_TRUST_FORWARDED_PREFIX = env_bool("EUREKA_TRUST_FORWARDED_PREFIX", False)

# Origins allowed to POST to the admin when they differ from the Host header (a TLS proxy on another
# name), e.g. https://eureka.example.com
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    # Django's admin with the registry's own pages (registered instances, status overrides).
    "eureka_site.apps.EurekaAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "registry",
    "dashboard",
]

# Kept short on purpose: every middleware runs on every heartbeat. Sessions and auth are lazy.
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files in every mode (no proxy needed); never reached by /eureka/ requests.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "eureka_site.urls"
WSGI_APPLICATION = "eureka_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Where a node keeps its files (the SQLite database unless DATABASE_URL is set). Two nodes on one
# machine need two (`make run` gives a node on another port var/node-PORT).
EUREKA_DATA_DIR = Path(env.str("EUREKA_DATA_DIR", default=str(BASE_DIR / "var")))
if not EUREKA_DATA_DIR.is_absolute():
    EUREKA_DATA_DIR = BASE_DIR / EUREKA_DATA_DIR
DATABASES = {"default": env.db_url("DATABASE_URL", default=f"sqlite:///{EUREKA_DATA_DIR / 'db.sqlite3'}")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# An absolute STATIC_URL: Django caches a relative one with the script prefix of the first request,
# but behind a proxy the prefix is per request (X-Forwarded-Prefix); the storage adds it per URL.
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "var" / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "eureka_site.storage.PrefixedStaticFilesStorage"},
}
# Serve straight from the source folders too, so `make run` needs no collectstatic step; files
# collected into STATIC_ROOT (Docker image, systemd unit) are served compressed.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
LOGIN_URL = "admin:login"

# --- Security headers. The console and the admin are pages of their own: never framed, no MIME
# sniffing, no referrer sent elsewhere. EUREKA_HTTPS says the site is reached over HTTPS through a TLS
# proxy that sets X-Forwarded-Proto: cookies are then Secure, HSTS is sent and plain-HTTP console and
# admin requests are redirected. Protocol requests (/eureka/, served without middleware) are never
# redirected (clients do not follow redirects of POST/PUT), nor are the probes and /metrics.
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
EUREKA_HTTPS = env_bool("EUREKA_HTTPS", False)
EUREKA_HSTS_SECONDS = env_int("EUREKA_HSTS_SECONDS", 31_536_000, minimum=0)
EUREKA_HSTS_INCLUDE_SUBDOMAINS = env_bool("EUREKA_HSTS_INCLUDE_SUBDOMAINS", False)
EUREKA_HSTS_PRELOAD = env_bool("EUREKA_HSTS_PRELOAD", False)
if EUREKA_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^(eureka/|healthz$|readyz$|metrics$|control/)"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = EUREKA_HSTS_SECONDS
    SECURE_HSTS_INCLUDE_SUBDOMAINS = EUREKA_HSTS_INCLUDE_SUBDOMAINS
    SECURE_HSTS_PRELOAD = EUREKA_HSTS_PRELOAD

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_THROTTLE_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "registry.protocol.http.EurekaContentNegotiation",
    "EXCEPTION_HANDLER": "registry.protocol.http.plain_exception_handler",
}

# API accounts: with EUREKA_API_AUTH on, every /eureka/ request needs HTTP Basic credentials of a
# Django user holding a role (client, reader, peer: registry/access/). Off keeps Eureka's open API.
EUREKA_API_AUTH = env_bool("EUREKA_API_AUTH", False)
# Verified credentials are trusted this long before the account row is read again (a disabled
# account or a new password is refused within this time; changes made in the admin at once).
EUREKA_API_AUTH_RECHECK_SECONDS = env_int("EUREKA_API_AUTH_RECHECK_SECONDS", 5, minimum=1)

# Failed sign-ins (the admin's form, which the console uses, and API Basic credentials): after this
# many from one client address within the lockout, that address is refused for the lockout without a
# password check (429, Retry-After); a user name, from anywhere, after the per-user count
# (registry/access/throttle.py). 0 switches a limit off. Verified API credentials are never refused.
EUREKA_SIGNIN_MAX_FAILURES = env_int("EUREKA_SIGNIN_MAX_FAILURES", 10, minimum=0)
EUREKA_SIGNIN_MAX_FAILURES_PER_USER = env_int("EUREKA_SIGNIN_MAX_FAILURES_PER_USER", 30, minimum=0)
EUREKA_SIGNIN_LOCKOUT_SECONDS = env_int("EUREKA_SIGNIN_LOCKOUT_SECONDS", 60, minimum=1)
# Proxies (addresses or CIDRs) whose X-Forwarded-For is believed for the client address these limits
# count: behind them, the last address in it that is not a proxy. Others' X-Forwarded-For is ignored.
# Default: loopback (a proxy or reader on the same host), as gunicorn's forwarded_allow_ips.
EUREKA_TRUSTED_PROXIES = tuple(env.list("EUREKA_TRUSTED_PROXIES", default=["127.0.0.1", "::1"]))
for _proxy in EUREKA_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"EUREKA_TRUSTED_PROXIES: {_proxy!r} is not an IP address or network"
        ) from None

# Django's hashers, the default one (PBKDF2-SHA256, same stored hashes) computed in gevent's threadpool
# so that a sign-in does not hold the event loop for half a second (registry/access/hashers.py).
PASSWORD_HASHERS = [
    "registry.access.hashers.OffloadedPBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.BCryptSHA256PasswordHasher",
    "django.contrib.auth.hashers.ScryptPasswordHasher",
]

# Request bodies larger than this are refused with 413 (also the limit after gunzip).
EUREKA_MAX_BODY_BYTES = env_int("EUREKA_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = EUREKA_MAX_BODY_BYTES

# Two timing profiles. "fast" (default): exact 90 s leases, eviction every 2 s and cache sync every
# 1 s, so a dead instance leaves GET /eureka/apps within ~93 s of its last heartbeat and a change shows
# within 1 s; expected clients counted exactly (self-preservation still stops eviction below 85 %).
# "eureka": the Java server's timings and arithmetic (2 x lease, 60 s eviction, 30 s cache, SC's 1).
EUREKA_TIMINGS = env.str("EUREKA_TIMINGS", default="fast")
if EUREKA_TIMINGS not in ("fast", "eureka"):
    raise ImproperlyConfigured("EUREKA_TIMINGS must be 'fast' or 'eureka'")
_FAST = EUREKA_TIMINGS == "fast"

_lease_expiry = env.str("EUREKA_LEASE_EXPIRY", default="exact" if _FAST else "eureka")
if _lease_expiry not in ("exact", "eureka"):
    raise ImproperlyConfigured("EUREKA_LEASE_EXPIRY must be 'exact' or 'eureka'")

# The registry's knobs, named after Eureka's eureka.server.* keys (defaults as Spring Cloud's).
EUREKA = {
    "REGISTRY": {
        "enable_self_preservation": env_bool("EUREKA_ENABLE_SELF_PRESERVATION", True),
        "renewal_percent_threshold": env_float("EUREKA_RENEWAL_PERCENT_THRESHOLD", 0.85),
        "expected_client_renewal_interval_secs": env_int(
            "EUREKA_EXPECTED_CLIENT_RENEWAL_INTERVAL_SECONDS", 30
        ),
        "expected_number_of_clients_sending_renews": env_int(
            "EUREKA_EXPECTED_NUMBER_OF_CLIENTS_SENDING_RENEWS", 0 if _FAST else 1, minimum=0
        ),
        "default_open_for_traffic_count": env_int(
            "EUREKA_DEFAULT_OPEN_FOR_TRAFFIC_COUNT", 0 if _FAST else 1, minimum=0
        ),
        "renewal_threshold_update_interval_ms": env_int(
            "EUREKA_RENEWAL_THRESHOLD_UPDATE_INTERVAL_MS", 900_000, minimum=1
        ),
        "eviction_interval_ms": env_int("EUREKA_EVICTION_INTERVAL_MS", 2_000 if _FAST else 60_000, minimum=1),
        "delta_retention_ms": env_int("EUREKA_RETENTION_TIME_IN_DELTA_QUEUE_MS", 180_000, minimum=1),
        "delta_retention_timer_interval_ms": env_int(
            "EUREKA_DELTA_RETENTION_TIMER_INTERVAL_MS", 30_000, minimum=1
        ),
        "disable_delta": env_bool("EUREKA_DISABLE_DELTA", False),
        "sync_when_timestamp_differs": env_bool("EUREKA_SYNC_WHEN_TIMESTAMP_DIFFERS", True),
        "lease_expiry": _lease_expiry,
        "wait_time_in_ms_when_sync_empty": env_int("EUREKA_WAIT_TIME_IN_MS_WHEN_SYNC_EMPTY", 0, minimum=0),
        "override_idle_expiry_ms": env_int("EUREKA_OVERRIDE_IDLE_EXPIRY_MS", 3_600_000, minimum=1),
        "expected_clients_move_only_above_zero": env_bool(
            "EUREKA_EXPECTED_CLIENTS_MOVE_ONLY_ABOVE_ZERO", not _FAST
        ),
        # Limits on what clients may store (registry/core.py RegistryConfig says why each default).
        "max_instances": env_int("EUREKA_MAX_INSTANCES", 0, minimum=0),
        "max_metadata_keys": env_int("EUREKA_MAX_METADATA_KEYS", 128, minimum=0),
        "max_metadata_bytes": env_int("EUREKA_MAX_METADATA_BYTES", 32_768, minimum=0),
        "max_lease_duration_secs": env_int("EUREKA_MAX_LEASE_DURATION_SECONDS", 3_600, minimum=90),
    },
    # 500 ms: with replication's ~0.2 s, a peer serves a change within a second (bench/README.md,
    # "Replication"); builds are paced and from pieces, so refreshing this often is cheap.
    "response_cache_update_interval_ms": env_int(
        "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS", 500 if _FAST else 30_000, minimum=1
    ),
    "response_cache_auto_expiration_ms": 1000
    * env_int("EUREKA_RESPONSE_CACHE_AUTO_EXPIRATION_SECONDS", 180, minimum=1),
    "use_read_only_response_cache": env_bool("EUREKA_USE_READ_ONLY_RESPONSE_CACHE", True),
    # Python's garbage collector (registry/runtime/gc_policy.py): every interval (and at once after bulk
    # changes), young generations collected and survivors frozen, so full collections stop walking
    # every lease; 0 switches it off.
    "gc_freeze_interval_ms": env_int("EUREKA_GC_FREEZE_INTERVAL_MS", 60_000, minimum=0),
    "gc_full_collection_interval_ms": env_int("EUREKA_GC_FULL_COLLECTION_INTERVAL_MS", 3_600_000, minimum=1),
    # Under gevent, a loop turn later than this is logged with what held the loop and counted in
    # /metrics (registry/runtime/loop_watch.py); 0 switches the watch off.
    "loop_stall_threshold_ms": env_int("EUREKA_LOOP_STALL_THRESHOLD_MS", 100, minimum=0),
    # The in-process scheduler thread; started by the WSGI entry point, never by manage.py commands.
    # With REDIS_URL set, Celery beat drives the jobs and this thread only runs overdue ones.
    "embedded_scheduler": env_bool("EUREKA_EMBEDDED_SCHEDULER", True),
}

# --- Status console ----------------------------------------------------------------------------
EUREKA_DASHBOARD_ENABLED = env_bool("EUREKA_DASHBOARD_ENABLED", True)
# The console, /lastn and the instance pages only for signed-in (staff) users; off shows the fleet
# to anyone who can reach the port, as Eureka's console does. Unset: on exactly when API accounts are
# (instance metadata often holds secrets, and a closed API should not leave them on an open page).
EUREKA_DASHBOARD_LOGIN_REQUIRED = env_bool("EUREKA_DASHBOARD_LOGIN_REQUIRED", EUREKA_API_AUTH)
# Reserved paths the console may not take (the protocol, the admin, static files, probes).
_RESERVED_DASHBOARD_PATHS = ("eureka", "admin", "static", "control", "healthz", "readyz", "metrics", "api")


def dashboard_prefix(path):
    """``/`` → ``""``, ``/console`` or ``/console/`` → ``"console/"`` (a URL pattern prefix)."""
    clean = path.strip().strip("/")
    if clean and not re.fullmatch(r"[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*", clean):
        raise ImproperlyConfigured(f"EUREKA_DASHBOARD_PATH {path!r} is not a plain URL path like /console")
    if clean.split("/")[0] in _RESERVED_DASHBOARD_PATHS:
        raise ImproperlyConfigured(
            f"EUREKA_DASHBOARD_PATH {path!r} collides with /{clean.split('/')[0]}/, which the registry serves"
        )
    return f"{clean}/" if clean else ""


EUREKA_DASHBOARD_PREFIX = dashboard_prefix(env.str("EUREKA_DASHBOARD_PATH", default="/"))
# Seconds between console refreshes while the tab is visible (backs off when hidden); 0 turns it off.
EUREKA_DASHBOARD_REFRESH_SECONDS = env_int("EUREKA_DASHBOARD_REFRESH_SECONDS", 10, minimum=0)
# Instances per page of the console's table (apps are kept whole on a page when they fit).
EUREKA_DASHBOARD_PAGE_SIZE = env_int("EUREKA_DASHBOARD_PAGE_SIZE", 500, minimum=10)
# Shown as Environment and Data center (Spring Cloud's eureka.environment / eureka.datacenter).
EUREKA["environment"] = env.str("EUREKA_ENVIRONMENT", default="test")
EUREKA["datacenter"] = env.str("EUREKA_DATACENTER", default="default")
# This node's address under Instance Info; empty = the address of the interface that routes outwards.
EUREKA["instance_ip_address"] = env.str("EUREKA_INSTANCE_IP_ADDRESS", default="")

# --- Metrics: GET /metrics in Prometheus' text format (registry/runtime/metrics.py) ---------------
# Off: /metrics answers 404 and protocol requests are not timed.
EUREKA_METRICS_ENABLED = env_bool("EUREKA_METRICS_ENABLED", True)
# Set: scrapers send "Authorization: Bearer <token>" (else 401). Empty: /metrics is open.
EUREKA_METRICS_TOKEN = env_secret("EUREKA_METRICS_TOKEN", default="")

# --- Cluster: peers and replication (README "Clusters") -------------------------------------------
# Service URLs of the other nodes, comma-separated, as clients write them (credentials = Basic auth,
# never shown). The node leaves out its own: EUREKA_SELF_URL, or the same host and port it listens on.
_peer_urls = env.list("EUREKA_PEER_URLS", default=[])
try:
    EUREKA["peer_urls"] = [peer.url for peer in parse_peer_urls(_peer_urls)]
except BadPeerUrl as exc:
    raise ImproperlyConfigured(f"EUREKA_PEER_URLS: {exc}") from None
EUREKA["self_url"] = env.str("EUREKA_SELF_URL", default="")
# Set: the node registers itself with each peer under this app name (Spring Cloud Eureka Server
# lists a peer as available only when it sees such a registration from the peer's host).
EUREKA["self_app_name"] = env.str("EUREKA_SELF_APP_NAME", default="")
# Start-up sync (Eureka's syncUp): tries after the first, while no peer had any instance.
EUREKA["registry_sync_retries"] = env_int("EUREKA_REGISTRY_SYNC_RETRIES", 5, minimum=0)
EUREKA["registry_sync_retry_wait_ms"] = env_int(
    "EUREKA_REGISTRY_SYNC_RETRY_WAIT_MS", 5_000 if _FAST else 30_000, minimum=0
)
# Writes are coalesced for this long before they go to the peers' queues (at most this much lag).
EUREKA["replication_flush_ms"] = env_int("EUREKA_REPLICATION_FLUSH_MS", 100, minimum=10)
# Items waiting per peer, at most; past it the oldest are dropped (and counted).
EUREKA["replication_queue_size"] = env_int("EUREKA_REPLICATION_QUEUE_SIZE", 10_000, minimum=250)
EUREKA["peer_timeout_ms"] = env_int("EUREKA_PEER_TIMEOUT_MS", 5_000, minimum=100)

# --- Remote regions (README "Remote regions"; registry/cluster/regions.py) -------------------------
# Other Eureka deployments whose registries this node fetches and merges into GET apps?regions=... and
# apps/delta?regions=... (Eureka's remoteRegionUrlsWithName): region=serviceUrl, comma-separated.
try:
    _remote_region_urls = parse_region_urls(env.list("EUREKA_REMOTE_REGION_URLS", default=[]))
except BadRegionConfig as exc:
    raise ImproperlyConfigured(f"EUREKA_REMOTE_REGION_URLS: {exc}") from None
try:
    # APP (from every region) or region:APP (from that region); a region with entries of its own uses
    # those, the others the plain entries; none at all: every app.
    _remote_region_whitelist = parse_whitelist(
        env.list("EUREKA_REMOTE_REGION_APP_WHITELIST", default=[]), _remote_region_urls
    )
except BadRegionConfig as exc:
    raise ImproperlyConfigured(f"EUREKA_REMOTE_REGION_APP_WHITELIST: {exc}") from None
EUREKA["remote_regions"] = {
    "urls": _remote_region_urls,
    "fetch_interval_ms": 1000 * env_int("EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS", 30, minimum=1),
    "connect_timeout_ms": env_int("EUREKA_REMOTE_REGION_CONNECT_TIMEOUT_MS", 1_000, minimum=100),
    "read_timeout_ms": env_int("EUREKA_REMOTE_REGION_READ_TIMEOUT_MS", 1_000, minimum=100),
    "whitelist": whitelist_to_options(_remote_region_whitelist),
    # Eureka's transparent fallback: requests without regions= get every region too, and an app or
    # instance missing here is looked up in them. Off: only regions= merges.
    "transparent_fallback": env_bool("EUREKA_REMOTE_REGION_TRANSPARENT_FALLBACK", True),
}

# --- Production topology: Redis + Celery -------------------------------------------------------
# REDIS_URL set = production mode: Celery beat drives the periodic jobs (registry/runtime/tasks.py).
REDIS_URL = env.str("REDIS_URL", default="")
# Celery tasks reach the registry process through its control endpoint with this shared secret.
EUREKA_CONTROL_SECRET = env_secret("EUREKA_CONTROL_SECRET", default="")
EUREKA_CONTROL_URL = env.str("EUREKA_CONTROL_URL", default="http://127.0.0.1:8761").rstrip("/")
if REDIS_URL and not EUREKA_CONTROL_SECRET:
    raise ImproperlyConfigured(
        "EUREKA_CONTROL_SECRET (or EUREKA_CONTROL_SECRET_FILE) is required with REDIS_URL"
    )
EUREKA["jobs_driver"] = "celery" if REDIS_URL else "embedded"
EUREKA["redis_url"] = REDIS_URL
# Key prefix of this node's read-only tier in Redis (nodes sharing one Redis need different ones).
EUREKA["redis_namespace"] = env.str("EUREKA_REDIS_NAMESPACE", default="eureka")

# --- Readers (registry/reader/, deploy/gunicorn_reader.conf.py) ----------------------------------
# A reader serves GET apps, apps/delta, apps/{app}, vips and svips from the Redis read-only tier. A
# payload the node has not confirmed for this long (its cache sync or the node itself stopped) is not
# served: the request goes to the node, as do writes and cache misses. Default: 3 cache-sync intervals.
EUREKA_READER_MAX_STALENESS_MS = env_int(
    "EUREKA_READER_MAX_STALENESS_MS", 3 * EUREKA["response_cache_update_interval_ms"], minimum=1
)
# A reader worker asks Redis whether a payload changed at most this often per key (0: every request);
# a new payload reaches its clients this much after the node's. Default: a tenth of the sync interval,
# at most 100 ms.
EUREKA_READER_REVALIDATE_MS = env_int(
    "EUREKA_READER_REVALIDATE_MS", min(100, EUREKA["response_cache_update_interval_ms"] // 10), minimum=0
)
# The node a reader forwards to (its base URL, like EUREKA_CONTROL_URL, the default), and how long it
# waits for its answer. No credentials in the URL (a reader refuses to start): each client's own
# Authorization is passed on.
EUREKA_READER_NODE_URL = env.str("EUREKA_READER_NODE_URL", default=EUREKA_CONTROL_URL).rstrip("/")
EUREKA_READER_NODE_TIMEOUT_MS = env_int("EUREKA_READER_NODE_TIMEOUT_MS", 5_000, minimum=100)

# --- Warm restart (README "Warm restart"; registry/runtime/snapshots.py) -----------------------------
# The node saves its lease map every interval and when it stops, and starts again from it: in embedded
# mode a file in EUREKA_DATA_DIR, in production mode the Redis key {EUREKA_REDIS_NAMESPACE}:snapshot.
# A snapshot older than the maximum age (default: the default lease duration) is not used.
EUREKA["warm_restart"] = env_bool("EUREKA_WARM_RESTART", True)
EUREKA["warm_restart_interval_ms"] = env_int("EUREKA_WARM_RESTART_INTERVAL_MS", 5_000, minimum=100)
EUREKA["warm_restart_max_age_ms"] = env_int("EUREKA_WARM_RESTART_MAX_AGE_MS", 90_000, minimum=1)
EUREKA["data_dir"] = str(EUREKA_DATA_DIR)

# --- Change feed (README "Change feed"; registry/feed/) ---------------------------------------------
# GET /api/v1/changes (JSON) and /api/v1/changes/stream (Server-Sent Events) on the node, and in
# production mode a Redis Stream {EUREKA_REDIS_NAMESPACE}:changes. Off answers 404 and publishes nothing.
EUREKA["change_feed"] = {
    "enabled": env_bool("EUREKA_CHANGE_FEED", True),
    # Open SSE streams per node; more answer 503 with Retry-After.
    "streams_max": env_int("EUREKA_CHANGE_STREAMS_MAX", 2_000, minimum=0),
    # A comment line this often on an idle stream (proxies keep it open; a gone client is noticed).
    "keepalive_seconds": env_int("EUREKA_CHANGE_STREAM_KEEPALIVE_SECONDS", 15, minimum=1),
    # A stream ends after this long; EventSource clients reconnect with Last-Event-ID, losing nothing.
    "stream_max_seconds": env_int("EUREKA_CHANGE_STREAM_MAX_SECONDS", 1_800, minimum=1),
    # Open streams are woken at most once per this window, however many changes come in it.
    "coalesce_ms": env_int("EUREKA_CHANGE_STREAM_COALESCE_MS", 50, minimum=0),
    # Production mode: entries kept in the Redis Stream (approximately), the node's buffer before
    # Redis (the oldest dropped when full), and how often the buffer is sent.
    "redis_maxlen": env_int("EUREKA_CHANGE_FEED_REDIS_MAXLEN", 100_000, minimum=1_000),
    "redis_buffer": env_int("EUREKA_CHANGE_FEED_REDIS_BUFFER", 10_000, minimum=100),
    "redis_flush_ms": env_int("EUREKA_CHANGE_FEED_REDIS_FLUSH_MS", 100, minimum=10),
}

# --- Webhooks (README "Webhooks"; registry/webhooks/) ----------------------------------------------
# Subscriptions are made in the admin; with none, nothing is buffered or sent. Embedded mode sends
# from a thread of the node, production mode (REDIS_URL) from the Celery worker.
EUREKA["webhooks"] = {
    # Off: the node neither buffers changes nor sends (subscriptions stay in the admin, unused).
    "enabled": env_bool("EUREKA_WEBHOOKS_ENABLED", True),
    # Per request: a receiver that has not answered by then is retried later.
    "timeout_ms": env_int("EUREKA_WEBHOOK_TIMEOUT_MS", 5_000, minimum=100),
    # Attempts per delivery before it is marked failed; waits between them double from the base
    # (1 s, 2 s, 4 s, ...) up to the cap.
    "max_attempts": env_int("EUREKA_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1),
    "retry_base_ms": env_int("EUREKA_WEBHOOK_RETRY_BASE_MS", 1_000, minimum=10),
    "retry_max_ms": env_int("EUREKA_WEBHOOK_RETRY_MAX_MS", 300_000, minimum=10),
    # Delivered and failed deliveries are deleted from the log after this many days (hourly job).
    "retention_days": env_int("EUREKA_WEBHOOK_RETENTION_DAYS", 7, minimum=1),
    "prune_interval_ms": 3_600_000,
    # Changes waiting to be queued (the oldest dropped when full), queued every flush_ms.
    "buffer_size": env_int("EUREKA_WEBHOOK_BUFFER_SIZE", 10_000, minimum=100),
    "flush_ms": 200,
    # Subscriptions saved in this node's admin apply at once; made elsewhere, within this long.
    "refresh_ms": env_int("EUREKA_WEBHOOK_REFRESH_MS", 5_000, minimum=100),
    # Production mode: beat runs the sender this often (retries that fell due, lost kicks).
    "poll_ms": env_int("EUREKA_WEBHOOK_POLL_MS", 2_000, minimum=100),
}

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True


def _beat_entry(job, interval_ms):
    seconds = interval_ms / 1000
    # A run that could not start before the next one is due is dropped, never queued up.
    return {
        "task": "registry.tasks.run_node_job",
        "schedule": seconds,
        "args": (job,),
        "options": {"expires": seconds * 0.9},
    }


CELERY_BEAT_SCHEDULE = {
    f"eureka-{job}": _beat_entry(job, interval)
    for job, interval in {
        "evict": EUREKA["REGISTRY"]["eviction_interval_ms"],
        "sync_response_cache": EUREKA["response_cache_update_interval_ms"],
        "prune_delta_queue": EUREKA["REGISTRY"]["delta_retention_timer_interval_ms"],
        "recount_expected_clients": EUREKA["REGISTRY"]["renewal_threshold_update_interval_ms"],
        "prune_webhook_deliveries": EUREKA["webhooks"]["prune_interval_ms"],
    }.items()
    if interval
}
if _remote_region_urls:
    # The remote regions' fetches run in the registry process (it holds their registries); beat only
    # says when (registry/runtime/jobs.py, fetch_remote_regions).
    CELERY_BEAT_SCHEDULE["eureka-fetch_remote_regions"] = _beat_entry(
        "fetch_remote_regions", EUREKA["remote_regions"]["fetch_interval_ms"]
    )
if EUREKA["peer_urls"]:
    # Peer replication's safety net: every peer's Redis outbox drained each second, even if the kick
    # the node sends when an outbox fills was lost (registry/cluster/redis_outbox.py).
    CELERY_BEAT_SCHEDULE["eureka-replication-drain"] = {
        "task": "registry.tasks.drain_replication_outboxes",
        "schedule": 1.0,
        "options": {"expires": 0.9},
    }
if REDIS_URL and EUREKA["webhooks"]["enabled"]:
    # Webhooks' safety net: due deliveries (retries, lost kicks) sent by the worker (registry/webhooks/).
    CELERY_BEAT_SCHEDULE["eureka-webhook-delivery"] = {
        "task": "registry.tasks.deliver_webhooks",
        "schedule": EUREKA["webhooks"]["poll_ms"] / 1000,
        "options": {"expires": EUREKA["webhooks"]["poll_ms"] / 1000 * 0.9},
    }

# --- Active health checks (README "Active health checks"; registry/health/) ------------------------
# Off by default. On: instances whose metadata asks for it (eureka-django.health-check = http | tcp)
# are probed, and marked DOWN through a status override after consecutive failures.
EUREKA["health_checks"] = {
    "enabled": env_bool("EUREKA_HEALTH_CHECKS", False),
    # Probes running at once, at most (a gevent pool in the node, threads in a Celery worker).
    "concurrency": env_int("EUREKA_HEALTH_CHECK_CONCURRENCY", 50, minimum=1),
    # How often due probes are handed out: the node's loop, or Celery beat's round in production mode.
    "dispatch_ms": env_int("EUREKA_HEALTH_CHECK_DISPATCH_MS", 250, minimum=50),
    # Defaults for what an instance's metadata leaves out.
    "interval_ms": 1000 * env_int("EUREKA_HEALTH_CHECK_INTERVAL_SECONDS", 10, minimum=1),
    "timeout_ms": 1000 * env_int("EUREKA_HEALTH_CHECK_TIMEOUT_SECONDS", 2, minimum=1),
    "threshold": env_int("EUREKA_HEALTH_CHECK_THRESHOLD", 3, minimum=1),
    "recover": env_int("EUREKA_HEALTH_CHECK_RECOVER", 2, minimum=1),
    # The longest timeout an instance's metadata may ask for: each probe holds a pool slot that long.
    "max_timeout_ms": 1000 * env_int("EUREKA_HEALTH_CHECK_MAX_TIMEOUT_SECONDS", 10, minimum=1),
    # Networks probes may reach although they are loopback, link-local or the node's own (CIDRs).
    "allowed_networks": tuple(env.list("EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS", default=[])),
}
if EUREKA["health_checks"]["timeout_ms"] > EUREKA["health_checks"]["max_timeout_ms"]:
    raise ImproperlyConfigured(
        "EUREKA_HEALTH_CHECK_TIMEOUT_SECONDS must be <= EUREKA_HEALTH_CHECK_MAX_TIMEOUT_SECONDS"
    )
try:
    parse_networks(",".join(EUREKA["health_checks"]["allowed_networks"]))
except ValueError as _bad_network:
    raise ImproperlyConfigured(f"EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS: {_bad_network}") from None
if EUREKA["health_checks"]["enabled"] and REDIS_URL:
    # Production mode: a Celery worker probes (registry/runtime/tasks.py, run_health_checks).
    _health_round_s = EUREKA["health_checks"]["dispatch_ms"] / 1000
    CELERY_BEAT_SCHEDULE["eureka-health-checks"] = {
        "task": "registry.tasks.run_health_checks",
        "schedule": _health_round_s,
        "options": {"expires": _health_round_s * 0.9},
    }

# --- Logs (README "Logs"; eureka_site/logs.py) ------------------------------------------------------
# plain: a text line per record. json: one JSON object per line (timestamp, level, logger, message,
# and the record's extra fields such as event, instances, peer), for log shippers. The node, Celery's
# worker and beat, and gunicorn's own lines all use it.
LOG_FORMAT = env.str("LOG_FORMAT", default="plain").strip().lower()
if LOG_FORMAT not in LOG_FORMATS:
    raise ImproperlyConfigured(f"LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, got {LOG_FORMAT!r}")
# Masked wherever they would appear in a line (any password in a URL is removed too).
_LOG_SECRETS = log_secrets(
    [SECRET_KEY, EUREKA_CONTROL_SECRET, EUREKA_METRICS_TOKEN, DATABASES["default"].get("PASSWORD") or ""],
    urls=[REDIS_URL, *EUREKA["peer_urls"], *EUREKA["remote_regions"]["urls"].values()],
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "line": {"()": "eureka_site.logs.line_formatter", "format": LOG_FORMAT, "secrets": _LOG_SECRETS}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        # 4xx answers are part of the protocol (404 on heartbeat means "re-register"): not warnings.
        "django.request": {"level": "ERROR"},
        # Celery tasks call the control endpoint every second: one line per call is noise.
        "httpx": {"level": "WARNING"},
    },
}
