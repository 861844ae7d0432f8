"""This node's cluster: its peers, and replication to and from them.

``peers.py`` holds the configured replicas and what replication learnt of each (the console's DS
Replicas); ``replication.py`` turns the registry's client writes into Eureka's batch items;
``replicator.py`` moves them through one bounded outbox per peer and acts on the peers' answers
(embedded mode sends from this process), ``redis_outbox.py`` keeps the outboxes in Redis for Celery
workers (production mode); ``incoming.py`` applies a peer's batch; ``startup.py`` is the start-up sync
and this node's own registration with its peers; ``transport.py`` the HTTP; ``member.py`` puts them
together for the node. ``regions.py`` fetches other Eureka deployments' registries (remote regions)
for the payloads to merge in, over ``region_transport.py``.
"""
