"""The operator's log of the map's own state changes: one line per change, never one per job run.

``StateLog.eviction`` reads each eviction run (``Registry.run_eviction``) and logs the leases it
evicted (which ones, capped at ``LISTED`` with "and N more", and how many), and the moments
self-preservation starts and stops holding expired leases, with renews of the last minute against
the threshold. Each line carries its facts as ``extra`` fields too (``event``, ``instances``,
``renews_last_minute``...), which ``LOG_FORMAT=json`` writes as fields of the line's object.

The other transitions are logged where they are found, once each: a peer that becomes unavailable or
available again (``registry/cluster/peers.py``), the Redis read-only tier lost and back
(``registry/cache/redis_tier.py``), a job Celery beat left overdue and its return (``watchdog.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from registry.domain.core import EvictionRun

logger = logging.getLogger("registry.events")

# Instances named in one eviction line; the rest are counted ("and 40 more").
LISTED = 20


def listing(names: Sequence[str], limit: int = LISTED) -> str:
    """``A, B, C and 2 more``: the first ``limit`` names, then how many were left out."""
    shown = ", ".join(names[:limit])
    rest = len(names) - limit
    return f"{shown} and {rest} more" if rest > 0 else shown


class StateLog:
    """Remembers what it last said about self-preservation, so each change is logged once."""

    def __init__(self) -> None:
        # None until a run with instances decides it: an empty map has nothing to preserve.
        self.preserving: bool | None = None

    def eviction(self, run: EvictionRun, size: int) -> None:
        """After each eviction run; ``size`` is the number of leases the map holds after it."""
        self._self_preservation(run, size)
        if not run.evicted:
            return
        names = [f"{app}/{instance_id}" for app, instance_id in sorted(run.evicted)]
        capped = f" (at most {len(run.evicted)} per run)" if run.limited else ""
        logger.warning(
            "evicted %d expired lease%s of %d%s: %s",
            len(run.evicted),
            "" if len(run.evicted) == 1 else "s",
            run.expired,
            capped,
            listing(names),
            extra={
                "event": "eviction",
                "evicted": len(run.evicted),
                "expired": run.expired,
                "limited": run.limited,
                "apps": sorted({app for app, _ in run.evicted}),
                "instances": names[:LISTED],
            },
        )

    def _self_preservation(self, run: EvictionRun, size: int) -> None:
        if run.preserving == self.preserving or (size == 0 and not run.evicted):
            return
        was, self.preserving = self.preserving, run.preserving
        if was is None and not run.preserving:
            return  # evicting from the start: nothing was entered, nothing is left
        numbers = {
            "renews_last_minute": run.renews_last_minute,
            "renews_threshold": run.renews_threshold,
            "expected_clients": run.expected_clients,
        }
        if run.preserving:
            logger.warning(
                "self-preservation entered: %d renews in the last minute, threshold %d (%d expected "
                "clients): no lease is evicted until renews exceed the threshold (%d expired now)",
                run.renews_last_minute,
                run.renews_threshold,
                run.expected_clients,
                run.expired,
                extra={"event": "self_preservation_entered", "expired": run.expired, **numbers},
            )
        else:
            logger.warning(
                "self-preservation left: %d renews in the last minute, threshold %d (%d expected "
                "clients): expired leases are evicted again",
                run.renews_last_minute,
                run.renews_threshold,
                run.expected_clients,
                extra={"event": "self_preservation_left", **numbers},
            )
