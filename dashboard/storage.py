"""Static file URLs that carry the request's script prefix (a reverse proxy's path prefix)."""

from django.urls import get_script_prefix
from whitenoise.storage import CompressedStaticFilesStorage


class PrefixedStaticFilesStorage(CompressedStaticFilesStorage):
    """``/static/x.css`` becomes ``/registry/static/x.css`` when the request came in under ``/registry``.

    ``STATIC_URL`` stays absolute (``/static/``) because Django caches a relative one with whatever
    prefix the first request had; the prefix is added here, per URL, from the current request.
    """

    def url(self, name):
        url = super().url(name)
        prefix = get_script_prefix().rstrip("/")
        return prefix + url if prefix and url.startswith("/") else url
