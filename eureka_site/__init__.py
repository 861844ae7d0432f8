"""The project package.

The Celery app (``eureka_site/celery.py``) is not imported here, as Django projects often do: only
production mode uses Celery, and importing it (with kombu and the Redis client) would cost every
embedded node memory. ``celery -A eureka_site`` finds
``eureka_site.celery`` by itself, and a production node's serving process loads it in
``eureka_site/wsgi.py`` before it sends any task.
"""
