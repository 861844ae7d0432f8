"""The admin site: Django's, plus the registry's own pages for registered instances."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.urls import NoReverseMatch, path, reverse

from registry.admin.signin import ThrottledAdminAuthenticationForm


class RegistryAdminSite(admin.AdminSite):
    site_header = "Eureka registry administration"
    site_title = "Eureka registry"
    index_title = "Registry administration"
    # Failed sign-ins throttled per address and per user name (registry/admin/signin.py).
    login_form = ThrottledAdminAuthenticationForm

    def login(self, request, extra_context=None):
        response = super().login(request, extra_context)
        form = (getattr(response, "context_data", None) or {}).get("form")
        retry_after = getattr(form, "retry_after", 0)
        if retry_after:
            # The form says how long to wait; the status and header say it to scripts and proxies.
            response.status_code = 429
            response["Retry-After"] = str(retry_after)
        busy_retry_after = getattr(form, "busy_retry_after", 0)
        if busy_retry_after:
            # Not checked: too many password checks were waiting (registry/access/hashers.py).
            response.status_code = 503
            response["Retry-After"] = str(busy_retry_after)
        return response

    def __init__(self, name="admin"):
        super().__init__(name)
        from registry.admin.records import StatusOverrideRecordAdmin
        from registry.models import StatusOverrideRecord

        self.register(StatusOverrideRecord, StatusOverrideRecordAdmin)

        # Webhooks (registry/webhooks/): subscriptions, and the read-only delivery log.
        from registry.webhooks.admin import WebhookDeliveryAdmin, WebhookSubscriptionAdmin
        from registry.webhooks.models import WebhookDelivery, WebhookSubscription

        self.register(WebhookSubscription, WebhookSubscriptionAdmin)
        self.register(WebhookDelivery, WebhookDeliveryAdmin)

    def register(self, model_or_iterable, admin_class=None, **options):
        # Django's auth app registers its user admin here while the admin autodiscovers: the API
        # accounts' certificate names and app grants are edited on that page.
        from django.contrib.auth import get_user_model

        models = model_or_iterable if isinstance(model_or_iterable, list | tuple) else (model_or_iterable,)
        if get_user_model() in models and admin_class is not None:
            from registry.admin.accounts import with_api_access

            admin_class = with_api_access(admin_class)
        super().register(model_or_iterable, admin_class, **options)

    def get_urls(self):
        from registry.admin.views import InstanceAdminView, InstanceListAdminView

        own = [
            path(
                "registry/instances/",
                self.admin_view(InstanceListAdminView.as_view(site=self)),
                name="registry_instances",
            ),
            path(
                "registry/instances/<str:app>/<str:instance_id>/",
                self.admin_view(InstanceAdminView.as_view(site=self)),
                name="registry_instance",
            ),
        ]
        return own + super().get_urls()

    def each_context(self, request):
        context = super().each_context(request)
        # "View site" leads to the status console (or nowhere when it is turned off).
        context["site_url"] = None
        if settings.EUREKA.dashboard.enabled:
            try:
                context["site_url"] = reverse("dashboard:status")
            except NoReverseMatch:
                pass
        return context

    def get_app_list(self, request, app_label=None):
        """The registry's section lists "Registered instances" (not a model: the live lease map)."""
        app_list = super().get_app_list(request, app_label)
        if app_label not in (None, "registry"):
            return app_list
        entry = {
            "name": "Registered instances",
            "object_name": "RegisteredInstance",
            "perms": {"add": False, "change": False, "delete": False, "view": True},
            "admin_url": reverse("admin:registry_instances", current_app=self.name),
            "add_url": None,
            "view_only": True,
        }
        section = next((app for app in app_list if app["app_label"] == "registry"), None)
        if section is None:
            section = {
                "name": "Eureka registry",
                "app_label": "registry",
                "app_url": reverse("admin:registry_instances", current_app=self.name),
                "has_module_perms": True,
                "models": [],
            }
            app_list.append(section)
        section["models"].insert(0, entry)
        return app_list
