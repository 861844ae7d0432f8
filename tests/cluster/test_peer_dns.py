"""Peers found through DNS (``EUREKA_PEER_DNS``): the setting, the lookups against a real DNS server on
loopback (tests/cluster/dns_server.py), and how a node's peers follow the answers. The live scenarios
(nodes on 127.0.0.2-6 scaling and rolling) are tests/cluster/test_kubernetes_live.py."""

from __future__ import annotations

import logging

import pytest

from registry.cluster.discovery import PeerDiscovery, PeerResolver, peer_for
from registry.cluster.member import ClusterMember
from registry.cluster.peers import PeerSet
from registry.config.eureka import parse_config
from registry.domain.config import BadSetting
from registry.domain.core import Registry, RegistryRules
from registry.domain.endpoints import BadPeerUrl, Peer, parse_nameserver, parse_peer_dns, parse_peer_urls
from registry.wire.codecs import build_instance
from tests.cluster.dns_server import DnsServer
from tests.cluster.test_replication import records_of
from tests.conftest import FakeClock
from tests.factories import instance_body

HEADLESS = "eureka-headless.ns.svc.cluster.local"


@pytest.fixture
def dns():
    with DnsServer() as server:
        yield server


# --- the setting ---------------------------------------------------------------------------------


def test_entries_name_a_records_srv_records_or_a_service_url():
    plain, srv, url = parse_peer_dns(
        [f"{HEADLESS}:8761", f"_eureka._tcp.{HEADLESS}", "https://u:p%40ss@Peers.Example/e"]
    )
    assert plain.peer_at("10.0.0.7") == Peer("http://10.0.0.7:8761/eureka/")
    assert not plain.srv and srv.srv
    assert srv.peer_at("10.0.0.8", 9000) == Peer("http://10.0.0.8:9000/eureka/")
    # A URL keeps its scheme, credentials (Basic auth) and path; its default port is the scheme's.
    assert url.name == "peers.example"
    # An https:// peer found at an address must show a certificate for the DNS name (docs/tls.md).
    assert url.peer_at("fd00::9") == Peer("https://u:p%40ss@[fd00::9]:443/e/", tls_name="peers.example")
    assert "p%40ss" not in url.display
    assert parse_peer_dns(["bare"])[0].peer_at("10.0.0.1").url == "http://10.0.0.1:8761/eureka/"


@pytest.mark.parametrize(
    "entry",
    ["ftp://peers:21/", "bad name:8761", "peers:99999", f"_eureka._tcp.{HEADLESS}:8761", "http://:8761/"],
)
def test_an_entry_that_cannot_be_used_is_refused_with_its_text(entry):
    with pytest.raises(BadPeerUrl, match="expected|[Pp]ort|SRV"):
        parse_peer_dns([entry])


def test_settings_parse_the_names_the_interval_and_the_nameservers():
    config = parse_config(
        {
            "EUREKA_PEER_DNS": f"{HEADLESS}:8761, _eureka._tcp.{HEADLESS}",
            "EUREKA_PEER_DNS_INTERVAL_SECONDS": "5",
            "EUREKA_DNS_NAMESERVERS": "10.96.0.10, 127.0.0.1:5353, [fd00::a]:53",
        }
    ).cluster
    assert [entry.name for entry in config.peer_dns] == [HEADLESS, f"_eureka._tcp.{HEADLESS}"]
    assert config.peer_dns_interval_ms == 5_000
    assert config.dns_nameservers == ("10.96.0.10:53", "127.0.0.1:5353", "[fd00::a]:53")
    assert config.clustered
    defaults = parse_config({}).cluster
    assert defaults.peer_dns == () and defaults.peer_dns_interval_ms == 30_000 and not defaults.clustered


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("EUREKA_PEER_DNS", "name with spaces"),
        ("EUREKA_DNS_NAMESERVERS", "dns.example"),
        ("EUREKA_DNS_NAMESERVERS", "10.0.0.1:0"),
        ("EUREKA_PEER_DNS_INTERVAL_SECONDS", "0"),
    ],
)
def test_a_bad_dns_setting_stops_the_start_naming_the_variable(variable, value):
    with pytest.raises(BadSetting) as error:
        parse_config({"EUREKA_PEER_DNS": "peers:8761", variable: value})
    assert error.value.variable == variable


def test_nameservers_default_to_port_53():
    assert parse_nameserver("10.96.0.10") == ("10.96.0.10", 53)
    assert parse_nameserver("[::1]:5353") == ("::1", 5353)


# --- lookups against a DNS server ----------------------------------------------------------------


def test_each_a_and_aaaa_address_becomes_a_peer(dns):
    dns.set(HEADLESS, "A", ["127.0.0.3", "127.0.0.2"])
    dns.set(HEADLESS, "AAAA", ["fd00::5"])
    discovery = PeerDiscovery(parse_peer_dns([f"{HEADLESS}:8761"]), PeerResolver([dns.nameserver]))
    assert [peer.url for peer in discovery.lookup()] == [
        "http://127.0.0.2:8761/eureka/",
        "http://127.0.0.3:8761/eureka/",
        "http://[fd00::5]:8761/eureka/",
    ]


def test_srv_targets_are_resolved_and_keep_their_ports(dns):
    dns.set(
        f"_eureka._tcp.{HEADLESS}",
        "SRV",
        [(0, 10, 8761, f"eureka-0.{HEADLESS}"), (0, 10, 8762, f"eureka-1.{HEADLESS}")],
    )
    dns.set(f"eureka-0.{HEADLESS}", "A", ["127.0.0.2"])
    dns.set(f"eureka-1.{HEADLESS}", "A", ["127.0.0.3"])
    discovery = PeerDiscovery(parse_peer_dns([f"_eureka._tcp.{HEADLESS}"]), PeerResolver([dns.nameserver]))
    assert sorted(peer.url for peer in discovery.lookup()) == [
        "http://127.0.0.2:8761/eureka/",
        "http://127.0.0.3:8762/eureka/",
    ]


def test_a_failed_lookup_keeps_the_last_good_answer_and_is_logged_once(dns, caplog):
    dns.set(HEADLESS, "A", ["127.0.0.2", "127.0.0.3"])
    discovery = PeerDiscovery(parse_peer_dns([f"{HEADLESS}:8761"]), PeerResolver([dns.nameserver]))
    good = discovery.lookup()
    assert len(good) == 2
    caplog.set_level(logging.INFO, logger="registry.cluster.discovery")
    dns.fail(HEADLESS)
    assert discovery.lookup() == good
    assert discovery.lookup() == good
    failures = [r for r in caplog.records if getattr(r, "event", None) == "peer_dns_failed"]
    assert len(failures) == 1 and "SERVFAIL" in failures[0].getMessage()
    assert discovery.status()[f"http://{HEADLESS}:8761/eureka/"]["failing"]
    # The name answers again (one address fewer): that answer counts, and the recovery is logged.
    dns.set(HEADLESS, "A", ["127.0.0.2"])
    assert [peer.url for peer in discovery.lookup()] == ["http://127.0.0.2:8761/eureka/"]
    assert [r for r in caplog.records if getattr(r, "event", None) == "peer_dns_recovered"]


def test_a_name_that_does_not_exist_or_a_silent_server_keeps_the_last_answer(dns):
    dns.set(HEADLESS, "A", ["127.0.0.2"])
    discovery = PeerDiscovery(parse_peer_dns([f"{HEADLESS}:8761"]), PeerResolver([dns.nameserver]))
    good = discovery.lookup()
    dns.answers.records.clear()  # NXDOMAIN from now on
    assert discovery.lookup() == good
    silent = PeerDiscovery(parse_peer_dns(["peers:8761"]), PeerResolver(["127.0.0.1:9"], timeout_s=0.3))
    assert silent.lookup() == []
    assert silent.failures == 1


def test_a_worker_rebuilds_a_dns_peer_with_its_credentials_from_its_url_without_them():
    entries = parse_peer_dns(["http://peer:secret@eureka-headless:8761/eureka/"])
    peer = entries[0].peer_at("10.0.0.4")
    assert peer_for(peer.display_url, entries) == peer
    assert peer_for("http://10.0.0.4:9999/eureka/", entries) is None  # not this entry's port
    assert peer_for("https://10.0.0.4:8761/eureka/", entries) is None


# --- a node's peers follow the answers -----------------------------------------------------------


class Answers:
    """A resolver whose answers the test sets (the lookups themselves are tested above)."""

    def __init__(self):
        self.addresses: list[str] = []

    def peers(self, entry):
        return [entry.peer_at(address) for address in self.addresses]


@pytest.fixture
def member(eureka_options):
    clock = FakeClock()
    options = eureka_options.with_changes(
        cluster__peers=tuple(parse_peer_urls(["http://static-peer:8761/eureka/"])),
        cluster__peer_dns=parse_peer_dns([f"{HEADLESS}:8761"]),
    )
    registry = Registry(RegistryRules(), clock())
    peer_set = PeerSet(list(options.cluster.peer_urls))
    member = ClusterMember(registry, peer_set, options, clock)
    answers = Answers()
    member.discovery.resolver = answers
    # As gunicorn's worker tells it: this node listens on 127.0.0.2:8761.
    member._listening = [("127.0.0.2", 8761)]
    yield member, answers, clock
    member.stop()


def urls(member: ClusterMember) -> list[str]:
    return sorted(peer.display_url for peer in member.peers)


def test_new_addresses_become_peers_and_the_nodes_own_is_left_out(member):
    member, answers, _ = member
    answers.addresses = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    added, removed = member.update_peers(member.discovery.lookup())
    assert sorted(p.display_url for p in added) == [
        "http://127.0.0.3:8761/eureka/",
        "http://127.0.0.4:8761/eureka/",
    ]
    assert not removed
    assert urls(member) == [
        "http://127.0.0.3:8761/eureka/",
        "http://127.0.0.4:8761/eureka/",
        "http://static-peer:8761/eureka/",
    ]
    # The console's replicas list (the peer set) follows.
    assert sorted(state.url for state in member.replicator.peer_set.states()) == urls(member)


def test_a_write_reaches_the_outbox_of_a_peer_found_later_and_a_gone_peers_queue_is_discarded(member, caplog):
    member, answers, clock = member
    answers.addresses = ["127.0.0.3"]
    member.update_peers(member.discovery.lookup())
    now = clock()
    member.registry.register(build_instance(instance_body()["instance"], now), now)
    member.replicator.flush(now)
    gone_key = Peer("http://127.0.0.3:8761/eureka/").key
    assert len(member.replicator.outboxes[gone_key]) == 1
    answers.addresses = ["127.0.0.4"]
    caplog.set_level(logging.INFO, logger="registry.cluster.member")
    added, removed = member.update_peers(member.discovery.lookup())
    assert [p.display_url for p in removed] == ["http://127.0.0.3:8761/eureka/"]
    assert gone_key not in member.replicator.outboxes and gone_key not in member.replicator.peers
    assert [r.peer for r in caplog.records if getattr(r, "event", None) == "peer_removed"] == [
        "http://127.0.0.3:8761/eureka/"
    ]
    # The next write goes to the new peer and the static one, not to the one gone.
    clock.advance(1000)
    now = clock()
    member.registry.register(build_instance(instance_body(instance_id="second")["instance"], now), now)
    member.replicator.flush(now)
    queued = {
        member.replicator.peers[key].display_url: len(box) for key, box in member.replicator.outboxes.items()
    }
    assert queued == {"http://127.0.0.4:8761/eureka/": 1, "http://static-peer:8761/eureka/": 2}


def test_static_peers_stay_whatever_dns_says(member):
    member, answers, _ = member
    answers.addresses = ["127.0.0.3"]
    member.update_peers(member.discovery.lookup())
    answers.addresses = []
    member.update_peers(member.discovery.lookup())
    assert urls(member) == ["http://static-peer:8761/eureka/"]


def test_status_names_each_dns_name_and_its_answer(member):
    member, answers, clock = member
    answers.addresses = ["127.0.0.3"]
    member.update_peers(member.discovery.lookup())
    status = member.status(clock())
    assert [peer["url"] for peer in status["peers"]] == [
        "http://static-peer:8761/eureka/",
        "http://127.0.0.3:8761/eureka/",
    ]
    assert status["dns"] == {
        f"http://{HEADLESS}:8761/eureka/": {"peers": ["http://127.0.0.3:8761/eureka/"], "failing": None}
    }


def test_eurekas_txt_layout_gives_the_servers_of_every_zone_of_the_region(dns):
    # As Eureka's useDnsForFetchingServiceUrls reads it: the region's record lists zones, each zone's
    # record lists its servers' host names (one TXT string with spaces, as Route 53 users write it).
    dns.set("txt.us-east-1.eureka.example", "TXT", ["us-east-1a.eureka.example us-east-1b.eureka.example"])
    dns.set("txt.us-east-1a.eureka.example", "TXT", ["node-1.example node-2.example"])
    dns.set("txt.us-east-1b.eureka.example", "TXT", ['"node-3.example"'])
    entries = parse_peer_dns(["http://u:p@txt.us-east-1.eureka.example:8761/eureka/"])
    assert entries[0].txt and "(TXT)" in entries[0].display
    discovery = PeerDiscovery(entries, PeerResolver([dns.nameserver]))
    assert [peer.url for peer in discovery.lookup()] == [
        "http://u:p@node-1.example:8761/eureka/",
        "http://u:p@node-2.example:8761/eureka/",
        "http://u:p@node-3.example:8761/eureka/",
    ]
    # A zone that no longer answers is left out; the region failing keeps the last good answer.
    dns.fail("txt.us-east-1b.eureka.example")
    assert len(discovery.lookup()) == 2
    dns.fail("txt.us-east-1.eureka.example")
    assert len(discovery.lookup()) == 2


class PeerRegistries:
    """A transport whose peers each hold one instance (the start-up sync's reads)."""

    def __init__(self):
        self.asked: list[str] = []

    def fetch_apps(self, peer):
        self.asked.append(peer.display_url)
        body = instance_body(app="SYNCED", instance_id=peer.address[0])["instance"]
        return records_of({"applications": {"application": [{"name": "SYNCED", "instance": [body]}]}})

    def fetch_delta(self, peer):
        return None


def test_a_node_whose_dns_gives_no_answer_at_start_waits_for_one_before_it_syncs_and_serves(
    member, monkeypatch
):
    from registry.cluster import member as member_module
    from registry.cluster.discovery import LookupFailed

    member, answers, clock = member
    monkeypatch.setattr(member_module, "DNS_WAIT_AT_START_MS", 10)
    member.transport = PeerRegistries()
    member.replicator.transport = member.transport
    member.registry.await_start_up_sync()
    tries = []

    def flaky(entry):
        tries.append(entry)
        if len(tries) < 3:
            raise LookupFailed("timed out")
        return [entry.peer_at("127.0.0.3")]

    answers.peers = flaky
    member.update_peers(member.discovery.lookup())  # as start() does: no answer
    assert not member.discovery.answered and not member.registry.allows_reads(clock())
    member._sync()
    assert len(tries) == 3
    # It synced from the peer DNS gave it (and the static one), and serves.
    assert sorted(member.transport.asked) == [
        "http://127.0.0.3:8761/eureka/",
        "http://static-peer:8761/eureka/",
    ]
    assert member.registry.reads.lease("SYNCED", "127.0.0.3") is not None
    assert member.registry.allows_reads(clock())
