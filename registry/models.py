"""What the registry keeps in the database: the audit trail of status overrides made in the admin.

The lease map itself is in memory (``registry.domain.core``); nothing here is read on the protocol path.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone

from registry.domain import constants as c

from .access import roles

STATUS_CHOICES = [(status, status) for status in (c.UP, c.DOWN, c.STARTING, c.OUT_OF_SERVICE, c.UNKNOWN)]


class StatusOverrideRecord(models.Model):
    """One status override an operator asked for in the admin: who, when, which instance, from which
    status to which, and why. Written before the change is applied (``outcome`` pending) and completed
    after, so no change reaches the registry without its record."""

    class Action(models.TextChoices):
        TAKE_OUT_OF_SERVICE = "take_out_of_service", "Take out of service"
        PUT_BACK_IN_SERVICE = "put_back_in_service", "Put back in service (remove override)"
        SET_STATUS = "set_status", "Set status"

    class Outcome(models.TextChoices):
        PENDING = "pending", "Pending"
        APPLIED = "applied", "Applied"
        UNCHANGED = "unchanged", "Unchanged (already so)"
        NOT_FOUND = "not_found", "Instance not found"
        FAILED = "failed", "Failed"

    created_at = models.DateTimeField("when", default=timezone.now, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Kept as text too, so the record still says who after the account is deleted.
    username = models.CharField("who", max_length=150)
    app = models.TextField(db_index=True)
    instance_id = models.TextField("instance", db_index=True)
    action = models.CharField(max_length=32, choices=Action.choices)
    old_status = models.CharField(max_length=16, blank=True, choices=STATUS_CHOICES)
    new_status = models.CharField(max_length=16, choices=STATUS_CHOICES)
    old_override = models.CharField("override before", max_length=16, blank=True)
    new_override = models.CharField("override after", max_length=16, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.PENDING)
    reason = models.TextField()

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("override_instance_status", "Can override the status of registered instances")]
        verbose_name = "status override record"

    def __str__(self):
        return f"{self.username}: {self.app}/{self.instance_id} {self.old_status or '?'} → {self.new_status}"


class RegistryApi(models.Model):
    """No table: the anchor of the API permissions that the roles (groups) hold (``registry.access``)."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = list(roles.PERMISSIONS.items())
        verbose_name = "Eureka API"

    def __str__(self):
        return "Eureka API"


# Webhook subscriptions and their delivery log live in their package (registry/webhooks/); imported
# here so they are models of this app and its migrations.
# API accounts' certificate names and app grants (registry/access/models.py), likewise.
from .access.models import ApiAccess  # noqa: E402, F401
from .webhooks.models import WebhookDelivery, WebhookSubscription  # noqa: E402, F401
