"""When a peer's sender tries again after replication to it failed, and with what.

Eureka's sender tries the same batch again 100 ms after a network error and 1 s after a 503, for as long
as the peer is down. A growing delay (100 ms doubling up to 30 s, say) leaves a peer that comes back
after a short outage without new writes for up to that longest delay; resending the whole batch every
100 ms hammers a peer that is gone. So, here:

* after a network error the batch is tried again 100 ms later, ``NETWORK_RETRIES`` times (a dropped
  kept-alive connection, a peer restarting at once);
* after that the peer counts as down: it gets a cheap probe (an empty batch) every ``PROBE_WHILE_DOWN_MS``
  instead of the batch, and the batch goes the moment a probe is answered. New writes reach a peer within
  about half a second of its answering again, however long it was down, and a dead peer costs one
  refused connection every half second;
* after a 503 or a timeout (the peer is there but busy) the batch is tried again after 1 s.

Plain Python: no Django, no clock (delays are relative; the caller waits them).
"""

from __future__ import annotations

from dataclasses import dataclass

NETWORK_RETRY_MS = 100
NETWORK_RETRIES = 2
PROBE_WHILE_DOWN_MS = 500
CONGESTION_RETRY_MS = 1_000


@dataclass
class RetryPolicy:
    """One peer's retry state. ``failed`` says how long to wait; ``probe_first`` what to try then."""

    failures: int = 0
    # The next try is a probe, and the batch goes only if the probe is answered.
    probe_first: bool = False

    @property
    def down(self) -> bool:
        return self.failures > 0

    def failed(self, congested: bool) -> int:
        """A send or a probe failed: the delay before the next try, in milliseconds."""
        self.failures += 1
        if congested:
            self.probe_first = False  # it answers, slowly: the batch again, as Eureka does
            return CONGESTION_RETRY_MS
        if self.failures <= NETWORK_RETRIES:
            self.probe_first = False
            return NETWORK_RETRY_MS
        self.probe_first = True
        return PROBE_WHILE_DOWN_MS

    def reported_down(self) -> None:
        """Another sender (a Celery worker, in production mode) found the peer down: probe it next."""
        if not self.down:
            self.failures = NETWORK_RETRIES + 1
            self.probe_first = True

    def recovered(self) -> None:
        """A probe or a batch was answered."""
        self.failures = 0
        self.probe_first = False
