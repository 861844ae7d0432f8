"""Request bodies read into memory before a view runs: within deadlines, and made readable by Django.

A client that sends its headers and then its body slowly, or never, holds a greenlet and a connection
for as long as it likes unless something times the body: gunicorn's own timeout covers a request's
headers only. So every body (up to ``EUREKA_MAX_BODY_BYTES``) is read here first, within
``EUREKA_BODY_IDLE_TIMEOUT_SECONDS`` between two reads and ``EUREKA_BODY_TIMEOUT_SECONDS`` in all; one
that is late is refused with 408 and its connection closed. The routing application asks who the
client is before this (``registry/wire/handlers.py``): with API accounts on, the body of a request
whose credentials open nothing is never read.

Bodies sent with ``Transfer-Encoding: chunked`` come out of it with a length. gunicorn decodes the
chunked framing and hands the application the bare body as ``wsgi.input``, with no ``CONTENT_LENGTH``
(the length is not known until the last chunk has arrived). Django sizes ``request.body`` from
``CONTENT_LENGTH`` alone, so every view would see an empty body. Real clients send chunked bodies: the
Netflix eureka-client 1.x (Jersey 1) on every registration, and Spring Cloud Eureka Server on every
peer replication batch. Reading stops one byte past the limit, so a longer chunked body is refused
with 413 and the rest of it is never read into memory (the node's gunicorn worker then closes the
connection rather than read the rest of the body to reach the next request:
``registry/serving/gunicorn_worker.py``); a body whose ``Content-Length`` is over the limit is not read
at all (Django refuses it when a view asks). Broken framing is refused with 400 before any view runs,
so nothing is half applied.
"""

from __future__ import annotations

import codecs
import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus

from django.core.exceptions import TooManyFieldsSent
from django.http import QueryDict
from django.utils.http import parse_header_parameters

# The environ key of a callable the server may set (registry/serving/granian_server.py): called once the
# request's body has been received, refused, or left unread.
BODY_RECEIVED = "registry.body_received"


class BodyRefused(Exception):
    """The request body cannot be handed to the application: answer ``status`` with ``message``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message

    def wsgi_response(self, start_response) -> list[bytes]:
        return plain_wsgi_answer(start_response, self.status, self.message)


def plain_wsgi_answer(start_response, status: int, message: str) -> list[bytes]:
    """A short plain-text answer written before Django is involved."""
    content = (message + "\n").encode()
    start_response(
        f"{status} {HTTPStatus(status).phrase}",
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(content))),
        ],
    )
    return [content]


def has_unsized_body(environ: dict) -> bool:
    """A body framed by a transfer coding (chunked) rather than by a ``Content-Length``."""
    return bool(environ.get("HTTP_TRANSFER_ENCODING")) and not environ.get("CONTENT_LENGTH")


def _content_length(environ: dict) -> int:
    try:
        return int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:  # the server refuses a malformed length before any application runs
        return 0


@dataclass(frozen=True, slots=True)
class EarlyAnswer:
    """A bodiless answer given before a request's body is read (``RoutingApplication``'s gate)."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()

    def wsgi_response(self, start_response) -> list[bytes]:
        start_response(
            f"{self.status} {HTTPStatus(self.status).phrase}", [*self.headers, ("Content-Length", "0")]
        )
        return [b""]


def has_body(environ: dict) -> bool:
    return has_unsized_body(environ) or _content_length(environ) > 0


@dataclass(frozen=True, slots=True)
class BodyDeadlines:
    """How long a client may take to send a request body: ``idle_s`` without a byte, ``total_s`` in all
    (EUREKA_BODY_IDLE_TIMEOUT_SECONDS, EUREKA_BODY_TIMEOUT_SECONDS); 0 is no deadline."""

    idle_s: float = 0.0
    total_s: float = 0.0


NO_DEADLINES = BodyDeadlines()


def buffer_body(environ: dict, limit: int, deadlines: BodyDeadlines = NO_DEADLINES) -> None:
    """Read the request body (at most ``limit`` bytes) into memory before the application runs.

    A client that sends its headers and then its body a byte now and then, or never, would otherwise
    hold a greenlet, its buffers and a connection for as long as it likes: gunicorn's timeouts cover
    the wait for a request's headers, not its body. Read here, the body must come within
    ``deadlines`` (408, and the server closes the connection), and nothing is half read by a view.

    A chunked body is then presented to Django with its length. Raises ``BodyRefused``: 413 when a
    chunked body is longer than ``limit``, 400 when its framing is broken or the client stopped
    sending before the last chunk, 408 past a deadline. A body whose ``Content-Length`` is over the
    limit is not read: Django refuses it, unread, when a view asks for it.
    """
    chunked = has_unsized_body(environ)
    # A chunked body one byte past the limit (to know it is longer); a sized one to its length.
    wanted = limit + 1 if chunked else _content_length(environ)
    if not chunked and not 0 < wanted <= limit:
        return
    stream = environ["wsgi.input"]
    parts: list[bytes] = []
    size = 0
    try:
        with _within(deadlines, environ.get("gunicorn.socket")):
            # wsgi.input may answer a read with fewer bytes than asked for: read until the end or enough.
            while size < wanted:
                data = stream.read(wanted - size)
                if not data:
                    break
                parts.append(data)
                size += len(data)
    except BodyTooSlow as slow:
        # Where the next request would start is unknown: the worker closes the connection after
        # the answer rather than read on (gunicorn's Body.failed, registry/serving/gunicorn_worker.py).
        if hasattr(stream, "failed"):
            stream.failed = True
        raise BodyRefused(408, f"Request body not received in time: {slow}") from None
    except Exception as exc:  # the server's framing errors (bad chunk size, missing CRLF, early EOF)
        if not chunked:
            # A sized body cut short: as Django would find it (a short body, refused by the view).
            body = b"".join(parts)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            return
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise BodyRefused(400, f"Malformed chunked request body: {reason}") from None
    if chunked and size > limit:
        raise BodyRefused(413, f"Request body is larger than {limit} bytes")
    body = b"".join(parts)
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))


class BodyTooSlow(Exception):
    """The client did not send its body within a deadline; the message says which."""


@contextmanager
def _within(deadlines: BodyDeadlines, sock) -> Iterator[None]:
    """The idle deadline as the socket's timeout for each read (restored after: a kept-alive
    connection waits for its next request without one); the total deadline as a gevent timeout
    where the worker serves on gevent (other workers get the idle deadline only)."""
    idle_s, total_s = deadlines.idle_s, deadlines.total_s
    if not idle_s and not total_s:
        yield
        return
    sets_timeout = bool(idle_s) and hasattr(sock, "settimeout")
    if sets_timeout:
        restore = sock.gettimeout()
        sock.settimeout(idle_s)
    timer = _total_timer(total_s)
    try:
        if timer is not None:
            timer.start()
        yield
    except TimeoutError:  # socket.timeout: no byte within idle_s
        raise BodyTooSlow(f"no data for {idle_s:g} s") from None
    except BaseException as exc:
        if timer is not None and exc is timer:
            raise BodyTooSlow(f"not all of it within {total_s:g} s") from None
        raise
    finally:
        if timer is not None:
            timer.close()
        if sets_timeout:
            try:
                sock.settimeout(restore)
            except OSError:
                pass


def _total_timer(total_s: float):
    """A gevent ``Timeout`` of ``total_s`` when requests are served on gevent's loop, else None."""
    if not total_s or "gevent" not in sys.modules:
        return None
    from gevent import monkey

    if not monkey.is_module_patched("socket"):
        return None
    from gevent import Timeout

    return Timeout(total_s)


def refuse_unusable_charset(environ: dict) -> None:
    """Refuse a ``Content-Type`` charset that Django cannot decode the request's query string with.

    Django decodes the query string with the request's charset while it builds the request object,
    before any view or error handling runs. A codec Python knows but that is no text encoding
    (``charset=base64``, ``rot13``) or that fails otherwise (``undefined``, ``idna``) then raises out
    of the WSGI application, and the server answers 500; so does a charset with more query parameters
    than ``DATA_UPLOAD_MAX_NUMBER_FIELDS``. Raises ``BodyRefused``: 415 for such a charset, 400 for too
    many parameters. Charsets Python does not know are ignored, as Django ignores them.
    """
    content_type = environ.get("CONTENT_TYPE", "")
    query = environ.get("QUERY_STRING", "")
    if not query or "charset" not in content_type.lower():
        return
    charset = parse_header_parameters(content_type)[1].get("charset")
    if not charset:
        return
    try:
        codecs.lookup(charset)
    except LookupError:
        return
    try:
        # What the request object will do: the WSGI query string is latin-1 text of the raw bytes.
        QueryDict(query.encode("latin-1", "replace"), encoding=charset)
    except TooManyFieldsSent:
        raise BodyRefused(400, "Too many query parameters") from None
    except Exception:
        raise BodyRefused(415, f"Unsupported charset {charset[:40]!r} in Content-Type") from None
