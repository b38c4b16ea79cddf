"""Property test of the analytics query parameters: whatever a member puts in the query string of
the log list, the overview, the cache and policy numbers or either export, the answer is never a
500: a 200 (an export then ends with its end marker) or a 4xx in the management error shape, a 400
naming the parameter at fault.

Hypothesis writes the query strings: the parameters each endpoint reads, with values that are
text of any kind (NULs, control characters, other scripts' digits), dates at and past the edges of
a datetime, offsets PostgreSQL refuses, ids that are not UUIDs, huge numbers and forged cursors.
They go to the gateway's ASGI application in this process, over entries of both organizations.
"""

import asyncio
import base64
import json
import uuid
from datetime import UTC, datetime
from urllib.parse import urlencode

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from gateway_project.asgi import application
from tests.audit.entries import AuditEntryFactory
from tests.conftest import login
from tests.factories import MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,  # the same examples in every run: CI stays reproducible
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

ENDPOINTS = {
    "/api/v1/analytics/logs": (
        "from",
        "to",
        "period",
        "team",
        "api_key",
        "model",
        "provider",
        "prompt",
        "status",
        "policy_action",
        "cache",
        "request_id",
        "cursor",
        "limit",
    ),
    "/api/v1/analytics/overview": (
        "from",
        "to",
        "period",
        "team",
        "api_key",
        "model",
        "provider",
        "prompt",
        "group_by",
    ),
    "/api/v1/analytics/cache": (
        "from",
        "to",
        "period",
        "team",
        "api_key",
        "model",
        "provider",
        "prompt",
        "group_by",
    ),
    "/api/v1/analytics/policy": ("from", "to", "period", "team", "api_key", "model", "provider", "prompt"),
    "/api/v1/analytics/compliance/export": ("from", "to", "period", "team", "policy", "export_format"),
    "/api/v1/analytics/policy/export": ("from", "to", "period", "team", "policy", "export_format"),
}
EXPORTS = ("/api/v1/analytics/compliance/export", "/api/v1/analytics/policy/export")


any_text = st.text(st.characters(codec="utf-8"), max_size=30)
instants = st.sampled_from(
    [
        "2026-11-20",
        "2026-11-20T12:00:00Z",
        "2026-11-20T12:00:00+23:00",
        "2026-11-20T12:00:00.123456789+05:30",
        "2026-11-20T12:00:00 01:00",
        "0001-01-01",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31",
        "9999-12-31T23:59:59-15:59",
        "10000-01-01",
        "\uff12\uff10\uff12\uff16-11-20",
        "2026-11-20\x00",
        "NaN",
    ]
)
# Digits of other scripts pass str.isdigit() and fail int().
numbers = st.sampled_from(
    ["0", "-1", "1e309", "NaN", "9" * 40, "\u00b2\u00b2\u00b2", "\u0664\u0660\u0664", "404"]
)
ids = st.one_of(
    st.uuids().map(str), st.sampled_from(["not-a-uuid", str(uuid.UUID(int=1)) + "\x00", "{" * 40])
)
anything = st.one_of(any_text, instants, numbers, ids, st.sampled_from(["\x00x", " ", "x" * 300]))


def forged_cursor(position: str, offset: str, reverse: str) -> str:
    return base64.b64encode(urlencode({"p": position, "o": offset, "r": reverse}).encode()).decode()


# What each parameter is meant to hold, near misses of it, or anything at all.
SHAPED = {
    "from": instants,
    "to": instants,
    "period": st.sampled_from(["24h", "7d", "30d", "mtd", "1y", "7d\x00", "\u0085"]),
    "team": ids,
    "api_key": ids,
    "request_id": ids,
    "model": st.sampled_from(["fast", "gpt-4o-mini", "fast\x00", "\x01", "m" * 201]),
    "provider": st.sampled_from(["openai", "anthropic", "openai\x00", "p" * 33]),
    "prompt": st.sampled_from(["support-answer", "support-answer\x00", "p" * 101]),
    "status": st.one_of(numbers, st.sampled_from(["5xx", "4XX", "error", "6xx", "600", "99"])),
    "policy_action": st.sampled_from(["redacted", "blocked", "flagged", "none"]),
    "cache": st.sampled_from(["l1", "l2", "l3", "miss", "bypass", "l4"]),
    "group_by": st.sampled_from(["hour", "day", "team", "model", "provider", "key", "prompt", "week"]),
    "cursor": st.builds(forged_cursor, instants | any_text, numbers, numbers | st.just("1")),
    "limit": numbers,
    "policy": st.sampled_from(["pii", "\x00x", "pii\x1b", " ", "p" * 201]),
    "export_format": st.sampled_from(["csv", "jsonl", "xlsx", "", "csv\x00"]),
}


@st.composite
def queries(draw) -> tuple[str, dict[str, str]]:
    path = draw(st.sampled_from(sorted(ENDPOINTS)))
    names = draw(st.lists(st.sampled_from(ENDPOINTS[path]), unique=True, max_size=4))
    return path, {name: draw(st.one_of(SHAPED[name], SHAPED[name], anything)) for name in names}


@pytest.fixture
def member_token(organization, outsider) -> str:
    team = TeamFactory(organization=organization)
    for org, team_id in ((organization, team.id), (outsider.organization, None)):
        for hour in range(3):
            AuditEntryFactory(
                organization=org,
                team_id=team_id,
                created_at=datetime(2026, 11, 20, hour, tzinfo=UTC),
                policy_decisions=[{"policy": "pii", "action": "redacted"}],
                cache=("l1", "miss", "bypass")[hour],
            )
    # An admin: the least role that may use every endpoint here, the compliance export included.
    membership = MembershipFactory(organization=organization, role="admin")
    return login(APIClient(), membership.user.email)["access"]


async def _get(token: str, path: str, params: dict[str, str]) -> httpx.Response:
    transport = httpx.ASGITransport(app=application, client=("203.0.113.7", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=30) as client:
        return await client.get(path, params=params, headers={"Authorization": f"Bearer {token}"})


@EXAMPLES
@given(query=queries())
# Each once answered 500 on PostgreSQL (issue 8).
@example(query=("/api/v1/analytics/compliance/export", {"from": "2025-01-01", "policy": "\x00x"}))
@example(query=("/api/v1/analytics/policy/export", {"policy": "\x00x", "export_format": "jsonl"}))
@example(query=("/api/v1/analytics/logs", {"status": "\u00b2\u00b2\u00b2"}))
@example(query=("/api/v1/analytics/logs", {"cursor": forged_cursor("2026-11-20 12:00:00+23:00", "0", "0")}))
def test_no_analytics_query_is_answered_with_a_500(member_token, query):
    path, params = query

    response = asyncio.run(_get(member_token, path, params))

    assert response.status_code < 500, (path, params, response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert {"type", "code", "message"} <= set(error)
        if response.status_code == 400:
            assert error["code"] == "validation_error"
            assert set(error["fields"]) <= set(ENDPOINTS[path]), error
    elif path in EXPORTS:
        last = response.text.splitlines()[-1]
        assert last.startswith("# end of export") or json.loads(last)["type"] == "export_end", last


def test_the_property_test_reaches_real_numbers(member_token):
    """The examples query real rows: a plain overview counts the organization's three entries."""
    response = asyncio.run(_get(member_token, "/api/v1/analytics/overview", {"from": "2026-11-20"}))

    assert response.status_code == 200, response.text
    assert response.json()["totals"]["requests"] == 3
