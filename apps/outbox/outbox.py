"""The off-request path: what a request leaves behind (its audit entry, later budget and webhook
events) is put here and written by a background thread, in batches, never on the request.

- ``put(kind, item)`` is all the hot path does: an append to an in-memory queue (no I/O, no lock
  held for long), from the event loop or any thread.
- A writer thread takes batches, turns items into JSON-able payloads with the kind's ``prepare``
  and hands them to the kind's handler (bulk inserts). Handlers must be idempotent: a batch may be
  delivered twice after a crash or a replay.
- A batch that fails is retried briefly; if the database is still unavailable it is spilled to a
  durable local spool (``spool.py``) and the writer keeps spilling until a probe succeeds, then
  replays the spool. A batch that fails while the database answers holds a bad item: its items are
  delivered one by one and the bad ones go to a dead-letter file (encrypted like the spool, 0600),
  logged, so they never block the rest; ``manage.py outbox_replay`` delivers them again.
- At shutdown (``atexit``, which Daphne and Celery reach on SIGTERM) the queue is drained: delivered
  if the database answers, spooled if not. Nothing that was put is lost by a restart.
"""

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, connections

from .spool import DEAD_LETTERS, UNREADABLE_DEAD_LETTERS, Spool, UnreadableSpool

logger = logging.getLogger(__name__)

Handler = Callable[[list[dict[str, Any]]], None]
Prepare = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Kind:
    handler: Handler
    prepare: Prepare


@dataclass(slots=True)
class DeadLetterReplay:
    replayed: int = 0  # delivered now (or already there: handlers are idempotent)
    kept: int = 0  # refused again, back in the dead-letter file
    unreadable: int = 0  # lines these keys cannot decrypt, set aside as they were


class DatabaseUnavailable(Exception):
    pass


class Outbox:
    def __init__(
        self,
        spool_dir: Path,
        *,
        batch_size: int = 500,
        flush_seconds: float = 0.2,
        probe_seconds: float = 1.0,
        retries: tuple[float, ...] = (0.05, 0.25),
        deliver: bool = True,
        seal_seconds: float = 0.5,
    ) -> None:
        self.spool = Spool(spool_dir)
        # False: this process only spools (prepare, append, fsync) and a separate ingest process
        # (``manage.py outbox_ingest``) delivers the sealed files; the server's own process then
        # pays nothing for the database writes (make bench).
        self.deliver = deliver
        self.seal_seconds = seal_seconds
        self.batch_size = batch_size
        self.flush_seconds = flush_seconds
        self.probe_seconds = probe_seconds
        self.retries = retries
        self._kinds: dict[str, Kind] = {}
        self._queue: deque[tuple[str, Any]] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._healthy = True
        self._next_probe = 0.0
        self._in_hand = 0  # items taken from the queue and not yet delivered or spooled
        # Counters, for health checks and tests.
        self.delivered = 0
        self.spilled = 0
        self.dead_lettered = 0

    # --- Producers -------------------------------------------------------------------------------

    def register(self, kind: str, handler: Handler, *, prepare: Prepare = dict) -> None:
        self._kinds[kind] = Kind(handler=handler, prepare=prepare)

    def put(self, kind: str, item: Any) -> None:
        """Never blocks and never fails: the hot path's only contact with the outbox."""
        self._queue.append((kind, item))
        if self._thread is None or not self._thread.is_alive():
            self._start()
        if len(self._queue) >= self.batch_size:
            self._wake.set()

    @property
    def backlog(self) -> int:
        return len(self._queue)

    # --- The writer thread -------------------------------------------------------------------------

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self.spool.recover()
            self._thread = threading.Thread(target=self._run, name="outbox-writer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.wait(self.flush_seconds)
                self._wake.clear()
                self._work()
        finally:
            connections.close_all()

    def ingest_forever(self, stop: threading.Event, interval: float = 0.2) -> None:
        """The ingest process's loop: delivers every sealed spool file, whichever process wrote it."""
        self.spool.recover()
        while not stop.is_set():
            if time.monotonic() >= self._next_probe:
                self._replay()
            stop.wait(interval)
        connections.close_all()

    def _work(self) -> None:
        if not self.deliver:
            self._spool_only()
            return
        # What has arrived so far, in full batches; later arrivals wait for the next round, so that
        # batches grow with the traffic instead of the writer chasing every single item.
        pending = len(self._queue)
        while pending > 0:
            batch = self._take(min(pending, self.batch_size))
            pending -= len(batch)
            try:
                self._deliver(batch)
            finally:
                self._in_hand = 0
        if self.spool.has_pending() and time.monotonic() >= self._next_probe:
            self._replay()

    def _spool_only(self) -> None:
        pending = len(self._queue)
        while pending > 0:
            batch = self._take(min(pending, self.batch_size))
            pending -= len(batch)
            try:
                # The items go to disk as they are: preparing them (building the row, redacting
                # bodies) is the ingest process's work, so this process pays only for writing them.
                self._spill_raw(batch)
            finally:
                self._in_hand = 0
        # Sealed files are what the ingest process can take: seal often, so entries show up soon.
        if self.spool.writing and self.spool.age() >= self.seal_seconds:
            self.spool.seal()

    def _take(self, limit: int) -> list[tuple[str, Any]]:
        batch = []
        while self._queue and len(batch) < limit:
            self._in_hand = len(batch) + 1  # before the pop, so flush() never sees the item nowhere
            batch.append(self._queue.popleft())
        return batch

    def flush(self, timeout: float = 10.0) -> bool:
        """Waits until everything put so far has been delivered or spooled (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while (self._queue or self._in_hand) and time.monotonic() < deadline:
            self._wake.set()
            time.sleep(0.005)
        return not (self._queue or self._in_hand)

    def close(self, timeout: float = 10.0) -> None:
        """Drains the queue and stops the writer. Whatever cannot be delivered is spooled."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._queue:
            # The writer is gone or stuck: this thread delivers what is left, or spools it.
            batch = self._take(len(self._queue))
            if self.deliver:
                self._deliver(batch)
            else:
                self._spill_raw(batch)
        self.spool.seal()
        connections.close_all()

    # --- Delivery -----------------------------------------------------------------------------------

    def _prepared(self, batch: list[tuple[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        grouped: dict[str, list[dict[str, Any]]] = {}
        for kind, item in batch:
            definition = self._kinds.get(kind)
            if definition is None:
                logger.error("Outbox: no handler for kind %r; item dead-lettered", kind)
                self._dead_letter(kind, item)
                continue
            # The writer shares the GIL with the server's event loop: let it in between items, or a
            # request that arrives during a batch waits for the whole batch (make bench's p99).
            time.sleep(0)
            try:
                payload = item if isinstance(item, dict) else definition.prepare(item)
            except Exception:
                logger.exception("Outbox: could not prepare a %r item; dead-lettered", kind)
                # The item as it was (encrypted, like the spool): outbox_replay prepares it again.
                self._dead_letter(kind, item)
                continue
            grouped.setdefault(kind, []).append(payload)
        return grouped

    def _deliver(self, batch: list[tuple[str, Any]]) -> None:
        for kind, payloads in self._prepared(batch).items():
            if not self._healthy and time.monotonic() < self._next_probe:
                self._spill(kind, payloads)
                continue
            if self._try(kind, payloads, retries=self.retries if self._healthy else ()):
                self._healthy = True
                continue
            if self._database_answers():
                self._isolate(kind, payloads)
            else:
                self._spill(kind, payloads)
                self._healthy = False
                self._next_probe = time.monotonic() + self.probe_seconds

    def _try(self, kind: str, payloads: list[dict[str, Any]], *, retries: tuple[float, ...] = ()) -> bool:
        for pause in (0.0, *retries):
            if pause:
                time.sleep(pause)
            # The connection is kept between batches (opening one per batch cost the proxy 14 % of
            # its CPU, make bench); it is closed after any error, so a broken one is never reused.
            try:
                self._kinds[kind].handler(payloads)
            except Exception as error:
                # Cut: a database error may quote a whole value a client sent.
                logger.warning("Outbox: delivering %d %r item(s) failed: %.300s", len(payloads), kind, error)
                connections.close_all()  # a broken connection must not be reused
                continue
            self.delivered += len(payloads)
            return True
        return False

    def _isolate(self, kind: str, payloads: list[dict[str, Any]]) -> None:
        """The database answers but the batch fails: deliver item by item, dead-letter the bad."""
        for payload in payloads:
            if not self._try(kind, [payload]):
                logger.error("Outbox: a %r item was refused by its handler; dead-lettered", kind)
                self._dead_letter(kind, payload)

    def _spill(self, kind: str, payloads: list[dict[str, Any]]) -> None:
        self._spill_raw([(kind, payload) for payload in payloads])

    def _spill_raw(self, batch: list[tuple[str, Any]]) -> None:
        try:
            self.spool.append(batch)
        except Exception:
            logger.exception("Outbox: could not spool %d item(s); they are lost", len(batch))
            return
        self.spilled += len(batch)

    def _database_answers(self) -> bool:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            return True
        except Exception:
            connections.close_all()
            return False

    def _replay(self) -> None:
        """Delivers spooled files, oldest first; stops at the first failure and probes again later."""
        self.spool.seal()
        for path in self.spool.sealed_files():
            claimed = self.spool.claim(path)
            if claimed is None:
                continue
            try:
                delivered = self._replay_file(claimed)
            except (OSError, ValueError, KeyError, UnreadableSpool):
                logger.exception("Outbox: spool file %s is unreadable; kept aside", claimed.name)
                claimed.rename(claimed.with_suffix(".unreadable"))
                continue
            if not delivered:
                self.spool.release(claimed)
                self._healthy = False
                self._next_probe = time.monotonic() + self.probe_seconds
                return
            claimed.unlink()
            logger.info("Outbox: replayed spool file %s", claimed.name)
        self._healthy = True

    def _replay_file(self, claimed: Path) -> bool:
        # Items are spooled as they were put (a server process in ingest mode does not prepare
        # them) or already prepared (a batch spilled after a failed delivery): _prepared takes both.
        for kind, payloads in self._prepared(list(self.spool.read(claimed))).items():
            for start in range(0, len(payloads), self.batch_size):
                chunk = payloads[start : start + self.batch_size]
                if self._try(kind, chunk):
                    continue
                if not self._database_answers():
                    return False
                self._isolate(kind, chunk)
        return True

    def _dead_letter(self, kind: str, payload: Any) -> None:
        self.dead_lettered += 1
        try:
            self.spool.dead_letter([(kind, payload)])
        except Exception:
            logger.exception("Outbox: could not write the dead-letter file")

    def replay_dead_letters(self) -> DeadLetterReplay:
        """Delivers the dead letters again through the kinds' handlers (``manage.py outbox_replay``):
        what the database takes now is written (once: handlers are idempotent), what it still
        refuses goes back to the dead-letter file. Never while the database is down."""
        if not self._database_answers():
            raise DatabaseUnavailable("the database does not answer; nothing was replayed")
        report = DeadLetterReplay()
        for claimed in self.spool.claim_dead_letters():
            items, unreadable = [], []
            for entry in self.spool.read_dead_letters(claimed):
                (unreadable if isinstance(entry, str) else items).append(entry)
            if unreadable:
                self.spool.set_aside(unreadable)
                report.unreadable += len(unreadable)
            delivered, dead = self.delivered, self.dead_lettered
            for kind, payloads in self._prepared(items).items():
                for start in range(0, len(payloads), self.batch_size):
                    chunk = payloads[start : start + self.batch_size]
                    if self._try(kind, chunk):
                        continue
                    if self._database_answers():
                        self._isolate(kind, chunk)
                    else:  # gone in the middle: keep the rest for the next replay
                        for payload in chunk:
                            self._dead_letter(kind, payload)
            report.replayed += self.delivered - delivered
            report.kept += self.dead_lettered - dead
            claimed.unlink()
        return report

    @property
    def dead_letter_path(self) -> Path:
        return self.spool.directory / DEAD_LETTERS

    @property
    def unreadable_dead_letter_path(self) -> Path:
        return self.spool.directory / UNREADABLE_DEAD_LETTERS


_outbox: Outbox | None = None
_outbox_lock = threading.Lock()


def outbox() -> Outbox:
    """This process's outbox, created on first use and drained at exit."""
    global _outbox
    if _outbox is None:
        with _outbox_lock:
            if _outbox is None:
                _outbox = Outbox(
                    Path(settings.GATEWAY_OUTBOX_DIR),
                    batch_size=settings.GATEWAY_OUTBOX_BATCH_SIZE,
                    flush_seconds=settings.GATEWAY_OUTBOX_FLUSH_SECONDS,
                    deliver=settings.GATEWAY_OUTBOX_DELIVERY == "in_process",
                )
                atexit.register(_outbox.close)
    return _outbox
