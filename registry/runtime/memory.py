"""Hands memory the node has freed back to the system (glibc's allocator). Plain Python, no Django.

A node's big allocations come and go: a snapshot's JSON document, each payload build's joined bytes,
the gzip copies made in the gevent threadpool's native threads. glibc keeps what they freed for reuse:
each native thread's allocations come from an arena of its own, and after a large block is freed the
allocator raises the size from which it maps blocks on their own (to up to 32 MB), so later
payload-sized blocks come from the heap, whose freed middle is never returned: a large part of what
a busy node holds is then no live object.

So, where the C library is glibc: ``tune()`` (at worker start) caps the arenas at two, and ``trim()``
(after each of the GC policy's collections, at most once a second and usually once a minute) returns
the heap's free pages, wherever they are in it. The mapping threshold is left to glibc: fixed low,
so that every large block is mapped and unmapped on its own, it saves as much memory, but each
payload build then pays for fresh zeroed pages, and heartbeats under churn wait longer. Elsewhere
both are no-ops and say so.
"""

from __future__ import annotations

import ctypes
import logging

logger = logging.getLogger(__name__)

# mallopt parameter (malloc.h) and its value here.
M_ARENA_MAX = -8
ARENAS = 2


def _glibc():
    try:
        library = ctypes.CDLL(None)
        library.mallopt  # noqa: B018 (present in glibc only)
        library.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return library


_LIBC = _glibc()


def tune() -> bool:
    """Cap the allocator's arenas; False when the C library is not glibc (nothing done)."""
    if _LIBC is None:
        logger.info("memory: the C library is not glibc; its allocator keeps its defaults")
        return False
    ok = bool(_LIBC.mallopt(M_ARENA_MAX, ARENAS))
    if not ok:
        logger.warning("memory: mallopt refused the arena cap")
    return ok


def trim() -> bool:
    """Return the heap's free pages to the system; whether any were (False without glibc)."""
    if _LIBC is None:
        return False
    return bool(_LIBC.malloc_trim(0))
