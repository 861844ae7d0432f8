"""The node's side of webhooks: from the change log to delivery rows, and (embedded mode) sending them.

1. ``_listen`` is subscribed to the registry's change log. It runs under the registry lock, so it only
   appends the change to a bounded buffer, and only while some subscription is enabled (none: nothing
   is kept, nothing costs).
2. A flusher thread wakes every ``flush_ms``, drains the buffer, matches the changes against the
   enabled subscriptions (cached: reloaded when one is saved or deleted in this process, and every
   ``refresh_ms`` for changes made elsewhere) and bulk-creates the delivery rows.
3. It then kicks the sender: the Celery task in production mode, else this node's delivery thread,
   which also polls each second for retries that fell due.

A full buffer drops its oldest changes (counted, logged once per burst): the registry never waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from registry.domain.changes import Change

from . import policy, sender, store
from .models import WebhookSubscription

if TYPE_CHECKING:
    from registry.config.services import WebhooksConfig

logger = logging.getLogger(__name__)

# How often the delivery thread looks for retries that fell due when nothing kicked it.
POLL_S = 1.0
# The longest the delivery thread sends before it looks whether the node is stopping.
PASS_S = 5.0


class ChangeBuffer:
    """Changes waiting for the flusher; appended under the registry lock, drained by the flusher."""

    def __init__(self, capacity: int):
        self._changes: deque[Change] = deque(maxlen=capacity)
        self.dropped = 0

    def append(self, change: Change) -> None:
        # Appenders hold the registry lock, so this count is exact; a deque append is atomic anyway.
        if len(self._changes) == self._changes.maxlen:
            self.dropped += 1
        self._changes.append(change)

    def drain(self) -> list[Change]:
        drained = []
        while True:
            try:
                drained.append(self._changes.popleft())
            except IndexError:
                return drained

    def __len__(self) -> int:
        return len(self._changes)


class WebhookRelay:
    def __init__(
        self,
        registry,
        config: WebhooksConfig,
        *,
        kick: Callable[[], None] | None = None,
        deliver_here: bool = True,
    ):
        """``config`` is ``settings.EUREKA.webhooks``; ``kick`` starts a sender elsewhere (Celery),
        ``deliver_here`` runs one in this process (embedded mode)."""
        self.registry = registry
        self.webhooks_config = config
        self.buffer = ChangeBuffer(config.buffer_size)
        self.config = sender.DeliveryConfig.from_config(config)
        self.targets: list[policy.Target] = []
        self.queued = 0  # delivery rows created
        self._active = False
        self._kick_elsewhere = kick
        self._deliver_here = deliver_here
        self._next_reload = 0.0
        self._reported_dropped = 0
        self._in_burst = False
        self._failing = False
        # Whether the flusher's current step got an answer from the database (see _flush_step).
        self._database_answered = False
        self._stop = threading.Event()
        self._wake_sender = threading.Event()
        self._threads: list[threading.Thread] = []
        self._unsubscribe: Callable[[], None] | None = None
        self._uid = f"webhook-relay-{id(self)}"

    # ------------------------------------------------------------------------------ lifecycle

    def start(self, threads: bool = True) -> None:
        """Load the subscriptions, listen to the change log and start the threads (``threads=False``:
        tests drive ``flush`` themselves)."""
        if self._unsubscribe is not None:
            return
        self._stop.clear()
        try:
            self.reload()
        except Exception as exc:
            # The database may be unreachable (or not migrated) at start-up: the flusher keeps trying.
            logger.warning("could not load the webhook subscriptions yet: %s", policy.short_error(exc))
            # Said once: the flusher logs again only once the database has answered.
            self._failing = True
        finally:
            store.close_connection()
        self._unsubscribe = self.registry.reads.subscribe_changes(self._listen)
        for signal in (post_save, post_delete):
            signal.connect(
                self._subscriptions_changed, sender=WebhookSubscription, weak=False, dispatch_uid=self._uid
            )
        if not threads:
            return
        self._threads = [threading.Thread(target=self._flush_loop, name="webhook-flush", daemon=True)]
        if self._deliver_here:
            self._threads.append(
                threading.Thread(target=self._deliver_loop, name="webhook-deliver", daemon=True)
            )
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop listening and the threads. A POST under way is not waited for past ``timeout``: the
        delivery it belongs to is claimed, and sent again once the claim runs out."""
        self._stop.set()
        self._wake_sender.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for signal in (post_save, post_delete):
            signal.disconnect(sender=WebhookSubscription, dispatch_uid=self._uid)
        for thread in self._threads:
            thread.join(timeout)
        self._threads = []

    # ----------------------------------------------------------------- change log -> rows

    def _listen(self, change: Change) -> None:
        # Under the registry lock: a flag test and an append, nothing more.
        if self._active:
            self.buffer.append(change)

    def _subscriptions_changed(self, **kwargs) -> None:
        # Buffer from now on, and reload once the admin's transaction is committed (before it, the
        # flusher's connection would still read the old subscriptions).
        self._active = True
        transaction.on_commit(self._reload_soon)

    def _reload_soon(self) -> None:
        self._next_reload = 0.0

    def reload(self) -> None:
        # Scheduled first: a database that is down is asked again a refresh interval later, not at once.
        self._next_reload = time.monotonic() + self.webhooks_config.refresh_ms / 1000
        self.targets = store.enabled_targets()
        self._database_answered = True
        self._active = bool(self.targets)

    def flush(self) -> int:
        """Turn buffered changes into delivery rows; returns how many rows. (The flusher's one step.)"""
        if time.monotonic() >= self._next_reload:
            self.reload()
        changes = self.buffer.drain()
        self._report_drops()
        if not changes or not self.targets:
            return 0
        created = store.enqueue(policy.matching(self.targets, changes), timezone.now())
        self._database_answered = True
        self.queued += created
        if created:
            self.kick()
        return created

    def _report_drops(self) -> None:
        dropped = self.buffer.dropped
        if dropped > self._reported_dropped:
            # Logged when a burst is first seen; a burst that goes on is reported when it ends.
            if not self._in_burst:
                logger.warning(
                    "webhook buffer full (%d changes): dropping the oldest; %d dropped so far",
                    self.webhooks_config.buffer_size,
                    dropped,
                    extra={"event": "webhook_buffer_full", "dropped": dropped},
                )
            self._in_burst = True
            self._reported_dropped = dropped
        elif self._in_burst:
            self._in_burst = False
            logger.warning(
                "webhook buffer drained: %d changes dropped in all",
                dropped,
                extra={"event": "webhook_buffer_recovered", "dropped": dropped},
            )

    def _flush_loop(self) -> None:
        interval = self.webhooks_config.flush_ms / 1000
        while not self._stop.wait(interval):
            self._flush_step()

    def _flush_step(self) -> None:
        """One step of the flusher. A failure is logged once; recovery only when the database answers
        again: most steps do not ask it (no change to queue, the subscriptions' reload not due yet),
        and taking those for recovery logged the same failure again at each reload."""
        self._database_answered = False
        try:
            self.flush()
        except Exception:
            # The changes of this step are lost (the database is down): later ones still go.
            if not self._failing:
                logger.exception("could not queue webhook deliveries (logged once until it works)")
            self._failing = True
        else:
            if self._failing and self._database_answered:
                logger.warning("webhook deliveries are queued again")
                self._failing = False
        finally:
            store.close_connection()

    # -------------------------------------------------------------------------- delivery

    def kick(self) -> None:
        if self._kick_elsewhere is not None:
            self._kick_elsewhere()
        self._wake_sender.set()

    def _deliver_loop(self) -> None:
        # Made at the first pass with a subscription: a node with none never loads the HTTP client.
        client = None
        try:
            while not self._stop.is_set():
                self._wake_sender.wait(POLL_S)
                self._wake_sender.clear()
                if self._stop.is_set() or not self._active:
                    continue
                try:
                    if client is None:
                        client = sender.new_client(self.config)
                    # Short passes, so a stop is noticed between them; more may be due: go on at once.
                    if sender.deliver_due(client, self.config, max_seconds=PASS_S):
                        self._wake_sender.set()
                except Exception:
                    logger.exception("webhook delivery pass failed")
                finally:
                    store.close_connection()
        finally:
            if client is not None:
                client.close()

    # ---------------------------------------------------------------------------- upkeep

    def prune(self) -> int:
        try:
            return store.prune(timezone.now(), timedelta(days=self.webhooks_config.retention_days))
        finally:
            store.close_connection()


_running: WebhookRelay | None = None


def set_running(relay: WebhookRelay | None) -> None:
    """The relay of this process, which the admin's "retry now" wakes (node.py sets it)."""
    global _running
    _running = relay


def kick_delivery() -> None:
    """Wake this process's sender, if it runs one; otherwise the next poll (1 s) or beat run sends."""
    if _running is not None:
        _running.kick()
