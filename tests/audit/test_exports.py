"""/api/v1/analytics/compliance/export and /api/v1/analytics/policy/export: the audit log streamed
out as CSV or JSON Lines for an auditor, never another organization's."""

import csv
import io
import json
import random
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db import connections
from django.test import AsyncClient
from rest_framework.test import APIClient

from apps.audit import exports
from apps.organizations.models import Membership
from tests.audit.entries import AuditEntryFactory, bulk_entries
from tests.conftest import login
from tests.factories import MembershipFactory, TeamFactory
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db(transaction=True)

COMPLIANCE = "/api/v1/analytics/compliance/export"
POLICY = "/api/v1/analytics/policy/export"
YEAR = {"from": "2025-01-01", "to": "2026-01-01"}
JAN_1 = datetime(2025, 1, 1, tzinfo=UTC)

create_entries = database_sync_to_async(bulk_entries)
create_entry = database_sync_to_async(AuditEntryFactory)
create_team = database_sync_to_async(TeamFactory)


@pytest.fixture(autouse=True)
async def _close_the_views_connection():
    """The views' ``sync_to_async`` calls ran on asgiref's shared thread, and Django's test client
    (unlike a server) keeps that thread's connection open after the request; close it, or
    PostgreSQL refuses to drop the test database."""
    yield
    await sync_to_async(connections.close_all)()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def exporter_auth(organization) -> dict[str, str]:
    """A new admin of ``organization`` (the least role that may export every entry), signed in."""
    membership = MembershipFactory(organization=organization, role="admin")
    return bearer(login(APIClient(), membership.user.email)["access"])


# Under time_machine, sign in inside the test: a token issued "later" would not be valid yet.
sign_in = database_sync_to_async(exporter_auth)


@pytest.fixture
def auth(organization) -> dict[str, str]:
    return exporter_auth(organization)


@pytest.fixture
def outsider_auth(outsider) -> dict[str, str]:
    return bearer(login(APIClient(), outsider.user.email)["access"])


async def download(path: str, params: dict, headers: dict) -> tuple[object, list[bytes]]:
    response = await AsyncClient().get(path, params, headers=headers)
    assert response.status_code == 200, response.content
    # Streamed from an async iterator: Django under ASGI would read a sync one whole first.
    assert response.streaming
    assert response.is_async
    return response, [chunk async for chunk in response.streaming_content]


def read_csv(body: str) -> tuple[list[str], list[dict[str, str]]]:
    """(the ``#`` comment lines, the rows under the column header)."""
    lines = io.StringIO(body, newline="").readlines()
    comments = [line.rstrip("\r\n") for line in lines if line.startswith("#")]
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    return comments, rows


def read_jsonl(body: str) -> list[dict]:
    assert body.endswith("\n")
    return [json.loads(line) for line in body.splitlines()]


async def compliance_rows(params: dict, headers: dict) -> list[dict]:
    _, chunks = await download(COMPLIANCE, {**params, "export_format": "jsonl"}, headers)
    lines = read_jsonl(b"".join(chunks).decode())
    return [line for line in lines if line["type"] == "audit_entry"]


# --- Compliance export -------------------------------------------------------------------------


@pytest.mark.parametrize("export_format", ["csv", "jsonl"])
async def test_a_year_of_entries_streams_oldest_first_in_chunks(organization, outsider, auth, export_format):
    count = 3000
    times = [JAN_1 + timedelta(minutes=175 * i) for i in range(count - 10)]
    times += [datetime(2025, 7, 1, 12, tzinfo=UTC)] * 10  # ties are ordered by request id
    random.shuffle(times)
    entries = await create_entries(organization, times)
    # Just outside the range on both sides, and another organization's entries inside it.
    await create_entries(organization, [JAN_1 - timedelta(microseconds=1), datetime(2026, 1, 1, tzinfo=UTC)])
    await create_entries(outsider.organization, [JAN_1 + timedelta(days=d) for d in range(0, 365, 5)])

    response, chunks = await download(COMPLIANCE, {**YEAR, "export_format": export_format}, auth)

    assert len(chunks) >= count // exports.SEND_ROWS + 2  # header, the rows a few hundred at a time, end
    body = b"".join(chunks).decode()
    if export_format == "csv":
        assert response["Content-Type"] == "text/csv; charset=utf-8"
        comments, rows = read_csv(body)
        assert comments[-1] == f"# end of export: {count} rows"
        assert list(rows[0]) == list(exports.COMPLIANCE_COLUMN_NAMES)
    else:
        assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
        lines = read_jsonl(body)
        assert lines[0]["type"] == "export_header"
        assert lines[-1] == {"type": "export_end", "rows": count}
        rows = lines[1:-1]
        assert {row["type"] for row in rows} == {"audit_entry"}
    expected = sorted(entries, key=lambda entry: (entry.created_at, entry.id))
    assert [row["request_id"] for row in rows] == [str(entry.id) for entry in expected]
    filename = f"compliance-export-{organization.slug}-20250101T000000Z-20260101T000000Z.{export_format}"
    assert response["Content-Disposition"] == f'attachment; filename="{filename}"'
    assert response["Cache-Control"] == "no-store"


@time_machine.travel(datetime(2026, 11, 22, 10, 30, tzinfo=UTC), tick=False)
async def test_the_csv_header_block_states_organization_range_filters_and_generation_time(organization):
    auth = await sign_in(organization)
    team = await create_team(organization=organization, name="Research")

    _, chunks = await download(COMPLIANCE, {**YEAR, "team": str(team.id), "policy": "pii-filter"}, auth)

    comments, rows = read_csv(b"".join(chunks).decode())
    assert comments == [
        "# LLM gateway compliance export",
        f"# organization: {organization.name} ({organization.id})",
        "# range: from 2025-01-01T00:00:00Z (inclusive) to 2026-01-01T00:00:00Z (exclusive)",
        f"# filters: team={team.id} (Research); policy=pii-filter",
        "# generated_at: 2026-11-22T10:30:00Z",
        "# end of export: 0 rows",
    ]
    assert rows == []
    assert chunks[0].decode().startswith("# LLM gateway compliance export")  # sent before any row is read


@time_machine.travel(datetime(2026, 11, 22, 10, 30, tzinfo=UTC), tick=False)
async def test_the_jsonl_header_states_organization_range_filters_and_generation_time(organization):
    auth = await sign_in(organization)
    team_id = uuid.uuid4()  # no such team (any more): its entries can still be exported

    _, chunks = await download(
        COMPLIANCE, {"period": "7d", "team": str(team_id), "export_format": "jsonl"}, auth
    )

    header, end = read_jsonl(b"".join(chunks).decode())
    assert header == {
        "type": "export_header",
        "export": "compliance",
        "organization": {"id": str(organization.id), "name": organization.name},
        "range": {
            "from": "2026-11-15T10:30:00Z",
            "to": "2026-11-22T10:30:00Z",
            "period": "7d",
            "half_open": True,
        },
        "filters": {"team": {"id": str(team_id), "name": None}, "policy": None},
        "generated_at": "2026-11-22T10:30:00Z",
        "columns": list(exports.COMPLIANCE_COLUMN_NAMES),
    }
    assert end == {"type": "export_end", "rows": 0}


async def test_a_row_carries_what_an_auditor_needs_and_never_a_body(organization, auth):
    team = await create_team(organization=organization, name="Research")
    decisions = [{"policy": "pii-filter", "action": "redacted", "reason": "email"}]
    entry = await create_entry(
        organization=organization,
        created_at=datetime(2025, 3, 4, 5, 6, 7, 890000, tzinfo=UTC),
        team_id=team.id,
        status=502,
        error_type="api_error",
        error_code="upstream_failed",
        policy_action="redacted",
        policy_reason="pii-filter: email",
        policy_decisions=decisions,
        cache="miss",
        ttft_ms=40.5,
        attempts=[{"status": 503}, {"status": 500}],
    )

    _, chunks = await download(COMPLIANCE, YEAR, auth)
    _, [row] = read_csv(b"".join(chunks).decode())
    [json_row] = await compliance_rows(YEAR, auth)

    assert row == {
        "time": "2025-03-04T05:06:07.890000Z",
        "request_id": str(entry.id),
        "team_id": str(team.id),
        "team_name": "Research",
        "api_key_id": str(entry.api_key_id),
        "api_key_prefix": "sk_live_abcd",
        "endpoint": "/v1/chat/completions",
        "requested_model": "fast",
        "provider": "openai",
        "provider_key_id": "",
        "model": "gpt-4o-mini",
        "stream": "false",
        "status": "502",
        "error_type": "api_error",
        "error_code": "upstream_failed",
        "policy_action": "redacted",
        "policy_reason": "pii-filter: email",
        "policy_decisions": row["policy_decisions"],  # JSON, its keys in the database's order
        "cache": "miss",
        "input_tokens": "12",
        "output_tokens": "4",
        "cached_input_tokens": "0",
        "reasoning_tokens": "0",
        "usage_estimated": "false",
        "cost_usd": "0.00000420",
        "latency_ms": "12.5",
        "ttft_ms": "40.5",
        "attempts": "2",
        "client_ip": "203.0.113.7",
        "user_agent": "pytest-agent",
    }
    assert json.loads(row["policy_decisions"]) == decisions
    assert json_row == {
        "type": "audit_entry",
        **row,
        "provider_key_id": None,
        "stream": False,
        "status": 502,
        "policy_decisions": decisions,
        "input_tokens": 12,
        "output_tokens": 4,
        "cached_input_tokens": 0,
        "reasoning_tokens": 0,
        "usage_estimated": False,
        "latency_ms": 12.5,
        "ttft_ms": 40.5,
        "attempts": 2,
    }
    assert b"secret" not in b"".join(chunks)


async def test_a_csv_cell_a_spreadsheet_would_run_as_a_formula_is_defused(organization, auth):
    await create_entry(organization=organization, requested_model="=HYPERLINK(1)", user_agent="@SUM(1)")

    _, chunks = await download(COMPLIANCE, YEAR, auth)
    _, [row] = read_csv(b"".join(chunks).decode())
    [json_row] = await compliance_rows(YEAR, auth)

    assert (row["requested_model"], row["user_agent"]) == ("'=HYPERLINK(1)", "'@SUM(1)")
    assert (json_row["requested_model"], json_row["user_agent"]) == ("=HYPERLINK(1)", "@SUM(1)")


async def test_the_range_is_half_open(organization, auth):
    start, end = datetime(2025, 5, 1, tzinfo=UTC), datetime(2025, 5, 2, tzinfo=UTC)
    micro = timedelta(microseconds=1)
    await create_entries(organization, [start - micro, start, end - micro, end])

    rows = await compliance_rows({"from": "2025-05-01", "to": "2025-05-02"}, auth)

    assert [row["time"] for row in rows] == ["2025-05-01T00:00:00.000000Z", "2025-05-01T23:59:59.999999Z"]


async def test_from_and_to_take_rfc_3339_offsets(organization, auth):
    await create_entries(
        organization, [datetime(2025, 5, 1, 9, tzinfo=UTC), datetime(2025, 5, 1, 11, tzinfo=UTC)]
    )

    # 10:00+01:00 is 09:00Z; a "+" left unencoded in the query string arrives as a space.
    rows = await compliance_rows({"from": "2025-05-01T10:00:00+01:00", "to": "2025-05-01T10:00:00Z"}, auth)
    unencoded = await AsyncClient().get(
        f"{COMPLIANCE}?from=2025-05-01T10:00:00+01:00&to=2025-05-01T10:00:00Z&export_format=jsonl",
        headers=auth,
    )

    assert [row["time"] for row in rows] == ["2025-05-01T09:00:00.000000Z"]
    lines = read_jsonl(b"".join([chunk async for chunk in unencoded.streaming_content]).decode())
    assert lines[-1]["rows"] == 1


@time_machine.travel(datetime(2026, 11, 22, 10, 30, tzinfo=UTC), tick=False)
@pytest.mark.parametrize(
    ("period", "kept"),
    [("24h", {1}), ("7d", {1, 5}), ("30d", {1, 5, 20}), ("mtd", {1, 5, 20})],
)
async def test_a_named_period_ends_now(organization, period, kept):
    auth = await sign_in(organization)
    now = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)
    ages = {
        1: timedelta(hours=23),
        5: timedelta(days=6),
        20: timedelta(days=21, hours=10),
        40: timedelta(days=40),
    }
    await create_entries(organization, [now - age for age in ages.values()])

    rows = await compliance_rows({"period": period}, auth)

    assert {row["time"] for row in rows} == {
        (now - ages[key]).isoformat(timespec="microseconds").replace("+00:00", "Z") for key in kept
    }


async def test_a_team_filter_keeps_only_that_teams_entries(organization, auth):
    team, other = await create_team(organization=organization), await create_team(organization=organization)
    mine = await create_entry(organization=organization, team_id=team.id)
    await create_entry(organization=organization, team_id=other.id)
    await create_entry(organization=organization, team_id=None)

    rows = await compliance_rows({**YEAR, "team": str(team.id)}, auth)

    assert [row["request_id"] for row in rows] == [str(mine.id)]


async def test_a_policy_filter_keeps_the_entries_that_policy_decided_on(organization, auth):
    pii = await create_entry(
        organization=organization,
        policy_decisions=[
            {"policy": "toxicity", "action": "flagged"},
            {"policy": "pii", "action": "redacted"},
        ],
    )
    await create_entry(
        organization=organization, policy_decisions=[{"policy": "pii-strict", "action": "blocked"}]
    )
    await create_entry(organization=organization, policy_decisions=[])

    rows = await compliance_rows({**YEAR, "policy": "pii"}, auth)

    assert [row["request_id"] for row in rows] == [str(pii.id)]


async def test_an_organization_exports_only_its_own_entries(organization, outsider, auth, outsider_auth):
    their_team = await create_team(organization=outsider.organization)
    mine = await create_entries(organization, [JAN_1 + timedelta(days=1)])
    theirs = await create_entries(outsider.organization, [JAN_1 + timedelta(days=1)], team_id=their_team.id)

    my_rows = await compliance_rows(YEAR, auth)
    their_rows = await compliance_rows(YEAR, outsider_auth)
    with_their_team = await compliance_rows({**YEAR, "team": str(their_team.id)}, auth)

    assert [row["request_id"] for row in my_rows] == [str(mine[0].id)]
    assert [row["request_id"] for row in their_rows] == [str(theirs[0].id)]
    assert with_their_team == []


# --- Policy export -----------------------------------------------------------------------------


@pytest.fixture
async def decided(organization, outsider):
    """Policy decisions over two days, and an outsider's that must not be counted."""
    day_one, day_two = datetime(2025, 5, 1, 8, tzinfo=UTC), datetime(2025, 5, 2, 23, tzinfo=UTC)
    pii, toxicity = {"policy": "pii", "action": "redacted"}, {"policy": "toxicity", "action": "blocked"}
    team = await create_team(organization=organization)
    await create_entries(organization, [day_one] * 3, policy_decisions=[pii], team_id=team.id)
    await create_entries(organization, [day_two] * 2, policy_decisions=[pii, toxicity])
    # The same policy acting twice on one request is one hit.
    await create_entries(organization, [day_two], policy_decisions=[toxicity, toxicity])
    await create_entries(organization, [day_two] * 4, policy_decisions=[])
    await create_entries(outsider.organization, [day_one] * 7, policy_decisions=[pii, toxicity])
    return team


@pytest.mark.parametrize("export_format", ["csv", "jsonl"])
async def test_the_policy_export_counts_hits_per_policy_and_action_over_the_range_and_per_day(
    auth, decided, export_format
):
    response, chunks = await download(POLICY, {**YEAR, "export_format": export_format}, auth)

    body = b"".join(chunks).decode()
    expected = [
        {"scope": "range", "day": None, "policy": "pii", "action": "redacted", "hits": 5},
        {"scope": "range", "day": None, "policy": "toxicity", "action": "blocked", "hits": 3},
        {"scope": "day", "day": "2025-05-01", "policy": "pii", "action": "redacted", "hits": 3},
        {"scope": "day", "day": "2025-05-02", "policy": "pii", "action": "redacted", "hits": 2},
        {"scope": "day", "day": "2025-05-02", "policy": "toxicity", "action": "blocked", "hits": 3},
    ]
    if export_format == "csv":
        comments, rows = read_csv(body)
        assert comments[0] == "# LLM gateway policy export"
        assert comments[-1] == "# end of export: 5 rows"
        assert rows == [{**row, "day": row["day"] or "", "hits": str(row["hits"])} for row in expected]
    else:
        header, *rows, end = read_jsonl(body)
        assert (header["type"], header["export"], header["columns"]) == (
            "export_header",
            "policy",
            ["scope", "day", "policy", "action", "hits"],
        )
        assert rows == [{"type": "policy_hits", **row} for row in expected]
        assert end == {"type": "export_end", "rows": 5}
    assert response["Content-Disposition"].startswith('attachment; filename="policy-export-')


async def test_the_policy_export_takes_a_team_and_a_policy(auth, decided):
    by_team = await download(POLICY, {**YEAR, "team": str(decided.id), "export_format": "jsonl"}, auth)
    by_policy = await download(POLICY, {**YEAR, "policy": "toxicity", "export_format": "jsonl"}, auth)

    team_lines = read_jsonl(b"".join(by_team[1]).decode())
    policy_lines = read_jsonl(b"".join(by_policy[1]).decode())
    assert [(r["scope"], r["policy"], r["hits"]) for r in team_lines[1:-1]] == [
        ("range", "pii", 3),
        ("day", "pii", 3),
    ]
    assert [(r["scope"], r["day"], r["policy"], r["hits"]) for r in policy_lines[1:-1]] == [
        ("range", None, "toxicity", 3),
        ("day", "2025-05-02", "toxicity", 3),
    ]
    assert policy_lines[0]["filters"] == {"team": None, "policy": "toxicity"}


@time_machine.travel(datetime(2026, 11, 22, 10, 30, tzinfo=UTC), tick=False)
async def test_the_policy_export_covers_the_last_30_days_by_default(organization):
    auth = await sign_in(organization)
    now = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)
    decision = [{"policy": "pii", "action": "flagged"}]
    await create_entries(
        organization, [now - timedelta(days=29), now - timedelta(days=31)], policy_decisions=decision
    )

    _, chunks = await download(POLICY, {"export_format": "jsonl"}, auth)

    header, *rows, _ = read_jsonl(b"".join(chunks).decode())
    assert header["range"] == {
        "from": "2026-10-23T10:30:00Z",
        "to": "2026-11-22T10:30:00Z",
        "period": "30d",
        "half_open": True,
    }
    assert [(row["scope"], row["hits"]) for row in rows] == [("range", 1), ("day", 1)]


# --- Bad input, authentication ----------------------------------------------------------------


@pytest.mark.parametrize("path", [COMPLIANCE, POLICY])
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": "2025-02-01", "to": "2025-01-01"}, "to"),
        ({"from": "2025-01-01", "to": "2025-01-01"}, "to"),
        ({"from": "yesterday", "to": "2025-01-01"}, "from"),
        ({"from": "2025-01-01", "to": "2025-13-40"}, "to"),
        ({"from": "2025-01-01T25:00:00Z"}, "from"),
        ({"from": "20250101"}, "from"),
        ({"to": "2025-01-01"}, "from"),
        ({"period": "1y"}, "period"),
        ({"period": "7d", "from": "2025-01-01"}, "period"),
        ({**YEAR, "export_format": "xlsx"}, "export_format"),
        ({**YEAR, "team": "research"}, "team"),
        ({**YEAR, "policy": "  "}, "policy"),
    ],
)
async def test_it_rejects_bad_input_with_the_field_at_fault(auth, path, params, field):
    response = await AsyncClient().get(path, params, headers=auth)

    error = assert_error(response, 400, "validation_error")
    assert list(error["fields"]) == [field]


@pytest.mark.parametrize("path", [COMPLIANCE, POLICY])
@pytest.mark.parametrize(
    ("params", "field"),
    [
        # NUL is refused by PostgreSQL in text and JSON: before the fix, a 200 whose body failed.
        ({**YEAR, "policy": "\x00x"}, "policy"),
        ({**YEAR, "policy": "pii\x1b[31m"}, "policy"),
        ({**YEAR, "policy": "p" * 201}, "policy"),
        ({**YEAR, "team": f"{uuid.UUID(int=1)}\x00"}, "team"),
        ({**YEAR, "team": "f" * 10_000}, "team"),
        ({**YEAR, "export_format": "csv\x00"}, "export_format"),
        ({**YEAR, "export_format": ""}, "export_format"),
        ({"from": "2025-01-01\x00", "to": "2026-01-01"}, "from"),
        ({"from": "2025-01-01", "to": "2026-01-01T00:00:00Z" + " " * 100}, "to"),
        ({"period": "7d\x00"}, "period"),
        ({"period": "\u0085"}, "period"),
        # Dates a datetime cannot hold once moved to UTC, or that are not dates at all.
        ({"from": "9999-12-31T23:59:59-01:00"}, "from"),
        ({"from": "0001-01-01T00:00:00+01:00", "to": "2025-01-01"}, "from"),
        ({"from": "10000-01-01"}, "from"),
        ({"from": "\uff12\uff10\uff12\uff15-01-01", "to": "2026-01-01"}, "from"),
    ],
)
async def test_it_refuses_control_characters_and_out_of_range_values_before_streaming(
    auth, path, params, field
):
    response = await AsyncClient().get(path, params, headers=auth)

    error = assert_error(response, 400, "validation_error")
    assert list(error["fields"]) == [field]


async def test_an_export_over_the_widest_range_a_date_can_name_streams(organization, auth):
    await create_entries(organization, [JAN_1])

    rows = await compliance_rows({"from": "0001-01-01", "to": "9999-12-31T23:59:59.999999Z"}, auth)

    assert len(rows) == 1


async def test_the_compliance_export_requires_a_range(auth):
    response = await AsyncClient().get(COMPLIANCE, {"export_format": "csv"}, headers=auth)

    error = assert_error(response, 400, "validation_error")
    assert "range is required" in error["fields"]["from"][0]


@pytest.mark.parametrize("path", [COMPLIANCE, POLICY])
async def test_it_authenticates_as_the_management_api_does(owner, api_key, path):
    client = AsyncClient()
    [_, secret] = api_key

    assert_error(await client.get(path, YEAR), 401, "not_authenticated")
    refused = await client.get(path, YEAR, headers=bearer(secret))
    assert_error(refused, 401, "api_key_not_accepted")
    assert refused["WWW-Authenticate"] == 'Bearer realm="management"'
    assert_error(await client.get(path, YEAR, headers=bearer("not-a-token")), 401, "token_not_valid")
    malformed = await client.get(path, YEAR, headers={"Authorization": "Token abc"})
    assert_error(malformed, 401, "malformed_authorization")


async def test_a_session_whose_membership_was_removed_is_refused(organization, auth):
    await Membership.objects.filter(organization=organization, role="admin").adelete()

    response = await AsyncClient().get(COMPLIANCE, YEAR, headers=auth)

    assert_error(response, 401, "membership_not_found")


async def test_only_get_is_allowed(auth):
    response = await AsyncClient().post(COMPLIANCE, {}, headers=auth)

    assert_error(response, 405, "method_not_allowed")
    assert response["Allow"] == "GET"


@pytest.mark.parametrize(
    ("path", "role"),
    [(COMPLIANCE, "owner"), (COMPLIANCE, "admin"), (POLICY, "owner"), (POLICY, "admin"), (POLICY, "member")],
)
async def test_the_roles_that_may_export_get_their_organizations_entries(organization, path, role):
    await create_entries(organization, [JAN_1])
    membership = await database_sync_to_async(MembershipFactory)(organization=organization, role=role)
    tokens = await database_sync_to_async(login)(APIClient(), membership.user.email)

    _, chunks = await download(path, {**YEAR, "export_format": "jsonl"}, bearer(tokens["access"]))

    assert read_jsonl(b"".join(chunks).decode())[0]["organization"]["id"] == str(organization.id)


async def test_a_member_may_not_export_every_entry(organization):
    """A member reads the log entry by entry; the compliance export (every entry of a range, with
    the bodies the organization keeps) is bulk extraction, for admins and owners."""
    await create_entries(organization, [JAN_1])
    membership = await database_sync_to_async(MembershipFactory)(organization=organization, role="member")
    tokens = await database_sync_to_async(login)(APIClient(), membership.user.email)

    response = await AsyncClient().get(COMPLIANCE, YEAR, headers=bearer(tokens["access"]))

    assert_error(response, 403, "permission_denied")


async def test_another_organizations_team_reads_like_a_team_that_does_not_exist(organization, outsider, auth):
    their_team = await create_team(organization=outsider.organization)
    await create_entries(outsider.organization, [JAN_1], team_id=their_team.id)
    await create_entries(organization, [JAN_1])

    theirs = await download(COMPLIANCE, {**YEAR, "team": str(their_team.id), "export_format": "jsonl"}, auth)
    unknown = await download(COMPLIANCE, {**YEAR, "team": str(uuid.uuid4()), "export_format": "jsonl"}, auth)

    [their_header, *their_rows] = read_jsonl(b"".join(theirs[1]).decode())
    [unknown_header, *unknown_rows] = read_jsonl(b"".join(unknown[1]).decode())
    assert [row["type"] for row in their_rows] == [row["type"] for row in unknown_rows] == ["export_end"]
    assert their_header["filters"]["team"]["name"] is unknown_header["filters"]["team"]["name"] is None
    assert their_team.name not in b"".join(theirs[1]).decode()
