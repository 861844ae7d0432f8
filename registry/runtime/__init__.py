"""The node: one registry per process, and what keeps it running.

``node.py`` builds the node from settings (lease map, response cache, peers, job table) and hands
it out with ``get_node()``; ``jobs.py`` is the table of periodic jobs (eviction, cache sync, delta
pruning, expected-clients recount); ``scheduler.py`` runs them in-process (embedded mode), and in
production mode Celery beat schedules ``tasks.py``, whose worker asks the registry process to run
them through the control endpoint (``registry/protocol/control.py``). ``operations.py`` is the
one path of status overrides for the protocol and the admin, ``status.py`` what the node reports
about itself, ``metrics.py`` the same numbers and more for Prometheus (``GET /metrics``),
``state_log.py`` the operator's log lines of evictions and self-preservation, ``logs.py`` the log
format (plain or JSON, secrets masked), ``gunicorn_worker.py`` the server's worker, and
``checks.py`` what ``manage.py check --deploy`` adds about the node's settings.
"""
