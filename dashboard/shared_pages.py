"""Console pages rendered once and shared by every viewer for a short while, one render at a time.

A console view reads the whole registry (search, grouping, suspicious registrations, the charts) and
renders hundreds of rows; under gevent that holds the one event loop, under granian one of the two
request threads. So:

* viewers asking for the same page (the same path and query, script prefix, staff or not) within
  ``share_ms`` of its render get that render's bytes: a page costs one render per ``share_ms``
  however many viewers ask for it, and what it shows is at most ``share_ms`` old;
* only one page is rendered at a time in the process, in the paced slices of the code it runs
  (registry/cache/pacing.py);
* under gevent, where waiting parks a greenlet, console views take turns: one at a time, each after
  the event loop has served what was ready (``give_way``), so heartbeats go first however many
  viewers there are. A view that waited ``wait_s`` for its turn gets its page's last copy, however
  old, or is refused (``Busy``: the view answers 503 with Retry-After);
* elsewhere (granian's request threads, where waiting would hold one of the few threads that serve
  heartbeats) a copy is served at once, and a view that finds another page being rendered gets its
  own page's last copy, however old, or is refused.

The copies kept are bounded in bytes (the oldest renders go first). Plain Python, no Django: the
views hand over a key and a function that renders.
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


def _no_pause() -> None:
    pass


class SharedPages:
    """Rendered pages by key. ``clock``: the node's (epoch ms); ``wait_s``: how long a view may wait
    for its turn (0: views do not take turns, a render is not waited for); ``give_way``: a view's
    pause before its turn (pacing's); ``refusal_lines``: which refusals get a log line."""

    def __init__(
        self,
        share_ms: int,
        clock: Callable[[], int],
        max_bytes: int = MAX_BYTES,
        wait_s: Callable[[], float] = lambda: WAIT_S if waiting_is_free() else 0.0,
        give_way: Callable[[], None] = _no_pause,
        refusal_lines: RefusalLines | None = None,
    ):
        self.share_ms = share_ms
        self.clock = clock
        self.max_bytes = max_bytes
        self.wait_s = wait_s
        self.give_way = give_way
        self.refusal_lines = refusal_lines or RefusalLines()
        self._pages: OrderedDict[Hashable, Page] = OrderedDict()
        self._bytes = 0
        # Made with the first view, so under gevent after the monkey-patching: a waiter yields.
        self._slot = threading.Lock()
        # Views answered by a render, a shared copy, an old copy, or refused (/metrics reads them).
        self.rendered = self.shared = self.stale = self.refused = 0

    def get(self, key: Hashable, render: Callable[[], Page]) -> Page:
        """The page for ``key``: a copy younger than ``share_ms``, else one ``render`` makes now,
        else (no turn) its last copy; raises ``Busy`` when there is none."""
        wait_s = self.wait_s()
        if wait_s > 0:
            return self._in_turn(key, render, wait_s)
        page = self._fresh(key)
        if page is not None:
            self.shared += 1
            return page
        if not self._slot.acquire(blocking=False):
            return self._copy(key)
        try:
            return self._render(key, render)
        finally:
            self._slot.release()

    def _in_turn(self, key: Hashable, render: Callable[[], Page], wait_s: float) -> Page:
        """One view at a time, each after what was ready to run (heartbeats) has had its turn."""
        if not self._slot.acquire(timeout=wait_s):
            return self._copy(key)
        try:
            self.give_way()
            page = self._fresh(key)
            if page is not None:
                self.shared += 1
                return page
            return self._render(key, render)
        finally:
            self._slot.release()

    def _render(self, key: Hashable, render: Callable[[], Page]) -> Page:
        """With the turn: only one thread changes the copies at a time."""
        now = self.clock()
        made = render()
        page = Page(made.status, made.content, made.content_type, now)
        self.rendered += 1
        if self.share_ms > 0:
            self._keep(key, page)
        return page

    def _copy(self, key: Hashable) -> Page:
        copy = self._pages.get(key)
        if copy is None:
            self._refuse()
            raise Busy
        self.stale += 1
        return copy

    @property
    def kept_bytes(self) -> int:
        return self._bytes

    def _fresh(self, key: Hashable) -> Page | None:
        page = self._pages.get(key)
        if page is None or self.clock() - page.rendered_at >= self.share_ms:
            return None
        return page

    def _keep(self, key: Hashable, page: Page) -> None:
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
                "console page refused with 503: no turn to render it, another page was being rendered%s",
                since_last_line(count),
                extra=refusal_fields("console_busy", count),
            )
