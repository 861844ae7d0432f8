"""The audit trail of status overrides in the Django admin (registered by ``site.RegistryAdminSite``)."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html


class StatusOverrideRecordAdmin(admin.ModelAdmin):
    """The audit trail: browsable and filterable, never edited (records are written by the actions)."""

    list_display = (
        "created_at",
        "username",
        "instance_link",
        "action",
        "change",
        "outcome",
        "reason",
    )
    list_filter = ("action", "new_status", "outcome", "created_at", "app", "username")
    search_fields = ("instance_id", "app", "username", "reason")
    date_hierarchy = "created_at"
    list_per_page = 100

    @admin.display(description="instance", ordering="instance_id")
    def instance_link(self, record):
        url = reverse("admin:registry_instance", args=[record.app, record.instance_id])
        return format_html('<a href="{}">{} / {}</a>', url, record.app, record.instance_id)

    @admin.display(description="status")
    def change(self, record):
        return f"{record.old_status or '?'} → {record.new_status}"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
