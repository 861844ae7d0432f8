from django.contrib.admin.apps import AdminConfig


class EurekaAdminConfig(AdminConfig):
    """Django's admin on the registry's site class, which adds the registered-instances pages."""

    default_site = "registry.admin.site.RegistryAdminSite"
