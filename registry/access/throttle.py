"""Failed sign-ins counted per client address and per user name; past a limit, refused without hashing.

Each password check costs half a second of CPU, and each one is a guess. So after ``per_address``
failures from one address (or ``per_user`` failures for one user name, from anywhere) within
``lockout_ms``, further attempts from that address (for that name) are refused at once for
``lockout_ms``: no password hashed, no guess made. Only failures count, and a success forgets the user
name's. The per-user limit is the higher one, so that a single address cannot lock a user out alone;
it stops a guess spread over many addresses. Credentials that already verified (the API's credential
cache) never get here, so a fleet keeps heartbeating through an attack.

In memory and per process (one registry process per node), bounded: each map keeps at most
``max_tracked`` keys, the ones that failed longest ago leaving first, so a spray from many addresses
costs a fixed amount of memory. Plain Python with an injected clock (milliseconds, monotonic).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

# Longer user names or addresses are cut: a key's size is bounded whatever a client sends.
KEY_CHARS = 150


@dataclass
class _Tally:
    failures: int
    counting_since: int
    locked_until: int = 0


class _Limit:
    """Failures per key, at most ``limit`` within ``lockout_ms``; ``limit`` 0 never locks."""

    def __init__(self, limit: int, lockout_ms: int, max_tracked: int):
        self.limit = limit
        self.lockout_ms = lockout_ms
        self.max_tracked = max_tracked
        self._tallies: OrderedDict[str, _Tally] = OrderedDict()

    def wait(self, key: str, now: int) -> int:
        tally = self._tallies.get(key)
        if tally is None or tally.locked_until <= now:
            return 0
        return tally.locked_until - now

    def fail(self, key: str, now: int) -> None:
        if not self.limit:
            return
        tally = self._tallies.get(key)
        if tally is None or now - tally.counting_since >= self.lockout_ms:
            tally = _Tally(0, now, tally.locked_until if tally else 0)
            self._tallies[key] = tally
        self._tallies.move_to_end(key)
        tally.failures += 1
        if tally.failures >= self.limit:
            tally.locked_until = now + self.lockout_ms
            tally.failures = 0
            tally.counting_since = now
        while len(self._tallies) > self.max_tracked:
            self._tallies.popitem(last=False)

    def forget(self, key: str) -> None:
        self._tallies.pop(key, None)

    def __len__(self) -> int:
        return len(self._tallies)


class SignInThrottle:
    def __init__(
        self,
        clock: Callable[[], int],
        per_address: int = 10,
        per_user: int = 30,
        lockout_ms: int = 60_000,
        max_tracked: int = 10_000,
    ):
        self.clock = clock
        self._addresses = _Limit(per_address, lockout_ms, max_tracked)
        self._users = _Limit(per_user, lockout_ms, max_tracked)
        self._lock = threading.Lock()

    def wait(self, address: str, username: str) -> int:
        """Whole seconds until ``username`` may try again from ``address`` (0: now, check the password)."""
        now = self.clock()
        with self._lock:
            longest = max(
                self._addresses.wait(address[:KEY_CHARS], now), self._users.wait(username[:KEY_CHARS], now)
            )
        return math.ceil(longest / 1000)

    def failed(self, address: str, username: str) -> None:
        """A password was checked and was wrong (or named no account)."""
        now = self.clock()
        with self._lock:
            self._addresses.fail(address[:KEY_CHARS], now)
            self._users.fail(username[:KEY_CHARS], now)

    def succeeded(self, username: str) -> None:
        """The user proved the password: its failures so far are forgotten (its address's are not, so
        that an attacker holding one account cannot reset the count of the address it guesses from)."""
        with self._lock:
            self._users.forget(username[:KEY_CHARS])

    def tracked(self) -> tuple[int, int]:
        """Addresses and user names remembered (the memory bound)."""
        with self._lock:
            return len(self._addresses), len(self._users)
