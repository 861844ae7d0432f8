"""The node's own deployment checks: ``manage.py check --deploy`` runs them beside Django's.

Registered by ``RegistryConfig.ready`` (registry/apps.py).
"""

from __future__ import annotations

from django.conf import settings
from django.core import checks

from registry.config.site import EMBEDDED_SECRET_KEY

BUILT_IN_SECRET_KEY = "registry.W001"


@checks.register(checks.Tags.security, deploy=True)
def check_secret_key_is_not_the_built_in_one(app_configs, **kwargs):
    """The key embedded mode falls back to is in the source, so anyone can forge the console's session
    and CSRF cookies signed with it. Django's own key check (security.W009) does not catch it: it is
    long and varied enough."""
    if settings.SECRET_KEY != EMBEDDED_SECRET_KEY:
        return []
    return [
        checks.Warning(
            "SECRET_KEY is the built-in development key of embedded mode (EUREKA_EMBEDDED=true and no "
            "SECRET_KEY): it is public, so anyone can forge the console's and the admin's session and "
            "CSRF cookies.",
            hint=(
                "Set SECRET_KEY (or SECRET_KEY_FILE) to a long random value, e.g. "
                "python3 -c 'import secrets; print(secrets.token_urlsafe(50))', and EUREKA_EMBEDDED=false "
                "so that a node without one refuses to start. With REDIS_URL set the node already refuses."
            ),
            id=BUILT_IN_SECRET_KEY,
        )
    ]
