"""Routes of a reader, relative to a protocol prefix (``eureka/``, ``eureka/v2/``...), as the node's
``registry/protocol/urls.py``: the five cached reads are served, anything else is forwarded."""

from django.urls import re_path

from registry.protocol.urls import APP
from registry.reader import views

app_name = "reader"

urlpatterns = [
    re_path(r"^apps/?$", views.ApplicationsView.as_view(), name="apps"),
    re_path(r"^apps/delta/?$", views.DeltaView.as_view(), name="delta"),
    re_path(rf"^apps/{APP}/?$", views.ApplicationView.as_view(), name="app"),
    re_path(r"^vips/(?P<vip>[^/]+)/?$", views.VipView.as_view(), name="vip"),
    re_path(r"^svips/(?P<vip>[^/]+)/?$", views.VipView.as_view(secure=True), name="svip"),
    # Instances, status, metadata, replication, unknown routes: the node answers, whatever the method.
    re_path(r"", views.forward, name="forward"),
]
