"""Sending due deliveries: claim a batch, POST each (signed), record what the receiver answered.

The same function serves the node's delivery thread (embedded mode) and the Celery task (production
mode); several of them may run at once, the claim (``store.claim_due``) keeps each delivery to one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.utils import timezone

from registry.domain.outbound_tls import tls_failure

from . import policy, store
from .models import WebhookDelivery

if TYPE_CHECKING:
    import httpx

    from registry.config.services import WebhooksConfig
    from registry.domain.outbound_tls import OutboundTls

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeliveryConfig:
    timeout_s: float = 5.0
    max_attempts: int = 8
    retry_base_ms: int = 1_000
    retry_max_ms: int = 300_000
    batch_size: int = 20

    @classmethod
    def from_config(cls, config: WebhooksConfig) -> DeliveryConfig:
        """From ``settings.EUREKA.webhooks``."""
        return cls(
            timeout_s=config.timeout_ms / 1000,
            max_attempts=config.max_attempts,
            retry_base_ms=config.retry_base_ms,
            retry_max_ms=config.retry_max_ms,
        )

    @property
    def hold(self) -> timedelta:
        # Long enough for a whole batch of receivers that each take the full timeout, with margin.
        return timedelta(seconds=self.timeout_s * self.batch_size + 30)


def new_client(config: DeliveryConfig, tls: OutboundTls | None = None) -> httpx.Client:
    """The sender's client. An https:// receiver's certificate is verified with the node's outbound
    TLS (``tls``, else EUREKA_OUTBOUND_CA_FILE's; the system's trust store without one); the node's
    own certificate is not presented to receivers."""
    # No redirects: a signed POST goes where it was subscribed, nowhere else. No environment proxies
    # either: deliveries go straight to the receiver. httpx is loaded here, by the first sender: a
    # node without webhook deliveries does not hold it (tests/runtime/test_lazy_imports.py).
    from django.conf import settings

    from registry.wire.outbound import outbound_client

    if tls is None:
        tls = settings.EUREKA.outbound_tls.contexts()
    return outbound_client(tls, client_cert=False, timeout=config.timeout_s, follow_redirects=False)


def deliver_due(
    client: httpx.Client,
    config: DeliveryConfig,
    *,
    max_seconds: float = 30.0,
    now: Callable[[], datetime] = timezone.now,
) -> int:
    """Send due deliveries until none is due or ``max_seconds`` have passed; returns how many were tried.

    A receiver that did not answer (timeout, refused connection) is not tried again in this pass: its
    other deliveries wait for the next, and the rest of the receivers are not held up behind it.
    """
    started = time.monotonic()
    tried = 0
    unreachable: set[int] = set()
    while time.monotonic() - started < max_seconds:
        token, batch = store.claim_due(now(), config.batch_size, config.hold, unreachable)
        if not batch:
            break
        skipped: list[int] = []
        for index, delivery in enumerate(batch):
            if time.monotonic() - started >= max_seconds:
                skipped.extend(d.id for d in batch[index:])
                break
            if delivery.subscription_id in unreachable:
                skipped.append(delivery.id)
                continue
            tried += 1
            if not send_one(client, delivery, token, config, now):
                unreachable.add(delivery.subscription_id)
        if skipped:
            # Given back at once: left claimed, they would wait out the whole hold.
            store.release(token, skipped, now())
    return tried


def send_one(
    client: httpx.Client,
    delivery: WebhookDelivery,
    token: str,
    config: DeliveryConfig,
    now: Callable[[], datetime] = timezone.now,
) -> bool:
    """POST one delivery and record the outcome; False when the receiver gave no answer at all."""
    import httpx  # loaded already by new_client (see there)

    subscription = delivery.subscription
    body = policy.encode(delivery.payload)
    headers = policy.headers(subscription.secret, int(time.time()), body, delivery.action, delivery.id)
    status_code: int | None = None
    try:
        response = client.post(subscription.url, content=body, headers=headers)
        status_code = response.status_code
        error = "" if 200 <= status_code < 300 else f"HTTP {status_code} {response.reason_phrase}".strip()
    except httpx.TimeoutException:
        error = f"no answer within {config.timeout_s:g} s"
    except httpx.HTTPError as exc:
        tls = tls_failure(exc)
        if tls is not None:
            error = f"TLS: {tls}"
        else:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    attempts = delivery.attempts + 1
    outcome = policy.next_step(policy.classify(status_code), attempts, config.max_attempts)
    at = now()
    retry_at = at + timedelta(
        milliseconds=policy.retry_delay_ms(attempts, config.retry_base_ms, config.retry_max_ms)
    )
    if not store.record(delivery, token, outcome, status_code, error, at, retry_at):
        logger.warning("webhook delivery %s was claimed by another sender meanwhile", delivery.id)
    if outcome is policy.Verdict.FAILED:
        logger.warning(
            "webhook delivery %s to %s failed after %d attempt(s): %s",
            delivery.id,
            subscription.name,
            attempts,
            error,
            extra={"event": "webhook_failed", "subscription": subscription.name},
        )
    return status_code is not None
