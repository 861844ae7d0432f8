from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from registry.wire.http import text

from . import protocol_urls

urlpatterns = [
    *protocol_urls.urlpatterns,
    path("", include("registry.protocol.control_urls")),
    path("admin/", admin.site.urls),
    # The change feed (registry/feed/): JSON and Server-Sent Events for operators' tools.
    path("api/v1/", include("registry.protocol.feed_urls")),
]
if settings.EUREKA.dashboard.enabled:
    urlpatterns.append(path(settings.EUREKA.dashboard.prefix, include("dashboard.urls")))


def handler404(request, exception=None):
    if request.path.startswith("/eureka/"):
        return protocol_urls.handler404(request, exception)
    return text(404, f"Not found: {request.path}")


handler500 = protocol_urls.handler500
