"""Peers found through DNS (``EUREKA_PEER_DNS``): the names are looked up at start and again every
``EUREKA_PEER_DNS_INTERVAL_SECONDS``, and the node's peers follow the answers (``ClusterMember``).

On Kubernetes the name is a StatefulSet's headless Service: its A/AAAA records are the pods' addresses,
its SRV records (``_service._proto.name``) their names and ports. A node that starts is in the answer
from then on, one that is gone leaves it, so scaling and rolling upgrades change the peers without a
restart of any node. What a lookup cannot tell (a timeout, SERVFAIL, no records at all) keeps the name's
last good answer: a DNS hiccup never empties a cluster. Each name's failures and recoveries are logged
once, not at every interval.

Lookups go to the system's resolver (``/etc/resolv.conf``, its search domains applied) or to
``EUREKA_DNS_NAMESERVERS``; no answer is cached here, each interval asks again. Under gunicorn's gevent
worker dnspython's sockets are gevent's, so a lookup never holds up requests.

Plain Python: no Django.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import dns.exception
import dns.nameserver
import dns.resolver

from registry.domain.endpoints import Peer, PeerDns, parse_nameserver

logger = logging.getLogger(__name__)

# One lookup (all its tries, over every nameserver) gives up after this long; a name's A and AAAA,
# or SRV and its targets, are separate lookups.
LOOKUP_TIMEOUT_S = 2.0


class LookupFailed(Exception):
    """A name gave no usable answer; the message says why."""


def _resolver(nameservers: Iterable[str], timeout_s: float) -> dns.resolver.Resolver:
    chosen = [parse_nameserver(entry) for entry in nameservers]
    resolver = dns.resolver.Resolver(configure=not chosen)
    if chosen:
        resolver.nameservers = [dns.nameserver.Do53Nameserver(address, port) for address, port in chosen]
    resolver.lifetime = timeout_s
    resolver.timeout = min(timeout_s, resolver.timeout)
    resolver.cache = None
    return resolver


class PeerResolver:
    """The lookups themselves: a name's addresses, an SRV name's targets and ports."""

    def __init__(self, nameservers: Iterable[str] = (), timeout_s: float = LOOKUP_TIMEOUT_S):
        self.resolver = _resolver(nameservers, timeout_s)

    def addresses(self, name: str) -> list[str]:
        """A and AAAA records of ``name``, IPv4 first. Raises LookupFailed when neither answers."""
        found: list[str] = []
        errors = []
        for record_type in ("A", "AAAA"):
            try:
                answer = self.resolver.resolve(name, record_type, search=True)
            except (dns.exception.DNSException, OSError) as exc:
                errors.append(_reason(exc))
                continue
            found += sorted(record.address for record in answer)
        if not found:
            raise LookupFailed("; ".join(dict.fromkeys(errors)) or "no addresses")
        return found

    def services(self, name: str) -> list[tuple[str, int]]:
        """(address, port) of each target of ``name``'s SRV records. A target whose own addresses cannot
        be found is left out; LookupFailed when none is left."""
        try:
            answer = self.resolver.resolve(name, "SRV", search=True)
        except (dns.exception.DNSException, OSError) as exc:
            raise LookupFailed(_reason(exc)) from None
        found: list[tuple[str, int]] = []
        for record in sorted(answer, key=lambda r: (r.priority, -r.weight, str(r.target))):
            target = str(record.target).rstrip(".")
            try:
                found += [(address, record.port) for address in self.addresses(target)]
            except LookupFailed as exc:
                logger.info("peer DNS: SRV target %s of %s left out: %s", target, name, exc)
        if not found:
            raise LookupFailed("no SRV target has an address")
        return list(dict.fromkeys(found))

    def texts(self, name: str) -> list[str]:
        """The words of ``name``'s TXT records (Eureka writes ``"host1 host2"``, quoted or not)."""
        try:
            answer = self.resolver.resolve(name, "TXT", search=True)
        except (dns.exception.DNSException, OSError) as exc:
            raise LookupFailed(_reason(exc)) from None
        words: list[str] = []
        for record in answer:
            text = b" ".join(record.strings).decode("ascii", "replace").strip().strip('"')
            words += text.split()
        return list(dict.fromkeys(words))

    def eureka_txt_hosts(self, name: str) -> list[str]:
        """Eureka's layout: ``name`` (``txt.<region>.<domain>``) lists zone names ``<zone>.<domain>``,
        and each ``txt.<zone>.<domain>`` its servers' host names. A zone that gives none is left out."""
        hosts: list[str] = []
        for zone in sorted(self.texts(name)):
            try:
                hosts += self.texts(f"txt.{zone.rstrip('.')}")
            except LookupFailed as exc:
                logger.info("peer DNS: zone %s of %s left out: %s", zone, name, exc)
        if not hosts:
            raise LookupFailed("no zone lists a server")
        return list(dict.fromkeys(host.rstrip(".") for host in hosts))

    def peers(self, entry: PeerDns) -> list[Peer]:
        if entry.txt:
            # Host names, as Eureka's clients use them (the transport resolves them).
            return [entry.peer_at(host) for host in self.eureka_txt_hosts(entry.name)]
        if entry.srv:
            return [entry.peer_at(address, port) for address, port in self.services(entry.name)]
        return [entry.peer_at(address) for address in self.addresses(entry.name)]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, dns.resolver.NXDOMAIN):
        return "no such name"
    if isinstance(exc, dns.resolver.NoAnswer):
        return "no records of that type"
    if isinstance(exc, dns.exception.Timeout | dns.resolver.LifetimeTimeout):
        return "timed out"
    if isinstance(exc, dns.resolver.NoNameservers):
        return "no nameserver answered (SERVFAIL or refused)"
    return str(exc) or type(exc).__name__


class PeerDiscovery:
    """The peers ``EUREKA_PEER_DNS`` names now: each name's latest good answer."""

    def __init__(self, entries: Iterable[PeerDns], resolver: PeerResolver):
        self.entries = tuple(entries)
        self.resolver = resolver
        self._last_good: dict[PeerDns, list[Peer]] = {}
        self._failing: dict[PeerDns, str] = {}
        self.lookups = 0
        self.failures = 0

    def lookup(self) -> list[Peer]:
        """Ask again for every name; a name that fails keeps its last good answer (none at first)."""
        peers: dict[str, Peer] = {}
        for entry in self.entries:
            self.lookups += 1
            try:
                found = self.resolver.peers(entry)
            except LookupFailed as exc:
                self.failures += 1
                self._report_failure(entry, str(exc))
                found = self._last_good.get(entry, [])
            else:
                if self._failing.pop(entry, None) is not None:
                    logger.warning(
                        "peer DNS %s answers again: %d addresses",
                        entry.display,
                        len(found),
                        extra={"event": "peer_dns_recovered", "dns_name": entry.name},
                    )
                self._last_good[entry] = found
            for peer in found:
                peers.setdefault(peer.display_url, peer)
        return list(peers.values())

    def _report_failure(self, entry: PeerDns, reason: str) -> None:
        if entry in self._failing:
            return
        self._failing[entry] = reason
        kept = len(self._last_good.get(entry, []))
        logger.warning(
            "peer DNS %s: %s; keeping the last good answer (%d addresses)",
            entry.display,
            reason,
            kept,
            extra={"event": "peer_dns_failed", "dns_name": entry.name, "error": reason},
        )

    @property
    def answered(self) -> bool:
        """Some name has given a good answer (one listing only this node too: a first node)."""
        return bool(self._last_good)

    def status(self) -> dict[str, object]:
        """For /readyz: each name, its last good answer and whether its latest lookup failed."""
        return {
            entry.display: {
                "peers": [peer.display_url for peer in self._last_good.get(entry, [])],
                "failing": self._failing.get(entry),
            }
            for entry in self.entries
        }


def peer_for(display_url: str, entries: Iterable[PeerDns]) -> Peer | None:
    """The DNS peer (credentials included) behind a URL shown without them, if an entry could give it."""
    for entry in entries:
        peer = entry.could_give(display_url)
        if peer is not None:
            return peer
    return None
