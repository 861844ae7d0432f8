"""Settings for the registry. The environment is read here and nowhere else: Django's own variables
(DEBUG, SECRET_KEY, ALLOWED_HOSTS, DATABASE_URL, LOG_*...) below, and every EUREKA_* one by
registry/config/eureka.py's parser, given ``os.environ`` here. The code reads that ``EUREKA`` config
(``settings.EUREKA.<section>.<field>``); the Django settings the site needs from it (security headers,
the request size limit, Celery's broker and schedule) are derived from it below.

Every variable, with its default, is documented in docs/configuration.md (generated from the settings'
declarations) and listed in ``deploy/.env.example``. Malformed values raise ImproperlyConfigured at
start-up rather than surfacing later as odd behaviour.
"""

import os
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from registry.config.environment import read_variable
from registry.config.eureka import parse_config
from registry.config.site import EMBEDDED_SECRET_KEY
from registry.domain.config import BadSetting
from registry.runtime.logs import LOG_FORMATS, log_secrets
from registry.runtime.schedule import beat_schedule

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def _env(reader, name, default):
    try:
        return reader(name, default=default)
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(f"Environment variable {name} is malformed: {exc}") from exc


def env_bool(name, default):
    return _env(env.bool, name, default)


def env_secret(name):
    """A secret from NAME, or from the file named by NAME_FILE (Docker/systemd credentials); "" if unset."""
    return read_variable(os.environ, name, secret=True) or ""


DEBUG = env_bool("DEBUG", False)
# The registry's own settings, every EUREKA_* variable: registry/config/eureka.py reads them (each with its
# default and checks, the "fast" and "eureka" timing profiles) into frozen objects, once.
try:
    EUREKA = parse_config(os.environ, base_dir=str(BASE_DIR))
except BadSetting as exc:
    raise ImproperlyConfigured(str(exc)) from None

# Embedded mode (make run / tests) falls back to a key anyone can read (EMBEDDED_SECRET_KEY, beside
# EUREKA.security); production mode (REDIS_URL, below) refuses it.
SECRET_KEY = env_secret("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG and not EUREKA.security.embedded:
        raise ImproperlyConfigured(
            "SECRET_KEY (or SECRET_KEY_FILE) is required when DEBUG is off in production mode"
        )
    SECRET_KEY = EMBEDDED_SECRET_KEY

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["*"])

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
    # Content-Security-Policy on the console's and the admin's pages.
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
DATABASES = {
    "default": env.db_url(
        "DATABASE_URL", default=f"sqlite:///{Path(EUREKA.warm_restart.data_dir) / 'db.sqlite3'}"
    )
}
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
SESSION_COOKIE_HTTPONLY = True
if EUREKA.security.https:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^(eureka/|healthz$|readyz$|metrics$|control/)"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = EUREKA.security.hsts_seconds
    SECURE_HSTS_INCLUDE_SUBDOMAINS = EUREKA.security.hsts_include_subdomains
    SECURE_HSTS_PRELOAD = EUREKA.security.hsts_preload

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "DEFAULT_THROTTLE_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "registry.wire.http.EurekaContentNegotiation",
    "EXCEPTION_HANDLER": "registry.wire.http.plain_exception_handler",
}

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
DATA_UPLOAD_MAX_MEMORY_SIZE = EUREKA.connections.max_body_bytes

# --- Production topology: Redis + Celery -------------------------------------------------------
# REDIS_URL set = production mode: Celery beat drives the periodic jobs (registry/runtime/tasks.py).
# Celery tasks reach the registry process through its control endpoint with EUREKA.control_secret.
if EUREKA.redis.url and not EUREKA.control_secret:
    raise ImproperlyConfigured(
        "EUREKA_CONTROL_SECRET (or EUREKA_CONTROL_SECRET_FILE) is required with REDIS_URL"
    )
if EUREKA.redis.url and SECRET_KEY == EMBEDDED_SECRET_KEY:
    # EUREKA_EMBEDDED=true left from .env.example must not put a public key on a production node.
    raise ImproperlyConfigured(
        "SECRET_KEY (or SECRET_KEY_FILE) is required with REDIS_URL (production mode), whatever "
        "EUREKA_EMBEDDED says: the built-in development key is public"
    )

CELERY_BROKER_URL = EUREKA.redis.url or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# The periodic work Celery beat starts, a function of the config (registry/runtime/schedule.py; the
# embedded scheduler takes the same jobs' intervals).
CELERY_BEAT_SCHEDULE = beat_schedule(EUREKA)

# --- Logs (README "Logs"; registry/runtime/logs.py) ------------------------------------------------------
# plain: a text line per record. json: one JSON object per line (timestamp, level, logger, message,
# and the record's extra fields such as event, instances, peer), for log shippers. The node, Celery's
# worker and beat, and gunicorn's own lines all use it.
LOG_FORMAT = env.str("LOG_FORMAT", default="plain").strip().lower()
if LOG_FORMAT not in LOG_FORMATS:
    raise ImproperlyConfigured(f"LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, got {LOG_FORMAT!r}")
# Masked wherever they would appear in a line (any password in a URL is removed too).
_LOG_SECRETS = log_secrets(
    [SECRET_KEY, EUREKA.control_secret, EUREKA.metrics.token, DATABASES["default"].get("PASSWORD") or ""],
    urls=[EUREKA.redis.url, *EUREKA.cluster.peer_urls, *EUREKA.remote_regions.urls.values()],
)
# gRPC's C core (the mesh's xDS port, registry/mesh/xds/) writes a line of its own for every TLS
# handshake that fails, one per hostile connection: its errors only, unless the operator asks for
# more. Read by grpc when it is first imported, which is after the settings.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "line": {"()": "registry.runtime.logs.line_formatter", "format": LOG_FORMAT, "secrets": _LOG_SECRETS}
    },
    # A line per request a client sends (Django's django.security.* lines, gunicorn's malformed
    # requests): at most one per kind each EUREKA_REFUSAL_LOG_INTERVAL_SECONDS, with a count.
    "filters": {
        "refusals": {
            "()": "registry.runtime.logs.RefusalLinesFilter",
            "interval_s": EUREKA.process.refusal_log_interval_seconds,
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line", "filters": ["refusals"]}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        # 4xx answers are part of the protocol (404 on heartbeat means "re-register"): not warnings.
        "django.request": {"level": "ERROR"},
        # Celery tasks call the control endpoint every second: one line per call is noise.
        "httpx": {"level": "WARNING"},
    },
}
