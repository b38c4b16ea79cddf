"""Dead letters are private, encrypted and replayable: an item the database refused is never a
silent loss, and never a request body in clear on disk."""

import io
import stat
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db.models import Sum

from apps.audit.models import AuditEntry, SpendRollup
from apps.audit.records import RequestRecord, record_payload
from apps.outbox import spool
from apps.outbox.ingest import DatabaseUnavailable
from apps.outbox.outbox import Outbox, outbox
from tests.outbox.conftest import KIND

BODY = "the patient's diagnosis is confidential"
API_KEY = "sk_live_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def probed(database, tmp_path):
    box = Outbox(tmp_path / "spool", batch_size=10, retries=(), probe=lambda: database.up)
    yield box, database
    box.close()


def test_the_dead_letter_file_is_private_and_holds_nothing_in_clear(probed, tmp_path):
    box, rows = probed
    box.put(KIND, {"id": "1"})
    box.put(KIND, {"id": "2", "poison": True, "body": BODY, "authorization": f"Bearer {API_KEY}"})
    assert box.flush()

    assert set(rows.rows) == {"1"}
    dead = tmp_path / "spool" / "dead-letters.failed"
    assert mode_of(dead) == 0o600
    raw = dead.read_bytes()
    assert BODY.encode() not in raw
    assert API_KEY.encode() not in raw
    assert b"poison" not in raw
    items, _ = spool.read_dead_letters(dead)
    assert [item["id"] for _, item in items] == ["2"]


def test_spool_files_and_their_directory_are_private(probed, tmp_path):
    box, _ = probed
    box.put(KIND, {"id": "1", "body": BODY})
    [spooled] = list((tmp_path / "spool").iterdir())
    assert mode_of(spooled) == 0o600
    assert mode_of(tmp_path / "spool") == 0o700


def test_a_replay_while_the_database_is_down_touches_nothing(probed, tmp_path):
    box, rows = probed
    spool.dead_letter(tmp_path / "spool", [(KIND, {"id": "1"})])
    rows.up = False

    with pytest.raises(DatabaseUnavailable):
        box.replay_dead_letters()

    items, _ = spool.read_dead_letters(tmp_path / "spool" / "dead-letters.failed")
    assert [item["id"] for _, item in items] == ["1"]


def test_a_replay_takes_up_a_file_claimed_by_a_replay_that_died(probed, tmp_path):
    box, rows = probed
    spool.dead_letter(tmp_path / "spool", [(KIND, {"id": "1"}), (KIND, {"id": "2", "poison": True})])
    dead = tmp_path / "spool" / "dead-letters.failed"
    dead_pid = 2**22 + 17  # above any pid_max default: no such process
    dead.rename(dead.with_name(f"{dead.name}.replaying-{dead_pid}-1"))

    report = box.replay_dead_letters()

    assert (report.replayed, report.kept) == (1, 1)
    assert set(rows.rows) == {"1"}
    assert [path.name for path in (tmp_path / "spool").iterdir()] == [dead.name]


def test_a_dead_letter_line_that_cannot_be_read_is_set_aside_as_it_was(probed, tmp_path):
    box, _ = probed
    spool.dead_letter(tmp_path / "spool", [(KIND, {"id": "1"})])
    with open(tmp_path / "spool" / "dead-letters.failed", "ab") as file:
        file.write(b"gAAAAAB-damaged-on-disk\n")

    report = box.replay_dead_letters()

    assert (report.replayed, report.kept, report.unreadable) == (1, 0, 1)
    assert (tmp_path / "spool" / "dead-letters.corrupt").read_bytes() == b"gAAAAAB-damaged-on-disk\n"
    assert mode_of(tmp_path / "spool" / "dead-letters.corrupt") == 0o600


# --- manage.py outbox_replay, against the real audit writer ---------------------------------------


def audit_record(organization, **values) -> RequestRecord:
    record = RequestRecord(
        request_id=str(uuid.uuid4()),
        started_at=datetime.now(UTC),
        endpoint="/v1/chat/completions",
        client_ip="203.0.113.7",
        user_agent="",
        organization_id=str(organization.id),
        requested_model="fast",
        provider="openai",
        model="gpt-4o-mini",
        log_bodies="full",
        request_body=BODY.encode(),
    )
    return replace(record, **values)


@pytest.fixture
def dead_letters():
    """The gateway's own dead-letter file, empty at the start of the test."""
    box = outbox()
    assert box.flush()
    path = box.dead_letter_path
    path.unlink(missing_ok=True)
    yield path
    path.unlink(missing_ok=True)


def replay() -> str:
    out = io.StringIO()
    call_command("outbox_replay", stdout=out)
    return out.getvalue()


def requests_counted(organization) -> int:
    return SpendRollup.objects.filter(organization=organization).aggregate(n=Sum("requests"))["n"] or 0


@pytest.mark.django_db(transaction=True)
def test_outbox_replay_writes_what_the_database_now_takes_and_keeps_what_it_still_refuses(
    organization, dead_letters
):
    # One refused because its organization was gone (now restored: written), one dead-lettered
    # twice (a crash between writing the file and acknowledging), one whose organization is still
    # gone, and one of a payload version this release does not know.
    written = record_payload(audit_record(organization, model="fast\x00", client_ip="not-an-ip"))
    orphan = record_payload(audit_record(organization, organization_id=str(uuid.uuid4())))
    newer = {**record_payload(audit_record(organization)), "v": 99}
    directory = dead_letters.parent
    spool.dead_letter(directory, [("audit", written), ("audit", orphan)])
    spool.dead_letter(directory, [("audit", written), ("audit", newer)])

    report = replay()

    assert "Replayed 2 item(s)" in report
    assert "2 still failing" in report
    entry = AuditEntry.objects.get(id=written["request_id"])
    assert (entry.model, entry.client_ip, entry.request_body) == ("fast", None, BODY)
    assert AuditEntry.objects.filter(organization=organization).count() == 1
    assert requests_counted(organization) == 1  # the duplicate is written and counted once
    assert mode_of(dead_letters) == 0o600
    items, _ = spool.read_dead_letters(dead_letters)
    assert sorted(item["v"] for _, item in items) == [1, 99]

    again = replay()  # idempotent: what still fails stays, nothing is written twice

    assert "Replayed 0 item(s)" in again
    assert "2 still failing" in again
    assert AuditEntry.objects.filter(organization=organization).count() == 1
    assert requests_counted(organization) == 1


@pytest.mark.django_db(transaction=True)
def test_outbox_replay_with_nothing_to_replay_says_so(dead_letters):
    assert "Replayed 0 item(s)" in replay()
