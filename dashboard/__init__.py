"""The status console: Eureka's status page, Last 1000 and the instance pages.

``views.py`` and ``urls.py`` are the pages, ``templatetags/`` their template tags, ``storage.py``
the static files' URLs behind a path prefix and ``middleware.py`` the Content-Security-Policy the
console's and the admin's pages are sent with. What the pages show (System Status, the
self-preservation banner and panel, DS Replicas, General and Instance Info, lease details, the recent
lists, the filtered instance table) comes from ``registry.console_data``, the one module the console and the
admin read the node through.
"""
