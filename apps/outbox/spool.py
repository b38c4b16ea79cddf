"""The spool: what a request leaves behind (its audit entry; budget and webhook events next), on
this node's disk, from the moment the answer is sent until the ingest has written it.

Files in ``GATEWAY_OUTBOX_DIR`` (the directory 0700, every file 0600):

    <pid>-<ns>-<n>.spool.open   being appended by one server process, which holds an flock on it
    <pid>-<ns>-<n>.spool        sealed (fsynced, closed) by that process, waiting for the ingest
    <pid>-<ns>-<n>.corrupt      the lines of that spool file the ingest could not read, as they were
    dead-letters.failed         items a kind's handler refused while the database answered
    dead-letters.corrupt        dead-letter lines that could not be read, as they were

One line per item, written with a single ``write`` as the item is put: the kernel keeps it when the
process dies, so a killed server loses nothing; it reaches the disk at the next ``fsync``, which the
writer's own thread does every ``GATEWAY_OUTBOX_FSYNC_SECONDS`` when it seals the file (a machine
crash loses at most that much). The ingest takes a file by taking its flock without waiting: a
sealed file once its writer let go, an ``.open`` file only when its writer has died (the kernel
drops the lock with the process), a file another ingest holds never. So several ingest processes
may share a directory, and nothing depends on process ids.

A line is ``(kind, payload)`` pickled, then encrypted and authenticated with the gateway's Fernet
keys (request bodies are data at rest), then base64 (Fernet's own): one line of text. Payloads are
plain values only (str, bytes, numbers, bools, None, lists, tuples and dicts of them): a class is
refused when the line is written and when it is read, so a line never depends on a class that a
later release may have changed (a kind versions its payload itself, as the audit record does).
Pickle because it runs in C: 4 us a request record, where ``json.dumps`` took 28 us (and would
need the bodies re-encoded) — this runs on the server's event loop.
"""

import fcntl
import io
import logging
import os
import pickle
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from apps.core import crypto

logger = logging.getLogger(__name__)

SEALED = ".spool"
OPEN = ".spool.open"
CORRUPT = ".corrupt"
DEAD_LETTERS = "dead-letters.failed"
CORRUPT_DEAD_LETTERS = "dead-letters.corrupt"
_PRIVATE = 0o600


class UnreadableLine(Exception):
    """A spool line that cannot be read: cut by a machine crash, damaged, or encrypted with a key
    that is no longer in GATEWAY_ENCRYPTION_KEYS."""


# --- Lines --------------------------------------------------------------------------------------


class _PlainPickler(pickle.Pickler):
    # Called for every object that is not a plain value: refuse it.
    def reducer_override(self, obj: Any) -> Any:
        raise TypeError(f"an outbox payload holds plain values only, not {type(obj).__name__}")


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a spool line holds no class ({module}.{name})")


def encode(kind: str, payload: Any) -> bytes:
    """One line, newline included. Raises ``TypeError`` for a payload that is not plain."""
    buffer = io.BytesIO()
    _PlainPickler(buffer, protocol=5).dump((kind, payload))
    return crypto.seal_line(buffer.getvalue()) + b"\n"


def decode(line: bytes) -> tuple[str, Any]:
    """``(kind, payload)`` from a line; ``UnreadableLine`` for anything else."""
    try:
        # Authenticated first: nothing but this gateway's keys can make a line that gets unpickled,
        # and even then it may hold no class.
        kind, payload = _PlainUnpickler(io.BytesIO(crypto.open_line(line.strip()))).load()
    except crypto.InvalidToken as error:
        raise UnreadableLine("the line cannot be decrypted with GATEWAY_ENCRYPTION_KEYS") from error
    except Exception as error:  # an authenticated line that is not ours to read (a bug, not a client)
        raise UnreadableLine(f"the line is not an outbox item ({type(error).__name__})") from error
    if not isinstance(kind, str):
        raise UnreadableLine("the line is not an outbox item")
    return kind, payload


# --- Writing: one file per server process at a time ----------------------------------------------


def make_directory(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)


def _open_locked(path: Path) -> int:
    """Opens (creating, 0600) and flocks ``path``; if an ingest removed the file between the two
    (it found it empty and free), opens it again, so nothing is ever appended to a removed file."""
    while True:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, _PRIVATE)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        if _same_file(descriptor, path):
            return descriptor
        os.close(descriptor)


class SpoolWriter:
    """This process's spool file. ``append`` is called on the request's event loop: one
    ``write``, no fsync; ``seal`` (the writer's thread, and at exit) fsyncs the file and hands it
    to the ingest."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()  # held by append for one write; by seal for a swap
        self._sealing = threading.Lock()  # one seal at a time: a seal returns once its file is sealed
        self._descriptor: int | None = None
        self._path: Path | None = None
        self._sequence = 0

    def append(self, line: bytes) -> None:
        with self._lock:
            if self._descriptor is None:
                self._open()
            written = os.write(self._descriptor, line)
            if written != len(line):
                # Only a full disk cuts a write to a file: this file ends on the cut line (the
                # ingest sets it aside) and the next line starts a new one.
                self._seal_now()
                raise OSError(f"the spool file was cut ({written} of {len(line)} bytes written)")

    def _open(self) -> None:
        make_directory(self.directory)
        self._sequence += 1
        self._path = self.directory / f"{os.getpid()}-{time.time_ns()}-{self._sequence}{OPEN}"
        self._descriptor = _open_locked(self._path)

    def seal(self) -> None:
        """Fsyncs the file being written and renames it ``.spool``; the next append starts a new
        one. The fsync runs outside the append lock, so requests never wait for the disk; a seal
        that finds another in progress returns after it, so what was appended before is sealed."""
        with self._sealing:
            with self._lock:
                descriptor, path = self._descriptor, self._path
                self._descriptor = self._path = None
            if descriptor is not None:
                _finish(descriptor, path)

    def _seal_now(self) -> None:
        descriptor, path = self._descriptor, self._path
        self._descriptor = self._path = None
        _finish(descriptor, path)

    @property
    def writing(self) -> bool:
        return self._descriptor is not None


def _finish(descriptor: int, path: Path) -> None:
    try:
        os.fsync(descriptor)
        path.rename(path.with_name(path.name.removesuffix(OPEN) + SEALED))
    finally:
        os.close(descriptor)  # lets the ingest take it


# --- Reading: the ingest ------------------------------------------------------------------------


def waiting_files(directory: Path) -> list[Path]:
    """Spool files, sealed or left open, oldest first (names start with the writer's pid and a
    nanosecond time; sorted by the time)."""
    if not directory.exists():
        return []
    names = [path for path in directory.iterdir() if path.name.endswith((SEALED, OPEN))]
    return sorted(names, key=_written_at)


def _written_at(path: Path) -> tuple[int, str]:
    parts = path.name.split("-", 2)
    try:
        return int(parts[1]), path.name
    except (IndexError, ValueError):
        return 0, path.name


@contextmanager
def taken(path: Path) -> Iterator[BinaryIO | None]:
    """The file, open for reading and flocked by this process; None while its writer or another
    ingest holds it, or when it is gone."""
    try:
        file = open(path, "rb")  # closed below, after the lock is released
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        # Another ingest may have finished it and removed it between our open and our lock.
        yield file if _same_file(file.fileno(), path) else None
    finally:
        file.close()


def read_lines(file: BinaryIO, size: int, unreadable: list[bytes]) -> Iterator[list[tuple[str, Any]]]:
    """The file's items in chunks of up to ``size``; lines that cannot be read are added to
    ``unreadable`` as they were (the last line cut by a machine crash among them)."""
    chunk: list[tuple[str, Any]] = []
    for line in file:
        if not line.strip():
            continue
        try:
            if not line.endswith(b"\n"):
                raise UnreadableLine("the line was cut")
            chunk.append(decode(line))
        except UnreadableLine:
            unreadable.append(line if line.endswith(b"\n") else line + b"\n")
            continue
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def set_aside(path: Path, lines: list[bytes]) -> Path:
    """Keeps unreadable lines of ``path`` as they were, in ``<name>.corrupt`` (0600)."""
    target = path.with_name(path.name.removesuffix(OPEN).removesuffix(SEALED) + CORRUPT)
    _append_private(target, b"".join(lines))
    return target


def move_aside(path: Path) -> Path:
    """A whole spool file the ingest cannot get through, renamed ``.corrupt``."""
    target = path.with_name(path.name.removesuffix(OPEN).removesuffix(SEALED) + CORRUPT)
    if target.exists():  # lines of it were set aside already: keep both
        target = target.with_name(f"{target.stem}-{time.time_ns()}{CORRUPT}")
    path.rename(target)
    return target


# --- Dead letters ---------------------------------------------------------------------------------


def dead_letter(directory: Path, items: list[tuple[str, Any]]) -> None:
    """Appends ``(kind, payload)`` items to the dead-letter file, encrypted, fsynced, 0600."""
    lines = b"".join(encode(kind, payload) for kind, payload in items)
    make_directory(directory)
    path = directory / DEAD_LETTERS
    while True:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, _PRIVATE), "ab") as file:
            # outbox_replay claims the file by renaming it, then takes this lock to wait for a
            # writer in the middle of a line; a writer that opened the file before the rename finds
            # it renamed once it holds the lock, and writes to a new one.
            fcntl.flock(file, fcntl.LOCK_EX)
            if not _same_file(file.fileno(), path):
                continue
            file.write(lines)
            file.flush()
            os.fsync(file.fileno())
            return


_CLAIMED = ".replaying-"


def claim_dead_letters(directory: Path) -> list[Path]:
    """The dead-letter file, renamed so that new dead letters start a new one, and any claimed file
    left by a replay that died (its pid is gone)."""
    if not directory.exists():
        return []
    left = [
        path
        for path in directory.glob(f"{DEAD_LETTERS}{_CLAIMED}*")
        if not _alive(path.name.rsplit(_CLAIMED, 1)[1].split("-", 1)[0])
    ]
    path = directory / DEAD_LETTERS
    target = path.with_name(f"{DEAD_LETTERS}{_CLAIMED}{os.getpid()}-{time.time_ns()}")
    try:
        path.rename(target)
    except FileNotFoundError:
        return left
    with open(target, "rb") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # a writer in the middle of a line finishes it first
    return [*left, target]


def read_dead_letters(path: Path) -> tuple[list[tuple[str, Any]], list[bytes]]:
    """The items of a dead-letter file, and the lines that cannot be read."""
    unreadable: list[bytes] = []
    with open(path, "rb") as file:
        items = [item for chunk in read_lines(file, 10_000, unreadable) for item in chunk]
    return items, unreadable


def set_aside_dead_letters(directory: Path, lines: list[bytes]) -> Path:
    path = directory / CORRUPT_DEAD_LETTERS
    _append_private(path, b"".join(lines))
    return path


def _append_private(path: Path, data: bytes) -> None:
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, _PRIVATE), "ab") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def _same_file(descriptor: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(descriptor), os.stat(path))
    except FileNotFoundError:
        return False


def _alive(pid: str) -> bool:
    if pid == str(os.getpid()):
        return False  # this process is not replaying: a claim under its pid is a previous life's
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True
