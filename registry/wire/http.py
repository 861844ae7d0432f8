"""HTTP details of the Eureka protocol that DRF's defaults get wrong for real clients.

* format: JSON only when ``Accept`` *contains* "json", otherwise XML (no q-value negotiation);
* error bodies: plain text for 4xx with a reason, empty for 404/403 (Jersey clients try to decode
  any non-HTML body as an instance);
* gzip: responses when ``Accept-Encoding`` contains gzip, request bodies with ``Content-Encoding: gzip``;
* browsers: what a web page makes a browser send is refused (403, with a reason: only browsers get
  it), and request bodies are read only with a JSON or XML media type (415), so that no page can write
  to an open registry through its visitors' browsers (``browser_refusal``, ``body_format``).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection
from urllib.parse import parse_qsl

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from rest_framework import exceptions
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer

from registry.cache.response_cache import Payload
from registry.domain.constants import SERVER_IDENTITY
from registry.wire.codecs import JSON, XML, BadInput, parse_long

CONTENT_TYPES = {JSON: "application/json", XML: "application/xml"}
REPLICATION_HEADER = "HTTP_X_NETFLIX_DISCOVERY_REPLICATION"


class RequestRefused(Exception):
    """A request refused before it reached the registry: answered with ``status`` and ``message``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# Paths no web page may drive: the protocol (every prefix: /eureka/, /eureka/v2/...; a proxy's
# X-Forwarded-Prefix is not part of PATH_INFO) and the node's control endpoint.
BROWSER_REFUSED_PREFIXES = ("/eureka/", "/control/")
# Sec-Fetch-Site values of a request the user made themselves: typed in the address bar or opened from
# a bookmark (none), or sent by a page of this same origin.
OWN_SITES = frozenset({"none", "same-origin"})
SAFE_METHODS = frozenset({"GET", "HEAD"})


def browser_refusal(environ: dict) -> str | None:
    """Why a request that a web page made the browser send is refused (403), or None.

    With API accounts off, any page a user of the network opens could otherwise register instances or
    post a replication batch through the user's browser, without CORS, as a form or a ``no-cors``
    fetch does. Eureka clients and peers send neither ``Origin`` nor ``Sec-Fetch-*``; browsers send:

    * ``Origin`` on every POST, PUT or DELETE (same-origin ones too: a page reached by DNS rebinding
      is "same-origin") and on every cross-origin fetch: refused, whatever the method. A page of
      another origin could not read a protocol answer anyway (no CORS headers are ever sent).
    * ``Sec-Fetch-Site``: refused unless ``none`` or ``same-origin``, except for a GET or HEAD
      navigation (``Sec-Fetch-Mode: navigate``): a link to ``/eureka/apps`` followed from a wiki or a
      runbook opens the registry in the user's tab, and reading it there changes nothing.

    A browser tab reading the registry by its URL (no ``Origin`` on a GET navigation) keeps working.
    """
    path = environ.get("PATH_INFO", "")
    if not path.startswith(BROWSER_REFUSED_PREFIXES):
        return None
    if "HTTP_ORIGIN" in environ:
        return (
            "Forbidden: requests sent by a web page (Origin header) are refused on the Eureka API and "
            "the control endpoint; Eureka clients send no Origin header"
        )
    site = environ.get("HTTP_SEC_FETCH_SITE")
    if site is None or site.strip().lower() in OWN_SITES:
        return None
    navigation = environ.get("HTTP_SEC_FETCH_MODE", "").strip().lower() == "navigate"
    if navigation and environ.get("REQUEST_METHOD") in SAFE_METHODS:
        return None
    return (
        f"Forbidden: a request from another site (Sec-Fetch-Site: {site.strip()[:40]}) is refused on "
        "the Eureka API and the control endpoint; open the URL in the browser's address bar instead"
    )


class EurekaContentNegotiation(BaseContentNegotiation):
    """Views render their own bytes, so DRF only needs *a* renderer; parsing is done by the codecs."""

    def select_parser(self, request, parsers):
        return None

    def select_renderer(self, request, renderers, format_suffix=None):
        renderer = renderers[0]
        return renderer, renderer.media_type


class PassthroughRenderer(BaseRenderer):
    media_type = "*/*"
    format = "raw"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data


def django_request(request: HttpRequest) -> HttpRequest:
    """The Django request behind a view's request. Views get DRF's Request, which hands ``META`` and
    ``body`` over only after a failed attribute lookup (several a request, each a slow path); its
    ``_request`` is that Django request, as DRF documents."""
    return getattr(request, "_request", request)


def meta(request: HttpRequest) -> dict:
    """The request's WSGI environ (see django_request)."""
    return django_request(request).META


def response_format(request: HttpRequest) -> str:
    return JSON if "json" in meta(request).get("HTTP_ACCEPT", "") else XML


def wants_gzip(request: HttpRequest) -> bool:
    return "gzip" in meta(request).get("HTTP_ACCEPT_ENCODING", "")


def wants_compact(request: HttpRequest) -> bool:
    return meta(request).get("HTTP_X_EUREKA_ACCEPT", "").lower() == "compact"


def from_peer_server(request: HttpRequest) -> bool:
    """Whether a Eureka server made the request (``DiscoveryIdentity-Name: DefaultServer``)."""
    return meta(request).get("HTTP_DISCOVERYIDENTITY_NAME") == SERVER_IDENTITY


def requested_regions(request: HttpRequest) -> tuple[str, ...] | None:
    """``?regions=a,b`` lower-cased and sorted, once each; None when not asked for (absent or empty).
    Java splits the lower-cased value on commas; blanks around a name are dropped here too."""
    value = query_values(request).get("regions")
    if not value:
        return None
    return tuple(sorted({name.strip().lower() for name in value.split(",") if name.strip()}))


def key_regions(
    request: HttpRequest, asked: tuple[str, ...] | None, configured: Collection[str], fallback: bool
) -> tuple[str, ...]:
    """The remote regions a ``GET apps`` or delta merges (``CacheKey.regions``): the configured ones
    among those asked for; without ``regions=``, every configured one when transparent fallback is
    on (Eureka's default), except for a Eureka server's read (a peer's start-up sync, another
    region's fetch), which gets this region's own instances only."""
    if asked is not None:
        return tuple(name for name in asked if name in configured)
    if fallback and configured and not from_peer_server(request):
        return tuple(sorted(configured))
    return ()


def is_replication(request: HttpRequest) -> bool:
    return meta(request).get(REPLICATION_HEADER) == "true"


def empty(status: int = 200) -> HttpResponse:
    # An explicit (empty) type spares Django working out its default text/html one, deleted anyway.
    response = HttpResponse(b"", status=status, content_type="")
    # Like Jersey's bodiless responses: no entity, no content type.
    del response["Content-Type"]
    return response


def text(status: int, message: str) -> HttpResponse:
    return HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")


def payload_response(request: HttpRequest, payload: Payload, fmt: str, status: int = 200) -> HttpResponse:
    """Serve cached bytes as they are, or their once-computed gzip copy when the client accepts gzip."""
    if not payload.found:
        return empty(404)
    if wants_gzip(request):
        response = HttpResponse(payload.gzipped(), status=status, content_type=CONTENT_TYPES[fmt])
        response["Content-Encoding"] = "gzip"
    else:
        response = HttpResponse(payload.body, status=status, content_type=CONTENT_TYPES[fmt])
    response["Vary"] = "Accept, Accept-Encoding, X-Eureka-Accept"
    return response


# Media types a body is read as. A browser sends a cross-site POST without asking the server first
# (a CORS "simple request") only as text/plain, application/x-www-form-urlencoded or
# multipart/form-data, with any parameters, or with no type at all: so the type is matched on its
# essence (the part before any ";"), never as a substring, and a body with no type is not guessed at
# (every Eureka client and peer names its type). A page can send the types accepted here only after a
# preflight, which this server never grants.
JSON_MEDIA_TYPES = frozenset({"application/json", "text/json"})
XML_MEDIA_TYPES = frozenset({"application/xml", "text/xml"})


def body_format(content_type: str) -> str | None:
    """JSON or XML for a request ``Content-Type`` naming one (``+json``/``+xml`` structured-syntax
    suffixes included), else None."""
    essence = content_type.partition(";")[0].strip().lower()
    kind, slash, subtype = essence.partition("/")
    if not kind or not slash or not subtype:
        return None
    if essence in JSON_MEDIA_TYPES or subtype.endswith("+json"):
        return JSON
    if essence in XML_MEDIA_TYPES or subtype.endswith("+xml"):
        return XML
    return None


def request_format(request: HttpRequest) -> str:
    """The format of the request body, from its ``Content-Type``; 415 unless JSON or XML."""
    content_type = meta(request).get("CONTENT_TYPE", "")
    fmt = body_format(content_type)
    if fmt is None:
        raise RequestRefused(
            415,
            f"Unsupported Content-Type {content_type[:100] or '(none)'!r}: "
            "send application/json or application/xml",
        )
    return fmt


def read_body(request: HttpRequest) -> bytes:
    """The request body, gunzipped when sent with Content-Encoding: gzip, within the size limit."""
    limit = settings.EUREKA.connections.max_body_bytes
    try:
        body = django_request(request).body
    except RequestDataTooBig:
        raise RequestRefused(413, f"Request body is larger than {limit} bytes") from None
    if len(body) > limit:
        raise RequestRefused(413, f"Request body is larger than {limit} bytes")
    if "gzip" in meta(request).get("HTTP_CONTENT_ENCODING", "").lower():
        decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        compressed = body
        try:
            body = decompressor.decompress(compressed, limit + 1)
        except zlib.error as exc:
            raise RequestRefused(400, f"Malformed gzip request body: {exc}") from None
        if len(body) > limit or decompressor.unconsumed_tail:
            raise RequestRefused(413, f"Decompressed request body is larger than {limit} bytes")
        if compressed and not decompressor.eof:
            # Cut short: zlib checks the CRC and the length only at the end of the stream.
            raise RequestRefused(400, "Malformed gzip request body: it ends before the gzip stream does")
    if not body.strip():
        raise RequestRefused(400, "Missing request body")
    return body


def query_values(request: HttpRequest) -> dict[str, str]:
    """The query string as ``request.GET.get`` reads it (the last value of a repeated name), without
    building a QueryDict: on a heartbeat its per-value bookkeeping cost a fifth of the view."""
    raw = meta(request).get("QUERY_STRING", "")
    if not raw:
        return {}
    if raw.isascii() and "%" not in raw and "+" not in raw:
        # What every client's heartbeat sends (status=UP&lastDirtyTimestamp=...): nothing to decode,
        # so splitting is all parse_qsl would do (a tenth of the view's time). The same answers,
        # the differential test in tests/wire/test_flat_routes.py checks.
        fields = raw.split("&")
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        if limit is not None and len(fields) > limit:
            raise BadInput(f"More than {limit} query parameters")
        values = {}
        for field in fields:
            if field:
                name, _, value = field.partition("=")
                values[name] = value
        return values
    try:
        # WSGI hands over the bytes as latin-1 text; like Django, read them as UTF-8 when they are.
        raw = raw.encode("iso-8859-1").decode("utf-8")
    except UnicodeError:
        pass
    try:
        return dict(
            parse_qsl(
                raw,
                keep_blank_values=True,
                encoding="utf-8",
                max_num_fields=settings.DATA_UPLOAD_MAX_NUMBER_FIELDS,
            )
        )
    except ValueError:
        raise BadInput(f"More than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} query parameters") from None


def parse_timestamp(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    return parse_long(value, name)


ACCOUNT_REFUSALS = (exceptions.NotAuthenticated, exceptions.AuthenticationFailed, exceptions.PermissionDenied)


class RefusedWithReason(exceptions.PermissionDenied):
    """A 403 whose reason the answer says in a plain-text body (an app the account may not write),
    unless ``with_body`` is False: a heartbeat's answer, which Jersey and Spring clients decode as an
    instance whatever its status (they would report a decoding error instead of the 403)."""

    def __init__(self, reason: str, with_body: bool = True):
        super().__init__(reason)
        self.reason = reason
        self.with_body = with_body


def plain_exception_handler(exc, context):
    """DRF errors (405, parse errors...) as short plain-text answers instead of JSON documents."""
    if isinstance(exc, RequestRefused):
        return text(exc.status, exc.message)
    if isinstance(exc, BadInput):
        return text(400, str(exc))
    if isinstance(exc, exceptions.MethodNotAllowed):
        response = text(405, f"Method {context['request'].method} not allowed")
        allowed = getattr(context.get("view"), "allowed_methods", None)
        if allowed:
            response["Allow"] = ", ".join(allowed)
        return response
    if isinstance(exc, RefusedWithReason) and exc.with_body:
        return text(exc.status_code, exc.reason)
    if isinstance(
        exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed | exceptions.PermissionDenied
    ):
        # API account refusals carry no body: Jersey clients read any body of a heartbeat answer as an
        # instance and Spring's converters choke on text/plain, so either would report a decoding
        # error instead of the 401/403. The reason is in the node's log (registry.access).
        response = empty(exc.status_code)
        # 401s carry the challenge, so clients and browsers know to send Basic credentials.
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            response["WWW-Authenticate"] = auth_header
        return response
    if isinstance(exc, exceptions.Throttled):
        # Too many failed sign-ins (registry/access/throttle.py): no body, like the other refusals.
        response = empty(exc.status_code)
        if exc.wait:
            response["Retry-After"] = str(math.ceil(exc.wait))
        return response
    if isinstance(exc, exceptions.APIException):
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return text(exc.status_code, detail)
    return None
