"""Settings for the registry. The environment is read here and nowhere else: Django's own settings
below, and the registry's (``EUREKA``) by registry/domain/config.py's parser, given ``os.environ`` here.

Every variable, with its default, is listed in ``deploy/.env.example``. Malformed values raise
ImproperlyConfigured at start-up rather than surfacing later as odd behaviour.
"""

import ipaddress
import os
import re
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from registry.domain.config import BadSetting, parse_config
from registry.runtime.logs import LOG_FORMATS, log_secrets

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


def env_secret(name, default=None):
    """A secret from NAME, or from the file named by NAME_FILE (Docker/systemd credentials)."""
    path = env.str(f"{name}_FILE", default="")
    if path:
        return Path(path).read_text().strip()
    return env.str(name, default=default)


DEBUG = env_bool("DEBUG", False)
# Embedded mode (make run / tests) falls back to this key, which anyone can read here: it signs the
# console's sessions and CSRF tokens. Production mode (REDIS_URL, below) refuses it whatever
# EUREKA_EMBEDDED says, and `check --deploy` flags it anywhere (registry/runtime/checks.py).
EUREKA_EMBEDDED_SECRET_KEY = "embedded-mode-insecure-key-set-SECRET_KEY-in-production"
SECRET_KEY = env_secret("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG and not env_bool("EUREKA_EMBEDDED", True):
        raise ImproperlyConfigured(
            "SECRET_KEY (or SECRET_KEY_FILE) is required when DEBUG is off in production mode"
        )
    SECRET_KEY = EUREKA_EMBEDDED_SECRET_KEY

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
    # Content-Security-Policy on the console's and the admin's pages (EUREKA_CONTENT_SECURITY_POLICY).
    "dashboard.middleware.ContentSecurityPolicyMiddleware",
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
    "staticfiles": {"BACKEND": "dashboard.storage.PrefixedStaticFilesStorage"},
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
# Scripts, styles, images and fetches from this site only, none inline (the pages have no inline script,
# style or handler; tests/browser checks that Chromium reports no violation): a registrant's text can
# never run in an operator's page. Not framed, no plugins, forms post here only.
EUREKA_CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
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
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "registry.wire.http.EurekaContentNegotiation",
    "EXCEPTION_HANDLER": "registry.wire.http.plain_exception_handler",
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

# The registry's own settings: registry/domain/config.py reads them (each variable with its default and
# checks, the "fast" and "eureka" timing profiles) into frozen objects, once; Django's own settings stay here.
try:
    EUREKA = parse_config(os.environ, data_dir=str(EUREKA_DATA_DIR))
except BadSetting as exc:
    raise ImproperlyConfigured(str(exc)) from None

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

# --- Metrics: GET /metrics in Prometheus' text format (registry/runtime/metrics.py) ---------------
# Off: /metrics answers 404 and protocol requests are not timed.
EUREKA_METRICS_ENABLED = env_bool("EUREKA_METRICS_ENABLED", True)
# Set: scrapers send "Authorization: Bearer <token>" (else 401). Empty: /metrics is open.
EUREKA_METRICS_TOKEN = env_secret("EUREKA_METRICS_TOKEN", default="")

# --- Production topology: Redis + Celery -------------------------------------------------------
# REDIS_URL set = production mode: Celery beat drives the periodic jobs (registry/runtime/tasks.py).
REDIS_URL = EUREKA.redis.url
# Celery tasks reach the registry process through its control endpoint with this shared secret.
EUREKA_CONTROL_SECRET = env_secret("EUREKA_CONTROL_SECRET", default="")
EUREKA_CONTROL_URL = EUREKA.control_url
if REDIS_URL and not EUREKA_CONTROL_SECRET:
    raise ImproperlyConfigured(
        "EUREKA_CONTROL_SECRET (or EUREKA_CONTROL_SECRET_FILE) is required with REDIS_URL"
    )
if REDIS_URL and SECRET_KEY == EUREKA_EMBEDDED_SECRET_KEY:
    # EUREKA_EMBEDDED=true left from .env.example must not put a public key on a production node.
    raise ImproperlyConfigured(
        "SECRET_KEY (or SECRET_KEY_FILE) is required with REDIS_URL (production mode), whatever "
        "EUREKA_EMBEDDED says: the built-in development key is public"
    )

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
    for job, interval in EUREKA.job_intervals_ms().items()
    # The remote regions' fetches run in the registry process (it holds their registries); beat only
    # says when (registry/runtime/jobs.py, fetch_remote_regions), and only if there are regions.
    if interval and (job != "fetch_remote_regions" or EUREKA.remote_regions.urls)
}
if EUREKA.cluster.clustered:
    # Peer replication's safety net: every peer's Redis outbox drained each second, even if the kick
    # the node sends when an outbox fills was lost (registry/cluster/redis_outbox.py).
    CELERY_BEAT_SCHEDULE["eureka-replication-drain"] = {
        "task": "registry.tasks.drain_replication_outboxes",
        "schedule": 1.0,
        "options": {"expires": 0.9},
    }
if REDIS_URL and EUREKA.webhooks.enabled:
    # Webhooks' safety net: due deliveries (retries, lost kicks) sent by the worker (registry/webhooks/).
    CELERY_BEAT_SCHEDULE["eureka-webhook-delivery"] = {
        "task": "registry.tasks.deliver_webhooks",
        "schedule": EUREKA.webhooks.poll_ms / 1000,
        "options": {"expires": EUREKA.webhooks.poll_ms / 1000 * 0.9},
    }

# --- Active health checks (README "Active health checks"; registry/health/): EUREKA.health_checks.
if EUREKA.health_checks.enabled and REDIS_URL:
    # Production mode: a Celery worker probes (registry/runtime/tasks.py, run_health_checks).
    _health_round_s = EUREKA.health_checks.dispatch_ms / 1000
    CELERY_BEAT_SCHEDULE["eureka-health-checks"] = {
        "task": "registry.tasks.run_health_checks",
        "schedule": _health_round_s,
        "options": {"expires": _health_round_s * 0.9},
    }

# --- Logs (README "Logs"; registry/runtime/logs.py) ------------------------------------------------------
# plain: a text line per record. json: one JSON object per line (timestamp, level, logger, message,
# and the record's extra fields such as event, instances, peer), for log shippers. The node, Celery's
# worker and beat, and gunicorn's own lines all use it.
LOG_FORMAT = env.str("LOG_FORMAT", default="plain").strip().lower()
if LOG_FORMAT not in LOG_FORMATS:
    raise ImproperlyConfigured(f"LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, got {LOG_FORMAT!r}")
# Masked wherever they would appear in a line (any password in a URL is removed too).
_LOG_SECRETS = log_secrets(
    [SECRET_KEY, EUREKA_CONTROL_SECRET, EUREKA_METRICS_TOKEN, DATABASES["default"].get("PASSWORD") or ""],
    urls=[REDIS_URL, *EUREKA.cluster.peer_urls, *EUREKA.remote_regions.urls.values()],
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "line": {"()": "registry.runtime.logs.line_formatter", "format": LOG_FORMAT, "secrets": _LOG_SECRETS}
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
