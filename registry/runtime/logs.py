"""The registry's log lines: plain text, or one JSON object per line (``LOG_FORMAT=json``), with the
configured secrets masked in every line, whichever library wrote it.

``settings.LOGGING`` builds its one formatter with ``line_formatter``. Celery's worker and beat log
through the same configuration (``eureka_site/celery.py`` answers Celery's ``setup_logging`` signal,
so Celery does not replace the root handler with its own), and gunicorn's own lines (start, stop,
worker errors) go through it too (``use_for_gunicorn``, from ``deploy/gunicorn.conf.py``).

Lines a client can cause at will, one per request it sends (Django's ``django.security.*`` lines,
gunicorn's malformed requests), pass ``RefusalLinesFilter`` on the one handler: at most one per kind
an interval, with a count (the node's own refusal lines are cut where they are written, by the same
``registry/domain/refusals.py``).

A JSON line holds ``timestamp`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``,
``message``, the exception if any (``exc_info``) and the record's ``extra`` fields: the registry's
state-change lines carry ``event`` and their facts (``instances``, ``peer``, ``renews_last_minute``...).
"""

from __future__ import annotations

import base64
import json
import logging
import logging.config
import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from urllib.parse import unquote, urlsplit

from pythonjsonlogger.json import JsonFormatter

from registry.domain.redact import scrub_text
from registry.domain.refusals import REFUSAL_LOG_INTERVAL_S, RefusalLines, refusal_fields, since_last_line

LOG_FORMATS = ("plain", "json")
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MASK = "***"
# Shorter values are not masked as bare words (a 3-letter password would mask parts of every line);
# they are still removed from URLs, with any other credentials there.
MIN_SECRET_LENGTH = 4


def log_secrets(values: Iterable[str] = (), urls: Iterable[str] = ()) -> list[str]:
    """The strings no log line may show: ``values`` as they are, and from each URL its password and,
    with a user name, the Basic-auth header value made of both."""
    found = [value for value in values if value]
    for url in urls:
        try:
            parts = urlsplit(url)
            username, password = parts.username, parts.password
        except ValueError:
            continue
        if password:
            found.append(unquote(password))
            found.append(password)
            credentials = f"{unquote(username or '')}:{unquote(password)}".encode()
            found.append(base64.b64encode(credentials).decode())
    return sorted(set(found))


class _Masker:
    def __init__(self, secrets: Iterable[str]):
        forms: set[str] = set()
        for secret in secrets:
            if len(secret) >= MIN_SECRET_LENGTH:
                forms.add(secret)
                forms.add(json.dumps(secret)[1:-1])  # as it reads inside a JSON string
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __call__(self, line: str) -> str:
        line = scrub_text(line)
        return self._pattern.sub(MASK, line) if self._pattern is not None else line


class PlainFormatter(logging.Formatter):
    """``2026-08-21 19:05:07,123 WARNING registry.events: evicted ...``, secrets masked."""

    def __init__(self, fmt: str = PLAIN_FORMAT, datefmt: str | None = None, secrets: Iterable[str] = ()):
        super().__init__(fmt, datefmt)
        self._mask = _Masker(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return self._mask(super().format(record))


class JsonLineFormatter(JsonFormatter):
    """One JSON object per line (python-json-logger), secrets masked."""

    def __init__(self, secrets: Iterable[str] = ()):
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "timestamp", "levelname": "level", "name": "logger"},
            json_ensure_ascii=False,
        )
        self._mask = _Masker(secrets)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")

    def format(self, record: logging.LogRecord) -> str:
        return self._mask(super().format(record))


# gunicorn's line for each request its parser refused (bad request line, headers or chunk framing).
GUNICORN_INVALID_REQUEST = "Invalid request from ip="


def refusal_kind(record: logging.LogRecord) -> str | None:
    """The kind of refusal a line written by a library reports, or None for any other line: Django's
    ``django.security.*`` lines (a Host not in ALLOWED_HOSTS, a failed CSRF check, a form with too
    many fields... one logger per kind) and gunicorn's malformed requests."""
    name = record.name
    if name.startswith("django.security."):
        return name
    if name == "gunicorn.error" and str(record.msg).startswith(GUNICORN_INVALID_REQUEST):
        return "gunicorn.invalid_request"
    return None


class RefusalLinesFilter(logging.Filter):
    """The lines libraries write for each request they refuse, one per request a client chose to
    send, cut to at most one per kind each ``interval_s`` (``registry/domain/refusals.py``), saying
    how many there were, and without Django's traceback (it shows Django's code, not the request).
    The registry's own refusals are counted where they happen and logged the same way."""

    def __init__(self, interval_s: float = REFUSAL_LOG_INTERVAL_S, clock=None):
        super().__init__()
        self.lines = RefusalLines(interval_s) if clock is None else RefusalLines(interval_s, clock)

    def filter(self, record: logging.LogRecord) -> bool:
        kind = refusal_kind(record)
        if kind is None or getattr(record, "event", None) == "refusals":  # not one, or counted already
            return True
        count = self.lines.note(kind)
        if not count:
            return False
        record.msg = record.getMessage() + since_last_line(count)
        record.args = None
        record.exc_info = record.exc_text = None
        record.__dict__.update(refusal_fields(kind, count))
        return True


def line_formatter(format: str = "plain", secrets: Iterable[str] = ()) -> logging.Formatter:  # noqa: A002
    """The formatter ``LOGGING`` names (``"()": "registry.runtime.logs.line_formatter"``)."""
    if format == "json":
        return JsonLineFormatter(secrets=list(secrets))
    if format == "plain":
        return PlainFormatter(secrets=list(secrets))
    raise ValueError(f"unknown log format {format!r}: expected one of {', '.join(LOG_FORMATS)}")


def configure_from_settings() -> None:
    """Apply ``settings.LOGGING`` (Celery's worker and beat; gunicorn's master)."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


def use_for_gunicorn(glogger) -> None:
    """gunicorn's error log (its start, stop and worker messages) written by the registry's handler,
    in the registry's format, instead of gunicorn's own. Called from ``on_starting``; the worker
    inherits it, and Django's set-up there applies the same configuration again."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")
    configure_from_settings()
    for handler in list(glogger.error_log.handlers):
        glogger.error_log.removeHandler(handler)
    glogger.error_log.propagate = True
