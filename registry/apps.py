from django.apps import AppConfig


class RegistryConfig(AppConfig):
    name = "registry"
    verbose_name = "Eureka registry"

    def ready(self):
        from registry.access.accounts import connect_signals
        from registry.runtime import checks  # noqa: F401 (registers the deployment checks)

        # Account changes made in this process forget remembered credentials at once.
        connect_signals()
