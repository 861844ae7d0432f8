"""Console pages rendered once and shared by every viewer for a short while, one render at a time.

A console view reads the whole registry (search, grouping, suspicious registrations, the charts) and
renders hundreds of rows; under gevent that holds the one event loop, under granian one of the two
request threads. So:

* viewers asking for the same page (the same path and query, script prefix, staff or not) within
  ``share_ms`` of its render get that render's bytes: a page costs one render per ``share_ms``
  however many viewers ask for it, and what it shows is at most ``share_ms`` old;
* only one page is rendered at a time in the process, in the paced slices of the code it runs
  (registry/cache/pacing.py). A view that finds another page being rendered gets its own page's
  last copy when there is one, however old; else it waits for its turn where waiting parks a
  greenlet and holds no server thread (gevent), or is refused (``Busy``: the view answers 503 with
  Retry-After) where it would hold one of the threads that serve heartbeats (granian).

However many viewers and whatever pages they ask for, the console then renders one page at a time,
and heartbeats wait a slice at most. The copies kept are bounded in bytes (the oldest renders go
first). Plain Python, no Django: the views hand over a key and a function that renders.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from registry.domain.refusals import RefusalLines, refusal_fields, since_last_line

logger = logging.getLogger(__name__)

# Copies of rendered pages kept at most, in bytes.
MAX_BYTES = 8 * 1024 * 1024
# How long a view waits for its turn to render where waiting holds no thread (gevent).
WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class Page:
    """A rendered answer, and when it was rendered (node time, epoch ms)."""

    status: int
    content: bytes
    content_type: str
    rendered_at: int = 0


class Busy(Exception):
    """Another page is being rendered, this one has no copy, and waiting would hold a thread."""


def waiting_is_free() -> bool:
    """Under gevent's monkey-patching a lock's wait parks a greenlet; elsewhere (granian's request
    threads) it holds one of the few threads that serve heartbeats."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and monkey.is_module_patched("threading")


class SharedPages:
    """Rendered pages by key. ``clock``: the node's (epoch ms); ``wait_s``: how long a view may wait
    for its turn to render (0: not at all); ``refusal_lines``: which refusals get a log line."""

    def __init__(
        self,
        share_ms: int,
        clock: Callable[[], int],
        max_bytes: int = MAX_BYTES,
        wait_s: Callable[[], float] = lambda: WAIT_S if waiting_is_free() else 0.0,
        refusal_lines: RefusalLines | None = None,
    ):
        self.share_ms = share_ms
        self.clock = clock
        self.max_bytes = max_bytes
        self.wait_s = wait_s
        self.refusal_lines = refusal_lines or RefusalLines()
        self._pages: OrderedDict[Hashable, Page] = OrderedDict()
        self._bytes = 0
        # Made with the first view, so under gevent after the monkey-patching: a waiter yields.
        self._slot = threading.Lock()
        # Views answered by a render, a shared copy, an old copy, or refused (/metrics reads them).
        self.rendered = self.shared = self.stale = self.refused = 0

    def get(self, key: Hashable, render: Callable[[], Page]) -> Page:
        """The page for ``key``: a copy younger than ``share_ms``, else one ``render`` makes now,
        else (another page is being rendered) its last copy; raises ``Busy`` when there is none."""
        page = self._fresh(key)
        if page is not None:
            self.shared += 1
            return page
        wait_s = self.wait_s()
        got_turn = self._slot.acquire(timeout=wait_s) if wait_s > 0 else self._slot.acquire(blocking=False)
        if not got_turn:
            copy = self._pages.get(key)
            if copy is not None:
                self.stale += 1
                return copy
            self._refuse()
            raise Busy
        try:
            # Rendered by the view that had the turn while this one waited?
            page = self._fresh(key)
            if page is not None:
                self.shared += 1
                return page
            now = self.clock()
            made = render()
            page = Page(made.status, made.content, made.content_type, now)
            self.rendered += 1
            if self.share_ms > 0:
                self._keep(key, page)
            return page
        finally:
            self._slot.release()

    @property
    def kept_bytes(self) -> int:
        return self._bytes

    def _fresh(self, key: Hashable) -> Page | None:
        page = self._pages.get(key)
        if page is None or self.clock() - page.rendered_at >= self.share_ms:
            return None
        return page

    def _keep(self, key: Hashable, page: Page) -> None:
        """Under the render turn: only one thread changes the copies at a time."""
        old = self._pages.pop(key, None)
        if old is not None:
            self._bytes -= len(old.content)
        if len(page.content) > self.max_bytes:
            return
        self._pages[key] = page
        self._bytes += len(page.content)
        while self._bytes > self.max_bytes:
            _, dropped = self._pages.popitem(last=False)
            self._bytes -= len(dropped.content)

    def _refuse(self) -> None:
        self.refused += 1
        count = self.refusal_lines.note("console_busy")
        if count:
            logger.warning(
                "console page refused with 503: another page was being rendered%s",
                since_last_line(count),
                extra=refusal_fields("console_busy", count),
            )
