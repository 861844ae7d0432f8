"""The Eureka registry, as one Django app (label ``registry``) in rooms by responsibility.

The modules at this level are the domain and import no Django: ``core.py`` (the lease map and
Eureka's rules: renewals, overrides, expiry, eviction), the classes it hands its side jobs to
(``delta.py`` the delta queue, ``preservation.py`` the self-preservation arithmetic, ``counters.py``
the console's counts, ``snapshot_format.py`` the warm-restart format), ``leases.py``,
``instances.py`` and ``constants.py``; they run on an injected clock. Around them:
``cache/`` (the two-tier response cache), ``wire/`` (codecs, payloads, HTTP habits), ``cluster/``
(peers), ``runtime/`` (the node that owns one map per process, its jobs and how they are driven),
``protocol/`` (the HTTP API as DRF views), ``reads/`` (what the pages read) and ``admin/`` (status
overrides in the Django admin); README's "Layout" lists them all by level. ``apps.py``,
``models.py`` and ``migrations/`` stay where Django looks for them. Imports point inwards, towards
the domain, and no two packages import each other.
"""
