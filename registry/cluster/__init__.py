"""This node's peers: the other Eureka servers of its cluster.

``peers.py`` holds the configured replicas and what replication has learnt of each (last success,
queued events, last error), from which the console and ``GET /eureka/status`` say which replicas
are available. Peer replication will live in this room.
"""
