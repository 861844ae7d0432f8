"""URLconf of a reader process (``eureka_site/reader_wsgi.py``): the protocol prefixes of
``protocol_urls.py`` (``/eureka/``, ``/eureka/v2/``, ``/eureka/v1/``, doubled slashes tolerated) on the
reader's routes, and its probes. Nothing else: no console, no admin, no control endpoint."""

from django.urls import include, path, re_path

from eureka_site import protocol_urls
from registry.reader import urls as reader_urls
from registry.reader import views
from registry.wire.http import text

urlpatterns = [
    re_path(r"^eureka/+(?:v[12]/+)?", include(reader_urls, namespace="reader")),
    path("healthz", views.HealthView.as_view(), name="healthz"),
    path("readyz", views.ReadyView.as_view(), name="readyz"),
]


def handler404(request, exception=None):
    if request.path.startswith("/eureka/"):
        return protocol_urls.handler404(request, exception)
    return text(404, f"Not found on a reader (it serves /eureka/, /healthz and /readyz): {request.path}")


handler500 = protocol_urls.handler500
