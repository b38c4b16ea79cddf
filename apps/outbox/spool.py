"""A durable local spool: what the outbox could not deliver (or, with an ingest process, does not
deliver itself) waits here, on disk, until it can.

Each process appends to its own file (a line per batch: the items pickled, then encrypted and
authenticated with the gateway's Fernet keys; flushed and fsynced) named
``<pid>-<time>-<n>.jsonl.open`` while it writes, and renamed ``.jsonl`` when sealed. A sealed file is
replayed by whichever process claims it first: claiming is an atomic rename to
``.jsonl.replaying-<pid>``, so two workers never replay the same file. A replayed file is deleted only
after every entry in it was delivered; handlers are idempotent, so a file replayed twice after a crash
does no harm. Files left open or claimed by a process that died are put back at start-up.

Items that a handler refuses while the database answers go to ``dead-letter.jsonl.failed``, lines in
the same encrypted format, for ``manage.py outbox_replay``. The directory is made 0700 and every
file in it 0600: the lines are encrypted, and the names are nobody else's business either.
"""

import fcntl
import json
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
DEAD_LETTERS = "dead-letter.jsonl.failed"
UNREADABLE_DEAD_LETTERS = "dead-letter.unreadable"
_PRIVATE = 0o600


def _encode(entries: list[tuple[str, Any]]) -> bytes:
    """One line: the pickled items, encrypted (request bodies may hold secrets, and the spool is
    data at rest) and authenticated (nothing but this gateway can make a line that will be
    unpickled). Pickle and AES run in C: far cheaper for the server's process than building JSON
    item by item."""
    pickled = []
    for kind, item in entries:
        pickled.append((kind, pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)))
        time.sleep(0)  # the server's event loop shares the GIL: let it in between items
    return crypto.encrypt_bytes(pickle.dumps(pickled, protocol=pickle.HIGHEST_PROTOCOL))


def _decode(line: str) -> Iterator[tuple[str, Any]]:
    try:
        entries = pickle.loads(crypto.decrypt_bytes(line.encode()))  # noqa: S301
    except crypto.InvalidToken as error:
        raise UnreadableSpool("a line cannot be decrypted") from error
    # Authenticated by the Fernet key above: only this gateway can have written them.
    for kind, item in entries:
        yield kind, pickle.loads(item)  # noqa: S301


def _open_private(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, _PRIVATE)


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
            self._make_directory()
            self._sequence += 1
            name = f"{os.getpid()}-{time.time_ns()}-{self._sequence}.jsonl{_OPEN}"
            self._path = self.directory / name
            self._opened_at = time.monotonic()
            self._file = open(_open_private(self._path), "a", encoding="utf-8")
        line = _encode(entries)  # one line per batch
        self._file.write(line.decode() + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def _make_directory(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)

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
                    yield from _decode(line.rstrip("\n"))
                except UnreadableSpool as error:
                    raise UnreadableSpool(f"line {number} cannot be decrypted") from error

    # --- Dead letters -------------------------------------------------------------------------------

    def dead_letter(self, entries: list[tuple[str, Any]]) -> None:
        """Appends ``(kind, item)`` entries to the dead-letter file, encrypted, fsynced, 0600."""
        line = _encode(entries) + b"\n"
        self._make_directory()
        path = self.directory / DEAD_LETTERS
        while True:
            with open(_open_private(path), "ab") as file:
                # outbox_replay claims the file by renaming it, then takes this lock to wait for a
                # writer in the middle of a line; a writer that opened the file before the rename
                # finds it renamed once it holds the lock, and writes to a new one.
                fcntl.flock(file, fcntl.LOCK_EX)
                if not _same_file(file.fileno(), path):
                    continue
                os.fchmod(file.fileno(), _PRIVATE)  # a file written by an older version was 0644
                file.write(line)
                file.flush()
                os.fsync(file.fileno())
                return

    def claim_dead_letters(self) -> list[Path]:
        """The dead-letter file, renamed so that new dead letters start a new one, and any claimed
        file left by a replay that died."""
        if not self.directory.exists():
            return []
        claimed = [
            path
            for path in self.directory.glob(f"{DEAD_LETTERS}{_CLAIMED}*")
            if not _alive(path.name.rsplit(_CLAIMED, 1)[1].split("-", 1)[0])
        ]
        path = self.directory / DEAD_LETTERS
        target = path.with_name(f"{DEAD_LETTERS}{_CLAIMED}{os.getpid()}-{time.time_ns()}")
        try:
            path.rename(target)
        except FileNotFoundError:
            return claimed
        with open(target, "rb") as file:
            fcntl.flock(file, fcntl.LOCK_EX)  # a writer in the middle of a line finishes it first
        return [*claimed, target]

    @staticmethod
    def read_dead_letters(path: Path) -> Iterator[tuple[str, Any] | str]:
        """Each item of a dead-letter file as ``(kind, item)``; a line this gateway's keys cannot
        decrypt as the line itself (a string), to be set aside. Lines of a file written by an older
        version, JSON in clear, are read too."""
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                line = line.rstrip("\n")
                if not line:
                    continue
                if line.startswith("{"):
                    try:
                        legacy = json.loads(line)
                        yield legacy["kind"], legacy["payload"]
                    except (ValueError, KeyError, TypeError):
                        yield line
                    continue
                try:
                    entries = list(_decode(line))
                except (UnreadableSpool, pickle.UnpicklingError, ValueError):
                    yield line
                else:
                    yield from entries

    def set_aside(self, lines: list[str]) -> Path:
        """Dead-letter lines that cannot be read, kept as they are for an operator (0600)."""
        self._make_directory()
        path = self.directory / UNREADABLE_DEAD_LETTERS
        with open(_open_private(path), "a", encoding="utf-8") as file:
            os.fchmod(file.fileno(), _PRIVATE)
            file.write("".join(f"{line}\n" for line in lines))
            file.flush()
            os.fsync(file.fileno())
        return path

    def recover(self) -> None:
        """Puts back files that a process which has died left open or claimed. Called before this
        process writes or claims anything, so files under its own pid are a previous life's (a
        container restarts with the same pids)."""
        if not self.directory.exists():
            return
        for path in self.directory.iterdir():
            name = path.name
            if path == self._path or name.startswith(DEAD_LETTERS):
                continue  # a dead-letter file left claimed is outbox_replay's (claim_dead_letters)
            if name.endswith(_OPEN) and not _alive(name.split("-", 1)[0]):
                path.rename(path.with_name(name.removesuffix(_OPEN)))
            elif _CLAIMED in name and not _alive(name.rsplit(_CLAIMED, 1)[1]):
                self.release(path)


def _same_file(descriptor: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(descriptor), os.stat(path))
    except FileNotFoundError:
        return False


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
