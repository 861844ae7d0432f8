"""App grants: which apps an API account of role *client* may write. Plain Python, no Django.

A grant is a pattern of app names in ``fnmatch`` style (``ORDERS``, ``PAYMENTS-*``, ``EDGE-?``),
compared without regard to case, as Eureka compares app names. An account with no grant may write
every app (as before grants existed); one with grants may write only the apps one of them matches.
Reads are never scoped, and neither are peers (they replicate every app).
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

MAX_PATTERN_CHARS = 200

# What an app name cannot hold (it is a segment of the instance's URL path), and the list separator.
_NOT_IN_PATTERN = re.compile(r"[\s/,\x00-\x1f\x7f]")


class BadGrant(ValueError):
    """A grant pattern that cannot mean an app name; the message says why."""


def check_pattern(pattern: str) -> str:
    """The pattern, upper-cased, or ``BadGrant`` saying what is wrong with it."""
    if not pattern:
        raise BadGrant("An app grant is empty (two commas in a row, or a trailing comma?)")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise BadGrant(f"The app grant {pattern[:40]!r}... is longer than {MAX_PATTERN_CHARS} characters")
    bad = _NOT_IN_PATTERN.search(pattern)
    if bad:
        char = f"{bad.group()!r}" if bad.group().isprintable() else f"U+{ord(bad.group()):04X}"
        raise BadGrant(
            f"The app grant {pattern[:60]!r} holds {char}: app names hold no '/', ',', whitespace or "
            "control characters"
        )
    if not pattern.strip("*?"):
        raise BadGrant(
            f"The app grant {pattern!r} matches every app: clear the account's grants instead "
            "(an account with no grant may write every app)"
        )
    depth = 0
    for char in pattern:
        if char == "[":
            depth += 1
        elif char == "]" and depth:
            depth -= 1
    if depth:
        raise BadGrant(f"The app grant {pattern[:60]!r} opens a '[' it never closes")
    return pattern.upper()


def parse_grants(text: str) -> tuple[str, ...]:
    """``"orders, PAYMENTS-*"`` → ``("ORDERS", "PAYMENTS-*")``: checked, upper-cased, duplicates
    dropped, in the order given. An empty or blank text is no grant at all; ``BadGrant`` otherwise
    names the first bad pattern."""
    if not text or not text.strip():
        return ()
    patterns: list[str] = []
    for part in text.split(","):
        pattern = check_pattern(part.strip())
        if pattern not in patterns:
            patterns.append(pattern)
    return tuple(patterns)


def format_grants(patterns: tuple[str, ...]) -> str:
    return ",".join(patterns)


def allows(patterns: tuple[str, ...], app: str) -> bool:
    """Whether grants ``patterns`` (upper-cased, as ``parse_grants`` leaves them) let an account write
    ``app``; no pattern at all lets it write every app."""
    if not patterns:
        return True
    name = app.upper()
    return any(fnmatchcase(name, pattern) for pattern in patterns)
