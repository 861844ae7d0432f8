"""The HTTP servers that run a node, and what one client may hold of them.

``gunicorn_worker.py`` is gunicorn's gevent worker as the node uses it (connections admitted before a
byte is read, deadlines for a request's head and for answers a client does not read, a prompt
graceful stop); ``connections.py`` its connection policy (caps per client address and in all, slow
readers let go); ``listening.py`` keeps a node's sockets refusing connections until it can answer
them. ``granian_server.py`` serves the node on granian instead (HTTP in Rust threads, off the GIL),
with ``granian_limits.py`` its limits per client. ``lifecycle.py`` is what both do with the node when
they start and stop. This package sits above the node (``registry/runtime/``); nothing below it
imports it.
"""
