from django.urls import path

from . import views

app_name = "dashboard"

urlpatterns = [
    path("", views.status_page, name="status"),
    path("lastn", views.lastn_page, name="lastn"),
    path("live", views.status_fragment, name="live"),
    path("instances/", views.instance_index, name="instances"),
    path("instances/<str:app>/<str:instance_id>/", views.instance_page, name="instance"),
]
