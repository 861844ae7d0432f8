"""The Eureka wire protocol, as DRF views over the node.

``urls.py`` routes the endpoints (served under ``/eureka/``, ``/eureka/v2/`` and ``/eureka/v1/``),
``views.py`` turns each request into one call on the lease map or one cached read, ``http.py``
holds the HTTP habits real clients depend on (format by ``Accept``, plain-text errors, empty 404
bodies, gzip), ``codecs.py`` reads and writes Eureka's JSON and XML, and ``payloads.py`` renders
the cached read payloads (``apps``, ``apps/delta``, one app, VIPs).
"""
