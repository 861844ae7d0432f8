"""The Eureka registry, as one Django app (label ``registry``) in packages by responsibility.

``domain/`` is the lease map and Eureka's rules, with no Django, on an injected clock. Around it:
``cache/`` (the two-tier response cache), ``wire/`` (codecs, payloads, HTTP habits), ``cluster/``
(peers), ``health/``, ``webhooks/``, ``feed/`` (the change feed), ``access/`` (API accounts),
``runtime/`` (the node that owns one map per process, its jobs and how they are driven),
``protocol/`` (the HTTP API as DRF views), ``console_data/`` (what the pages read), ``admin/``
(status overrides in the Django admin) and ``reader/`` (the stateless read-only processes); the
architecture page of the docs lists them all by level. ``apps.py``, ``models.py`` and
``migrations/`` stay where Django looks for them. Imports point inwards, towards the domain, and no
two packages import each other.
"""
