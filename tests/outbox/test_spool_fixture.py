"""A spool file written by release 1 (fixtures/release-1.spool, made by make_spool_fixture.py with
FIXTURE_KEY) is ingested whole by this release: every entry, every field. Never regenerate the
fixture: a release that changes the record's payload adds a fixture of its own beside it, and this
test keeps proving that what an older release left on a node's disk survives the upgrade."""

import shutil
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from django.test import override_settings

from apps.audit.models import AuditEntry, SpendRollup
from apps.audit.records import record_from_payload
from apps.core import crypto
from apps.organizations.models import Organization
from apps.outbox import spool
from apps.outbox.ingest import Ingest

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_KEY = "cmVsZWFzZS0xLXNwb29sLWZpeHR1cmUta2V5LTAwMDE="  # a test key, in no real deployment
ORGANIZATION_ID = "6d0f3a52-1f4e-4c43-9d7e-2f1b8a7c0e11"
OPENAI_KEY = "9f8e7d6c-5b4a-4392-8a1b-0c9d8e7f6a71"


@pytest.fixture
def fixture_keys():
    """This gateway's keys are the ones the fixture was written with."""
    with override_settings(GATEWAY_ENCRYPTION_KEYS=[FIXTURE_KEY]):
        crypto.forget_keys()
        yield
    crypto.forget_keys()


@pytest.fixture
def release_1_spool(tmp_path) -> Path:
    directory = tmp_path / "spool"
    directory.mkdir()
    # Named as the servers name a sealed file: <pid>-<time ns>-<n>.spool.
    shutil.copyfile(FIXTURES / "release-1.spool", directory / "4242-1795426215000000000-1.spool")
    return directory


@pytest.mark.django_db(transaction=True)
def test_a_spool_file_of_release_1_is_ingested_whole(fixture_keys, release_1_spool):
    Organization.objects.create(id=ORGANIZATION_ID, name="Release one", slug="release-one")

    ingest = Ingest(release_1_spool)
    assert ingest.run_once()

    assert ingest.dead_lettered == 0
    assert not list(release_1_spool.iterdir())  # written, nothing set aside
    entries = {
        str(entry.id)[-2:]: entry for entry in AuditEntry.objects.filter(organization_id=ORGANIZATION_ID)
    }
    assert sorted(entries) == ["01", "02", "03", "04"]

    chat = entries["01"]
    assert chat.created_at == datetime(2026, 11, 24, 9, 30, 15, 123456, tzinfo=UTC)
    assert (chat.endpoint, chat.client_ip, chat.user_agent) == (
        "/v1/chat/completions",
        "203.0.113.7",
        "OpenAI/Python 1.99.0",
    )
    assert str(chat.api_key_id) == "3c1b6f0e-2d4a-4b8e-8f1a-9e2d7c6b5a41"
    assert chat.api_key_prefix == "sk_live_ab12"
    assert str(chat.team_id) == "7a9e2c41-0b3d-4f5e-8a6b-1c2d3e4f5a61"
    assert (chat.requested_model, chat.provider, str(chat.provider_key_id), chat.model) == (
        "fast",
        "openai",
        OPENAI_KEY,
        "gpt-4o-mini",
    )
    assert (chat.stream, chat.stream_completed, chat.client_disconnected) == (True, True, False)
    assert chat.attempts == [
        {
            "provider": "anthropic",
            "provider_key_id": "1e2d3c4b-5a69-4788-9a0b-1c2d3e4f5a81",
            "model": "claude-3-5-haiku",
            "alias": "fast",
            "status": 529,
            "outcome": "upstream_error",
            "latency_ms": 41.5,
            "trial": False,  # fields added after release 1 read as their defaults
            "backoff_ms": None,
            "error": "overloaded",
        },
        {
            "provider": "openai",
            "provider_key_id": OPENAI_KEY,
            "model": "gpt-4o-mini",
            "alias": "fast",
            "status": 200,
            "outcome": "ok",
            "latency_ms": 12.25,
            "trial": False,
            "backoff_ms": None,
            "error": None,
        },
    ]
    assert (chat.cache, chat.policy_action, chat.policy_reason) == ("miss", "allow", "")
    assert chat.policy_decisions == [{"policy": "pii", "action": "allow", "score": 0.25}]
    assert (chat.status, chat.error_type, chat.error_code) == (200, "", "")
    assert (chat.input_tokens, chat.output_tokens, chat.cached_input_tokens, chat.reasoning_tokens) == (
        12,
        34,
        5,
        7,
    )
    assert chat.usage_estimated is False
    assert chat.cost_usd == Decimal("0.00012345")
    assert (chat.latency_ms, chat.ttft_ms, chat.upstream_ms) == (58.75, 44.5, 53.75)
    assert chat.body_mode == "full"
    assert (
        chat.request_body == '{"model":"fast","messages":[{"role":"user","content":"Grüße \\u00e9"}]}\ufffd'
    )
    assert chat.response_body == 'data: {"choices":[{"delta":{"content":"Hallo"}}]}\n\ndata: [DONE]\n\n'

    embedding = entries["02"]
    assert (embedding.endpoint, embedding.client_ip, embedding.model) == (
        "/v1/embeddings",
        "2001:db8::7",
        "text-embedding-3-small",
    )
    assert embedding.team_id is None
    assert (embedding.input_tokens, embedding.output_tokens, embedding.usage_estimated) == (8, 0, True)
    assert embedding.cost_usd == Decimal("0.00000016")
    assert (embedding.cache, embedding.body_mode, embedding.request_body, embedding.response_body) == (
        "bypass",
        "metadata",
        "",
        "",
    )
    assert embedding.attempts[0]["alias"] is None

    refused = entries["03"]
    assert (refused.status, refused.error_type, refused.error_code) == (
        404,
        "invalid_request_error",
        "model_not_found",
    )
    assert (refused.provider, refused.model, refused.attempts, refused.cost_usd) == ("", "", [], Decimal(0))
    assert refused.created_at == datetime(2026, 11, 24, 9, 30, 17, 500000, tzinfo=UTC)
    assert "ada@example.com" not in refused.request_body  # redacted, as the organization chose
    assert refused.request_body.startswith('{"model":"no-such-model"')

    timeout = entries["04"]
    assert (timeout.status, timeout.error_code, timeout.stream_completed, timeout.client_disconnected) == (
        504,
        "upstream_timeout",
        False,
        True,
    )
    assert timeout.api_key_id is None
    assert timeout.attempts[0]["status"] is None
    assert timeout.attempts[0]["error"] == "no answer within 30 s"
    assert timeout.ttft_ms is None

    rollups = SpendRollup.objects.filter(organization_id=ORGANIZATION_ID)
    assert sum(rollup.requests for rollup in rollups) == 4


def release_1_payloads(fixture_keys) -> list[dict]:
    with open(FIXTURES / "release-1.spool", "rb") as file:
        [items] = list(spool.read_lines(file, 100, []))
    return [payload for _, payload in items]


def test_a_field_added_later_takes_its_default_and_one_dropped_later_is_ignored(fixture_keys):
    """What the next release does when it adds a field with a default: an older payload lacks it."""
    payload = release_1_payloads(fixture_keys)[0]
    del payload["policy_decisions"], payload["client_disconnected"]  # as if added after release 1
    payload["a_field_of_a_newer_release"] = "ignored"

    record = record_from_payload(payload)

    assert (record.policy_decisions, record.client_disconnected) == ([], False)
    assert record.request_id == "0b7d1c9e-5a51-4c1e-9d0a-3f6f1f0c2a01"


def test_a_payload_of_an_unknown_version_is_refused_not_misread(fixture_keys):
    payload = {**release_1_payloads(fixture_keys)[0], "v": 2}

    with pytest.raises(ValueError, match="payload version 2"):
        record_from_payload(payload)
