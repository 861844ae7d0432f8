"""The rules of webhook delivery, in plain Python: matching, payload, signature, retries.

No Django here, so each rule is unit-tested on its own. The scheme receivers verify (docs/webhooks.md):
``X-Eureka-Signature: sha256=<hex>`` where ``hex`` is HMAC-SHA256 with the subscription's
secret over ``<X-Eureka-Timestamp>.<raw body>``, the timestamp being whole seconds since the epoch.
Signing the timestamp lets a receiver refuse a captured request replayed later.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit

import orjson

from registry.domain.changes import ACTIONS, Change

SIGNATURE_HEADER = "X-Eureka-Signature"
TIMESTAMP_HEADER = "X-Eureka-Timestamp"
EVENT_HEADER = "X-Eureka-Event"
DELIVERY_HEADER = "X-Eureka-Delivery"
USER_AGENT = "eureka-django-webhooks"


class BadFilter(ValueError):
    pass


def parse_apps(text: str) -> frozenset[str]:
    """``"orders, Billing"`` → ``{"ORDERS", "BILLING"}`` (app names compare upper-case, as Eureka's)."""
    return frozenset(part.strip().upper() for part in (text or "").split(",") if part.strip())


def parse_actions(text: str) -> frozenset[str]:
    """Comma-separated actions of ``registry.domain.changes.ACTIONS``; an unknown one raises BadFilter."""
    wanted = frozenset(part.strip().upper() for part in (text or "").split(",") if part.strip())
    unknown = sorted(wanted - set(ACTIONS))
    if unknown:
        raise BadFilter(f"unknown action(s) {', '.join(unknown)}: expected some of {', '.join(ACTIONS)}")
    return wanted


def check_url(url: str) -> str:
    """The URL itself when it is an absolute http(s) URL with a host, else BadFilter naming why."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (reading it raises on a port out of range or not a number)
    except ValueError as exc:
        raise BadFilter(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise BadFilter("the URL must start with http:// or https://")
    if not parts.hostname:
        raise BadFilter("the URL has no host")
    if parts.username or parts.password:
        # Credentials in the URL would be shown in the admin's lists and logs: the secret signs instead.
        raise BadFilter("the URL must not carry credentials (the secret signs each request)")
    if any(ch.isspace() for ch in url):
        raise BadFilter("the URL contains white space")
    return url


@dataclass(frozen=True)
class Target:
    """An enabled subscription as the relay matches changes against it (no secret: not needed here)."""

    id: int
    name: str
    apps: frozenset[str] = frozenset()  # empty: every app
    actions: frozenset[str] = frozenset()  # empty: every action
    include_replicated: bool = False

    def matches(self, change: Change) -> bool:
        # A change a peer replicated here was announced by the node that took it.
        if change.replicated and not self.include_replicated:
            return False
        if self.apps and change.app.upper() not in self.apps:
            return False
        return not self.actions or change.action in self.actions


def matching(targets: Iterable[Target], changes: Iterable[Change]) -> list[tuple[Target, Change]]:
    targets = list(targets)
    return [(target, change) for change in changes for target in targets if target.matches(change)]


def payload(change: Change, subscription_name: str) -> dict:
    """The JSON object POSTed for one change (docs/webhooks.md documents each key)."""
    return {**change.as_json(), "subscription": subscription_name}


def encode(body: dict) -> bytes:
    return orjson.dumps(body)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256(secret, b"<timestamp>." + body)>``."""
    message = str(int(timestamp)).encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def headers(secret: str, timestamp: int, body: bytes, action: str, delivery_id: int) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        EVENT_HEADER: action,
        DELIVERY_HEADER: str(delivery_id),
        TIMESTAMP_HEADER: str(int(timestamp)),
        SIGNATURE_HEADER: signature(secret, timestamp, body),
    }


class Verdict(Enum):
    DELIVERED = "delivered"
    RETRY = "retry"
    FAILED = "failed"


# 408 and 429 say "not now", not "never": the receiver asks for another try.
_RETRYABLE_CLIENT_ERRORS = frozenset({408, 429})


def classify(status_code: int | None) -> Verdict:
    """An answer's verdict; ``None`` stands for no answer (transport error, timeout): retried."""
    if status_code is None:
        return Verdict.RETRY
    if 200 <= status_code < 300:
        return Verdict.DELIVERED
    if status_code in _RETRYABLE_CLIENT_ERRORS or status_code >= 500:
        return Verdict.RETRY
    # Other 4xx (and the odd 1xx/3xx: redirects are not followed, a signed POST must not wander):
    # the receiver refuses this request; sending it again would get the same answer.
    return Verdict.FAILED


def retry_delay_ms(attempts: int, base_ms: int, cap_ms: int) -> int:
    """The wait after the ``attempts``-th failed attempt: base, 2 x base, 4 x base, ... up to cap."""
    if attempts < 1:
        return 0
    # The exponent is bounded so a huge attempt count cannot build a huge integer.
    return min(cap_ms, base_ms * (1 << min(attempts - 1, 40)))


def next_step(verdict: Verdict, attempts: int, max_attempts: int) -> Verdict:
    """What becomes of a delivery after its ``attempts``-th attempt got ``verdict``."""
    if verdict is Verdict.RETRY and attempts >= max_attempts:
        return Verdict.FAILED
    return verdict


def short_error(text: str, limit: int = 200) -> str:
    """One line, bounded: what the delivery log keeps of an error (never a header, never a secret)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
