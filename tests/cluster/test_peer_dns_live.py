"""Peers through DNS in production mode: the outboxes are Redis lists that each node's Celery workers
drain, so the workers must find the peers the node found in DNS (published in Redis, credentials
rebuilt from the workers' own settings) and a peer gone from DNS must take its list with it.

The nodes share 127.0.0.1 and are told apart by port: an SRV name (``_eureka._tcp.cluster.test``)
lists them with their ports, answered by a DNS server on loopback (tests/cluster/dns_server.py). The
embedded-mode scenarios (nodes on 127.0.0.2-6, scaling, rolling upgrades) are
tests/cluster/test_kubernetes_live.py.
"""

from __future__ import annotations

import shutil

import pytest
from redis import Redis

from tests.cluster.dns_server import DnsServer
from tests.cluster.test_cluster_live import Cluster, listed, poll, unique_app
from tests.integration.conftest import Processes
from tests.interop.conftest import api_accounts_database, require_toolchain  # noqa: F401
from tests.ports import free_port

pytestmark = pytest.mark.cluster

SRV_NAME = "_eureka._tcp.cluster.test"
HOST_NAME = "nodes.cluster.test"
INTERVAL_S = 1


def test_celery_workers_replicate_to_the_peers_a_node_finds_in_dns_and_forget_those_gone(tmp_path):
    require_toolchain(
        "redis-server",
        shutil.which("redis-server") is not None,
        "install it with `apt-get install redis-server`",
    )
    redis = Processes(tmp_path, free_port(), 0, {})
    redis.start_redis()
    with DnsServer() as dns:
        cluster = Cluster(
            "production",
            tmp_path,
            {"A": [], "B": [], "C": []},
            redis,
            {
                "EUREKA_PEER_DNS": SRV_NAME,
                "EUREKA_DNS_NAMESERVERS": dns.nameserver,
                "EUREKA_PEER_DNS_INTERVAL_SECONDS": str(INTERVAL_S),
            },
        )
        ports = {name: node.port for name, node in cluster.nodes.items()}
        dns.set(HOST_NAME, "A", ["127.0.0.1"])
        dns.set(SRV_NAME, "SRV", [(0, 1, ports[name], HOST_NAME) for name in ("A", "B")])
        try:
            cluster.start("A")
            cluster.start("B")
            cluster.wait_ready("A")
            cluster.wait_ready("B")
            app = unique_app("DNSPROD")
            cluster["A"].register(app, "first")
            poll({"B": listed(cluster["B"], app, "first")}, 20, "a write at A listed at B")
            assert cluster["A"].ready()["replication"]["sender"] == "celery"

            # C joins: it is started, then listed in DNS; A's workers send it the next write.
            cluster.start("C")
            dns.set(SRV_NAME, "SRV", [(0, 1, ports[name], HOST_NAME) for name in ("A", "B", "C")])
            cluster.wait_ready("C")
            c_url = f"http://127.0.0.1:{ports['C']}/eureka/"

            def a_replicates_to_c() -> bool:
                return c_url in [peer["url"] for peer in cluster["A"].ready()["replication"]["peers"]]

            poll({"A": a_replicates_to_c}, 10, "A lists C as a peer")
            cluster["A"].register(app, "second")
            poll({"C": listed(cluster["C"], app, "second")}, 20, "a write at A listed at C")

            # C leaves DNS (and stops): A forgets it, and its Redis list and published entry go.
            dns.set(SRV_NAME, "SRV", [(0, 1, ports[name], HOST_NAME) for name in ("A", "B")])
            cluster._exit(cluster.node("C"))
            if cluster.node("C").celery is not None:
                cluster.node("C").celery.stop_celery()
            poll({"A": lambda: not a_replicates_to_c()}, 3 * INTERVAL_S + 5, "A forgets C")
            database = Redis(port=redis.redis_port, db=0)  # node A's database
            published = {v.decode() for v in database.hvals("eureka:replication-peers")}
            assert published == {f"http://127.0.0.1:{ports['B']}/eureka/"}
            cluster["A"].register(app, "third")
            poll({"B": listed(cluster["B"], app, "third")}, 20, "a write at A listed at B after C left")
            lists = [
                key for key in database.scan_iter("eureka:replication:*") if database.type(key) == b"list"
            ]
            leftover = [key for key in lists if database.llen(key)]
            assert leftover == [], "no queue waits for the peer that left"
        finally:
            cluster.stop_all()
            redis.stop_redis()
