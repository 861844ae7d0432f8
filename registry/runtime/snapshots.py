"""Warm restart: the node saves its lease map and, when it starts again, begins from it.

Without it a restarted node starts empty: every client's next heartbeat gets a 404 and the whole
fleet registers again at once, and the expected-clients count starts from nothing. With it the node
writes a snapshot (``registry.saved_state.export_parts``, orjson, gzip) every ``interval_ms`` from a
background thread, and once more when it stops cleanly; at start, before it serves and before its
start-up sync from peers, it restores the snapshot (``registry.saved_state.restore``) and opens for
traffic at once.

Where a snapshot lives:

- embedded mode: a file in the node's data directory (``EUREKA_DATA_DIR``), replaced atomically
  (written to a temporary file in the same directory, then ``os.replace``), so a crash mid-write
  leaves the previous snapshot whole;
- production mode (``REDIS_URL``): the Redis key ``{namespace}:snapshot``, one SET.

A snapshot of another format, a corrupt one, or one older than ``max_age_ms`` (a restart that long
is no longer warm: the clients have been re-registering meanwhile anyway) is refused: logged, and the
node starts empty as before. A failed write is logged once per episode and retried next interval;
the node serves on.

Plain Python (no Django); the node wires it (``registry/runtime/composition.py``).
"""

from __future__ import annotations

import gzip
import io
import itertools
import logging
import operator
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from registry.cache.pacing import PACER
from registry.domain.changes import Change
from registry.domain.core import Registry
from registry.domain.history import History
from registry.domain.snapshot_format import BadSnapshot, instance_row

if TYPE_CHECKING:
    from registry.config.eureka import EurekaConfig

logger = logging.getLogger(__name__)

FILE_NAME = "registry-snapshot.json.gz"
# Level 1: far quicker than gzip's default level, for a snapshot only slightly larger.
GZIP_LEVEL = 1
_GZIP_MAGIC = b"\x1f\x8b"


def redis_key(namespace: str) -> str:
    return f"{namespace}:snapshot"


class SnapshotStore(Protocol):
    """Where one node's snapshot is kept: ``save`` replaces it whole, ``load`` gives None when none;
    ``saves_off_loop`` says whether ``save`` may run in a native thread (the writer's runner)."""

    saves_off_loop: bool

    def save(self, data: bytes) -> None: ...

    def load(self) -> bytes | None: ...

    def describe(self) -> str: ...


class FileStore:
    # Its write and fsync block the calling thread without the GIL: the writer runs them off the loop.
    saves_off_loop = True

    def __init__(self, path: Path):
        self.path = Path(path)

    def save(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # In the same directory, so that os.replace is a rename on one file system (atomic).
        fd, temporary = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                # On disk before it replaces the previous snapshot: a power cut must not leave neither.
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            try:
                os.unlink(temporary)
            except FileNotFoundError:
                pass
            raise

    def load(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def describe(self) -> str:
        return str(self.path)


class RedisStore:
    # Its client's socket is the event loop's (gevent): the writer saves from the serving thread.
    saves_off_loop = False

    def __init__(self, client: Any, key: str):
        self.client = client
        self.key = key

    def save(self, data: bytes) -> None:
        self.client.set(self.key, data)

    def load(self) -> bytes | None:
        return self.client.get(self.key)

    def describe(self) -> str:
        return f"Redis key {self.key}"


def compressed(document: bytes | memoryview) -> bytes:
    """A snapshot's JSON as it is stored (zlib releases the GIL while it compresses)."""
    return gzip.compress(document, compresslevel=GZIP_LEVEL, mtime=0)


def encode(state: dict) -> bytes:
    return compressed(orjson.dumps(state))


def decode(data: bytes) -> Any:
    """The saved state (gzip or plain JSON); ``BadSnapshot`` when it is neither."""
    try:
        if data[:2] == _GZIP_MAGIC:
            # A snapshot is thousands of gzip members: gzip.decompress copies the rest of the data at
            # each one (seconds at 100,000 instances), the file reader reads through them in one pass.
            data = gzip.GzipFile(fileobj=io.BytesIO(data)).read()
        return orjson.loads(data)
    except (OSError, EOFError, orjson.JSONDecodeError) as exc:
        raise BadSnapshot(f"not readable: {type(exc).__name__}: {exc}") from exc


# Records are kept encoded by blocks of up to this many from one app (a change re-encodes its block);
# change-log entries by blocks of this many consecutive ids (all but the newest block never change).
RECORDS_PER_BLOCK = 500
CHANGES_PER_BLOCK = 1_000
# Lease times are encoded this many at a time, the event loop having a turn between two.
TIMES_PER_PIECE = 10_000


@dataclass(frozen=True, slots=True)
class SavedBlock:
    """Consecutive immutable objects (instance records, change-log entries) and their saved JSON, as
    one gzip member."""

    items: tuple
    member: bytes

    def holds(self, items: list) -> bool:
        return len(items) == len(self.items) and all(map(operator.is_, items, self.items))


# A snapshot is the concatenation of gzip members (RFC 1952, 2.2: it decompresses to the concatenation
# of their contents); the separator between two blocks is a member of its own.
_COMMA = SavedBlock((), compressed(b","))


class SavedBlocks:
    """The saved form of immutable objects, by blocks, each kept compressed while the block holds the
    same objects.

    Records are immutable and a lease swaps its record on every change, so the same objects mean the
    same bytes; between two snapshots of a large registry few change (renewals only move lease
    times, saved apart), and re-encoding them all would cost the node much CPU; change-log entries
    never change at all. A block is kept as its gzip member, far smaller than its JSON, which for a
    large registry would hold much memory between two snapshots. Each snapshot keeps the blocks it
    used.

    A block is encoded and compressed at once, in the serving thread (a short step; the loop has a
    turn between two blocks, registry/cache/pacing.py): holding a whole registry's JSON until a
    native thread compressed it would raise the resident size by that much for good, as freed small
    buffers are not given back to the system.
    """

    def __init__(self, saved_form: Callable[[Any], object]) -> None:
        self._saved_form = saved_form
        self._kept: dict[object, SavedBlock] = {}
        self._used: dict[object, SavedBlock] = {}
        self.encoded = 0  # objects encoded since the start (reused ones are not counted)

    def block(self, key: object, items: list) -> SavedBlock:
        """The block ``key`` (stable across snapshots: an app and a position, a range of ids) as these
        objects: the kept one when it holds the very same objects, else encoded now."""
        block = self._kept.get(key)
        if block is None or not block.holds(items):
            saved_form = self._saved_form
            # One buffer for the block, without its brackets: blocks are joined by commas.
            body = orjson.dumps([saved_form(item) for item in items])
            block = SavedBlock(tuple(items), compressed(memoryview(body)[1:-1]))
            self.encoded += len(items)
        self._used[key] = block
        PACER.tick()
        return block

    def rotate(self) -> None:
        """Forget the blocks the snapshot just taken did not use (apps gone, entries dropped)."""
        self._kept, self._used = self._used, {}


def _add_blocks(pieces: list, blocks: Iterable[SavedBlock]) -> None:
    """The blocks (never empty) as the members of one JSON array's elements, commas between."""
    for number, block in enumerate(blocks):
        if number:
            pieces.append(_COMMA)
        pieces.append(block)


def _members(pieces: list[bytes | SavedBlock]) -> bytes:
    """The snapshot: each piece as a gzip member (raw JSON compressed now, blocks as kept), joined."""
    return b"".join(piece.member if isinstance(piece, SavedBlock) else compressed(piece) for piece in pieces)


@dataclass(frozen=True)
class WriteReport:
    at: int
    bytes: int
    instances: int
    # Wall time of the whole write: export (the map's lock is held for the copy only), encode, save.
    took_ms: float


# Runs a function off the event loop and returns its result (gunicorn.conf.py sets gevent's threadpool).
# Only work that releases the GIL goes there: gzip, and a file store's write and fsync. Python code in a
# native thread would hold the GIL in 5 ms slices (Python's switch interval) while the event loop
# waits for one at every socket call: heartbeats would stall at every snapshot.
Runner = Callable[[Callable[[], Any]], Any]


def _run_here(function: Callable[[], Any]) -> Any:
    return function()


# Snapshots may take at most 1/WRITE_BUDGET of the node's time: the interval is stretched to
# WRITE_BUDGET times the last write's duration when that is longer. A small registry's write is far
# shorter than the interval; a large one's, written as often, would take a large share of the core.
WRITE_BUDGET = 20


def _change_block(change: Change) -> int:
    return change.id // CHANGES_PER_BLOCK


class WarmRestart:
    """One node's snapshots: restore at start, write every ``interval_ms`` (stretched so that writing
    takes at most 1/WRITE_BUDGET of the time, never past half the usable age) and at a clean stop."""

    def __init__(
        self,
        registry: Registry,
        store: SnapshotStore,
        clock: Callable[[], int],
        interval_ms: int,
        max_age_ms: int,
    ):
        self.registry = registry
        self.store = store
        self.clock = clock
        self.interval_ms = interval_ms
        self.max_age_ms = max_age_ms
        # Set under gevent so that compressing and writing a snapshot does not hold up heartbeats.
        self.runner: Runner = _run_here
        # The console's last hour (registry/domain/history.py), saved beside the map when the node
        # keeps one: a few KB, so the charts go on across a restart.
        self.history: History | None = None
        self.restored: int | None = None
        self.refused: str | None = None
        self.last_write: WriteReport | None = None
        self.failures = 0
        self.last_error: str | None = None
        self._failing = False
        self._write_lock = threading.Lock()
        self._records = SavedBlocks(instance_row)
        self._changes = SavedBlocks(Change.as_dict)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = False

    # ------------------------------------------------------------------------------ restore

    def restore(self) -> int:
        """Load and restore the snapshot; 0 (and logged) when there is none or it is refused."""
        where = self.store.describe()
        try:
            data = self.store.load()
        except Exception as exc:  # the store is unreachable (Redis down): start empty, say why
            self.refused = f"could not read {where}: {type(exc).__name__}: {exc}"
            logger.warning("warm restart: %s; starting empty", self.refused)
            return 0
        if data is None:
            logger.info("warm restart: no snapshot at %s; starting empty", where)
            return 0
        now = self.clock()
        try:
            state = decode(data)
            count = self.registry.saved_state.restore(state, now, self.max_age_ms)
        except BadSnapshot as exc:
            self.refused = f"snapshot at {where} refused: {exc}"
            logger.warning(
                "warm restart: %s; starting empty", self.refused, extra={"event": "snapshot_refused"}
            )
            return 0
        self.restored = count
        if self.history is not None and isinstance(state, dict):
            self.history.restore(state.get("history") or {}, now)
        restored = self.registry.saved_state.restored
        age_ms = restored.age_ms if restored is not None else 0
        expired = restored.expired if restored is not None else 0
        logger.info(
            "warm restart: restored %d instances from %s, saved %d ms ago; %d leases already expired dropped",
            count,
            where,
            age_ms,
            expired,
            extra={"event": "snapshot_restored", "instances": count, "age_ms": age_ms, "expired": expired},
        )
        return count

    # -------------------------------------------------------------------------------- write

    def write(self) -> WriteReport | None:
        """Save a snapshot now; None when it failed (logged once per run of failures)."""
        with self._write_lock:
            try:
                # The copy, and the blocks that changed (encoded and compressed), here in the serving
                # thread, paced; the rest of the gzip (header, lease times) and a file's write through
                # the runner, in a native thread under gevent; a Redis store's socket belongs to the
                # event loop, which a native thread cannot use.
                started = time.perf_counter()
                now, pieces, leases = self._export()
                data = self.runner(lambda: _members(pieces))
                if self.store.saves_off_loop:
                    self.runner(lambda: self.store.save(data))
                else:
                    self.store.save(data)
                report = WriteReport(now, len(data), leases, (time.perf_counter() - started) * 1000)
            except Exception as exc:
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if not self._failing:
                    logger.error(
                        "warm restart: could not write the snapshot to %s (%s); trying again every %d ms",
                        self.store.describe(),
                        self.last_error,
                        self.interval_ms,
                        extra={"event": "snapshot_write_failed"},
                    )
                self._failing = True
                return None
            if self._failing:
                logger.warning("warm restart: snapshots written again to %s", self.store.describe())
            self._failing = False
            self.last_write = report
            return report

    def _export(self) -> tuple[int, list[bytes | SavedBlock], int]:
        """The snapshot's JSON in pieces, to be compressed one gzip member each: (taken at, the
        pieces, leases in it). Records and change-log entries come as blocks, reused where unchanged;
        ``registry.saved_state.export_parts(now).as_state()`` is the same document as plain data."""
        now = self.clock()
        parts = self.registry.saved_state.export_parts(now)
        try:
            header = orjson.dumps(parts.header)
            times = parts.lease_times
            encoded_times = []
            for start in range(0, len(times), TIMES_PER_PIECE):
                encoded_times.append(orjson.dumps(times[start : start + TIMES_PER_PIECE])[1:-1])
                PACER.tick()
            pieces: list[bytes | SavedBlock] = [
                header[:-1] + b',"lease_times":[' + b",".join(encoded_times) + b'],"records":['
            ]
            _add_blocks(
                pieces,
                (
                    self._records.block((app, start), instances[start : start + RECORDS_PER_BLOCK])
                    for app, instances in parts.records
                    for start in range(0, len(instances), RECORDS_PER_BLOCK)
                ),
            )
            pieces.append(b'],"changes":{"last_id":%d,"entries":[' % parts.last_change_id)
            _add_blocks(
                pieces,
                (
                    self._changes.block(first_id, list(entries))
                    for first_id, entries in itertools.groupby(parts.changes, _change_block)
                ),
            )
            if self.history is not None:
                pieces.append(b']},"history":' + orjson.dumps(self.history.export()) + b"}")
            else:
                pieces.append(b"]}}")
        finally:
            self._records.rotate()
            self._changes.rotate()
        return now, pieces, len(times)

    # ----------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Restore, then write every ``interval_ms`` from a daemon thread (a greenlet under gevent)."""
        if self.started:
            return
        self.started = True
        self.restore()
        self._thread = threading.Thread(target=self._loop, name="warm-restart", daemon=True)
        self._thread.start()

    def next_interval_ms(self) -> int:
        """The wait before the next write: ``interval_ms``, or WRITE_BUDGET times the last write's
        duration when longer, but never more than half of ``max_age_ms`` (or ``interval_ms`` if that
        is longer still), so the latest snapshot stays young enough to restore."""
        stretched = int(self.last_write.took_ms * WRITE_BUDGET) if self.last_write is not None else 0
        return max(self.interval_ms, min(stretched, self.max_age_ms // 2))

    def _loop(self) -> None:
        while not self._stop.wait(self.next_interval_ms() / 1000):
            self.write()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the periodic writes and save once more (a clean stop loses nothing)."""
        if not self.started:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        # The final write runs here, not through the runner: the event loop is stopping.
        self.runner = _run_here
        report = self.write()
        if report is not None:
            logger.info(
                "warm restart: %d instances saved to %s at stop (%d bytes, %.0f ms)",
                report.instances,
                self.store.describe(),
                report.bytes,
                report.took_ms,
            )
        self.started = False

    def status(self, now: int) -> dict:
        """For /readyz: what was restored at start, and the latest write."""
        restored = self.registry.saved_state.restored
        last = self.last_write
        return {
            "store": self.store.describe(),
            "restored_instances": restored.instances if restored is not None else None,
            "restored_snapshot_age_ms": restored.age_ms if restored is not None else None,
            "restored_expired_dropped": restored.expired if restored is not None else None,
            "refused": self.refused,
            "last_write_ms_ago": None if last is None else now - last.at,
            "last_write_bytes": None if last is None else last.bytes,
            "last_write_took_ms": None if last is None else round(last.took_ms, 1),
            "interval_ms": self.next_interval_ms(),
            "write_failures": self.failures,
            "last_error": self.last_error,
        }


def build_store(config: EurekaConfig) -> SnapshotStore:
    """A Redis key in production mode (``REDIS_URL``), else a file in the node's data directory."""
    if config.redis.url:
        from registry.cache.redis_tier import connect

        return RedisStore(connect(config.redis.url), redis_key(config.redis.namespace))
    return FileStore(Path(config.warm_restart.data_dir) / FILE_NAME)


def build_warm_restart(registry: Registry, config: EurekaConfig, clock: Callable[[], int]) -> WarmRestart:
    return WarmRestart(
        registry,
        build_store(config),
        clock,
        config.warm_restart.interval_ms,
        config.warm_restart.max_age_ms,
    )
