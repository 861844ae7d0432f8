from django.urls import path

from . import ops_views

app_name = "ops"

urlpatterns = [
    path("control/jobs/<str:job>", ops_views.ControlJobView.as_view(), name="control-job"),
    path("healthz", ops_views.HealthView.as_view(), name="healthz"),
    path("readyz", ops_views.ReadyView.as_view(), name="readyz"),
]
