"""The outbox delivers everything put into it exactly once in effect, whatever the database does."""

import os
import time
from pathlib import Path

import pytest

from apps.outbox.outbox import Outbox


class Database:
    """Stands for the database behind a handler: up or down, and what it holds."""

    def __init__(self) -> None:
        self.up = True
        self.rows: dict[str, dict] = {}
        self.calls = 0

    def write(self, payloads: list[dict]) -> None:
        self.calls += 1
        if not self.up:
            raise ConnectionError("database unavailable")
        if any(payload.get("poison") for payload in payloads):
            raise ValueError("this row violates a constraint")
        for payload in payloads:
            self.rows.setdefault(payload["id"], payload)  # idempotent, like ignore_conflicts


class ProbedOutbox(Outbox):
    """The outbox, with its database probe answered by ``Database.up`` instead of a SELECT 1."""

    def __init__(self, database: Database, spool_dir: Path, **kwargs) -> None:
        kwargs.setdefault("retries", ())
        kwargs.setdefault("flush_seconds", 0.01)
        kwargs.setdefault("probe_seconds", 0.0)
        super().__init__(spool_dir, **kwargs)
        self.database = database
        self.register("row", database.write)

    def _database_answers(self) -> bool:
        return self.database.up


def settle(box: Outbox, done) -> None:
    """Lets the writer run until ``done()`` holds (replays happen on its later rounds)."""
    deadline = time.monotonic() + 5
    while not done() and time.monotonic() < deadline:
        box.flush()
        time.sleep(0.01)
    assert done()


@pytest.fixture
def database():
    return Database()


@pytest.fixture
def make_outbox(database, tmp_path):
    made = []

    def make(**kwargs) -> ProbedOutbox:
        box = ProbedOutbox(database, tmp_path / "spool", **kwargs)
        made.append(box)
        return box

    yield make
    for box in made:
        box.close()


def test_it_delivers_in_batches(make_outbox, database):
    box = make_outbox(batch_size=100)
    for n in range(1000):
        box.put("row", {"id": str(n)})

    assert box.flush()
    assert len(database.rows) == 1000
    assert database.calls <= 20  # batches, not one write per item
    assert box.delivered == 1000


def test_while_the_database_is_down_items_are_spooled_and_replayed_when_it_is_back(
    make_outbox, database, tmp_path
):
    box = make_outbox(batch_size=50)
    database.up = False
    for n in range(300):
        box.put("row", {"id": str(n)})
    assert box.flush()
    assert database.rows == {}
    assert box.spilled == 300
    assert list((tmp_path / "spool").iterdir())  # on disk, not only in memory

    database.up = True
    box.put("row", {"id": "after"})
    settle(box, lambda: len(database.rows) == 301)

    assert set(database.rows) == {str(n) for n in range(300)} | {"after"}
    assert not [p for p in (tmp_path / "spool").iterdir() if p.name.endswith((".jsonl", ".open"))]


def test_a_bad_item_is_dead_lettered_and_never_blocks_the_others(make_outbox, database, tmp_path):
    box = make_outbox(batch_size=10)
    for n in range(10):
        box.put("row", {"id": str(n), "poison": n == 4})

    assert box.flush()

    assert set(database.rows) == {str(n) for n in range(10)} - {"4"}
    assert box.dead_lettered == 1
    [(kind, item)] = box.spool.read_dead_letters(tmp_path / "spool" / "dead-letter.jsonl.failed")
    assert (kind, item["id"]) == ("row", "4")


def test_closing_drains_what_is_queued_into_the_spool_when_the_database_is_down(
    make_outbox, database, tmp_path
):
    first = make_outbox()
    database.up = False
    first._stop.set()  # as at shutdown: the writer does not get to run first
    for n in range(25):
        first.put("row", {"id": str(n)})
    first.close()
    assert database.rows == {}

    database.up = True
    second = make_outbox()  # the next process replays what the first one spooled
    second.put("row", {"id": "new"})
    settle(second, lambda: len(database.rows) == 26)


def test_a_file_left_open_by_a_process_that_died_is_replayed(make_outbox, database, tmp_path):
    from apps.outbox.spool import Spool

    spool = tmp_path / "spool"
    writer = Spool(spool)
    writer.append([("row", {"id": f"old-{n}"}) for n in range(3)])
    written = next(spool.iterdir())
    writer._file.close()
    dead_pid = 2**22 + 17  # above any pid_max default: no such process
    assert not os.path.exists(f"/proc/{dead_pid}")
    left_open = spool / f"{dead_pid}-1-1.jsonl.open"
    written.rename(left_open)
    with open(left_open, "a") as file:
        file.write("gAAAAAB-cut-mid-line")  # the crash came in the middle of the next batch

    box = make_outbox()
    box.put("row", {"id": "new"})
    settle(box, lambda: len(database.rows) == 4)

    assert set(database.rows) == {"old-0", "old-1", "old-2", "new"}


def test_the_spool_keeps_nothing_in_clear(make_outbox, database, tmp_path):
    box = make_outbox(deliver=False, seal_seconds=0.0)
    box.put("row", {"id": "1", "body": "my key is sk-proj-abcdefghijklmnop"})
    assert box.flush()
    box.close()

    [spooled] = [p for p in (tmp_path / "spool").iterdir() if p.name.endswith(".jsonl")]
    assert b"sk-proj" not in spooled.read_bytes()


def test_a_spooling_server_writes_nothing_and_an_ingest_process_delivers_it_all(database, tmp_path):
    import threading

    server = ProbedOutbox(database, tmp_path / "spool", deliver=False, seal_seconds=0.0)
    for n in range(120):
        server.put("row", {"id": str(n)})
    assert server.flush()
    server._wake.set()
    server.flush()
    assert database.calls == 0  # the server process never touched the database
    server.close()

    ingest = ProbedOutbox(database, tmp_path / "spool")
    stop = threading.Event()
    thread = threading.Thread(target=ingest.ingest_forever, args=(stop, 0.01))
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while len(database.rows) < 120 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(5)

    assert set(database.rows) == {str(n) for n in range(120)}
    assert not [p for p in (tmp_path / "spool").iterdir() if p.name.endswith((".jsonl", ".open"))]
