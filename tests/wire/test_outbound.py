"""The transport of every outbound ``httpx.Client`` (registry/wire/outbound.py) against an HTTPS server
on loopback: a rotated certificate is presented on the next connection, while a request already under
way on the old one finishes there, and the old connections are closed once it is done."""

from __future__ import annotations

import trustme

from registry.domain.outbound_tls import CHECK_INTERVAL_S, OutboundTls
from registry.wire.outbound import outbound_client
from tests.tls_servers import FakeTlsServer, node_files, write_pem


def test_a_request_under_way_finishes_on_the_old_certificate_and_the_next_one_presents_the_new(tmp_path):
    ca = trustme.CA()
    ca_file = write_pem(tmp_path, "ca.pem", ca.cert_pem.bytes())
    cert_file, key_file = node_files(tmp_path, ca, "before")
    clock = [1000.0]
    tls = OutboundTls(ca_file, cert_file, key_file, clock=lambda: clock[0])
    server = FakeTlsServer(ca, client_ca=ca)
    try:
        with outbound_client(tls, client_cert=True, timeout=5.0) as client:
            url = server.url(path="/eureka/apps/")
            with client.stream("GET", url) as under_way:
                first = client._transport._pool
                node_files(tmp_path, ca, "after")
                clock[0] += CHECK_INTERVAL_S
                assert client.get(url).status_code == 200
                assert first.retired and first.in_flight == 1, "kept for the request under way"
                assert first.transport._pool.connections, "its connection still open"
                # The first answer is still read, on its own connection.
                assert b"applications" in under_way.read()
            # Done: the old pool's connections are closed.
            assert first.in_flight == 0 and first.transport._pool.connections == []
            assert client.get(url).status_code == 200
        assert [seen.client_cn for seen in server.requests] == ["before", "after", "after"]
    finally:
        server.close()


def test_a_client_without_the_node_certificate_presents_none(tmp_path):
    ca = trustme.CA()
    cert_file, key_file = node_files(tmp_path, ca, "node-a")
    tls = OutboundTls(write_pem(tmp_path, "ca.pem", ca.cert_pem.bytes()), cert_file, key_file)
    server = FakeTlsServer(ca, client_ca=ca)
    try:
        with outbound_client(tls, client_cert=False, timeout=5.0) as client:
            assert client.get(server.url(path="/hook")).status_code == 200
        assert [seen.client_cn for seen in server.requests] == [None]
    finally:
        server.close()
