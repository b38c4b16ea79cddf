"""A durable local spool: what the outbox could not deliver (or, with an ingest process, does not
deliver itself) waits here, on disk, until it can.

Each process appends to its own file (a line per batch: the items pickled, then encrypted and
authenticated with the gateway's Fernet keys; flushed and fsynced) named
``<pid>-<time>-<n>.jsonl.open`` while it writes, and renamed ``.jsonl`` when sealed. A sealed file is
replayed by whichever process claims it first: claiming is an atomic rename to
``.jsonl.replaying-<pid>``, so two workers never replay the same file. A replayed file is deleted only
after every entry in it was delivered; handlers are idempotent, so a file replayed twice after a crash
does no harm. Files left open or claimed by a process that died are put back at start-up.
"""

import logging
import os
import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apps.core import crypto

logger = logging.getLogger(__name__)


class UnreadableSpool(Exception):
    """A spool line this gateway's keys cannot decrypt (the keys changed, or it was tampered with)."""


_OPEN = ".open"
_CLAIMED = ".replaying-"


class Spool:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._file = None
        self._path: Path | None = None
        self._opened_at = 0.0
        self._sequence = 0

    def append(self, entries: list[tuple[str, Any]]) -> None:
        """Writes ``(kind, item)`` entries durably; items must pickle (dicts, the proxy's records)."""
        if not entries:
            return
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._sequence += 1
            name = f"{os.getpid()}-{time.time_ns()}-{self._sequence}.jsonl{_OPEN}"
            self._path = self.directory / name
            self._opened_at = time.monotonic()
            self._file = open(self._path, "a", encoding="utf-8")
        # One line per batch: the pickled items, encrypted (request bodies may hold secrets, and
        # the spool is data at rest) and authenticated (nothing but this gateway can make a line
        # that will be unpickled). Pickle and AES run in C: far cheaper for the server's process
        # than building JSON item by item.
        pickled = []
        for kind, item in entries:
            pickled.append((kind, pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)))
            time.sleep(0)  # the server's event loop shares the GIL: let it in between items
        line = crypto.encrypt_bytes(pickle.dumps(pickled, protocol=pickle.HIGHEST_PROTOCOL))
        self._file.write(line.decode() + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def seal(self) -> None:
        """Closes the file being written, so that it can be replayed."""
        if self._file is not None:
            self._file.close()
            assert self._path is not None
            self._path.rename(self._path.with_name(self._path.name.removesuffix(_OPEN)))
            self._file = self._path = None

    def age(self) -> float:
        """Seconds since the file being written was opened."""
        return time.monotonic() - self._opened_at

    @property
    def writing(self) -> bool:
        return self._file is not None

    def sealed_files(self) -> list[Path]:
        if not self.directory.exists():
            return []
        return sorted(path for path in self.directory.iterdir() if path.name.endswith(".jsonl"))

    def has_pending(self) -> bool:
        return self.writing or bool(self.sealed_files())

    def claim(self, path: Path) -> Path | None:
        claimed = path.with_name(f"{path.name}{_CLAIMED}{os.getpid()}")
        try:
            path.rename(claimed)
        except FileNotFoundError:
            return None  # another process claimed it first
        return claimed

    @staticmethod
    def release(claimed: Path) -> None:
        claimed.rename(claimed.with_name(claimed.name.split(_CLAIMED, 1)[0]))

    @staticmethod
    def read(claimed: Path) -> Iterator[tuple[str, Any]]:
        with open(claimed, encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.endswith("\n"):
                    # A line cut by a crash mid-write was never acknowledged; everything before counts.
                    logger.warning("Outbox spool %s: incomplete line %d skipped", claimed.name, number)
                    continue
                try:
                    entries = pickle.loads(crypto.decrypt_bytes(line.rstrip("\n").encode()))  # noqa: S301
                except crypto.InvalidToken as error:
                    raise UnreadableSpool(f"line {number} cannot be decrypted") from error
                # Authenticated by the Fernet key above: only this gateway can have written them.
                for kind, item in entries:
                    yield kind, pickle.loads(item)  # noqa: S301

    def recover(self) -> None:
        """Puts back files that a process which has died left open or claimed. Called before this
        process writes or claims anything, so files under its own pid are a previous life's (a
        container restarts with the same pids)."""
        if not self.directory.exists():
            return
        for path in self.directory.iterdir():
            name = path.name
            if path == self._path:
                continue
            if name.endswith(_OPEN) and not _alive(name.split("-", 1)[0]):
                path.rename(path.with_name(name.removesuffix(_OPEN)))
            elif _CLAIMED in name and not _alive(name.rsplit(_CLAIMED, 1)[1]):
                self.release(path)


def _alive(pid: str) -> bool:
    if pid == str(os.getpid()):
        return False  # see recover()
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True
