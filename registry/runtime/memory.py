"""Hands memory the node has freed back to the system (glibc's allocator). Plain Python, no Django.

A node's big allocations come and go: a snapshot's JSON document, each payload build's joined bytes,
the gzip copies made in the gevent threadpool's native threads. glibc keeps what they freed for reuse:
each native thread's allocations come from an arena of its own, and after a large block is freed the
allocator raises the size from which it maps blocks on their own (to up to 32 MB), so later
payload-sized blocks come from the heap, whose freed middle is never returned. Measured at 100,000
instances (bench/README.md, "Side by side", memory): after registering, fetching and the fetch phases
the node held 892 MB, of which ~600 MB were live objects.

So, where the C library is glibc: ``tune()`` (at worker start) caps the arenas at two and fixes the
mapping threshold at 128 KB, so a large block is unmapped when freed; ``trim()`` (after the GC
policy's collections, at most once a minute) returns the free pages of the heap. Elsewhere both are
no-ops and say so.
"""

from __future__ import annotations

import ctypes
import logging

logger = logging.getLogger(__name__)

# mallopt parameters (malloc.h).
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 128 * 1024
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
    """Set the allocator up for a long-lived process with large short-lived blocks; False when the C
    library is not glibc (nothing done)."""
    if _LIBC is None:
        logger.info("memory: the C library is not glibc; its allocator keeps its defaults")
        return False
    ok = bool(_LIBC.mallopt(M_ARENA_MAX, ARENAS)) and bool(
        _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    )
    if not ok:
        logger.warning("memory: mallopt refused the arena or mapping settings")
    return ok


def trim() -> bool:
    """Return the heap's free pages to the system; whether any were (False without glibc)."""
    if _LIBC is None:
        return False
    return bool(_LIBC.malloc_trim(0))
