"""The status console: Eureka's status page, Last 1000 and the instance pages.

``views.py`` and ``urls.py`` are the pages; ``console.py`` computes what they show from the node
(System Status, the self-preservation banner and panel, DS Replicas, General and Instance Info,
lease details, the recent lists) and ``queries.py`` filters, groups and pages the instance table.
Both are plain Python over the node; the admin's instance list reuses the filters.
"""
