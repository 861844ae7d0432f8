"""Password hashing off the event loop, with a bounded queue.

A PBKDF2 hash is deliberately slow: a good part of a second of CPU. Under gevent every request shares
one loop, so a hash computed on a request's greenlet holds every heartbeat for that long: a few wrong
sign-ins a second would stall the node. ``hashlib.pbkdf2_hmac`` releases the GIL, so computed in a
native thread of gevent's threadpool it leaves the loop free. The hasher below is Django's PBKDF2 hasher
(same algorithm name, same stored hashes) whose ``encode`` — which ``verify``, ``harden_runtime`` and
``make_password`` all go through — runs there. Every path that hashes is covered that way: the admin's
sign-in, ModelBackend's dummy hash for unknown user names, password changes, API credentials. Hashes
also queue for a core of their own: with as many hashing threads as cores, the loop would wait for a
core behind them.

The queue is bounded (``HashingQueue``): a few waiters per hashing slot, and any check beyond them is
refused at once with ``HashingBusy``, unhashed. Unbounded, wrong credentials sent together from rotating
addresses (which the failed sign-in throttle cannot stop) would make a valid account's first check wait
behind all of them; bounded, a check waits at most a few hashes, and the callers answer the ones refused
503 with Retry-After (registry/access/drf.py, registry/admin/signin.py), neither remembered nor counted
as failed sign-ins: no password was checked.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from django.contrib.auth.hashers import PBKDF2PasswordHasher

T = TypeVar("T")

# What a refused check is told to wait: about the time the queue takes to move on by a few hashes.
BUSY_RETRY_AFTER_S = 1


class HashingBusy(Exception):
    """Every hashing slot is taken and the most checks allowed are waiting: this one is not hashed."""

    retry_after = BUSY_RETRY_AFTER_S


class HashingQueue:
    """At most ``slots`` hashes at once and ``max_waiting`` more waiting for a slot (0: no limit);
    one more raises ``HashingBusy`` at once.

    For the loop's greenlets: ``waiting`` is read and changed with no switch in between (gevent
    switches only where a greenlet blocks), so it needs no lock of its own. ``semaphore`` is gevent's
    ``BoundedSemaphore`` class in the worker."""

    def __init__(self, slots: int, max_waiting: int, semaphore: Callable[[int], object]):
        self.slots = slots
        self.max_waiting = max_waiting
        self.waiting = 0
        # Checks refused since start (for tests and the log; /metrics counts them as auth refusals).
        self.shed = 0
        self._semaphore = semaphore(slots)

    @contextmanager
    def turn(self, may_shed: bool = True) -> Iterator[None]:
        semaphore = self._semaphore
        if not semaphore.acquire(blocking=False):
            if may_shed and self.max_waiting and self.waiting >= self.max_waiting:
                self.shed += 1
                raise HashingBusy
            self.waiting += 1
            try:
                semaphore.acquire()
            finally:
                self.waiting -= 1
        try:
            yield
        finally:
            semaphore.release()


_queue: HashingQueue | None = None

# Whether a hash computed now may be refused when the queue is full: only where the caller answers
# that refusal (an API credential check, the sign-in form: ``sign_in_checks``). Every other hash (a
# password change in the admin, ``createsuperuser``) waits its turn, however long the queue.
_may_shed: ContextVar[bool] = ContextVar("password_hash_may_shed", default=False)


@contextmanager
def sign_in_checks() -> Iterator[None]:
    """Hashes computed inside may be refused with ``HashingBusy`` when too many wait already."""
    token = _may_shed.set(True)
    try:
        yield
    finally:
        _may_shed.reset(token)


def hashing_queue() -> HashingQueue:
    """Hashes computed at once, at most: one core fewer than the process may use (at least one), so
    that a burst of sign-ins leaves a core to the event loop; and EUREKA_SIGNIN_WAITING_PER_CORE
    checks per slot waiting. Made on first use, under gevent only."""
    global _queue
    if _queue is None:
        from django.conf import settings
        from gevent.lock import BoundedSemaphore

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
        slots = max(1, cores - 1)
        _queue = HashingQueue(slots, slots * settings.EUREKA.access.signin_waiting_per_core, BoundedSemaphore)
    return _queue


def off_the_loop(function: Callable[..., T], *args) -> T:
    """``function(*args)``, in gevent's threadpool when called from a greenlet of the main thread's
    loop in a monkey-patched process (the gunicorn worker), after waiting for a hashing slot
    (``HashingBusy`` when too many checks wait already); directly anywhere else (tests, management
    commands, and the threadpool's own threads: queueing there would wait for itself)."""
    if "gevent" in sys.modules:
        from gevent import getcurrent, monkey
        from gevent._hub_local import get_hub_if_exists

        if monkey.is_module_patched("socket"):
            hub = get_hub_if_exists()
            if hub is not None and hub.main_hub and getcurrent() is not hub:
                with hashing_queue().turn(_may_shed.get()):
                    return hub.threadpool.apply(function, args)
    return function(*args)


class OffloadedPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2-SHA256 hasher, computed off the event loop (see the module's docstring)."""

    def encode(self, password, salt, iterations=None):
        parent = super().encode
        return off_the_loop(parent, password, salt, iterations)
