"""A spool file that cannot be read whole (cut by a machine crash, damaged on disk, encrypted with a
key no longer listed) never stops the ingest: what can be read is written, what cannot is set
aside in ``<file>.corrupt`` as it was, logged, and the next round goes on."""

import logging
import os
import pickle
from decimal import Decimal

from cryptography.fernet import Fernet

from apps.core import crypto
from apps.outbox import spool
from apps.outbox.ingest import Ingest
from tests.outbox.conftest import KIND


def good(n: int) -> bytes:
    return spool.encode(KIND, {"id": str(n)})


def write_sealed(directory, name: str, data: bytes):
    spool.make_directory(directory)
    path = directory / name
    path.write_bytes(data)
    return path


def test_unreadable_lines_are_set_aside_and_every_readable_one_is_written(database, tmp_path, caplog):
    directory = tmp_path / "spool"
    other_key = Fernet(Fernet.generate_key()).encrypt(pickle.dumps((KIND, {"id": "x"}))) + b"\n"
    garbage = b"not a spool line at all\n"
    cut = good(5)[:40]  # the tail a machine crash left half written
    path = write_sealed(
        directory, "1-1-1.spool", good(1) + garbage + good(2) + other_key + good(3) + good(4) + cut
    )

    with caplog.at_level(logging.ERROR, logger="apps.outbox.ingest"):
        assert Ingest(directory, probe=lambda: True).run_once()

    assert set(database.rows) == {"1", "2", "3", "4"}
    assert not path.exists()
    corrupt = directory / "1-1-1.corrupt"
    assert corrupt.read_bytes() == garbage + other_key + cut + b"\n"
    assert os.stat(corrupt).st_mode & 0o777 == 0o600
    assert "3 line(s) of 1-1-1.spool cannot be read" in caplog.text

    assert Ingest(directory, probe=lambda: True).run_once()  # the next round: nothing left to trip on
    assert [p.name for p in directory.iterdir()] == ["1-1-1.corrupt"]


def test_a_file_of_garbage_is_set_aside_and_the_files_after_it_are_written(database, tmp_path):
    directory = tmp_path / "spool"
    write_sealed(directory, "1-1-1.spool", os.urandom(20_000))
    write_sealed(directory, "1-2-2.spool", good(1) + good(2))

    assert Ingest(directory, probe=lambda: True).run_once()

    assert set(database.rows) == {"1", "2"}
    assert [p.name for p in directory.iterdir()] == ["1-1-1.corrupt"]


def test_an_authenticated_line_that_holds_a_class_is_refused_not_unpickled(database, tmp_path):
    directory = tmp_path / "spool"
    with_class = crypto.seal_line(pickle.dumps((KIND, {"id": "1", "cost": Decimal(1)}))) + b"\n"
    write_sealed(directory, "1-1-1.spool", with_class + good(2))

    assert Ingest(directory, probe=lambda: True).run_once()

    assert set(database.rows) == {"2"}
    assert (directory / "1-1-1.corrupt").read_bytes() == with_class


def test_the_ingest_loop_goes_on_after_a_corrupt_file(database, tmp_path):
    import threading

    directory = tmp_path / "spool"
    write_sealed(directory, "1-1-1.spool", b"\x00" * 100)
    ingest = Ingest(directory, probe=lambda: True)
    stop = threading.Event()
    thread = threading.Thread(target=ingest.run_forever, args=(stop,), kwargs={"interval": 0.01})
    thread.start()
    try:
        writer = spool.SpoolWriter(directory)
        writer.append(good(1))
        writer.seal()
        for _ in range(500):
            if database.rows:
                break
            stop.wait(0.01)
    finally:
        stop.set()
        thread.join(5)

    assert set(database.rows) == {"1"}
    assert (directory / "1-1-1.corrupt").read_bytes() == b"\x00" * 100 + b"\n"
