"""The ingest: writes what the servers spooled into the database, off every request.

One loop, wherever it runs: ``manage.py outbox_ingest`` (a process per node, beside the servers),
a thread of the Celery worker (what ``make run`` runs: no process of its own), or a test's
``outbox().flush()``. Each round it takes every spool file it can (``spool.taken``), oldest first,
and hands the items to their kind's handler in batches:

- A batch that fails is retried briefly. If the database does not answer, the file is left as it
  is and the loop waits ``probe_seconds`` before the next round; what was written of the file
  already is written again then, once (handlers are idempotent).
- A batch that fails while the database answers holds a bad item: the items are handed over one by
  one and the refused ones go to the dead-letter file (``manage.py outbox_replay``), logged. An
  item of a kind nobody registered goes there too.
- Lines that cannot be read are set aside in ``<file>.corrupt`` and logged; a file the ingest
  cannot get through at all is renamed ``.corrupt``. Either way the next round goes on: no file
  can stop the ingest or make it crash in a loop.
- A file is removed only once every item in it was written or dead-lettered.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection, connections

from apps.observability import metrics

from . import spool
from .kinds import Kind, kinds

logger = logging.getLogger(__name__)


class DatabaseUnavailable(Exception):
    pass


@dataclass(slots=True)
class DeadLetterReplay:
    replayed: int = 0  # delivered now (or already there: handlers are idempotent)
    kept: int = 0  # refused again, back in the dead-letter file
    unreadable: int = 0  # lines these keys cannot decrypt, set aside as they were


def database_answers() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        connections.close_all()
        return False


class Ingest:
    def __init__(
        self,
        directory: Path,
        *,
        batch_size: int = 500,
        retries: tuple[float, ...] = (0.05, 0.25),
        probe: Callable[[], bool] = database_answers,
        registry: dict[str, Kind] | None = None,
    ) -> None:
        self.directory = directory
        self.batch_size = batch_size
        self.retries = retries
        self.probe = probe
        self.kinds = kinds if registry is None else registry
        # Counters, for the command's report and the tests.
        self.delivered = 0
        self.dead_lettered = 0
        self._replaying = False

    def run_forever(self, stop: threading.Event, *, interval: float, probe_seconds: float = 1.0) -> None:
        """Rounds every ``interval`` seconds (``probe_seconds`` after the database failed) until
        ``stop`` is set; a round in progress finishes its file first."""
        self._warn_of_first_release_files()
        try:
            while not stop.is_set():
                try:
                    done = self.run_once()
                except Exception:  # a bug must not stop the audit log: log it, go on next round
                    logger.exception("Outbox: an ingest round failed")
                    done = False
                stop.wait(interval if done else probe_seconds)
        finally:
            connections.close_all()

    def _warn_of_first_release_files(self) -> None:
        if not self.directory.exists():
            return
        old = sorted(path.name for path in self.directory.iterdir() if ".jsonl" in path.name)
        if old:
            logger.warning(
                "Outbox: %d file(s) of the first release's spool format are left as they are (%s); "
                "ingest them with that release (docs/audit-log.md, 'Upgrading from the first release')",
                len(old),
                ", ".join(old[:5]),
            )

    def run_once(self) -> bool:
        """Takes every spool file it can; False when the database stopped answering."""
        for path in spool.waiting_files(self.directory):
            with spool.taken(path) as file:
                if file is None:
                    continue  # still being written, or another ingest has it
                try:
                    if not self._ingest(path, file):
                        return False
                except OSError:  # the disk (full, failing): the file stays for the next round
                    logger.exception("Outbox: cannot finish spool file %s; kept for later", path.name)
                    return False
                except Exception:  # a bug reading it: set the file aside rather than fail on it forever
                    logger.exception("Outbox: cannot get through spool file %s", path.name)
                    moved = spool.move_aside(path)
                    logger.error("Outbox: spool file %s moved aside to %s", path.name, moved.name)
        return True

    def _ingest(self, path: Path, file) -> bool:
        unreadable: list[bytes] = []
        for chunk in spool.read_lines(file, self.batch_size, unreadable):
            if not self._deliver(chunk):
                logger.warning("Outbox: the database does not answer; %s stays on the spool", path.name)
                return False
        if unreadable:
            kept = spool.set_aside(path, unreadable)
            logger.error(
                "Outbox: %d line(s) of %s cannot be read (cut by a crash, damaged, or encrypted with a "
                "key no longer in GATEWAY_ENCRYPTION_KEYS); kept as they were in %s",
                len(unreadable),
                path.name,
                kept.name,
            )
        path.unlink()
        return True

    # --- Delivery ---------------------------------------------------------------------------------

    def _deliver(self, items: list[tuple[str, Any]]) -> bool:
        """Writes the items, kind by kind, in batches; False when the database stopped answering
        (nothing is lost: the caller keeps the file)."""
        grouped: dict[str, list[Any]] = {}
        for kind, payload in items:
            grouped.setdefault(kind, []).append(payload)
        for kind, payloads in grouped.items():
            definition = self.kinds.get(kind)
            if definition is None:
                logger.error("Outbox: no handler for kind %r; %d item(s) dead-lettered", kind, len(payloads))
                self._dead_letter(kind, payloads)
                continue
            for start in range(0, len(payloads), self.batch_size):
                batch = payloads[start : start + self.batch_size]
                if self._try(definition, kind, batch, retries=self.retries):
                    continue
                if not self.probe() or not self._isolate(definition, kind, batch):
                    return False
        return True

    def _try(self, definition: Kind, kind: str, payloads: list[Any], *, retries=()) -> bool:
        for pause in (0.0, *retries):
            if pause:
                time.sleep(pause)
            # The connection is kept between batches (opening one per batch cost 14 % of the CPU,
            # docs/benchmarks.md); it is closed after any error, so a broken one is never reused.
            try:
                definition.handler(payloads)
            except Exception as error:
                # Cut: a database error may quote a whole value a client sent.
                logger.warning("Outbox: writing %d %r item(s) failed: %.300s", len(payloads), kind, error)
                connections.close_all()
                continue
            self.delivered += len(payloads)
            return True
        return False

    def _isolate(self, definition: Kind, kind: str, payloads: list[Any]) -> bool:
        """The database answers but the batch fails: item by item, the refused ones dead-lettered.
        An item that fails is blamed only while the database still answers: if it went away
        meanwhile, False, and the file is kept for the next round (handlers are idempotent)."""
        for payload in payloads:
            if not self._try(definition, kind, [payload]):
                if not self.probe():
                    return False
                logger.error("Outbox: a %r item was refused by its handler; dead-lettered", kind)
                self._dead_letter(kind, [payload])
        return True

    def _dead_letter(self, kind: str, payloads: list[Any]) -> None:
        # Raises if the file cannot be written: then the spool file is kept, and nothing is lost.
        spool.dead_letter(self.directory, [(kind, payload) for payload in payloads])
        self.dead_lettered += len(payloads)
        if not self._replaying:  # an item the replay puts back was counted when it first failed
            metrics.dead_lettered(kind, len(payloads))

    # --- Dead letters -------------------------------------------------------------------------------

    def replay_dead_letters(self) -> DeadLetterReplay:
        """Hands the dead letters to their handlers again (``manage.py outbox_replay``): what the
        database takes now is written (once: handlers are idempotent), what it still refuses goes
        back to the dead-letter file. Never while the database is down."""
        if not self.probe():
            raise DatabaseUnavailable("the database does not answer; nothing was replayed")
        report = DeadLetterReplay()
        self._replaying = True
        try:
            self._replay(report)
        finally:
            self._replaying = False
        return report

    def _replay(self, report: DeadLetterReplay) -> None:
        for claimed in spool.claim_dead_letters(self.directory):
            items, unreadable = spool.read_dead_letters(claimed)
            if unreadable:
                spool.set_aside_dead_letters(self.directory, unreadable)
                report.unreadable += len(unreadable)
            delivered, dead = self.delivered, self.dead_lettered
            for start in range(0, len(items), self.batch_size):
                chunk = items[start : start + self.batch_size]
                if not self._deliver(chunk):  # gone in the middle: keep the rest for the next replay
                    for kind, payload in chunk:
                        self._dead_letter(kind, [payload])
            report.replayed += self.delivered - delivered
            report.kept += self.dead_lettered - dead
            claimed.unlink()
