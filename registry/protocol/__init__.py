"""The HTTP API, as DRF views over the node: the level above the node and below the pages.

``urls.py`` routes the Eureka protocol (served under ``/eureka/``, ``/eureka/v2/`` and ``/eureka/v1/``)
and ``views.py`` turns each request into one call on the lease map or one cached read;
``feed_urls.py`` and ``feed_views.py`` serve the change feed (``/api/v1/changes`` and its stream);
``control.py`` and ``control_urls.py`` the control endpoint Celery workers call, ``/healthz`` and
``/readyz``; ``metrics.py`` the node's numbers for Prometheus (``/metrics``). What the bytes look
like — codecs, payloads, the HTTP habits real clients depend on — is one level down, in
``registry/wire/``.
"""
