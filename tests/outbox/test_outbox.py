"""The outbox writes everything put into it exactly once in effect, whatever the database does:
every item is on the spool when ``put`` returns, and the ingest writes it."""

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from apps.outbox import spool
from apps.outbox.ingest import Ingest
from apps.outbox.outbox import Outbox, register, unregister
from tests.metrics import metric_value
from tests.outbox.conftest import KIND, Database
from tests.servers import ROOT


@pytest.fixture
def make_outbox(database, tmp_path):
    made = []

    def make(**kwargs) -> Outbox:
        kwargs.setdefault("retries", ())
        box = Outbox(tmp_path / "spool", probe=lambda: database.up, **kwargs)
        made.append(box)
        return box

    yield make
    for box in made:
        box.close()


def spool_files(directory: Path) -> list[Path]:
    return sorted(path for path in directory.iterdir() if path.name.endswith((spool.SEALED, spool.OPEN)))


def test_every_item_is_on_the_spool_when_put_returns_and_nothing_is_written_on_put(
    make_outbox, database, tmp_path
):
    box = make_outbox(fsync_seconds=60)
    for n in range(50):
        box.put(KIND, {"id": str(n)})

    assert database.calls == 0  # nothing reaches the database on the request
    [open_file] = spool_files(tmp_path / "spool")
    assert open_file.name.endswith(".spool.open")
    with open(open_file, "rb") as file:
        unreadable: list[bytes] = []
        [items] = list(spool.read_lines(file, 100, unreadable))
    assert [payload["id"] for _, payload in items] == [str(n) for n in range(50)]
    assert not unreadable


def test_it_writes_in_batches(make_outbox, database):
    box = make_outbox(batch_size=100)
    for n in range(1000):
        box.put(KIND, {"id": str(n)})

    assert box.flush()
    assert len(database.rows) == 1000
    assert database.calls == 10  # batches, not one write per item
    assert box.delivered == 1000


def test_the_writer_thread_seals_its_file_every_fsync_interval(make_outbox, database, tmp_path):
    box = make_outbox(fsync_seconds=0.01)
    box.put(KIND, {"id": "1"})
    for _ in range(500):
        if spool_files(tmp_path / "spool")[0].name.endswith(".spool"):
            break
        threading.Event().wait(0.01)
    [sealed] = spool_files(tmp_path / "spool")
    assert sealed.name.endswith(".spool")


def test_while_the_database_is_down_the_spool_keeps_everything_until_it_is_back(
    make_outbox, database, tmp_path
):
    box = make_outbox(batch_size=50)
    database.up = False
    for n in range(300):
        box.put(KIND, {"id": str(n)})

    assert not box.flush()
    assert database.rows == {}
    assert spool_files(tmp_path / "spool")  # on disk, not only in memory

    database.up = True
    box.put(KIND, {"id": "after"})
    assert box.flush()

    assert set(database.rows) == {str(n) for n in range(300)} | {"after"}
    assert not spool_files(tmp_path / "spool")


def test_a_bad_item_is_dead_lettered_and_never_blocks_the_others(make_outbox, database, tmp_path):
    box = make_outbox(batch_size=10)
    counted = metric_value("gateway_outbox_dead_letters_total", kind=KIND)
    for n in range(10):
        box.put(KIND, {"id": str(n), "poison": n == 4})

    assert box.flush()

    assert set(database.rows) == {str(n) for n in range(10)} - {"4"}
    assert box.dead_lettered == 1
    assert metric_value("gateway_outbox_dead_letters_total", kind=KIND) == counted + 1
    items, _ = spool.read_dead_letters(tmp_path / "spool" / "dead-letters.failed")
    assert [(kind, item["id"]) for kind, item in items] == [(KIND, "4")]

    # Replayed and refused again, it goes back to the file, but is not a new dead letter.
    assert box.replay_dead_letters().kept == 1
    assert metric_value("gateway_outbox_dead_letters_total", kind=KIND) == counted + 1


def test_an_item_of_a_kind_nobody_registered_is_dead_lettered_and_replayed_once_it_is(
    make_outbox, database, tmp_path
):
    box = make_outbox()
    box.put("not-yet-a-kind", {"id": "early"})
    assert box.flush()
    assert box.dead_lettered == 1

    later = Database()
    register("not-yet-a-kind", later.write)  # the release that brings its handler
    try:
        report = box.replay_dead_letters()
    finally:
        unregister("not-yet-a-kind")

    assert (report.replayed, report.kept) == (1, 0)
    assert set(later.rows) == {"early"}


def test_a_kind_is_one_registration_its_payload_made_by_the_producer_and_written_by_any_ingest(tmp_path):
    """The producer turns what it is given into a plain payload; a separate ingest (another
    process in production, here another object with nothing shared but the directory and the
    registry every process fills at start-up) hands it to the handler."""
    written: list[dict] = []

    class Event:
        def __init__(self, name: str) -> None:
            self.name = name

    register("test-event", written.extend, payload=lambda event: {"v": 1, "name": event.name})
    try:
        producer = Outbox(tmp_path / "spool")
        producer.put("test-event", Event("budget.exceeded"))
        producer.close()
        assert Ingest(tmp_path / "spool", probe=lambda: True).run_once()
    finally:
        unregister("test-event")

    assert written == [{"v": 1, "name": "budget.exceeded"}]


def test_a_payload_that_is_not_plain_is_refused_when_it_is_put(make_outbox, database):
    box = make_outbox()

    with pytest.raises(TypeError, match="plain values only"):
        box.put(KIND, {"id": "1", "when": object()})


def test_a_file_left_open_by_a_process_that_died_is_written(make_outbox, database, tmp_path):
    writer = spool.SpoolWriter(tmp_path / "spool")
    for n in range(3):
        writer.append(spool.encode(KIND, {"id": f"old-{n}"}))
    os.close(writer._descriptor)  # the process is gone: the kernel drops its lock, the file stays open

    box = make_outbox()
    box.put(KIND, {"id": "new"})
    assert box.flush()

    assert set(database.rows) == {"old-0", "old-1", "old-2", "new"}
    assert not spool_files(tmp_path / "spool")


def test_a_file_its_writer_still_holds_is_left_alone(make_outbox, database, tmp_path):
    writer = spool.SpoolWriter(tmp_path / "spool")
    writer.append(spool.encode(KIND, {"id": "in-progress"}))
    ingest = Ingest(tmp_path / "spool", probe=lambda: True)

    assert ingest.run_once()
    assert database.rows == {}

    writer.seal()
    assert ingest.run_once()
    assert set(database.rows) == {"in-progress"}


def test_two_ingests_on_one_spool_never_write_a_file_twice(database, tmp_path):
    directory = tmp_path / "spool"
    writer = spool.SpoolWriter(directory)
    for n in range(400):
        writer.append(spool.encode(KIND, {"id": str(n)}))
        if n % 10 == 9:
            writer.seal()
    ingests = [Ingest(directory, batch_size=7, probe=lambda: True) for _ in range(2)]

    threads = [threading.Thread(target=ingest.run_once) for ingest in ingests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert len(database.written) == 400  # each file taken by exactly one of them
    assert set(database.rows) == {str(n) for n in range(400)}


def test_the_spool_keeps_nothing_in_clear(make_outbox, database, tmp_path):
    box = make_outbox()
    box.put(KIND, {"id": "1", "body": "my key is sk-proj-abcdefghijklmnop"})
    box.close()

    [spooled] = spool_files(tmp_path / "spool")
    assert b"sk-proj" not in spooled.read_bytes()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GATEWAY_OUTBOX_BATCH_SIZE", "0"),
        ("GATEWAY_OUTBOX_FSYNC_SECONDS", "0"),
        ("GATEWAY_OUTBOX_INGEST_SECONDS", "-1"),
    ],
)
def test_an_out_of_range_setting_stops_the_gateway_at_start_up(variable, value, tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings", variable: value}
    env["GATEWAY_DATA_DIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", "import gateway_project.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert variable in result.stderr


def test_flush_writes_what_was_put_even_while_the_writer_thread_is_sealing(make_outbox, database):
    box = make_outbox(fsync_seconds=0.001)
    for n in range(200):
        box.put(KIND, {"id": str(n)})
        assert box.flush()
        assert str(n) in database.rows


def test_a_seal_that_fails_does_not_stop_the_sealing_thread(make_outbox, database, tmp_path):
    """The spool directory removed under an open file: that seal fails, the next ones go on."""
    box = make_outbox(fsync_seconds=0.01)
    box.put(KIND, {"id": "lost-with-its-directory"})
    shutil.rmtree(tmp_path / "spool")
    box.put(KIND, {"id": "after"})  # still the removed file: its seal's rename fails
    threading.Event().wait(0.1)

    box.put(KIND, {"id": "later"})
    for _ in range(500):
        if any(path.name.endswith(spool.SEALED) for path in (tmp_path / "spool").iterdir()):
            break
        threading.Event().wait(0.01)

    assert box._sealer.is_alive()
    assert box.flush()
    assert "later" in database.rows


def test_items_are_not_blamed_for_a_database_that_went_away_while_they_were_tried_one_by_one(
    make_outbox, database, tmp_path
):
    box = make_outbox(batch_size=10)
    for n in range(10):
        box.put(KIND, {"id": str(n), "poison": n == 2})
    write = database.write

    def goes_down_after_the_poison(payloads):
        if payloads[0]["id"] == "3":  # item by item now: the database is gone from here on
            database.up = False
        write(payloads)

    register(KIND, goes_down_after_the_poison)
    assert not box.flush()
    assert box.dead_lettered == 1  # the poison only; the rest wait on the spool

    database.up = True
    register(KIND, write)
    assert box.flush()
    assert set(database.rows) == {str(n) for n in range(10)} - {"2"}
