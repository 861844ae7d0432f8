"""The domain: the lease map and Eureka's rules, with no Django and none of the packages around it.

``core.py`` holds the lease map and its write rules (register, renew, cancel, status overrides,
expiry and eviction) under one lock; its reads are ``map_reads.py``'s and a warm restart's saving
and restoring ``saved_state.py``'s (parts it holds as ``reads`` and ``saved_state``). It hands side jobs to
``lease_map.py`` (the leases by app and their counts), ``overrides.py`` (the status override map),
``write_rules.py`` (the limits and status rules a write obeys), ``eviction.py`` (an eviction run's
pieces), ``delta.py`` (the delta queue), ``preservation.py`` (the self-preservation arithmetic),
``counters.py`` (the console's counts) and ``snapshot_format.py`` (the warm-restart format);
``history.py`` keeps the console's last hour. ``instances.py``, ``leases.py``, ``changes.py``,
``constants.py`` and ``endpoints.py`` are the values they pass around; ``config.py`` is every
setting's one home; ``outbound_tls.py`` builds the TLS context of the requests the node sends.
Everything here runs on an injected clock and imports nothing from the packages around it
(tests/test_layout.py checks both).
"""
