from django.urls import path

from registry.protocol import control, metrics

app_name = "ops"

urlpatterns = [
    path("control/jobs/<str:job>", control.ControlJobView.as_view(), name="control-job"),
    path(
        "control/replication/<str:peer>",
        control.ControlReplicationView.as_view(),
        name="control-replication",
    ),
    path("control/health/targets", control.ControlHealthTargetsView.as_view(), name="control-health-targets"),
    path("control/health/results", control.ControlHealthResultsView.as_view(), name="control-health-results"),
    path("healthz", control.HealthView.as_view(), name="healthz"),
    path("readyz", control.ReadyView.as_view(), name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
]
