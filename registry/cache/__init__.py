"""Eureka's two-tier response cache for reads of the registry.

``response_cache.py`` has the read-write tier, rebuilt on demand and invalidated by writes, and the
read-only tier that readers use, refreshed by the cache-sync job; each payload is serialized once
and gzipped at most once. ``redis_tier.py`` keeps the read-only tier in Redis (production mode).
"""
