"""Where the registry is told to reach, as settings give it: peers' and remote regions' service URLs,
a region's app whitelist, networks. Parsed and checked here, once, with no Django and nothing above
the domain, so that the typed settings (``registry/domain/config.py``) and the packages that use the
values (``cluster/``, ``health/``) share one reading. Credentials in a URL are kept (Basic auth) and never
shown (``registry/domain/redact.py``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from registry.domain.redact import scrub_credentials, scrub_text

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Region names as ``?regions=`` carries them: the Java server lower-cases the query, so a region
# configured in capitals could never be asked for; names are lower-cased here too.
_REGION_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*\Z")


def peer_hostname(url: str) -> str:
    try:
        return urlsplit(url).hostname or url
    except ValueError:
        return url


@dataclass(frozen=True)
class Peer:
    """A replica as configured: ``url`` keeps any credentials (used for Basic auth, never shown).
    ``tls_name``: the name an https:// peer's certificate must carry when it is not the URL's host (a
    peer found through DNS is reached at an address; its certificate names the DNS name)."""

    url: str
    tls_name: str = ""

    @property
    def display_url(self) -> str:
        return scrub_credentials(self.url)

    @property
    def key(self) -> str:
        """A short stable name for queues and tasks (the same in the node and in Celery workers)."""
        return hashlib.sha1(self.display_url.encode()).hexdigest()[:12]

    @property
    def auth(self) -> tuple[str, str] | None:
        parts = urlsplit(self.url)
        if parts.username is None:
            return None
        return unquote(parts.username), unquote(parts.password or "")

    @property
    def base_url(self) -> str:
        """The service URL without credentials, ending in ``/``: requests append ``apps/...``."""
        return self.display_url

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        return (parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))


class BadPeerUrl(ValueError):
    pass


def parse_peer_urls(urls: list[str] | tuple[str, ...]) -> list[Peer]:
    """Service URLs as clients write them (``http://[user:secret@]host:port/eureka/``), normalized to end
    in ``/``; duplicates (after removing credentials) are kept once. Raises BadPeerUrl."""
    peers: dict[str, Peer] = {}
    for raw in urls:
        text = raw.strip()
        if not text:
            continue
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018  (raises ValueError on a port that is not a number in range)
        except ValueError as exc:
            raise BadPeerUrl(f"{scrub_credentials(text)!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadPeerUrl(f"{scrub_credentials(text)!r}: expected http(s)://host[:port]/eureka/")
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        peer = Peer(urlunsplit((parts.scheme, parts.netloc, path, "", "")))
        peers.setdefault(peer.display_url, peer)
    return list(peers.values())


# A DNS name as EUREKA_PEER_DNS gives it: labels of letters, digits, '-' and '_' (SRV names start with
# ``_service._proto``), dot-separated, at most 253 characters.
_DNS_NAME = re.compile(
    r"(?=.{1,253}\Z)([A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\.)*"
    r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?\Z"
)
DEFAULT_PEER_PORT = 8761


@dataclass(frozen=True)
class PeerDns:
    """A name whose DNS records list peers (``EUREKA_PEER_DNS``): each address of ``name`` (A and
    AAAA records) becomes a peer ``scheme://[credentials@]address:port/path``; with ``srv``, each
    target of ``name``'s SRV records does, with the record's port. Credentials are kept (Basic auth)
    and never shown."""

    name: str
    port: int = DEFAULT_PEER_PORT
    scheme: str = "http"
    userinfo: str = ""
    path: str = "/eureka/"

    @property
    def srv(self) -> bool:
        return self.name.startswith("_")

    @property
    def txt(self) -> bool:
        """Eureka's own DNS layout (``useDnsForFetchingServiceUrls``): ``txt.<region>.<domain>`` holds
        the region's zone names, each zone's ``txt.<zone>`` its servers' host names."""
        return self.name.startswith("txt.")

    @property
    def display(self) -> str:
        where = self.name if self.srv else f"{self.name}:{self.port}"
        kind = " (SRV)" if self.srv else " (TXT)" if self.txt else ""
        return f"{self.scheme}://{where}{self.path}{kind}"

    @property
    def tls_name(self) -> str:
        """What an https:// peer found at an address must have its certificate name: the DNS name
        looked up (for SRV, the name after ``_service._proto.``: the service's own). Eureka's TXT
        layout gives host names, which are checked as they are."""
        if self.scheme != "https" or self.txt:
            return ""
        return self.name.split(".", 2)[2] if self.srv and self.name.count(".") >= 2 else self.name

    def peer_at(self, address: str, port: int | None = None) -> Peer:
        """The peer at ``address`` (an IP address or a host name), on ``port`` (an SRV record's) or
        this entry's own."""
        host = f"[{address}]" if ":" in address else address
        credentials = f"{self.userinfo}@" if self.userinfo else ""
        port = self.port if port is None else port
        return Peer(f"{self.scheme}://{credentials}{host}:{port}{self.path}", self.tls_name)

    def could_give(self, display_url: str) -> Peer | None:
        """The peer (credentials included) this entry gives for an address, when ``display_url``, a
        peer's URL without credentials, could have come from it; else None. A Celery worker rebuilds
        the node's DNS peers this way, without credentials ever passing through Redis."""
        try:
            parts = urlsplit(display_url)
            port = parts.port
        except ValueError:
            return None
        if parts.scheme != self.scheme or parts.path != self.path or not parts.hostname:
            return None
        if port is None or (not self.srv and port != self.port):
            return None
        return self.peer_at(parts.hostname, port)


def parse_peer_dns(entries: Iterable[str]) -> tuple[PeerDns, ...]:
    """``name:port`` (A/AAAA, http, path /eureka/; port 8761 when left out), ``_service._proto.name``
    (SRV), ``txt.<region>.<domain>[:port]`` (Eureka's TXT records), or a service URL whose host is
    the name (``http://user:pw@name:8761/eureka/``; scheme,
    credentials and path kept). Raises BadPeerUrl naming the entry."""
    found: dict[tuple, PeerDns] = {}
    for raw in entries:
        text = raw.strip()
        if not text:
            continue
        shown = scrub_credentials(text)
        url = text if "://" in text else f"http://{text}/eureka/"
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise BadPeerUrl(f"{shown!r}: {exc}") from None
        name = (parts.hostname or "").rstrip(".")
        if parts.scheme not in ("http", "https") or not name or not _DNS_NAME.match(name):
            raise BadPeerUrl(
                f"{shown!r}: expected name:port, _service._proto.name or http(s)://name:port/eureka/"
            )
        if name.startswith("_") and port is not None:
            raise BadPeerUrl(f"{shown!r}: an SRV name takes its ports from its records; leave the port out")
        if port is None:
            port = DEFAULT_PEER_PORT if "://" not in text else (443 if parts.scheme == "https" else 80)
        userinfo = parts.netloc.rpartition("@")[0]
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        entry = PeerDns(name.lower(), port, parts.scheme, userinfo, path)
        found.setdefault((entry.name, entry.port, entry.scheme, entry.path), entry)
    return tuple(found.values())


def parse_nameserver(entry: str) -> tuple[str, int]:
    """``ip``, ``ip:port`` or ``[ipv6]:port`` → (address, port); port 53 when left out. Raises
    ValueError naming the entry."""
    text = entry.strip()
    address, port = text, 53
    if text.startswith("["):
        address, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r}: expected [ipv6]:port")
        port_text = rest[1:]
    elif text.count(":") == 1:
        address, _, port_text = text.partition(":")
    else:
        port_text = ""
    try:
        ipaddress.ip_address(address)
        if port_text:
            port = int(port_text)
    except ValueError:
        raise ValueError(f"{text!r}: expected an IP address, ip:port or [ipv6]:port") from None
    if not 0 < port < 65536:
        raise ValueError(f"{text!r}: port out of range")
    return address, port


class BadRegionConfig(ValueError):
    """A remote-region setting that cannot be used; the message names the entry."""


def parse_region_urls(entries: Iterable[str]) -> dict[str, str]:
    """``name=url`` entries (``EUREKA_REMOTE_REGION_URLS``, split on commas) → {name: service URL}.
    Names are lower-cased; URLs are normalized like peer URLs (credentials kept, for Basic auth)."""
    regions: dict[str, str] = {}
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        name, sep, url = entry.partition("=")
        name = name.strip().lower()
        if not sep or not url.strip():
            raise BadRegionConfig(f"{scrub_text(entry)!r}: expected region=http://host:port/eureka/")
        if not _REGION_NAME.match(name):
            raise BadRegionConfig(f"region name {name[:40]!r}: use letters, digits, '.', '_' or '-'")
        if name in regions:
            raise BadRegionConfig(f"region {name!r} is given twice")
        try:
            (peer,) = parse_peer_urls([url.strip()])
        except BadPeerUrl as exc:
            raise BadRegionConfig(f"region {name!r}: {exc}") from None
        regions[name] = peer.url
    return regions


@dataclass(frozen=True)
class Whitelist:
    """Which apps of a region are merged: the region's own list if it has one, else the global list,
    else every app (Eureka's ``shouldFetchFromRemoteRegistry``)."""

    everywhere: frozenset[str] | None = None
    per_region: Mapping[str, frozenset[str]] | None = None

    def allows(self, region: str, app: str) -> bool:
        apps = (self.per_region or {}).get(region, self.everywhere)
        return apps is None or app in apps


def parse_whitelist(entries: Iterable[str], regions: Iterable[str]) -> Whitelist:
    """``APP`` (every region) or ``region:APP`` (that region) entries; apps are upper-cased, as app
    names are. A region named here must be configured."""
    known = set(regions)
    everywhere: set[str] = set()
    per_region: dict[str, set[str]] = {}
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        region, sep, app = entry.rpartition(":")
        region, app = region.strip().lower(), app.strip().upper()
        if not app or (sep and not region):
            raise BadRegionConfig(f"whitelist entry {entry[:60]!r}: expected APP or region:APP")
        if not sep:
            everywhere.add(app)
        elif region not in known:
            raise BadRegionConfig(
                f"whitelist entry {entry[:60]!r}: no remote region {region!r} is configured"
                f" (known: {', '.join(sorted(known)) or 'none'})"
            )
        else:
            per_region.setdefault(region, set()).add(app)
    return Whitelist(
        frozenset(everywhere) if everywhere else None,
        {region: frozenset(apps) for region, apps in per_region.items()} or None,
    )


def parse_networks(text: str) -> tuple[Network, ...]:
    """``"127.0.0.0/8, fd00::/8"`` → networks; a single address is a /32 (/128). Raises ValueError
    naming the bad entry."""
    networks = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError as exc:
            raise ValueError(f"{entry!r} is not a network (CIDR such as 127.0.0.0/8): {exc}") from None
    return tuple(networks)
