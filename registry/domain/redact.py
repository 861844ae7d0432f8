"""Credentials out of URLs and texts before they are shown or logged. Plain Python, no Django.

Service URLs may carry Basic credentials (``http://user:secret@host:8761/eureka/``: peers, remote
regions, clients' own URLs quoted in errors); whatever shows or logs a URL or an error text passes it
through here first. A URL a registrant sent becomes a link on a page only through ``link_url``.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# The user-info part of any URL in a text (``scheme://user:secret@``).
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@]*@")


def scrub_credentials(url: str) -> str:
    """``http://user:pass@host:8761/eureka/`` → ``http://host:8761/eureka/`` (never show secrets)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def scrub_text(text: str) -> str:
    """Any text (an error, a log line) with the credentials of every URL in it removed."""
    return _URL_USERINFO.sub(r"\1", text)


def link_url(url: str | None) -> str | None:
    """A registrant's URL (``statusPageUrl``, ``homePageUrl``, ...) as a page may link to it: http(s)
    only, credentials scrubbed; None for anything else (``javascript:``, ``data:``), which the page
    shows as text: such a link would run the registrant's script as whoever clicks it."""
    if url and url.lower().startswith(("http://", "https://")):
        return scrub_credentials(url)
    return None
