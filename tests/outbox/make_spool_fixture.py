"""Writes tests/outbox/fixtures/release-1.spool: a spool file as this release's servers write it,
for test_spool_fixture.py to prove that later releases still ingest it whole. Run once per payload
version (a release that changes ``PAYLOAD_VERSION`` adds a fixture beside this one, never rewrites it):

    GATEWAY_DATA_DIR=$(mktemp -d) GATEWAY_ENCRYPTION_KEYS=cmVsZWFzZS0xLXNwb29sLWZpeHR1cmUta2V5LTAwMDE= \
        DJANGO_SETTINGS_MODULE=gateway_project.settings .venv/bin/python -m tests.outbox.make_spool_fixture

The key is a fixed test key (FIXTURE_KEY in the test), never a real one.
"""

import shutil
import tempfile
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "release-1.spool"
ORGANIZATION_ID = "6d0f3a52-1f4e-4c43-9d7e-2f1b8a7c0e11"


def records() -> list:
    from apps.audit.records import Attempt, RequestRecord
    from apps.catalog.pricing import Usage

    return [
        RequestRecord(
            request_id="0b7d1c9e-5a51-4c1e-9d0a-3f6f1f0c2a01",
            started_at=datetime(2026, 11, 24, 9, 30, 15, 123456, tzinfo=UTC),
            endpoint="/v1/chat/completions",
            client_ip="203.0.113.7",
            user_agent="OpenAI/Python 1.99.0",
            organization_id=ORGANIZATION_ID,
            api_key_id="3c1b6f0e-2d4a-4b8e-8f1a-9e2d7c6b5a41",
            api_key_prefix="sk_live_ab12",
            team_id="7a9e2c41-0b3d-4f5e-8a6b-1c2d3e4f5a61",
            requested_model="fast",
            provider="openai",
            provider_key_id="9f8e7d6c-5b4a-4392-8a1b-0c9d8e7f6a71",
            model="gpt-4o-mini",
            stream=True,
            attempts=[
                Attempt(
                    "anthropic",
                    "1e2d3c4b-5a69-4788-9a0b-1c2d3e4f5a81",
                    "claude-3-5-haiku",
                    "fast",
                    529,
                    "upstream_error",
                    41.5,
                    "overloaded",
                ),
                Attempt(
                    "openai", "9f8e7d6c-5b4a-4392-8a1b-0c9d8e7f6a71", "gpt-4o-mini", "fast", 200, "ok", 12.25
                ),
            ],
            cache="miss",
            policy_action="allow",
            policy_reason="",
            policy_decisions=[{"policy": "pii", "action": "allow", "score": 0.25}],
            status=200,
            usage=Usage(input_tokens=12, output_tokens=34, cached_input_tokens=5, reasoning_tokens=7),
            cost_usd=Decimal("0.00012345"),
            latency_ms=58.75,
            ttft_ms=44.5,
            upstream_ms=53.75,
            stream_completed=True,
            log_bodies="full",
            request_body='{"model":"fast","messages":[{"role":"user","content":"Grüße \\u00e9"}]}'.encode()
            + b"\xff",  # a byte that is not UTF-8: kept as the client sent it
            response_body=b'data: {"choices":[{"delta":{"content":"Hallo"}}]}\n\ndata: [DONE]\n\n',
        ),
        RequestRecord(
            request_id="0b7d1c9e-5a51-4c1e-9d0a-3f6f1f0c2a02",
            started_at=datetime(2026, 11, 24, 9, 30, 16, tzinfo=UTC),
            endpoint="/v1/embeddings",
            client_ip="2001:db8::7",
            user_agent="curl/8.5.0",
            organization_id=ORGANIZATION_ID,
            api_key_id="3c1b6f0e-2d4a-4b8e-8f1a-9e2d7c6b5a41",
            api_key_prefix="sk_live_ab12",
            requested_model="text-embedding-3-small",
            provider="openai",
            provider_key_id="9f8e7d6c-5b4a-4392-8a1b-0c9d8e7f6a71",
            model="text-embedding-3-small",
            attempts=[
                Attempt(
                    "openai",
                    "9f8e7d6c-5b4a-4392-8a1b-0c9d8e7f6a71",
                    "text-embedding-3-small",
                    None,
                    200,
                    "ok",
                    3.5,
                ),
            ],
            cache="bypass",
            status=200,
            usage=Usage(input_tokens=8, estimated=True),
            cost_usd=Decimal("0.00000016"),
            latency_ms=4.25,
            upstream_ms=3.5,
            log_bodies="metadata",
            request_body=b'{"input":"secret text"}',
            response_body=b'{"data":[]}',
        ),
        RequestRecord(
            request_id="0b7d1c9e-5a51-4c1e-9d0a-3f6f1f0c2a03",
            started_at=datetime(2026, 11, 24, 9, 30, 17, 500000, tzinfo=UTC),
            endpoint="/v1/chat/completions",
            client_ip="198.51.100.23",
            user_agent="",
            organization_id=ORGANIZATION_ID,
            api_key_id="3c1b6f0e-2d4a-4b8e-8f1a-9e2d7c6b5a41",
            api_key_prefix="sk_live_ab12",
            requested_model="no-such-model",
            status=404,
            error_type="invalid_request_error",
            error_code="model_not_found",
            latency_ms=0.75,
            log_bodies="redacted",
            request_body=b'{"model":"no-such-model","messages":[{"role":"user","content":"mail ada@example.com"}]}',  # noqa: E501
        ),
        RequestRecord(
            request_id="0b7d1c9e-5a51-4c1e-9d0a-3f6f1f0c2a04",
            started_at=datetime(2026, 11, 24, 9, 30, 18, tzinfo=UTC),
            endpoint="/v1/chat/completions",
            client_ip="203.0.113.7",
            user_agent="OpenAI/Python 1.99.0",
            organization_id=ORGANIZATION_ID,
            requested_model="fast",
            provider="openai",
            model="gpt-4o-mini",
            stream=True,
            attempts=[
                Attempt(
                    "openai",
                    "9f8e7d6c-5b4a-4392-8a1b-0c9d8e7f6a71",
                    "gpt-4o-mini",
                    "fast",
                    None,
                    "timeout",
                    30000.0,
                    "no answer within 30 s",
                ),
            ],
            status=504,
            error_type="server_error",
            error_code="upstream_timeout",
            latency_ms=30001.5,
            upstream_ms=30000.0,
            stream_completed=False,
            client_disconnected=True,
            log_bodies="redacted",
        ),
    ]


def main() -> None:
    import django

    django.setup()
    from apps.audit.services import KIND
    from apps.outbox.outbox import Outbox

    directory = Path(tempfile.mkdtemp(prefix="spool-fixture-"))
    try:
        box = Outbox(directory)
        for record in records():
            box.put(KIND, record)
        box.close()
        [written] = directory.glob("*.spool")
        FIXTURE.parent.mkdir(exist_ok=True)
        shutil.copyfile(written, FIXTURE)
    finally:
        shutil.rmtree(directory)
    print(f"Wrote {FIXTURE}")


if __name__ == "__main__":
    main()
