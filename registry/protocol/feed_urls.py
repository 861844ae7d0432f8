"""The change feed's URLs, mounted under ``/api/v1/`` by the site's URLconf."""

from django.urls import path

from registry.protocol import feed_views as views

app_name = "feed"

urlpatterns = [
    path("changes", views.ChangesView.as_view(), name="changes"),
    path("changes/stream", views.ChangeStreamView.as_view(), name="stream"),
    path("registry", views.RegistryView.as_view(), name="registry"),
]
