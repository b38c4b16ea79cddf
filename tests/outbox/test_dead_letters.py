"""Dead letters are private, encrypted and replayable: an item the database refused is never a
silent loss, and never a request body in clear on disk."""

import io
import json
import stat
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db.models import Sum

from apps.audit.models import AuditEntry, SpendRollup
from apps.outbox.outbox import outbox
from apps.proxy.records import RequestRecord
from tests.outbox.test_outbox import Database, ProbedOutbox

BODY = "the patient's diagnosis is confidential"
API_KEY = "sk_live_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def probed(tmp_path):
    database = Database()
    box = ProbedOutbox(database, tmp_path / "spool", batch_size=10)
    yield box, database
    box.close()


def test_the_dead_letter_file_is_private_and_holds_nothing_in_clear(probed, tmp_path):
    box, database = probed
    box.put("row", {"id": "1"})
    box.put("row", {"id": "2", "poison": True, "body": BODY, "authorization": f"Bearer {API_KEY}"})
    assert box.flush()

    assert set(database.rows) == {"1"}
    dead = tmp_path / "spool" / "dead-letter.jsonl.failed"
    assert mode_of(dead) == 0o600
    raw = dead.read_bytes()
    assert BODY.encode() not in raw
    assert API_KEY.encode() not in raw
    assert b"poison" not in raw
    assert [item["id"] for _, item in box.spool.read_dead_letters(dead)] == ["2"]


def test_spool_files_and_their_directory_are_private(tmp_path):
    box = ProbedOutbox(Database(), tmp_path / "spool", deliver=False, seal_seconds=60)
    try:
        box.put("row", {"id": "1", "body": BODY})
        assert box.flush()
        [spooled] = list((tmp_path / "spool").iterdir())
        assert mode_of(spooled) == 0o600
        assert mode_of(tmp_path / "spool") == 0o700
    finally:
        box.close()


def test_a_replay_while_the_database_is_down_touches_nothing(probed, tmp_path):
    from apps.outbox.outbox import DatabaseUnavailable

    box, database = probed
    box.spool.dead_letter([("row", {"id": "1"})])
    database.up = False

    with pytest.raises(DatabaseUnavailable):
        box.replay_dead_letters()

    dead = tmp_path / "spool" / "dead-letter.jsonl.failed"
    assert [item["id"] for _, item in box.spool.read_dead_letters(dead)] == ["1"]


def test_a_replay_takes_up_a_file_claimed_by_a_replay_that_died(probed, tmp_path):
    box, database = probed
    box.spool.dead_letter([("row", {"id": "1"}), ("row", {"id": "2", "poison": True})])
    dead = tmp_path / "spool" / "dead-letter.jsonl.failed"
    dead_pid = 2**22 + 17  # above any pid_max default: no such process
    dead.rename(dead.with_name(f"{dead.name}.replaying-{dead_pid}-1"))

    report = box.replay_dead_letters()

    assert (report.replayed, report.kept) == (1, 1)
    assert set(database.rows) == {"1"}
    assert [path.name for path in (tmp_path / "spool").iterdir()] == [dead.name]


# --- manage.py outbox_replay, against the real audit writer ---------------------------------------


def audit_payload(organization, **values) -> dict:
    return {
        "id": str(uuid.uuid4()),
        "organization_id": str(organization.id),
        "created_at": datetime.now(UTC).isoformat(),
        "endpoint": "/v1/chat/completions",
        "team_id": None,
        "api_key_id": None,
        "api_key_prefix": "",
        "requested_model": "fast",
        "provider": "openai",
        "provider_key_id": None,
        "model": "gpt-4o-mini",
        "stream": False,
        "stream_completed": None,
        "client_disconnected": False,
        "status": 200,
        "error_type": "",
        "error_code": "",
        "attempts": [],
        "cache": "miss",
        "policy_action": "",
        "policy_reason": "",
        "policy_decisions": [],
        "input_tokens": 3,
        "output_tokens": 4,
        "cached_input_tokens": 0,
        "reasoning_tokens": 0,
        "usage_estimated": False,
        "cost_usd": "0.00001000",
        "latency_ms": 1.5,
        "ttft_ms": None,
        "upstream_ms": 1.0,
        "client_ip": "203.0.113.7",
        "user_agent": "",
        "body_mode": "full",
        "request_body": BODY,
        "response_body": "",
        **values,
    }


@pytest.fixture
def dead_letters():
    """The gateway's own dead-letter file, empty at the start of the test."""
    box = outbox()
    assert box.flush()
    path = box.spool.directory / "dead-letter.jsonl.failed"
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
    # Refused by an older writer (a NUL, an address that is not one), dead-lettered twice (a crash
    # between writing the file and acknowledging), and one whose organization is gone.
    refused = audit_payload(organization, model="fast\x00", client_ip="not-an-ip")
    orphan = audit_payload(organization, organization_id=str(uuid.uuid4()))
    record = RequestRecord(
        request_id=str(uuid.uuid4()),
        started_at=datetime.now(UTC),
        endpoint="/v1/embeddings",
        client_ip="198.51.100.2",
        user_agent="sdk",
        organization_id=str(organization.id),
        model="text-embedding-3-small",
    )
    outbox().spool.dead_letter([("audit", refused), ("audit", orphan)])
    outbox().spool.dead_letter([("audit", refused), ("audit", record)])

    report = replay()

    assert "Replayed 3 item(s)" in report
    assert "1 still failing" in report
    entry = AuditEntry.objects.get(id=refused["id"])
    assert (entry.model, entry.client_ip) == ("fast", None)
    assert AuditEntry.objects.filter(id=record.request_id).exists()
    assert not AuditEntry.objects.filter(id=orphan["id"]).exists()
    assert requests_counted(organization) == 2  # the duplicate is written and counted once
    assert mode_of(dead_letters) == 0o600
    assert [item["id"] for _, item in outbox().spool.read_dead_letters(dead_letters)] == [orphan["id"]]

    again = replay()  # idempotent: what still fails stays, nothing is written twice

    assert "Replayed 0 item(s)" in again
    assert "1 still failing" in again
    assert AuditEntry.objects.filter(organization=organization).count() == 2
    assert requests_counted(organization) == 2


@pytest.mark.django_db(transaction=True)
def test_outbox_replay_takes_a_plaintext_file_of_an_older_version_and_leaves_nothing_in_clear(
    organization, dead_letters
):
    refused = audit_payload(organization, user_agent="agent\x00")
    dead_letters.parent.mkdir(parents=True, exist_ok=True)
    dead_letters.write_text(json.dumps({"kind": "audit", "payload": refused}) + "\n")
    dead_letters.chmod(0o644)

    report = replay()

    assert "Replayed 1 item(s)" in report
    assert AuditEntry.objects.get(id=refused["id"]).user_agent == "agent"
    assert not dead_letters.exists()
    assert not [path for path in dead_letters.parent.iterdir() if path.name.startswith("dead-letter")]


@pytest.mark.django_db(transaction=True)
def test_outbox_replay_with_nothing_to_replay_says_so(dead_letters):
    assert "Replayed 0 item(s)" in replay()
