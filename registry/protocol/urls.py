"""Routes of the Eureka protocol, relative to a prefix (``eureka/``, ``eureka/v2/``...).

Every route accepts an optional trailing slash, and the prefixes in ``eureka_site/urls.py`` accept a
doubled slash (fargo builds ``serviceUrl + "/apps"``): a redirect would break POST/PUT clients, so
none is ever issued.
"""

from django.urls import re_path

from registry.protocol import views

app_name = "eureka"

APP = r"(?P<app>[^/]+)"
ID = r"(?P<instance_id>[^/]+)"

urlpatterns = [
    # Heartbeats first: they are most of the traffic and the resolver tries routes in order.
    re_path(rf"^apps/{APP}/{ID}/?$", views.InstanceView.as_view(), name="instance"),
    re_path(r"^apps/?$", views.ApplicationsView.as_view(), name="apps"),
    re_path(r"^apps/delta/?$", views.DeltaView.as_view(), name="delta"),
    re_path(rf"^apps/{APP}/?$", views.ApplicationView.as_view(), name="app"),
    re_path(rf"^apps/{APP}/{ID}/status/?$", views.InstanceStatusView.as_view(), name="instance-status"),
    re_path(rf"^apps/{APP}/{ID}/metadata/?$", views.InstanceMetadataView.as_view(), name="instance-metadata"),
    re_path(rf"^instances/{ID}/?$", views.InstanceByIdView.as_view(), name="instance-by-id"),
    re_path(r"^vips/(?P<vip>[^/]+)/?$", views.VipView.as_view(), name="vip"),
    re_path(r"^svips/(?P<vip>[^/]+)/?$", views.VipView.as_view(secure=True), name="svip"),
    re_path(r"^asg/(?P<asg>[^/]+)/status/?$", views.AsgStatusView.as_view(), name="asg-status"),
    re_path(r"^status/?$", views.StatusView.as_view(), name="status"),
    re_path(r"^serverinfo/statusoverrides/?$", views.StatusOverridesView.as_view(), name="status-overrides"),
    re_path(r"^peerreplication/batch/?$", views.PeerReplicationBatchView.as_view(), name="replication-batch"),
]
