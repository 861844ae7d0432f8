"""Request bodies sent with ``Transfer-Encoding: chunked``, made readable by Django.

gunicorn decodes the chunked framing and hands the application the bare body as ``wsgi.input``, with
no ``CONTENT_LENGTH`` (the length is not known until the last chunk has arrived). Django sizes
``request.body`` from ``CONTENT_LENGTH`` alone, so every view would see an empty body. Real clients
send chunked bodies: the Netflix eureka-client 1.x (Jersey 1) on every registration, and Spring Cloud
Eureka Server on every peer replication batch.

So before a request reaches Django, a body framed by a transfer coding is read into memory, and the
request goes on as if it had come with a ``Content-Length``. The limit is the one Django applies to
bodies with a length (``EUREKA_MAX_BODY_BYTES``, which is also ``DATA_UPLOAD_MAX_MEMORY_SIZE``): reading
stops one byte past it, so a longer body is refused with 413 and the rest of it is never read into
memory (the node's gunicorn worker then closes the connection rather than read the rest of the body
to reach the next request: ``registry/runtime/gunicorn_worker.py``). Broken framing is refused with 400
before any view runs, so nothing is half applied.
"""

from __future__ import annotations

import codecs
import io
from http import HTTPStatus

from django.core.exceptions import TooManyFieldsSent
from django.http import QueryDict
from django.utils.http import parse_header_parameters


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


def buffer_unsized_body(environ: dict, limit: int) -> None:
    """Read a chunked body (at most ``limit`` bytes) and present it to Django with its length.

    Raises ``BodyRefused``: 413 when the body is longer than ``limit``, 400 when its framing is broken
    or the client stopped sending before the last chunk. Requests with a ``Content-Length`` (or no
    body) are left as they are.
    """
    if not has_unsized_body(environ):
        return
    stream = environ["wsgi.input"]
    parts: list[bytes] = []
    size = 0
    try:
        # wsgi.input may answer a read with fewer bytes than asked for: read until the end or the limit.
        while size <= limit:
            data = stream.read(limit + 1 - size)
            if not data:
                break
            parts.append(data)
            size += len(data)
    except Exception as exc:  # the server's framing errors (bad chunk size, missing CRLF, early EOF)
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise BodyRefused(400, f"Malformed chunked request body: {reason}") from None
    if size > limit:
        raise BodyRefused(413, f"Request body is larger than {limit} bytes")
    body = b"".join(parts)
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))


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
