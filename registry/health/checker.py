"""The health checker's state machine: per instance, consecutive failures and successes, and what
the checker did about them. Plain Python: every method takes ``now`` (epoch ms); the probes
themselves run elsewhere (``probes.py``) and come back here as ``ProbeResult`` values.

Rules, in the order ``apply`` follows them:

1. A result for a probe the checker no longer waits for (the instance left, re-registered with
   another check, or the claim expired and was handed out again) is ignored. A ``refused`` result
   (the address policy let no probe out, ``addresses.py``) is not a failure: the instance is not
   checked, its counts start again, a DOWN the checker holds is lifted, and the reason is kept for
   staff.
2. The instance's override is looked at first. If the checker holds DOWN and the override is now
   anything else (changed or removed by an operator, or by a peer), the checker forgets its DOWN and
   its counts. An override the checker did not set makes it stand aside; once that override is gone
   the counts start again from zero.
3. The result is counted: a success resets the failures, a failure the successes.
4. Not holding DOWN, no override, status UP, and ``threshold`` failures in a row: set a DOWN override
   as the ``health-check`` actor (the registry's override path: delta, caches, peers).
5. Holding DOWN and ``recover`` successes in a row: remove that override, restoring the status the
   instance had before (UP), or the one it reports now if it re-registered as STARTING meanwhile.

The checker never evicts and never cancels. Instances that are cancelled or evicted lose their state
(the registry's change log tells the checker, see ``refresh``).
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from registry.domain import constants as c
from registry.domain.changes import CANCELLED, EVICTED, METADATA_CHANGED, REGISTERED, Change
from registry.domain.core import Registry
from registry.health.config import CheckConfig, CheckDefaults, ParsedCheck, parse_check

logger = logging.getLogger(__name__)

ACTOR = "health-check"
# A claimed probe whose result has not come back after its timeout plus this is handed out again
# (a Celery worker that died mid-round must not keep the instance unchecked for good).
CLAIM_GRACE_MS = 30_000
# Every so often the checker compares itself with the whole map, in case a change was missed.
FULL_SCAN_INTERVAL_MS = 30_000
# Changes kept between two refreshes, at most (past it the next refresh reads the whole map).
PENDING_LIMIT = 100_000

Key = tuple[str, str]


@dataclass(frozen=True)
class ProbeTarget:
    """What a prober needs for one probe; ``claim`` ties the result to this very request."""

    app: str
    instance_id: str
    claim: int
    kind: str
    url: str | None
    host: str
    port: int
    timeout_ms: int
    # When the probe is due (epoch ms): the node's loop starts each at its time, not all at once.
    due: int = 0

    def as_dict(self) -> dict:
        return {
            "app": self.app,
            "instance_id": self.instance_id,
            "claim": self.claim,
            "kind": self.kind,
            "url": self.url,
            "host": self.host,
            "port": self.port,
            "timeout_ms": self.timeout_ms,
            "due": self.due,
        }

    @classmethod
    def from_dict(cls, data: dict) -> ProbeTarget:
        return cls(
            app=str(data["app"]),
            instance_id=str(data["instance_id"]),
            claim=int(data["claim"]),
            kind=str(data["kind"]),
            url=None if data.get("url") is None else str(data["url"]),
            host=str(data["host"]),
            port=int(data["port"]),
            timeout_ms=int(data["timeout_ms"]),
            due=int(data.get("due") or 0),
        )


class BadResult(ValueError):
    """A probe result that cannot be read (the control endpoint answers 400)."""


@dataclass(frozen=True)
class ProbeResult:
    app: str
    instance_id: str
    claim: int
    ok: bool
    latency_ms: float
    reason: str
    # Not probed: no address of the target may be (the reason says why); never counted as a failure.
    refused: bool = False

    def as_dict(self) -> dict:
        return {
            "app": self.app,
            "instance_id": self.instance_id,
            "claim": self.claim,
            "ok": self.ok,
            "latency_ms": self.latency_ms,
            "reason": self.reason,
            "refused": self.refused,
        }

    @classmethod
    def from_dict(cls, data: object) -> ProbeResult:
        """Strict: exactly the types ``as_dict`` writes (raises BadResult)."""
        if not isinstance(data, dict):
            raise BadResult("each result must be an object")
        app, instance_id, claim = data.get("app"), data.get("instance_id"), data.get("claim")
        ok, latency, reason = data.get("ok"), data.get("latency_ms"), data.get("reason", "")
        refused = data.get("refused", False)
        if not isinstance(app, str) or not isinstance(instance_id, str) or not app or not instance_id:
            raise BadResult("app and instance_id must be non-empty strings")
        if not isinstance(claim, int) or isinstance(claim, bool) or claim <= 0:
            raise BadResult("claim must be a positive integer")
        if not isinstance(ok, bool):
            raise BadResult("ok must be true or false")
        if not isinstance(latency, (int, float)) or isinstance(latency, bool) or not 0 <= latency < 3_600_000:
            raise BadResult("latency_ms must be a number of milliseconds")
        if not isinstance(reason, str):
            raise BadResult("reason must be a string")
        if not isinstance(refused, bool) or (refused and ok):
            raise BadResult("refused must be true or false, and false when ok is true")
        return cls(app, instance_id, claim, ok, float(latency), reason[:200], refused)


@dataclass
class CheckState:
    """One instance the checker knows of (checked, or asking for a check it cannot have)."""

    app: str
    instance_id: str
    parsed: ParsedCheck
    # The record the config was read from: a new record (re-registration, metadata) is read again.
    instance_ref: object = None
    next_due: int = 0
    claim: int = 0
    claimed_until: int = 0
    probes: int = 0
    failures: int = 0
    successes: int = 0
    last_probe_at: int | None = None
    last_latency_ms: float | None = None
    last_ok: bool | None = None
    last_reason: str = ""
    # Why the last probe was not made (the address policy's reason); empty once a probe goes out.
    refused_reason: str = ""
    holds_down: bool = False
    marked_down_at: int | None = None
    restore_status: str = c.UP
    # An override the checker did not set, as last seen (the checker stands aside while it lasts).
    foreign_override: str | None = None

    @property
    def config(self) -> CheckConfig | None:
        return self.parsed.config


UNKNOWN = "unknown"


@dataclass(frozen=True)
class CheckView:
    """What the instance page shows of one instance's check: ``health`` to everyone, the rest (the
    probe's reasons and timings, which tell about the network behind the node) to staff only."""

    kind: str | None
    target: str | None
    interval_ms: int | None
    timeout_ms: int | None
    threshold: int | None
    recover: int | None
    errors: tuple[str, ...]
    probes: int
    failures: int
    successes: int
    last_probe_at: int | None
    last_latency_ms: float | None
    last_ok: bool | None
    last_reason: str
    refused_reason: str
    holds_down: bool
    marked_down_at: int | None
    foreign_override: str | None
    next_due: int | None

    @property
    def health(self) -> str:
        """UP, DOWN or unknown: DOWN while the checker holds its override or the last probe failed,
        unknown until a probe has been made (or while none may be)."""
        if self.holds_down:
            return c.DOWN
        if self.kind is None or self.refused_reason or self.last_ok is None:
            return UNKNOWN
        return c.UP if self.last_ok else c.DOWN


@dataclass
class CheckerStats:
    probes_ok: int = 0
    probes_failed: int = 0
    # Probes the address policy did not let out (not failures).
    probes_refused: int = 0
    # Results that came back for a probe the checker no longer waited for.
    results_ignored: int = 0
    marked_down: int = 0
    lifted: int = 0


class HealthChecker:
    """Per-instance check state for one registry. Thread-safe: probes report from a pool."""

    def __init__(self, registry: Registry, defaults: CheckDefaults, now: int):
        self.registry = registry
        self.defaults = defaults
        self.stats = CheckerStats()
        self._states: dict[Key, CheckState] = {}
        self._lock = threading.Lock()
        self._claims = 0
        self._last_full_scan: int | None = None
        # Changes the registry told of, kept until the next ``refresh`` (appended under its lock).
        self._pending: deque[tuple[str, str, str]] = deque()
        self._unsubscribe: Callable[[], None] | None = registry.reads.subscribe_changes(self._on_change)
        self.refresh(now)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    # ----------------------------------------------------------------- knowing the instances

    def _on_change(self, change: Change) -> None:
        # Called under the registry's lock: only note it (a deque append needs no lock of ours).
        if change.action in (REGISTERED, METADATA_CHANGED, CANCELLED, EVICTED):
            if len(self._pending) >= PENDING_LIMIT:
                # Nobody refreshed for a long while (Celery beat stopped, say): compare with the
                # whole map next time instead of keeping an ever longer list.
                self._pending.clear()
                self._last_full_scan = None
            self._pending.append((change.app, change.instance_id, change.action))

    def refresh(self, now: int) -> None:
        """Take in the registrations, metadata changes, cancels and evictions since the last call
        (the whole map every ``FULL_SCAN_INTERVAL_MS``), and notice overrides changed by others."""
        with self._lock:
            changes = []
            while True:  # the registry may append (or clear) meanwhile, under its own lock
                try:
                    changes.append(self._pending.popleft())
                except IndexError:
                    break
            full = self._last_full_scan is None or now - self._last_full_scan >= FULL_SCAN_INTERVAL_MS
            # In order: a cancel followed by a registration is a new instance, counted afresh.
            to_read: set[Key] = set()
            for app, instance_id, action in changes:
                key = (app, instance_id)
                if action in (CANCELLED, EVICTED):
                    self._forget(key)
                    to_read.discard(key)
                else:
                    to_read.add(key)
            if full:
                self._last_full_scan = now
                self._scan_all(now)
            else:
                for key in to_read:
                    found = self.registry.reads.lease(*key)
                    self._update(key, found[0].instance if found else None, now)
            # Few: the instances the checker holds DOWN or stands aside for.
            for key, state in list(self._states.items()):
                if state.holds_down or state.foreign_override is not None:
                    found = self.registry.reads.lease(*key)
                    if found is None:
                        self._forget(key)
                    else:
                        self._observe_override(
                            state, found[1], self.registry.reads.override_actor(key[1]), now
                        )

    def _scan_all(self, now: int) -> None:
        seen: set[Key] = set()
        for app, instances in self.registry.reads.instances():
            for instance in instances:
                key = (app, instance.instance_id)
                state = self._states.get(key)
                if state is None and not instance.metadata:
                    continue
                seen.add(key)
                self._update(key, instance, now)
        for key in [key for key in self._states if key not in seen]:
            self._forget(key)

    def _update(self, key: Key, instance, now: int) -> None:
        """(Re)read one instance's check from its current record (None: it is gone)."""
        state = self._states.get(key)
        if instance is None:
            self._forget(key)
            return
        if state is not None and state.instance_ref is instance:
            return
        parsed = parse_check(instance, self.defaults)
        if not parsed.requested:
            if state is not None:
                self._give_up(state, now, "the instance no longer asks for a health check")
                del self._states[key]
            return
        if state is None:
            state = self._states[key] = CheckState(key[0], key[1], parsed)
            state.next_due = now + self._phase(key, parsed.config)
        elif state.parsed != parsed:
            old = state.config
            state.parsed = parsed
            if parsed.config is None:
                self._give_up(state, now, "its health check can no longer be run")
            elif old is None or old.interval_ms != parsed.config.interval_ms:
                state.next_due = now + self._phase(key, parsed.config)
        state.instance_ref = instance

    @staticmethod
    def _phase(key: Key, config: CheckConfig | None) -> int:
        """Each instance's probes fall at its own offset in the interval, so a round is spread over
        the interval rather than a burst (stable across calls: the same instance, the same offset)."""
        if config is None:
            return 0
        return zlib.crc32(f"{key[0]}/{key[1]}".encode()) % config.interval_ms

    def _forget(self, key: Key) -> None:
        # Cancelled or evicted: the override went with the lease (Eureka drops it on cancel).
        self._states.pop(key, None)

    def _give_up(self, state: CheckState, now: int, why: str) -> None:
        """Stop checking an instance; a DOWN the checker holds is lifted, never left behind."""
        if state.holds_down:
            self._lift(state, now, why)
        state.claim = 0
        state.failures = state.successes = 0

    # ----------------------------------------------------------------------------- probes

    def claim_due(self, now: int, limit: int, ahead_ms: int = 0) -> list[ProbeTarget]:
        """Up to ``limit`` probes due by ``now + ahead_ms``, most overdue first; each is handed out once
        until its result comes back (or its claim expires)."""
        if limit <= 0:
            return []
        horizon = now + ahead_ms
        with self._lock:
            due = [
                state
                for state in self._states.values()
                if state.parsed.config is not None
                and state.next_due <= horizon
                and state.claimed_until <= now
            ]
            due.sort(key=lambda state: state.next_due)
            targets = []
            for state in due[:limit]:
                config = state.config
                self._claims += 1
                state.claim = self._claims
                starts = max(now, state.next_due)
                state.claimed_until = starts + config.timeout_ms + CLAIM_GRACE_MS
                # On the instance's own grid; slots missed while the node was busy are skipped.
                state.next_due += config.interval_ms * max(
                    1, (now - state.next_due) // config.interval_ms + 1
                )
                targets.append(
                    ProbeTarget(
                        state.app,
                        state.instance_id,
                        state.claim,
                        config.kind,
                        config.url,
                        config.host,
                        config.port,
                        config.timeout_ms,
                        starts,
                    )
                )
            return targets

    def apply(self, result: ProbeResult, now: int) -> str | None:
        """Count one probe's result and act on it (module docstring); returns ``"down"`` or ``"up"``
        when the checker set or lifted its override, else None."""
        with self._lock:
            key = (result.app, result.instance_id)
            state = self._states.get(key)
            if state is None or state.config is None or state.claim != result.claim:
                self.stats.results_ignored += 1
                return None
            state.claim = 0
            state.claimed_until = 0
            found = self.registry.reads.lease(*key)
            if found is None:
                self._forget(key)
                self.stats.results_ignored += 1
                return None
            view, override = found
            self._observe_override(state, override, self.registry.reads.override_actor(key[1]), now)
            if result.refused:
                self._refused(state, result, now)
                return None
            state.refused_reason = ""
            self._count(state, result, now)
            return self._act(state, view.instance.status, override, now)

    def _refused(self, state: CheckState, result: ProbeResult, now: int) -> None:
        """Nothing was probed: no failure to count, and no DOWN to keep (it could never be lifted)."""
        self.stats.probes_refused += 1
        first = state.refused_reason != result.reason
        state.refused_reason = result.reason
        state.last_probe_at = now
        state.last_ok = None
        state.last_latency_ms = None
        state.last_reason = ""
        self._give_up(state, now, "its health-check target may not be probed")
        if first:
            # Once per reason, for the operator (a dev on loopback learns which setting to use).
            logger.warning(
                "health check of %s/%s not probed: %s",
                state.app,
                state.instance_id,
                result.reason,
                extra={"event": "health_check_refused", "app": state.app, "instance": state.instance_id},
            )

    def _count(self, state: CheckState, result: ProbeResult, now: int) -> None:
        state.probes += 1
        state.last_probe_at = now
        state.last_latency_ms = result.latency_ms
        state.last_ok = result.ok
        state.last_reason = result.reason
        if result.ok:
            self.stats.probes_ok += 1
            state.successes += 1
            state.failures = 0
        else:
            self.stats.probes_failed += 1
            state.failures += 1
            state.successes = 0

    def _observe_override(
        self, state: CheckState, override: str | None, actor: str | None = None, now: int = 0
    ) -> None:
        if not state.holds_down and override == c.DOWN and actor == ACTOR:
            # The checker's own DOWN from before a restart (a warm restart keeps overrides and who set
            # them): hold it again, and lift it on recovery as if this process had set it.
            state.holds_down = True
            state.marked_down_at = now
            state.restore_status = c.UP
            state.foreign_override = None
            state.failures = state.successes = 0
            return
        if state.holds_down and override != c.DOWN:
            state.holds_down = False
            state.marked_down_at = None
            state.failures = state.successes = 0
            logger.warning(
                "health check: the DOWN override of %s/%s was changed to %s by someone else; "
                "the checker leaves the instance to them",
                state.app,
                state.instance_id,
                override or "none",
                extra={"event": "health_check_yielded", "app": state.app, "instance": state.instance_id},
            )
        if state.holds_down:
            return
        if override is not None:
            state.foreign_override = override
        elif state.foreign_override is not None:
            # The operator's override is gone: count afresh from here.
            state.foreign_override = None
            state.failures = state.successes = 0

    def _act(self, state: CheckState, status: str, override: str | None, now: int) -> str | None:
        config = state.config
        if state.holds_down:
            if state.successes >= config.recover:
                restore = state.restore_status if status == c.DOWN else status
                return (
                    "up"
                    if self._lift(state, now, f"{state.successes} consecutive successes", restore)
                    else None
                )
            return None
        if override is None and status == c.UP and state.failures >= config.threshold:
            return "down" if self._mark_down(state, now) else None
        return None

    def _mark_down(self, state: CheckState, now: int) -> bool:
        change = self.registry.set_status_override(state.app, state.instance_id, c.DOWN, now, actor=ACTOR)
        if change is None or change.new_override != c.DOWN:
            return False
        if change.old_override is not None:
            # An operator's override landed between our look and our write: theirs wins, put it back.
            self.registry.set_status_override(
                state.app, state.instance_id, change.old_override, now, actor=ACTOR
            )
            state.foreign_override = change.old_override
            return False
        state.holds_down = True
        state.marked_down_at = now
        state.restore_status = change.old_status
        self.stats.marked_down += 1
        logger.warning(
            "health check marked %s/%s DOWN after %d consecutive failures (%s): last %s",
            state.app,
            state.instance_id,
            state.failures,
            state.config.target,
            state.last_reason,
            extra={
                "event": "health_check_down",
                "app": state.app,
                "instance": state.instance_id,
                "reason": state.last_reason,
            },
        )
        return True

    def _lift(self, state: CheckState, now: int, why: str, restore: str | None = None) -> bool:
        restore = restore or state.restore_status
        change = self.registry.remove_status_override(
            state.app, state.instance_id, now, new_status=restore, actor=ACTOR
        )
        state.holds_down = False
        state.marked_down_at = None
        state.failures = state.successes = 0
        if change is None:
            return False
        if change.old_override not in (None, c.DOWN):
            # Someone else's override was there after all: theirs wins, put it back.
            self.registry.set_status_override(
                state.app, state.instance_id, change.old_override, now, actor=ACTOR
            )
            state.foreign_override = change.old_override
            return False
        self.stats.lifted += 1
        logger.warning(
            "health check lifted its DOWN of %s/%s (%s): status %s again",
            state.app,
            state.instance_id,
            why,
            restore,
            extra={"event": "health_check_up", "app": state.app, "instance": state.instance_id},
        )
        return True

    # ----------------------------------------------------------------------------- reading

    def view(self, app: str, instance_id: str) -> CheckView | None:
        with self._lock:
            state = self._states.get((app, instance_id))
            if state is None:
                return None
            config = state.config
            return CheckView(
                kind=config.kind if config else None,
                target=config.target if config else None,
                interval_ms=config.interval_ms if config else None,
                timeout_ms=config.timeout_ms if config else None,
                threshold=config.threshold if config else None,
                recover=config.recover if config else None,
                errors=state.parsed.errors,
                probes=state.probes,
                failures=state.failures,
                successes=state.successes,
                last_probe_at=state.last_probe_at,
                last_latency_ms=state.last_latency_ms,
                last_ok=state.last_ok,
                last_reason=state.last_reason,
                refused_reason=state.refused_reason,
                holds_down=state.holds_down,
                marked_down_at=state.marked_down_at,
                foreign_override=state.foreign_override,
                next_due=state.next_due if config else None,
            )

    def checked(self) -> int:
        with self._lock:
            return sum(1 for state in self._states.values() if state.config is not None)

    def held_down(self) -> list[Key]:
        with self._lock:
            return [key for key, state in self._states.items() if state.holds_down]

    def apply_all(self, results: Iterable[ProbeResult], now: int) -> int:
        """Apply a batch (the control endpoint's); returns how many changed an override."""
        return sum(1 for result in results if self.apply(result, now) is not None)
