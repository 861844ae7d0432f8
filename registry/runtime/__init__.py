"""The node: one registry per process, and what keeps it running.

``node.py`` is the node (lease map, response cache, peers, job table) and how its parts start and
stop; ``composition.py`` builds it from settings (``build_node``), and ``process.py`` holds the
process's one and hands it out with ``get_node()``. ``jobs.py`` is the table of periodic jobs
(eviction, cache sync, delta pruning, expected-clients recount); ``scheduler.py`` runs them
in-process (embedded mode), and in production mode Celery beat schedules ``tasks.py``, whose worker
asks the registry process to run them through the control endpoint (``registry/protocol/control.py``),
with ``watchdog.py`` running those beat leaves overdue. ``operations.py`` is the one path of status
overrides for the protocol and the admin, ``status.py`` what the node reports about itself,
``state_log.py`` the operator's log lines of evictions and self-preservation, ``logs.py`` the log
format (plain or JSON, secrets masked), and ``checks.py`` what ``manage.py check --deploy`` adds
about the node's settings. The HTTP servers that run the node are one level up, in
``registry/serving/``.
"""
