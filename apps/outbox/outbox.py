"""The off-request path: what a request leaves behind (its audit entry; budget and webhook events
next) goes to this node's spool as the answer is sent, and the ingest writes it to the database.

One path, in every process layout:

    server process                          ingest (outbox_ingest, or a thread of the Celery worker)
    put(kind, item) ──> one line appended ──> spool file ──> handler(batch) ──> database
                        (no fsync, no lock held                    │ refused while the database answers
                         for more than the write)                  └──> dead-letters.failed (outbox_replay)

- ``put`` runs on the request's event loop: the kind's payload function, the line encrypted and
  appended with one ``write`` (about 50 us a request record). Never a database, never a broker.
- A thread of each process that puts seals its spool file every ``GATEWAY_OUTBOX_FSYNC_SECONDS``
  (fsync, rename), and at exit. A killed process loses nothing (the kernel has every line it wrote;
  the ingest takes the file it left open); a machine crash loses at most that interval.
- The ingest (``ingest.py``) takes sealed files and those of dead processes, and hands the items to
  their kind's handler in batches (``kinds.py``: a kind is one registration).
"""

import atexit
import logging
import threading
from pathlib import Path
from typing import Any

from django.conf import settings

from . import spool
from .ingest import DeadLetterReplay, Ingest
from .kinds import kinds, register, unregister

__all__ = ["Outbox", "outbox", "register", "unregister"]

logger = logging.getLogger(__name__)


class Outbox:
    """This process's end of the outbox: its spool file, the thread that seals it, and an ingest
    for ``flush`` and ``outbox_replay``."""

    def __init__(
        self, directory: Path, *, fsync_seconds: float = 0.2, batch_size: int = 500, **ingest: Any
    ) -> None:
        self.directory = directory
        self.fsync_seconds = fsync_seconds
        self.writer = spool.SpoolWriter(directory)
        self.ingest = Ingest(directory, batch_size=batch_size, **ingest)
        self._sealer: threading.Thread | None = None
        self._stop = threading.Event()
        self._start_lock = threading.Lock()

    # --- Producers -------------------------------------------------------------------------------

    def put(self, kind: str, item: Any) -> None:
        """Appends the item to this process's spool file. Raises only when it cannot: a payload
        that is not plain (a bug), or a disk that refuses the write."""
        definition = kinds.get(kind)
        payload = definition.payload(item) if definition is not None and definition.payload else item
        self.writer.append(spool.encode(kind, payload))
        if self._sealer is None:
            self._start()

    def _start(self) -> None:
        with self._start_lock:
            if self._sealer is not None:
                return
            self._stop.clear()
            self._sealer = threading.Thread(target=self._seal_forever, name="outbox-sealer", daemon=True)
            self._sealer.start()

    def _seal_forever(self) -> None:
        while not self._stop.wait(self.fsync_seconds):
            try:
                self.writer.seal()
            except Exception:
                # A seal that failed (the directory removed, the disk refusing the fsync) must not
                # end the thread: the next append opens a new file, and the next seal hands it over.
                logger.exception("Outbox: could not seal the spool file in %s", self.directory)

    # --- Delivering now ----------------------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> bool:
        """Seals this process's spool file and runs one ingest round, on a thread of its own (never
        on the caller's event loop): True when everything spooled so far is in the database or
        dead-lettered. For tests and operators; the servers never call it."""
        self.writer.seal()
        result: list[bool] = []

        def run() -> None:
            try:
                result.append(self.ingest.run_once())
            finally:
                from django.db import connections

                connections.close_all()

        thread = threading.Thread(target=run, name="outbox-flush")
        thread.start()
        thread.join(timeout)
        return bool(result and result[0])

    def replay_dead_letters(self) -> DeadLetterReplay:
        return self.ingest.replay_dead_letters()

    def close(self) -> None:
        """Seals the spool file (fsync) and stops the sealing thread: at exit, and SIGTERM (Daphne
        and Celery reach ``atexit``)."""
        self._stop.set()
        if self._sealer is not None:
            self._sealer.join(self.fsync_seconds + 5)
            self._sealer = None
        self.writer.seal()

    @property
    def delivered(self) -> int:
        return self.ingest.delivered

    @property
    def dead_lettered(self) -> int:
        return self.ingest.dead_lettered

    @property
    def dead_letter_path(self) -> Path:
        return self.directory / spool.DEAD_LETTERS

    @property
    def corrupt_dead_letter_path(self) -> Path:
        return self.directory / spool.CORRUPT_DEAD_LETTERS


_outbox: Outbox | None = None
_outbox_lock = threading.Lock()


def outbox() -> Outbox:
    """This process's outbox, created on first use and sealed at exit."""
    global _outbox
    if _outbox is None:
        with _outbox_lock:
            if _outbox is None:
                _outbox = Outbox(
                    Path(settings.GATEWAY_OUTBOX_DIR),
                    fsync_seconds=settings.GATEWAY_OUTBOX_FSYNC_SECONDS,
                    batch_size=settings.GATEWAY_OUTBOX_BATCH_SIZE,
                )
                atexit.register(_outbox.close)
    return _outbox


def seal() -> None:
    """Seals this process's spool file now, if it has one (a server at the end of its drain), so
    the ingest can take it without waiting for the process to exit."""
    if _outbox is not None:
        _outbox.close()
