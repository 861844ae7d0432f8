"""The WSGI application: the Eureka protocol on a lean Django handler, everything else on the full one.

Heartbeats are most of a registry's traffic, and the site's middleware (sessions, auth, messages,
CSRF) and request signals cost more than the registry work itself. Requests under ``/eureka/`` are
served by the same DRF views through a handler with no middleware, resolving against the protocol's
own URLconf, and without ``request_started``/``request_finished`` (their receivers close database
connections and caches, which protocol views never open).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from asgiref.sync import async_to_sync, iscoroutinefunction
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.exception import response_for_exception
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponseBase
from django.urls import set_urlconf
from django.utils.functional import cached_property
from django.utils.log import log_response

from registry.domain.refusals import RefusalLines, refusal_fields, since_last_line
from registry.wire.flat_routes import FlatRoutes
from registry.wire.http import browser_refusal
from registry.wire.request_bodies import (
    BODY_RECEIVED,
    BodyDeadlines,
    BodyRefused,
    EarlyAnswer,
    buffer_body,
    plain_wsgi_answer,
    refuse_unusable_charset,
)

PROTOCOL_PREFIX = "/eureka/"
DISALLOWED_HOST = "Bad Request: the Host header names no host in ALLOWED_HOSTS"
PROTOCOL_URLCONF = "eureka_site.protocol_urls"
_PREFIX = re.compile(r"(/[A-Za-z0-9._~-]+)+")
# Django's logger for this refusal: a logging set-up that routes or silences Django's own lines about
# it applies to these too.
host_logger = logging.getLogger("django.security.DisallowedHost")
# Requests refused before any view since start, by reason, read by /metrics (eureka_bad_requests_total):
# a Host not in ALLOWED_HOSTS, and HTTP gunicorn's parser refused (registry/serving/gunicorn_worker.py).
BAD_REQUESTS = {"host": 0, "malformed": 0}


class ProtocolHandler(WSGIHandler):
    # The reader process (eureka_site/reader_wsgi.py) uses this handler with its own URLconf.
    urlconf = PROTOCOL_URLCONF

    def load_middleware(self, is_async=False):
        # No middleware: protocol views are CSRF-exempt, sessionless and set their own headers.
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._middleware_chain = self._get_response_or_error_answer

    @cached_property
    def routes(self) -> FlatRoutes:
        return FlatRoutes(self.urlconf)

    @cached_property
    def hosts(self) -> AllowedHosts:
        return AllowedHosts()

    def _get_response_or_error_answer(self, request):
        # As convert_exception_to_response. The protocol's URLconf is made current only here, for its
        # handler404/handler500: setting it (an asgiref Local) per request is a noticeable share of a
        # heartbeat, and no protocol view reverses a URL.
        try:
            return self._get_response(request)
        except Exception as exc:
            set_urlconf(self.urlconf)
            return response_for_exception(request, exc)

    def _get_response(self, request):
        # As BaseHandler._get_response with no view or template-response middleware (this handler
        # has none), and with each view's preparation (the ATOMIC_REQUESTS wrapper, the async check)
        # done once per view instead of per request: it does not change between requests.
        callback, callback_args, callback_kwargs = self.resolve_request(request)
        prepared = self._prepared_views.get(callback)
        if prepared is None:
            prepared = self._prepared_views[callback] = self._prepare_view(callback)
        response = prepared(request, *callback_args, **callback_kwargs)
        if not isinstance(response, HttpResponseBase):
            # None or a coroutine: Django's complaint (anything else passes its check as it is).
            self.check_response(response, callback)
        # DRF's own Response (its error answers) renders late, like a TemplateResponse.
        if hasattr(response, "render") and callable(response.render):
            response = response.render()
        return response

    @cached_property
    def _prepared_views(self) -> dict:
        return {}

    def _prepare_view(self, callback):
        view = self.make_view_atomic(callback)
        if iscoroutinefunction(view):
            view = async_to_sync(view)
        return view

    def get_response(self, request):
        # As BaseHandler.get_response, without making the site's URLconf current first.
        response = self._middleware_chain(request)
        if response.status_code >= 400:
            log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)
        return response

    def resolve_request(self, request):
        match = self.routes.resolve(request.path_info)
        if match is None:
            # Django decides: its 404 (with the tried patterns) and any URLconf the flat routes leave out.
            return super().resolve_request(request)
        request.resolver_match = match
        return match

    def __call__(self, environ, start_response):
        if not self.hosts.allowed(environ):
            # A page reached by DNS rebinding names its own host, and must not read the registry.
            return self.hosts.refuse(environ, start_response)
        request = self.request_class(environ)
        request.urlconf = self.urlconf
        response = self.get_response(request)
        content = response.content
        # CommonMiddleware would set it; without it gunicorn falls back to chunked encoding.
        response["Content-Length"] = str(len(content))
        start_response(f"{response.status_code} {response.reason_phrase}", list(response.items()))
        # The bytes, not the response: the server would call response.close(), which sends
        # request_finished. Protocol responses are never streamed.
        return [content]


class AllowedHosts:
    """``ALLOWED_HOSTS`` as Django's ``request.get_host()`` applies it, with its answers kept per Host
    (and X-Forwarded-Host) value: every protocol request asks, and a fleet names the node a few ways.
    With ``"*"`` allowed (the default) nothing is checked.

    A refused request is answered 400 here, before Django, which would log a traceback for each one a
    client sends: it is counted (``BAD_REQUESTS``) and logged at most once an interval, with a count."""

    REMEMBERED = 1024

    def __init__(self):
        self._answers: dict[tuple, bool] = {}
        self._checks = None
        self.lines = RefusalLines(settings.EUREKA.process.refusal_log_interval_seconds)
        setting_changed.connect(self._forget, weak=False)

    def _forget(self, *, setting: str, **kwargs) -> None:
        if setting in ("ALLOWED_HOSTS", "USE_X_FORWARDED_HOST", "DEBUG"):
            self._answers.clear()
            self._checks = None

    def allowed(self, environ: dict) -> bool:
        if self._checks is None:
            self._checks = "*" not in settings.ALLOWED_HOSTS
        if not self._checks:
            return True
        key = (
            environ.get("HTTP_HOST"),
            environ.get("HTTP_X_FORWARDED_HOST"),
            environ.get("SERVER_NAME"),
            environ.get("SERVER_PORT"),
        )
        answer = self._answers.get(key)
        if answer is None:
            answer = _disallowed_host(environ) is None
            if len(self._answers) >= self.REMEMBERED:
                self._answers.clear()
            self._answers[key] = answer
        return answer

    def refuse(self, environ: dict, start_response):
        """The 400 of a request whose host ``allowed`` refused, counted and logged."""
        BAD_REQUESTS["host"] += 1
        count = self.lines.note("host")
        if count:
            host_logger.warning(
                "%s %r from %s refused with 400: %s%s",
                environ.get("REQUEST_METHOD", "")[:20],
                environ.get("PATH_INFO", "")[:200],
                environ.get("REMOTE_ADDR", ""),
                (_disallowed_host(environ) or "Host not in ALLOWED_HOSTS")[:300],
                since_last_line(count),
                extra=refusal_fields("host", count),
            )
        return plain_wsgi_answer(start_response, 400, DISALLOWED_HOST)


def _disallowed_host(environ: dict) -> str | None:
    """Why Django's ``get_host()`` refuses this request's host, or None when it does not."""
    request = HttpRequest()
    request.META = environ
    try:
        request.get_host()
    except DisallowedHost as refused:
        return str(refused)
    return None


def body_deadlines() -> BodyDeadlines:
    connections = settings.EUREKA.connections
    return BodyDeadlines(connections.body_idle_timeout_s, connections.body_timeout_s)


def read_any_body(environ: dict) -> bool:
    return True


# What the gate asked before a protocol request's body is read may say: read it (True), leave it
# unread for the view to refuse (False), or answer now without it.
BodyGate = Callable[[dict], "bool | EarlyAnswer"]


class RoutingApplication:
    """The node's WSGI application: refusals decided before a body is read, the body read within its
    deadlines, then the lean protocol handler for ``/eureka/`` and Django's own for the rest.

    ``may_read_body(environ)`` is asked for protocol requests before their body is read (the wiring
    passes the API accounts' check, ``registry.access.drf.credentials_open_the_api``): when it says
    no, the body is left unread and the view refuses the request (401, 429) without reading it; an
    ``EarlyAnswer`` is sent as it is, without Django (a body sent with no credentials at all: under
    a flood of them, each costs an answer, not a view)."""

    def __init__(
        self,
        trust_forwarded_prefix: bool | None = None,
        may_read_body: BodyGate = read_any_body,
    ):
        self.protocol = ProtocolHandler()
        self.site = WSGIHandler()
        if trust_forwarded_prefix is None:
            trust_forwarded_prefix = settings.EUREKA.security.trust_forwarded_prefix
        self.trust_forwarded_prefix = trust_forwarded_prefix
        self.may_read_body = may_read_body
        self.body_deadlines = body_deadlines()

    def __call__(self, environ, start_response):
        if self.trust_forwarded_prefix:
            prefix = environ.get("HTTP_X_FORWARDED_PREFIX", "").rstrip("/")
            # A reverse proxy that strips a path prefix tells us so; links and redirects then keep it.
            if _PREFIX.fullmatch(prefix):
                environ["SCRIPT_NAME"] = prefix
        refusal = browser_refusal(environ)
        if refusal is not None:
            # Before the body is read: nothing of a refused request is looked at.
            return plain_wsgi_answer(start_response, 403, refusal)
        protocol = environ.get("PATH_INFO", "").startswith(PROTOCOL_PREFIX)
        if not protocol and not self.protocol.hosts.allowed(environ):
            # As the protocol handler does: before the body is read, and before Django.
            return self.protocol.hosts.refuse(environ, start_response)
        try:
            # Before Django builds the request: a charset it cannot use would raise out of the handler.
            refuse_unusable_charset(environ)
            verdict = self.may_read_body(environ) if protocol else True
            if verdict is True:
                # Every body (chunked ones too: Jersey 1 clients, Spring's replication batches) for
                # both handlers alike, within its deadlines.
                buffer_body(environ, settings.EUREKA.connections.max_body_bytes, self.body_deadlines)
            elif verdict is False:
                # Refused by the view without a look at the body, which Django must not try to read.
                environ["CONTENT_LENGTH"] = "0"
            else:
                return verdict.wsgi_response(start_response)
        except BodyRefused as refusal:
            return refusal.wsgi_response(start_response)
        finally:
            # The server's watch of slow bodies lets go of this request (registry/serving/granian_server.py).
            body_received = environ.pop(BODY_RECEIVED, None)
            if body_received is not None:
                body_received()
        return (self.protocol if protocol else self.site)(environ, start_response)
