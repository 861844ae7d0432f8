from django.contrib import admin
from django.urls import include, path, re_path

from registry import urls as eureka_urls
from registry.http import empty, text

# The same protocol tree under every prefix real clients use (Spring: /eureka/, JS and fargo: /eureka/v2/).
urlpatterns = [
    re_path(r"^eureka/+v2/+", include((eureka_urls.urlpatterns, "eureka"), namespace="eureka-v2")),
    re_path(r"^eureka/+v1/+", include((eureka_urls.urlpatterns, "eureka"), namespace="eureka-v1")),
    re_path(r"^eureka/+", include(eureka_urls, namespace="eureka")),
    path("admin/", admin.site.urls),
    path("", include("dashboard.urls")),
]


def handler404(request, exception=None):
    # Protocol 404s carry no body: Jersey clients try to decode any non-HTML body as an instance.
    if request.path.startswith("/eureka/"):
        return empty(404)
    return text(404, f"Not found: {request.path}")


def handler500(request):
    return text(500, "Internal server error")
