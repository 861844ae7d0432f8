"""Admin pages of webhooks (registered by ``registry.admin.site.RegistryAdminSite``): subscriptions are
edited here, with a write-only secret; the delivery log is read-only, with a "retry now" action."""

from __future__ import annotations

import orjson
from django import forms
from django.contrib import admin, messages
from django.utils import timezone
from django.utils.html import format_html

from . import store
from .models import WebhookSubscription
from .relay import kick_delivery


class WebhookSubscriptionForm(forms.ModelForm):
    # Write-only: never rendered back into the page; left empty on an edit, the saved one stays.
    secret = forms.CharField(
        required=False,
        strip=False,
        max_length=200,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Signs each request (X-Eureka-Signature). Leave empty to keep the current one.",
    )

    class Meta:
        model = WebhookSubscription
        fields = ("name", "url", "enabled", "apps", "actions", "include_replicated", "secret")
        widgets = {"apps": forms.TextInput(attrs={"size": 80})}

    def clean_secret(self):
        secret = self.cleaned_data.get("secret", "")
        if secret:
            return secret
        if self.instance.pk:
            return self.instance.secret
        raise forms.ValidationError("A secret is required: receivers verify each request with it.")


class WebhookSubscriptionAdmin(admin.ModelAdmin):
    """Subscriptions: where changes are sent, which ones, signed with which secret (never shown)."""

    form = WebhookSubscriptionForm
    list_display = (
        "name",
        "url",
        "apps_shown",
        "actions_shown",
        "enabled",
        "include_replicated",
        "updated_at",
    )
    list_filter = ("enabled",)
    search_fields = ("name", "url", "apps")

    @admin.display(description="apps")
    def apps_shown(self, subscription):
        return subscription.apps or "all"

    @admin.display(description="actions")
    def actions_shown(self, subscription):
        return subscription.actions.replace(",", ", ") if subscription.actions else "all"


class WebhookDeliveryAdmin(admin.ModelAdmin):
    """The delivery log: what was sent where and how it went; written by the senders, never edited."""

    list_display = (
        "id",
        "created_at",
        "subscription",
        "action",
        "app",
        "instance_id",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
        "next_attempt_at",
        "delivered_at",
    )
    list_filter = ("status", "subscription", "action")
    search_fields = ("app", "instance_id", "=change_id")
    list_select_related = ("subscription",)
    list_per_page = 100
    actions = ("retry_now",)
    readonly_fields = (
        "subscription",
        "change_id",
        "action",
        "app",
        "instance_id",
        "payload_shown",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
        "next_attempt_at",
        "delivered_at",
        "created_at",
    )
    exclude = ("payload",)

    @admin.display(description="payload")
    def payload_shown(self, delivery):
        return format_html(
            "<pre>{}</pre>", orjson.dumps(delivery.payload, option=orjson.OPT_INDENT_2).decode()
        )

    @admin.action(description="Retry now", permissions=("retry",))
    def retry_now(self, request, queryset):
        selected = queryset.count()
        count = store.retry_now(queryset, timezone.now())
        kick_delivery()
        skipped = selected - count
        message = f"{count} deliver{'y' if count == 1 else 'ies'} will be sent again now."
        if skipped:
            message += f" {skipped} already delivered left alone."
        self.message_user(request, message, messages.SUCCESS)

    def has_retry_permission(self, request):
        return request.user.has_perm("registry.change_webhookdelivery")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
