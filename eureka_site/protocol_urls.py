"""URLconf of the Eureka protocol alone: what the lean protocol handler resolves against.

One include serves ``/eureka/``, ``/eureka/v2/`` and ``/eureka/v1/`` (Spring and py-eureka-client use
the first, eureka-js-client and fargo the second); a doubled slash is tolerated because fargo builds
``serviceUrl + "/apps"``.
"""

from django.urls import include, re_path

from registry.protocol import urls as eureka_urls
from registry.wire.http import empty, text

urlpatterns = [
    re_path(r"^eureka/+(?:v[12]/+)?", include(eureka_urls, namespace="eureka")),
]


def handler404(request, exception=None):
    # Protocol 404s carry no body: Jersey clients try to decode any non-HTML body as an instance.
    return empty(404)


def handler500(request):
    return text(500, "Internal server error")
