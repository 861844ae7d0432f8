"""Webhook subscriptions (edited in the admin) and the delivery log (written by the relay and the sender).

Imported by ``registry/models.py`` so they belong to the ``registry`` app and its migrations.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from registry.domain.changes import ACTIONS

from . import policy


def validate_webhook_url(value: str) -> None:
    try:
        policy.check_url(value)
    except policy.BadFilter as exc:
        raise ValidationError(str(exc), code="invalid_url") from None


def validate_actions(value: str) -> None:
    try:
        policy.parse_actions(value)
    except policy.BadFilter as exc:
        raise ValidationError(str(exc), code="invalid_actions") from None


class WebhookSubscription(models.Model):
    """A URL sent every registry change that matches its app and action filters, signed with its secret."""

    name = models.CharField(max_length=100, unique=True, help_text="Sent in each payload as “subscription”.")
    # Not a URLField: Django's URL check refuses single-label hosts (a Compose service name).
    url = models.CharField(
        "URL",
        max_length=500,
        validators=[validate_webhook_url],
        help_text="http:// or https://; each change is POSTed here as JSON.",
    )
    apps = models.TextField(
        blank=True,
        help_text="Comma-separated application names (any case); empty: every application.",
    )
    actions = models.CharField(
        max_length=200,
        blank=True,
        validators=[validate_actions],
        help_text=f"Comma-separated, some of {', '.join(ACTIONS)}; empty: every action.",
    )
    secret = models.CharField(
        max_length=200,
        help_text="Signs each request (X-Eureka-Signature); shown nowhere once saved.",
    )
    include_replicated = models.BooleanField(
        default=False,
        help_text="Also send changes that peers replicated to this node (in a cluster each change "
        "is otherwise sent once, by the node that took it).",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "webhook subscription"

    def __str__(self):
        return self.name

    def clean(self):
        super().clean()
        # Stored as written but normalised: upper-case, no blanks, so the lists read the way they match.
        self.apps = ",".join(sorted(policy.parse_apps(self.apps)))
        try:
            self.actions = ",".join(a for a in ACTIONS if a in policy.parse_actions(self.actions))
        except policy.BadFilter:
            pass  # the field's validator reports it

    def as_target(self) -> policy.Target:
        return policy.Target(
            id=self.pk,
            name=self.name,
            apps=policy.parse_apps(self.apps),
            actions=policy.parse_actions(self.actions),
            include_replicated=self.include_replicated,
        )


class WebhookDelivery(models.Model):
    """One change to send to one subscription: its payload, and how sending it went so far."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    subscription = models.ForeignKey(WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries")
    change_id = models.BigIntegerField("change")
    action = models.CharField(max_length=32)
    app = models.TextField()
    instance_id = models.TextField("instance")
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField("last answer", null=True, blank=True)
    last_error = models.CharField(max_length=200, blank=True)
    # Due from then; while a sender holds the delivery, the end of its claim (see sender.py).
    next_attempt_at = models.DateTimeField(default=timezone.now)
    # Set by the sender that holds the delivery; only that sender records its outcome.
    claim = models.CharField(max_length=32, blank=True, editable=False)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-id"]
        verbose_name = "webhook delivery"
        verbose_name_plural = "webhook deliveries"
        constraints = [
            # The relay may flush a change twice (a retry after a database error): it is sent once.
            models.UniqueConstraint(fields=["subscription", "change_id"], name="webhook_delivery_once")
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="webhook_due")]

    def __str__(self):
        return (
            f"{self.subscription_id}: {self.action} {self.app}/{self.instance_id} (change {self.change_id})"
        )
