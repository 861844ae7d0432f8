"""Active health checks: the registry probes instances that ask for it and marks the ones that hang DOWN.

Opt-in twice: the node's ``EUREKA_HEALTH_CHECKS`` and each instance's metadata
(``eureka-django.health-check`` = ``http`` or ``tcp``, see ``config.py``). The checker (``checker.py``,
plain Python on an injected clock) keeps consecutive failures and successes per instance and acts only
through the registry's status-override path: after ``threshold`` failures it sets a DOWN override as
the ``health-check`` actor, after ``recover`` successes it removes that override again. It never
evicts or cancels, and an operator's override always wins. Probes (``probes.py``) run off the request
path: in the node's own loop in embedded mode (``loop.py``), in a Celery worker in production mode,
which fetches due targets from the node's control endpoint and posts the results back.
"""
