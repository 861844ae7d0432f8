"""The change feed: the registry's numbered changes (``registry/domain/changes.py``) for operators' tools.

``GET /api/v1/changes`` pages through the change log as JSON, ``GET /api/v1/changes/stream`` pushes
it as Server-Sent Events, and in production mode (``REDIS_URL``) the node also publishes every change
to a Redis Stream that other processes follow. Opt-in and off the Eureka protocol's path: clients and
the wire protocol are untouched. ``query.py`` parses requests and shapes changes (no Django),
``streams.py`` wakes the open streams (no Django), ``redis_feed.py`` is the publisher and a follower;
the HTTP side is with the other views, ``registry/protocol/feed_views.py`` and ``feed_urls.py``.
"""
