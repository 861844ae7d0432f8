"""The API account's certificate names and app grants, edited on the user's admin page (an inline).

Django's auth app registers its ``UserAdmin`` on the registry's site; the site adds this inline to it
(``RegistryAdminSite.register``). Changes are recorded as every admin change is, in the admin's
history (``LogEntry``: who, when, which fields), and empty the credential cache at once
(registry/access/accounts.py), so the account's next request already meets its new grants.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin

from registry.access.models import ApiAccess


class ApiAccessForm(forms.ModelForm):
    class Meta:
        model = ApiAccess
        fields = ("certificate_names", "apps")
        widgets = {
            "certificate_names": forms.Textarea(attrs={"rows": 3, "cols": 80}),
            "apps": forms.TextInput(attrs={"size": 80}),
        }


class ApiAccessInline(admin.StackedInline):
    model = ApiAccess
    form = ApiAccessForm
    can_delete = True
    max_num = 1
    extra = 1
    verbose_name = "API access: certificate names and app grants"
    verbose_name_plural = verbose_name


def with_api_access(admin_class: type[admin.ModelAdmin]) -> type[admin.ModelAdmin]:
    """``admin_class`` (the user model's admin) with the API access inline on its change page."""

    class AccountAdmin(admin_class):
        inlines = (*admin_class.inlines, ApiAccessInline)

        def get_inline_instances(self, request, obj=None):
            # Not on the add page (Django's user admin asks only for a name and password there).
            return super().get_inline_instances(request, obj) if obj is not None else []

    AccountAdmin.__name__ = AccountAdmin.__qualname__ = f"{admin_class.__name__}WithApiAccess"
    return AccountAdmin
