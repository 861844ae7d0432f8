"""The database work of webhooks: which subscriptions are on, queueing deliveries, claiming due ones,
recording outcomes, pruning the log. Shared by the node's relay, its delivery thread and Celery.

Callers on background threads close their connection afterwards (``close_connection``): nothing else
would, and each thread or greenlet would keep one open for good.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import IntegrityError, connection
from django.db.models import Q, QuerySet

from registry.domain.changes import Change

from . import policy
from .models import WebhookDelivery, WebhookSubscription

Status = WebhookDelivery.Status


def close_connection() -> None:
    if not connection.in_atomic_block:
        connection.close()


def enabled_targets() -> list[policy.Target]:
    targets = []
    for subscription in WebhookSubscription.objects.filter(enabled=True).order_by("id"):
        try:
            targets.append(subscription.as_target())
        except policy.BadFilter:
            # Saved outside the admin's validation (a shell, a fixture): skipped rather than guessed at.
            continue
    return targets


def enqueue(pairs: Iterable[tuple[policy.Target, Change]], now: datetime) -> int:
    """One pending delivery per (subscription, change); a pair already queued is left as it is."""
    rows = [
        WebhookDelivery(
            subscription_id=target.id,
            change_id=change.id,
            action=change.action,
            app=change.app,
            instance_id=change.instance_id,
            payload=policy.payload(change, target.name),
            next_attempt_at=now,
            created_at=now,
        )
        for target, change in pairs
    ]
    if not rows:
        return 0
    try:
        # ignore_conflicts: the unique (subscription, change) constraint makes a repeated flush harmless.
        WebhookDelivery.objects.bulk_create(rows, batch_size=500, ignore_conflicts=True)
    except IntegrityError:
        # A subscription deleted since the relay last loaded them (a foreign key is no "conflict"):
        # its rows are dropped, the others queued.
        alive = set(
            WebhookSubscription.objects.filter(id__in={row.subscription_id for row in rows}).values_list(
                "id", flat=True
            )
        )
        rows = [row for row in rows if row.subscription_id in alive]
        WebhookDelivery.objects.bulk_create(rows, batch_size=500, ignore_conflicts=True)
    return len(rows)


def _due(now: datetime) -> QuerySet[WebhookDelivery]:
    return WebhookDelivery.objects.filter(
        status=Status.PENDING, next_attempt_at__lte=now, subscription__enabled=True
    )


def claim_due(
    now: datetime, limit: int, hold: timedelta, skip_subscriptions: Iterable[int] = ()
) -> tuple[str, list[WebhookDelivery]]:
    """Claim up to ``limit`` due deliveries, oldest first, for ``hold``; returns the claim and them.

    The claim is one conditional UPDATE (due and pending at the moment it runs), so of two senders
    racing for a row exactly one gets it, on every database; a sender that dies holding rows gives
    them back when ``hold`` runs out (they are due again).
    """
    candidates = _due(now).exclude(subscription_id__in=list(skip_subscriptions)).order_by("id")
    ids = list(candidates.values_list("id", flat=True)[:limit])
    if not ids:
        return "", []
    token = uuid.uuid4().hex
    WebhookDelivery.objects.filter(id__in=ids, status=Status.PENDING, next_attempt_at__lte=now).update(
        claim=token, next_attempt_at=now + hold
    )
    claimed = list(WebhookDelivery.objects.filter(claim=token).select_related("subscription").order_by("id"))
    return token, claimed


def release(token: str, ids: Iterable[int], now: datetime) -> None:
    """Give back claimed deliveries that were not attempted (due again at once, no attempt counted)."""
    WebhookDelivery.objects.filter(claim=token, id__in=list(ids)).update(claim="", next_attempt_at=now)


def record(
    delivery: WebhookDelivery,
    token: str,
    outcome: policy.Verdict,
    status_code: int | None,
    error: str,
    now: datetime,
    retry_at: datetime | None,
) -> bool:
    """Store one attempt's outcome; False when the claim was lost meanwhile (the row is left alone)."""
    changes = {
        "attempts": delivery.attempts + 1,
        "last_status_code": status_code,
        "last_error": policy.short_error(error),
        "claim": "",
    }
    if outcome is policy.Verdict.DELIVERED:
        changes |= {"status": Status.DELIVERED, "delivered_at": now, "last_error": ""}
    elif outcome is policy.Verdict.FAILED:
        changes |= {"status": Status.FAILED}
    else:
        changes |= {"next_attempt_at": retry_at or now}
    return WebhookDelivery.objects.filter(id=delivery.id, claim=token).update(**changes) == 1


def retry_now(deliveries: QuerySet[WebhookDelivery], now: datetime) -> int:
    """Make deliveries due now (pending again if they had failed): one more attempt each, kept attempts."""
    return deliveries.exclude(status=Status.DELIVERED).update(
        status=Status.PENDING, next_attempt_at=now, claim=""
    )


def prune(now: datetime, retention: timedelta) -> int:
    """Delete delivered and failed deliveries older than ``retention``; pending ones stay."""
    cutoff = now - retention
    finished = Q(status=Status.DELIVERED) | Q(status=Status.FAILED)
    deleted, _ = WebhookDelivery.objects.filter(finished, created_at__lt=cutoff).delete()
    return deleted


def has_due(now: datetime) -> bool:
    return _due(now).exists()
