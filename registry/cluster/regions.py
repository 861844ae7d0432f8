"""Remote regions: other Eureka deployments whose registries this node fetches and serves beside its
own, as the Java server does with ``eureka.server.remoteRegionUrlsWithName`` (protocol reference 5.13).

Each configured region is fetched like a Eureka client fetches a server: the full registry first,
then the delta at every run, checked against the remote's ``apps__hashcode`` (a mismatch, or a delta
that cannot be read, means a full fetch, as ``DiscoveryClient`` does). A region is *ready* once a
first fetch succeeded; until every region is ready, requests that ask for regions are refused (403),
as the Java server's ``shouldAllowAccess(true)``.

The node serves each region's instances as the remote sent them (their own status, lease times,
``actionType``): ``GET apps?regions=...`` merges them in, ``apps/delta?regions=...`` merges the
remote's last delta in, with the hashcode counted over the merged registry. A whitelist
(``EUREKA_REMOTE_REGION_APP_WHITELIST``) limits which apps of a region are merged.

Who drives the fetches (the node's scheduler, or Celery beat through the control endpoint) only
decides when: ``start_fetches`` hands each region not already being fetched to ``spawn`` (a thread,
under gevent a greenlet) and returns at once, so a slow remote never holds a job or a request.
A remote's answer is read instance by instance within limits (registry/wire/answers.py: how many
instances and applications, how large one instance), never as one document of Python objects, and
the event loop gets a turn every few milliseconds (``PACER``). An answer over the limits fails the
fetch: the region keeps what it had.

Plain Python: no Django. The HTTP client (httpx) is loaded only when a region is configured.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from registry.cache.pacing import PACER
from registry.domain import constants as c
from registry.domain.endpoints import Peer, Whitelist
from registry.domain.instances import InstanceInfo
from registry.domain.lease_map import reconcile_hashcode
from registry.domain.leases import LeaseView
from registry.wire.answers import (
    RECORD_BYTES_SETTING,
    TOO_LARGE,
    AnswerDocument,
    AnswerOverLimit,
    AnswerUnreadable,
    RecordLimits,
    Skipped,
    registry_answer,
)
from registry.wire.codecs import BadInput, build_instance, parse_long

logger = logging.getLogger(__name__)

_ACTIONS = frozenset({c.ADDED, c.MODIFIED, c.DELETED})

AppViews = list[tuple[str, list[LeaseView]]]

# Unknown region names asked for are logged once each, up to this many.
UNKNOWN_NAMES_LOGGED = 100


class FetchFailed(Exception):
    """A remote region's registry could not be had this time; the message is shown on the console
    (staff only) and never holds credentials. ``over_limit``: the answer was larger, or slower, than
    this node reads (region_transport.py), so asking for the full registry instead would not help."""

    def __init__(self, reason: str, over_limit: bool = False):
        super().__init__(reason)
        self.over_limit = over_limit


class RegionTransport(Protocol):
    def fetch(self, peer: Peer, delta: bool) -> bytes | bytearray:
        """The body of ``GET apps/`` (or ``apps/delta``) as JSON; raises FetchFailed."""
        ...


def _counts_by_status(apps: Iterable[Iterable[LeaseView]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for views in apps:
        for view in views:
            status = view.instance.status
            counts[status] = counts.get(status, 0) + 1
    return counts


def region_limits(max_instances: int, max_record_bytes: int) -> RecordLimits:
    """What a region's answer may hold, and the settings that say so."""
    return RecordLimits(
        max_instances, max_record_bytes, "EUREKA_REMOTE_REGION_MAX_ANSWER_INSTANCES", RECORD_BYTES_SETTING
    )


def decode_registry(document: AnswerDocument, now: int, skipped: Skipped) -> tuple[AppViews, str | None]:
    """A remote ``applications`` document → its instances grouped by app, and its hashcode. Each
    instance keeps the remote's data: status, lease times, ``actionType``, ``lastUpdatedTimestamp``.
    An instance that is not a valid registration, or larger than the limit, is counted in
    ``skipped``. Raises AnswerOverLimit, or AnswerUnreadable for a document that is not a registry."""
    grouped: dict[str, dict[str, LeaseView]] = {}
    for raw in document:
        if raw is TOO_LARGE:
            skipped.add(f"larger than {RECORD_BYTES_SETTING}")
            continue
        try:
            view = _remote_view(raw, now)
        except BadInput as exc:
            skipped.add("not valid registrations", str(exc))
            continue
        grouped.setdefault(view.instance.app, {})[view.instance.instance_id] = view
        # Building an instance is a slice of work: the loop may get its turn between two.
        PACER.tick()
    if not document.found:
        raise AnswerUnreadable(f"unreadable {document.what}: no applications document")
    return [(app, list(views.values())) for app, views in grouped.items()], document.captured


def _remote_view(raw: Mapping[str, Any], now: int) -> LeaseView:
    instance: InstanceInfo = build_instance(raw, now)
    action = raw.get("actionType")
    action = action.upper() if isinstance(action, str) and action.upper() in _ACTIONS else None
    updated = raw.get("lastUpdatedTimestamp")
    instance = instance.evolve(
        action_type=action,
        last_updated_timestamp=parse_long(updated, "lastUpdatedTimestamp") if updated else now,
    )
    lease = raw.get("leaseInfo") if isinstance(raw.get("leaseInfo"), dict) else {}

    def stamp(key: str) -> int:
        value = lease.get(key)
        return parse_long(value, f"leaseInfo.{key}") if value not in (None, "") else 0

    return LeaseView(
        instance,
        stamp("registrationTimestamp"),
        stamp("lastRenewalTimestamp"),
        stamp("evictionTimestamp"),
        stamp("serviceUpTimestamp"),
    )


@dataclass(frozen=True)
class RegionHealth:
    """One region as the console and the metrics show it (``url`` without credentials)."""

    name: str
    url: str
    ready: bool
    instances: int
    last_success_at: int | None
    last_attempt_at: int | None
    last_error: str | None
    full_fetches: int
    delta_fetches: int
    hashcode_mismatches: int
    failures: int


class RemoteRegion:
    """One remote region's registry as last fetched. A fetch builds new ``apps`` and ``delta``
    objects and swaps them in; none is changed in place once published, so readers need no lock."""

    def __init__(self, name: str, url: str, limits: RecordLimits):
        self.name = name
        self.peer = Peer(url)
        self.limits = limits
        # The last answer's skipped instances as logged (None: it skipped none).
        self._skipped_said: str | None = None
        # app -> instance id -> view, as the remote holds them after the last fetch.
        self.apps: dict[str, dict[str, LeaseView]] = {}
        # What the remote changed in the last fetch: its delta, or after a full fetch its whole
        # registry (the Java server keeps the same; protocol reference 5.13).
        self.delta: AppViews = []
        # The raw vip strings of the instances the last change touched, before and after it.
        self.changed_vips: set[str] = set()
        self.ready = False
        self.last_success_at: int | None = None
        self.last_attempt_at: int | None = None
        self.last_error: str | None = None
        self.full_fetches = 0
        self.delta_fetches = 0
        self.hashcode_mismatches = 0
        self.failures = 0

    def instance_count(self) -> int:
        return sum(len(instances) for instances in self.apps.values())

    def hashcode(self) -> str:
        return reconcile_hashcode(_counts_by_status(held.values() for held in self.apps.values()))

    def health(self) -> RegionHealth:
        return RegionHealth(
            self.name,
            self.peer.display_url,
            self.ready,
            self.instance_count(),
            self.last_success_at,
            self.last_attempt_at,
            self.last_error,
            self.full_fetches,
            self.delta_fetches,
            self.hashcode_mismatches,
            self.failures,
        )

    def fetch(self, transport: RegionTransport, now: Callable[[], int]) -> set[str] | None:
        """One fetch, as a Eureka client's: full while nothing is held, else the delta, then full
        again when the delta does not add up to the remote's hashcode. Returns the apps whose
        instances changed, or None when nothing a payload shows changed."""
        self.last_attempt_at = now()
        before_apps, before_delta = self.apps, self.delta
        try:
            touched = self._fetch_delta(transport, now) if self.apps else None
            if touched is None:
                self._fetch_full(transport, now)
        except FetchFailed as exc:
            self.failures += 1
            if self.last_error != str(exc):
                logger.warning("remote region %s (%s): %s", self.name, self.peer.display_url, exc)
            self.last_error = str(exc)
            return None
        if self.last_error is not None or not self.ready:
            logger.info(
                "remote region %s (%s): fetched, %d instances",
                self.name,
                self.peer.display_url,
                self.instance_count(),
            )
        self.ready = True
        self.last_error = None
        self.last_success_at = now()
        if touched is None:
            # A full fetch decoded every instance anew: comparing them all with what was held would
            # cost as much as serializing them again (it is rare: the first fetch, or a mismatch).
            changed = self.apps.keys() | before_apps.keys()
        else:
            changed = {app for app in touched if self.apps.get(app) != before_apps.get(app)}
        if not changed and self.delta == before_delta:
            return None
        self.changed_vips = {
            vip
            for app in changed
            for held in (before_apps.get(app, {}), self.apps.get(app, {}))
            for view in held.values()
            for vip in (view.instance.vip_address, view.instance.secure_vip_address)
            if vip
        }
        return changed

    def _decoded(
        self, transport: RegionTransport, delta: bool, now: Callable[[], int]
    ) -> tuple[AppViews, str | None]:
        """``GET apps/`` (or the delta) decoded; raises FetchFailed. What was skipped of a readable
        answer is logged in one line, and only when it is not what the last answer skipped."""
        body = transport.fetch(self.peer, delta)
        request = "GET apps/delta" if delta else "GET apps"
        skipped = Skipped()
        try:
            decoded = decode_registry(
                registry_answer(body, self.limits, "delta" if delta else "registry"), now(), skipped
            )
        except AnswerOverLimit as exc:
            raise FetchFailed(f"{request}: {exc}", over_limit=True) from None
        except AnswerUnreadable as exc:
            raise FetchFailed(str(exc)) from None
        said = str(skipped) if skipped else None
        if said is not None and said != self._skipped_said:
            logger.warning("remote region %s: %s: instances skipped: %s", self.name, request, said)
        self._skipped_said = said
        return decoded

    def _fetch_full(self, transport: RegionTransport, now: Callable[[], int]) -> None:
        apps, _ = self._decoded(transport, False, now)
        self.apps = {app: _by_id(views) for app, views in apps}
        self.delta = apps
        self.full_fetches += 1

    def _fetch_delta(self, transport: RegionTransport, now: Callable[[], int]) -> set[str] | None:
        """Apply the remote's delta and return the apps it touched; None when a full fetch is needed
        instead: the delta could not be had (a remote with deltas disabled answers 403), or it does
        not add up to the remote's hashcode. A delta over this node's limits fails the fetch: the
        full registry is larger still."""
        try:
            delta, remote_hashcode = self._decoded(transport, True, now)
        except FetchFailed as exc:
            if exc.over_limit:
                raise
            logger.info("remote region %s: no delta (%s): full fetch", self.name, exc)
            return None
        # Only the apps the delta touches get new dictionaries; the others are shared with the last.
        apps = dict(self.apps)
        for app, views in delta:
            held = apps[app] = dict(apps.get(app, {}))
            for view in views:
                if view.instance.action_type == c.DELETED:
                    held.pop(view.instance.instance_id, None)
                else:
                    held[view.instance.instance_id] = view
        apps = {app: instances for app, instances in apps.items() if instances}
        self.delta_fetches += 1
        if remote_hashcode is not None and remote_hashcode != reconcile_hashcode(
            _counts_by_status(held.values() for held in apps.values())
        ):
            self.hashcode_mismatches += 1
            logger.info("remote region %s: the delta does not add up to its hashcode: full fetch", self.name)
            return None
        self.apps = apps
        self.delta = delta
        return {app for app, _ in delta}


class RemoteRegions:
    """Every configured remote region, what requests may read of them, and their fetching."""

    def __init__(
        self,
        urls: Mapping[str, str],
        whitelist: Whitelist,
        transport: RegionTransport,
        clock: Callable[[], int],
        on_change: Callable[[str, set[str], set[str]], None] | None = None,
        spawn: Callable[[Callable[[], None]], None] | None = None,
        fallback: bool = True,
        *,
        limits: RecordLimits,
    ):
        # Transparent fallback (Eureka's default): requests that name no region get them all, and
        # ``GET apps/{app}`` / ``apps/{app}/{id}`` missing here are looked up in the regions.
        self.fallback = fallback
        self.regions = {name: RemoteRegion(name, url, limits) for name, url in urls.items()}
        self.whitelist = whitelist
        self.transport = transport
        self.clock = clock
        self.on_change = on_change
        self._spawn = spawn or _thread
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()
        self._unknown_logged: set[str] = set()

    @property
    def names(self) -> list[str]:
        return list(self.regions)

    # ---------------------------------------------------------------------------------- fetching

    def fetch(self, name: str) -> set[str] | None:
        """Fetch one region now, in this thread. When what payloads show changed, ``on_change`` is
        told the region, the apps whose instances changed and the vips they carried or carry (the
        cached payloads drop them)."""
        region = self.regions[name]
        changed = region.fetch(self.transport, self.clock)
        if changed is not None and self.on_change is not None:
            self.on_change(name, changed, region.changed_vips)
        return changed

    def fetch_all(self) -> None:
        """Fetch every region now, one after the other, in this thread (tests, commands)."""
        for name in self.regions:
            self.fetch(name)

    def start_fetches(self) -> int:
        """Start a fetch of every region not being fetched already (``spawn``); returns how many."""
        started = 0
        for name in self.regions:
            with self._lock:
                if name in self._in_flight:
                    continue
                self._in_flight.add(name)
            started += 1
            self._spawn(lambda name=name: self._fetch_and_release(name))
        return started

    def _fetch_and_release(self, name: str) -> None:
        try:
            self.fetch(name)
        except Exception:  # a bug must not leave the region marked in flight for good
            logger.exception("remote region %s: fetch failed", name)
        finally:
            with self._lock:
                self._in_flight.discard(name)

    # ----------------------------------------------------------------------------------- reading

    def ready(self) -> bool:
        """Whether requests asking for regions may be served: every region fetched once (as Eureka)."""
        return all(region.ready for region in self.regions.values())

    def known(self, asked: Iterable[str]) -> tuple[str, ...]:
        """The configured ones among ``asked`` (lower-cased, sorted, once each). The others are
        ignored, as by Eureka, and logged once each (a few: any name can be asked for)."""
        names = []
        for name in sorted({name.strip().lower() for name in asked if name.strip()}):
            if name in self.regions:
                names.append(name)
            elif name not in self._unknown_logged and len(self._unknown_logged) < UNKNOWN_NAMES_LOGGED:
                self._unknown_logged.add(name)
                logger.info("remote region %r asked for but not configured: ignored", name[:60])
        return tuple(names)

    def applications(self, names: Iterable[str]) -> AppViews:
        """The whitelisted apps of these regions, an app's instances from every region together (a
        later region's instance replacing an earlier one with the same id, as in Eureka)."""
        return self._merged(names, lambda region: region.apps.items())

    def deltas(self, names: Iterable[str]) -> AppViews:
        """What these regions' last fetches brought (whitelisted), grouped by app."""
        return self._merged(names, lambda region: ((app, _by_id(views)) for app, views in region.delta))

    def _merged(self, names: Iterable[str], apps_of: Callable[[RemoteRegion], Any]) -> AppViews:
        merged: dict[str, dict[str, LeaseView]] = {}
        for name in names:
            region = self.regions.get(name)
            if region is None:
                continue
            for app, instances in apps_of(region):
                if instances and self.whitelist.allows(name, app):
                    merged.setdefault(app, {}).update(instances)
        return [(app, list(instances.values())) for app, instances in merged.items()]

    def find_app(self, app: str) -> list[LeaseView] | None:
        """``GET apps/{app}`` for an app with no instance here: the first region that has it."""
        for region in self.regions.values():
            instances = region.apps.get(app)
            if instances:
                return list(instances.values())
        return None

    def find_instance(self, app: str, instance_id: str) -> LeaseView | None:
        """``GET apps/{app}/{id}`` for an instance not held here."""
        for region in self.regions.values():
            view = region.apps.get(app, {}).get(instance_id)
            if view is not None:
                return view
        return None

    def find_by_id(self, instance_id: str) -> LeaseView | None:
        """``GET instances/{id}`` for an id not held here: the first app of a region holding it."""
        for region in self.regions.values():
            for instances in region.apps.values():
                view = instances.get(instance_id)
                if view is not None:
                    return view
        return None

    def health(self) -> list[RegionHealth]:
        return [region.health() for region in self.regions.values()]


def _by_id(views: list[LeaseView]) -> dict[str, LeaseView]:
    return {view.instance.instance_id: view for view in views}


def _thread(run: Callable[[], None]) -> None:
    threading.Thread(target=run, name="remote-region-fetch", daemon=True).start()
