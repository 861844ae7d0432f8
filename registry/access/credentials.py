"""Verified credentials, remembered for a short time. Plain Python with an injected clock.

Checking a password hash costs about half a second of CPU (PBKDF2, a million rounds); a fleet
heartbeats thousands of times a second with the same few credentials. So a header that verified is
remembered by its SHA-256 digest (the cache never holds a password) together with the account's
stored password hash; a client certificate by its own digest, with the certificate name it matched.
After ``recheck_ms`` the account row is read again — cheap, no hashing — and the entry stays only
while the stored hash is unchanged (the account still holds the certificate name) and the account
active, so a disabled account or a changed password is refused within seconds. Refusals are
remembered for a shorter time, so a client retrying with a wrong password costs one hash per
``refused_ms``, not one per try.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """An authenticated API account: what the permission checks need, nothing from the database."""

    user_id: int
    username: str
    permissions: frozenset[str]
    # App grants (registry/access/grants.py): patterns of the apps a client account may write; none,
    # every app.
    apps: tuple[str, ...] = ()
    is_authenticated = True
    is_active = True

    def __str__(self) -> str:
        return self.username


@dataclass(frozen=True)
class Verdict:
    """One remembered check: ``principal`` None means the credentials were refused. ``proof`` is what
    must still hold at the recheck: for Basic credentials the account's stored password hash, for a
    client certificate the certificate name it matched."""

    principal: Principal | None
    proof: str
    checked_at: int

    def fresh(self, now: int, ttl: int) -> bool:
        return now - self.checked_at < ttl


def digest(header: str) -> bytes:
    return hashlib.sha256(header.encode("utf-8", "surrogatepass")).digest()


class CredentialCache:
    def __init__(
        self,
        clock: Callable[[], int],
        recheck_ms: int = 5_000,
        refused_ms: int = 2_000,
        max_entries: int = 10_000,
    ):
        self.clock = clock
        self.recheck_ms = recheck_ms
        self.refused_ms = refused_ms
        self.max_entries = max_entries
        self._verdicts: dict[bytes, Verdict] = {}

    def lookup(self, key: bytes) -> Verdict | None:
        return self._verdicts.get(key)

    def is_fresh(self, verdict: Verdict, now: int) -> bool:
        return verdict.fresh(now, self.recheck_ms if verdict.principal else self.refused_ms)

    def remember(self, key: bytes, principal: Principal | None, proof: str, now: int) -> Verdict:
        if len(self._verdicts) >= self.max_entries and key not in self._verdicts:
            # Many distinct credentials (a scan): start over rather than grow without bound.
            self._verdicts.clear()
        verdict = Verdict(principal, proof, now)
        self._verdicts[key] = verdict
        return verdict

    def forget(self, key: bytes) -> None:
        self._verdicts.pop(key, None)

    def clear(self) -> None:
        self._verdicts.clear()

    def __len__(self) -> int:
        return len(self._verdicts)
