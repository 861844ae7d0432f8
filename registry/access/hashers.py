"""Password hashing off the event loop.

A PBKDF2 hash costs about half a second of CPU. Under gevent every request shares one loop, so a
hash computed on a request's greenlet holds every heartbeat for that long: a few wrong sign-ins a
second would stall the node. ``hashlib.pbkdf2_hmac`` releases the GIL, so computed in a native
thread of gevent's threadpool it leaves the loop free. The hasher below is Django's PBKDF2 hasher
(same algorithm name, same stored hashes) whose ``encode`` — which ``verify``, ``harden_runtime`` and
``make_password`` all go through — runs there. Every path that hashes is covered that way: the admin's
sign-in, ModelBackend's dummy hash for unknown user names, password changes, API credentials. Hashes
also queue for a core of their own: with as many hashing threads as cores, the loop would wait for
a core behind them (bench/README.md, "Numbers behind the code").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TypeVar

from django.contrib.auth.hashers import PBKDF2PasswordHasher

T = TypeVar("T")


_slots = None


def _hashing_slots():
    """Hashes computed at once, at most: one core fewer than the process may use (at least one), so
    that a burst of sign-ins leaves a core to the event loop. Made on first use, under gevent only."""
    global _slots
    if _slots is None:
        from gevent.lock import BoundedSemaphore

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
        _slots = BoundedSemaphore(max(1, cores - 1))
    return _slots


def off_the_loop(function: Callable[..., T], *args) -> T:
    """``function(*args)``, in gevent's threadpool when called from a greenlet of the main thread's
    loop in a monkey-patched process (the gunicorn worker); directly anywhere else (tests, management
    commands, and the threadpool's own threads: queueing there would wait for itself)."""
    if "gevent" in sys.modules:
        from gevent import getcurrent, monkey
        from gevent._hub_local import get_hub_if_exists

        if monkey.is_module_patched("socket"):
            hub = get_hub_if_exists()
            if hub is not None and hub.main_hub and getcurrent() is not hub:
                with _hashing_slots():
                    return hub.threadpool.apply(function, args)
    return function(*args)


class OffloadedPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2-SHA256 hasher, computed off the event loop (see the module's docstring)."""

    def encode(self, password, salt, iterations=None):
        parent = super().encode
        return off_the_loop(parent, password, salt, iterations)
