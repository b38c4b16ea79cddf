"""/api/v1/analytics/: the audit log and the numbers computed from it.

Entries are created directly, with known costs, statuses, latencies, cache tiers and policy
decisions, so every number can be checked against what was stored. ``make_entry`` writes a twin of
each entry into the outsider's organization: every count below also proves that the outsider's
entries were not counted.
"""

import base64
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.audit.models import AuditEntry
from tests.conftest import login
from tests.factories import TeamFactory
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

LOGS = "/api/v1/analytics/logs"
OVERVIEW = "/api/v1/analytics/overview"
CACHE = "/api/v1/analytics/cache"
POLICY = "/api/v1/analytics/policy"

# A fixed day for range tests; tests of named periods use the clock.
NOON = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)

SUMMARY_KEYS = {
    "log_id",
    "created_at",
    "endpoint",
    "team_id",
    "api_key_id",
    "api_key_prefix",
    "requested_model",
    "model",
    "provider",
    "stream",
    "status",
    "error_type",
    "error_code",
    "cache",
    "policy_action",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_ms",
    "ttft_ms",
}


def entry_fields(organization, fields: dict) -> dict:
    return {
        "id": uuid.uuid4(),
        "organization": organization,
        "created_at": timezone.now() - timedelta(minutes=5),
        "endpoint": "/v1/chat/completions",
        "api_key_prefix": "sk_live_abcd",
        "requested_model": "fast",
        "provider": "openai",
        "model": "gpt-4o-mini",
        "status": 200,
        "cache": "miss",
        "input_tokens": 10,
        "output_tokens": 5,
        "cost_usd": Decimal("0.00100000"),
        "latency_ms": 100.0,
        **fields,
    }


@pytest.fixture
def make_entry(organization, outsider):
    """An entry of the organization under test, and the same again for the outsider."""

    def make(**fields) -> AuditEntry:
        mine = AuditEntry(**entry_fields(organization, fields))
        twin = AuditEntry(**{**entry_fields(outsider.organization, fields), "id": uuid.uuid4()})
        AuditEntry.objects.bulk_create([mine, twin])
        return mine

    return make


@pytest.fixture
def outsider_client(api_client, outsider):
    tokens = login(api_client, outsider.user.email)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")
    return api_client


def log_ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["log_id"] for row in response.json()["results"]]


def ids(*entries: AuditEntry) -> list[str]:
    return [str(entry.id) for entry in entries]


def rfc3339(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


# The log ------------------------------------------------------------------------------------------


def test_the_log_lists_entries_newest_first_as_summaries_without_bodies(session_client, make_entry):
    old = make_entry(created_at=NOON, request_body='{"secret": "prompt"}', response_body="answer")
    new = make_entry(
        created_at=NOON + timedelta(minutes=1),
        status=429,
        error_type="rate_limit_error",
        cache="l2",
        cost_usd=Decimal("0.01234567"),
        attempts=[{"provider": "openai", "status": 200}],
    )

    response = session_client.get(LOGS)

    assert log_ids(response) == ids(new, old)
    body = response.json()
    assert body["next"] is None and body["previous"] is None
    first = body["results"][0]
    assert set(first) == SUMMARY_KEYS
    assert first["created_at"] == "2026-11-20T12:01:00Z"
    assert (first["status"], first["error_type"], first["cache"]) == (429, "rate_limit_error", "l2")
    assert first["cost_usd"] == "0.01234567"
    assert "prompt" not in response.content.decode()


def test_the_log_reads_no_bodies_from_the_database(session_client, make_entry):
    make_entry(request_body="x" * 1000)

    with CaptureQueriesContext(connection) as queries:
        assert session_client.get(LOGS).status_code == 200

    entry_queries = [q["sql"] for q in queries.captured_queries if "audit_auditentry" in q["sql"]]
    assert entry_queries
    assert not any("request_body" in sql or '"attempts"' in sql for sql in entry_queries)


def test_the_log_pages_with_a_cursor_including_entries_of_the_same_instant(session_client, make_entry):
    same_instant = [make_entry(created_at=NOON) for _ in range(3)]
    others = [make_entry(created_at=NOON + timedelta(seconds=s)) for s in (1, 2, -1)]
    expected = [str(e.id) for e in sorted(others + same_instant, key=lambda e: (e.created_at, e.id))][::-1]

    seen, url, pages = [], f"{LOGS}?limit=2", 0
    while url:
        body = session_client.get(url).json()
        seen += [row["log_id"] for row in body["results"]]
        url, pages = body["next"], pages + 1

    assert seen == expected
    assert pages == 3
    # And back again from the last page.
    previous = session_client.get(body["previous"]).json()
    assert [row["log_id"] for row in previous["results"]] == expected[2:4]


def test_the_next_page_keeps_the_filters(session_client, make_entry):
    failed = [make_entry(status=500, created_at=NOON + timedelta(seconds=s)) for s in range(3)]
    make_entry(status=200, created_at=NOON + timedelta(seconds=1, milliseconds=500))

    first = session_client.get(LOGS, {"status": "5xx", "limit": 2}).json()
    second = session_client.get(first["next"]).json()

    assert [row["log_id"] for row in first["results"] + second["results"]] == ids(*failed[::-1])
    assert second["next"] is None


def test_a_page_holds_at_most_500_entries(session_client, organization):
    AuditEntry.objects.bulk_create(
        AuditEntry(**entry_fields(organization, {"created_at": NOON + timedelta(seconds=i)}))
        for i in range(501)
    )

    body = session_client.get(LOGS, {"limit": 1000}).json()

    assert len(body["results"]) == 500
    assert body["next"] is not None
    assert len(session_client.get(LOGS, {"limit": 3}).json()["results"]) == 3
    assert len(session_client.get(LOGS).json()["results"]) == 50


def test_a_forged_cursor_is_refused_not_a_server_error(session_client, make_entry):
    make_entry()
    for position in ("not-a-time", "2026-11-20 12:00:00", "9999-12-31 23:59:59-23:59"):
        forged = base64.b64encode(urlencode({"p": position}).encode()).decode()
        assert_error(session_client.get(LOGS, {"cursor": forged}), 404, "not_found")


def test_the_log_filters_by_each_dimension(session_client, make_entry, organization):
    team = TeamFactory(organization=organization)
    key_id = uuid.uuid4()
    plain = make_entry()
    by_team = make_entry(team_id=team.id)
    by_key = make_entry(api_key_id=key_id)
    by_alias = make_entry(requested_model="smart", model="claude-3-5-haiku", provider="anthropic")
    unrouted = make_entry(requested_model="nope", model="", provider="", status=404, cache="bypass")
    throttled = make_entry(status=429, cache="bypass")
    failed = make_entry(status=502, cache="l1")
    blocked = make_entry(status=400, policy_action="blocked", cache="bypass")
    redacted = make_entry(policy_action="redacted", cache="l3")

    cases = {
        "team": (str(team.id), [by_team]),
        "api_key": (str(key_id), [by_key]),
        "model": ("smart", [by_alias]),  # the alias the client asked for
        "provider": ("anthropic", [by_alias]),
        "request_id": (str(throttled.id), [throttled]),
        "policy_action": ("blocked", [blocked]),
        "cache": ("bypass", [unrouted, throttled, blocked]),
    }
    for name, (value, expected) in cases.items():
        assert sorted(log_ids(session_client.get(LOGS, {name: value}))) == sorted(ids(*expected)), name

    resolved = log_ids(session_client.get(LOGS, {"model": "claude-3-5-haiku"}))  # the model that served it
    assert resolved == ids(by_alias)
    statuses = {
        "429": [throttled],
        "2xx": [plain, by_team, by_key, by_alias, redacted],
        "4xx": [unrouted, throttled, blocked],
        "5xx": [failed],
        "error": [unrouted, throttled, failed, blocked],
    }
    for value, expected in statuses.items():
        assert sorted(log_ids(session_client.get(LOGS, {"status": value}))) == sorted(ids(*expected)), value
    both = session_client.get(LOGS, {"status": "4xx", "cache": "bypass", "policy_action": "blocked"})
    assert log_ids(both) == ids(blocked)


def test_the_log_filters_by_a_half_open_range(session_client, make_entry):
    before = make_entry(created_at=NOON - timedelta(microseconds=1))
    at_start = make_entry(created_at=NOON)
    inside = make_entry(created_at=NOON + timedelta(hours=1) - timedelta(microseconds=1))
    make_entry(created_at=NOON + timedelta(hours=1))  # at the end: excluded

    window = {"from": rfc3339(NOON), "to": rfc3339(NOON + timedelta(hours=1))}
    assert log_ids(session_client.get(LOGS, window)) == ids(inside, at_start)
    # The same instants with an offset, and with the offset's "+" left unencoded (a space).
    with_offset = {"from": "2026-11-20T13:00:00+01:00", "to": "2026-11-20T14:00:00+01:00"}
    assert log_ids(session_client.get(LOGS, with_offset)) == ids(inside, at_start)
    unencoded = session_client.get(f"{LOGS}?from=2026-11-20T13:00:00+01:00&to=2026-11-20T14:00:00+01:00")
    assert log_ids(unencoded) == ids(inside, at_start)
    # Dates are midnight UTC: [20 Nov, 21 Nov) is the whole of 20 November.
    day = log_ids(session_client.get(LOGS, {"from": "2026-11-20", "to": "2026-11-21"}))
    assert len(day) == 4
    assert log_ids(session_client.get(LOGS, {"from": "2026-11-19", "to": "2026-11-20"})) == []
    assert ids(before)[0] in log_ids(session_client.get(LOGS, {"from": "2026-11-20"}))


def test_the_log_filters_by_a_named_period(session_client, make_entry):
    now = timezone.now()
    hour_ago = make_entry(created_at=now - timedelta(hours=1))
    days_ago = make_entry(created_at=now - timedelta(days=3))
    weeks_ago = make_entry(created_at=now - timedelta(days=20))
    make_entry(created_at=now - timedelta(days=40))

    def period(name: str) -> set[str]:
        return set(log_ids(session_client.get(LOGS, {"period": name})))

    assert period("24h") == set(ids(hour_ago))
    assert period("7d") == set(ids(hour_ago, days_ago))
    assert period("30d") == set(ids(hour_ago, days_ago, weeks_ago))


def test_month_to_date_starts_at_midnight_utc_on_the_first(session_client, make_entry, organization):
    month_start = timezone.now().astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    make_entry(created_at=month_start)
    make_entry(created_at=month_start - timedelta(microseconds=1))
    make_entry(created_at=timezone.now() - timedelta(days=12))

    this_month = AuditEntry.objects.filter(organization=organization, created_at__gte=month_start)
    assert set(log_ids(session_client.get(LOGS, {"period": "mtd"}))) == set(ids(*this_month))


def test_the_log_without_a_range_is_the_whole_log(session_client, make_entry):
    ancient = make_entry(created_at=datetime(2020, 1, 1, tzinfo=UTC))

    assert log_ids(session_client.get(LOGS)) == ids(ancient)


def test_one_entry_shows_its_attempts_policy_decisions_and_bodies(session_client, make_entry):
    attempts = [
        {"provider": "openai", "provider_key_id": str(uuid.uuid4()), "model": "gpt-4o-mini", "alias": "fast",
         "status": 503, "outcome": "upstream_error", "latency_ms": 12.5, "error": "Service Unavailable"},
        {"provider": "openai", "provider_key_id": str(uuid.uuid4()), "model": "gpt-4o-mini", "alias": "fast",
         "status": 200, "outcome": "ok", "latency_ms": 80.0, "error": None},
    ]  # fmt: skip
    decisions = [{"policy": "pii", "action": "redacted", "matched": "email"}]
    entry = make_entry(
        attempts=attempts,
        policy_action="redacted",
        policy_reason="pii: email",
        policy_decisions=decisions,
        body_mode="redacted",
        request_body='{"messages": "[EMAIL]"}',
        response_body='{"choices": []}',
        client_ip="203.0.113.7",
        user_agent="pytest",
    )

    response = session_client.get(f"{LOGS}/{entry.id}")

    assert response.status_code == 200
    body = response.json()
    assert SUMMARY_KEYS < set(body)
    assert body["log_id"] == str(entry.id)
    assert body["attempts"] == attempts
    assert body["policy_decisions"] == decisions
    assert (body["policy_action"], body["policy_reason"]) == ("redacted", "pii: email")
    assert (body["body_mode"], body["request_body"], body["response_body"]) == (
        "redacted",
        '{"messages": "[EMAIL]"}',
        '{"choices": []}',
    )
    assert (body["client_ip"], body["user_agent"]) == ("203.0.113.7", "pytest")


def test_another_organizations_entry_is_not_found_and_never_listed(
    session_client, outsider_client, make_entry
):
    mine = make_entry()
    theirs = AuditEntry.objects.exclude(organization=mine.organization_id).get()

    assert_error(session_client.get(f"{LOGS}/{theirs.id}"), 404, "not_found")
    assert log_ids(session_client.get(LOGS)) == ids(mine)
    assert log_ids(session_client.get(LOGS, {"request_id": str(theirs.id)})) == []
    # And the same seen from the other side.
    assert_error(outsider_client.get(f"{LOGS}/{mine.id}"), 404, "not_found")
    assert log_ids(outsider_client.get(LOGS)) == ids(theirs)


def test_an_unknown_or_malformed_log_id_is_not_found(session_client):
    assert_error(session_client.get(f"{LOGS}/{uuid.uuid4()}"), 404, "not_found")
    assert_error(session_client.get(f"{LOGS}/not-a-uuid"), 404, "not_found")


# Bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "params", "field"),
    [
        (LOGS, {"from": "2026-11-21", "to": "2026-11-20"}, "to"),
        (LOGS, {"from": "2026-11-20T10:00:00Z", "to": "2026-11-20T10:00:00Z"}, "to"),
        (LOGS, {"from": "yesterday"}, "from"),
        (LOGS, {"to": "2026-11-20"}, "from"),
        (LOGS, {"from": "2026-13-01"}, "from"),
        (LOGS, {"to": "2026-11-20T25:00:00Z", "from": "2026-11-19"}, "to"),
        (LOGS, {"period": "1y"}, "period"),
        (LOGS, {"period": "7d", "from": "2026-11-20"}, "period"),
        (LOGS, {"status": "abc"}, "status"),
        (LOGS, {"status": "600"}, "status"),
        (LOGS, {"status": "2xxx"}, "status"),
        (LOGS, {"cache": "l4"}, "cache"),
        (LOGS, {"policy_action": "nuked"}, "policy_action"),
        (LOGS, {"team": "not-a-uuid"}, "team"),
        (LOGS, {"api_key": "sk_live_abc"}, "api_key"),
        (LOGS, {"request_id": "42"}, "request_id"),
        (OVERVIEW, {"group_by": "week"}, "group_by"),
        (OVERVIEW, {"period": "1d"}, "period"),
        (OVERVIEW, {"from": "2026-11-20", "to": "2026-11-19"}, "to"),
        (OVERVIEW, {"team": "x"}, "team"),
        (CACHE, {"group_by": "tier"}, "group_by"),
        (CACHE, {"from": "soon"}, "from"),
        (POLICY, {"period": "forever"}, "period"),
        (POLICY, {"api_key": "123"}, "api_key"),
    ],
)
def test_it_rejects_bad_query_parameters_naming_the_field(session_client, url, params, field):
    error = assert_error(session_client.get(url, params), 400, "validation_error")

    assert error["type"] == "invalid_request_error"
    assert field in error["fields"], error


@pytest.mark.parametrize("url", [LOGS, OVERVIEW, CACHE, POLICY])
@pytest.mark.parametrize(
    ("params", "field"),
    [
        # Each once reached the database (or int()) and answered 500.
        ({"model": "fast\x00"}, "model"),
        ({"model": "fast\x1b[2J"}, "model"),
        ({"provider": "openai\x7f"}, "provider"),
        ({"from": "2026-11-20\x00"}, "from"),
        ({"from": "2026-11-20", "to": "2026-11-21T00:00:00." + "0" * 100 + "Z"}, "to"),
        ({"from": "9999-12-31T23:59:59-01:00"}, "from"),
        ({"from": "0001-01-01T00:00:00+15:00", "to": "2026-11-21"}, "from"),
        ({"from": "\uff12\uff10\uff12\uff16-11-20"}, "from"),
        ({"team": "\x00"}, "team"),
        ({"api_key": "{" * 40}, "api_key"),
    ],
)
def test_it_refuses_control_characters_and_dates_a_datetime_cannot_hold(session_client, url, params, field):
    error = assert_error(session_client.get(url, params), 400, "validation_error")

    assert list(error["fields"]) == [field]


@pytest.mark.parametrize("status", ["\u00b2\u00b2\u00b2", "\u0664\u0660\u0664", "4\u00b204"])
def test_a_status_in_digits_other_than_ascii_is_refused_not_a_server_error(session_client, status):
    error = assert_error(session_client.get(LOGS, {"status": status}), 400, "validation_error")

    assert list(error["fields"]) == ["status"]


def test_the_widest_range_dates_can_name_is_read(session_client, make_entry):
    entry = make_entry()

    response = session_client.get(LOGS, {"from": "0001-01-01", "to": "9999-12-31T23:59:59.999999Z"})
    overview = session_client.get(OVERVIEW, {"from": "0001-01-01", "group_by": "day"})

    assert log_ids(response) == ids(entry)
    assert overview.json()["totals"]["requests"] == 1


def test_an_empty_parameter_is_the_same_as_none(session_client, make_entry):
    entry = make_entry()

    assert log_ids(session_client.get(LOGS, {"team": "", "status": "", "from": ""})) == ids(entry)


def test_a_member_may_read_every_analytics_endpoint(client_for, organization, make_entry):
    entry = make_entry()
    member = client_for(organization, "member")

    for url in (LOGS, f"{LOGS}/{entry.id}", OVERVIEW, CACHE, POLICY):
        assert member.get(url).status_code == 200, url


def test_analytics_need_a_session_and_are_read_only(api_client, session_client):
    for url in (LOGS, OVERVIEW, CACHE, POLICY):
        assert_error(api_client.get(url), 401, "not_authenticated")
        assert_error(session_client.post(url, {}, format="json"), 405, "method_not_allowed")


# Overview -----------------------------------------------------------------------------------------


def test_the_overview_sums_what_the_entries_recorded(session_client, make_entry):
    # Ten requests, latencies 10..100 ms; two errors; cache: 3 hits of 8 looked up (2 bypassed).
    caches = ["l1", "l2", "l3", "miss", "miss", "miss", "miss", "miss", "bypass", "bypass"]
    for i, cache in enumerate(caches):
        make_entry(
            created_at=NOON + timedelta(minutes=i),
            latency_ms=float(10 * (i + 1)),
            cost_usd=Decimal("0.00012345") * (i + 1),
            input_tokens=100 + i,
            output_tokens=20 + i,
            status=500 if i == 3 else 429 if i == 7 else 200,
            cache=cache,
        )

    body = session_client.get(OVERVIEW, {"from": "2026-11-20", "to": "2026-11-21"}).json()

    assert (body["from"], body["to"], body["group_by"]) == (
        "2026-11-20T00:00:00Z",
        "2026-11-21T00:00:00Z",
        None,
    )
    assert "groups" not in body
    assert body["totals"] == {
        "requests": 10,
        "spend_usd": "0.00678975",  # 0.00012345 * 55
        "input_tokens": 1045,
        "output_tokens": 245,
        "errors": 2,
        "error_rate": 0.2,
        # percentile_cont: linear interpolation between the closest ranks.
        "latency_p50_ms": 55.0,
        "latency_p95_ms": 95.5,
        "cache_hit_rate": 0.375,
    }


def test_the_overview_covers_the_last_24_hours_by_default(session_client, make_entry):
    make_entry(created_at=timezone.now() - timedelta(hours=1), cost_usd=Decimal("0.5"))
    make_entry(created_at=timezone.now() - timedelta(hours=25), cost_usd=Decimal("7"))

    body = session_client.get(OVERVIEW).json()

    assert (body["totals"]["requests"], body["totals"]["spend_usd"]) == (1, "0.50000000")
    start = datetime.fromisoformat(body["from"])
    end = datetime.fromisoformat(body["to"])
    assert end - start == timedelta(hours=24)
    assert abs(timezone.now() - end) < timedelta(minutes=1)
    week = session_client.get(OVERVIEW, {"period": "7d"}).json()
    assert (week["totals"]["requests"], week["totals"]["spend_usd"]) == (2, "7.50000000")


def test_the_overview_of_an_empty_range_reports_zeros(session_client, make_entry):
    make_entry(created_at=NOON)

    body = session_client.get(OVERVIEW, {"from": "2026-11-21", "group_by": "day"}).json()

    assert body["totals"] == {
        "requests": 0,
        "spend_usd": "0.00000000",
        "input_tokens": 0,
        "output_tokens": 0,
        "errors": 0,
        "error_rate": 0.0,
        "latency_p50_ms": None,
        "latency_p95_ms": None,
        "cache_hit_rate": 0.0,
    }
    assert body["groups"] == []


def test_the_overview_groups_by_utc_day_and_hour(session_client, make_entry):
    late = datetime(2026, 11, 20, 23, 30, tzinfo=UTC)
    make_entry(created_at=late, latency_ms=10.0, cost_usd=Decimal("0.1"))
    make_entry(created_at=late + timedelta(minutes=10), latency_ms=30.0, cost_usd=Decimal("0.2"))
    # 00:10 UTC on the 21st is still the 20th in New York: the buckets are UTC.
    make_entry(created_at=late + timedelta(minutes=40), latency_ms=50.0, cost_usd=Decimal("0.4"), status=503)
    window = {"from": "2026-11-20", "to": "2026-11-22"}

    days = session_client.get(OVERVIEW, {**window, "group_by": "day"}).json()
    hours = session_client.get(OVERVIEW, {**window, "group_by": "hour"}).json()

    assert days["group_by"] == "day"
    assert [(g["key"], g["requests"], g["spend_usd"], g["error_rate"]) for g in days["groups"]] == [
        ("2026-11-20T00:00:00Z", 2, "0.30000000", 0.0),
        ("2026-11-21T00:00:00Z", 1, "0.40000000", 1.0),
    ]
    assert [(g["latency_p50_ms"], g["latency_p95_ms"]) for g in days["groups"]] == [
        (20.0, 29.0),
        (50.0, 50.0),
    ]
    assert [(g["key"], g["requests"]) for g in hours["groups"]] == [
        ("2026-11-20T23:00:00Z", 2),
        ("2026-11-21T00:00:00Z", 1),
    ]
    assert days["totals"]["requests"] == hours["totals"]["requests"] == 3


def test_the_overview_groups_by_team_model_provider_and_key(session_client, make_entry, organization):
    team = TeamFactory(organization=organization)
    key_id = uuid.uuid4()
    make_entry(created_at=NOON, team_id=team.id, api_key_id=key_id, latency_ms=10.0, cache="l1")
    make_entry(created_at=NOON, team_id=team.id, api_key_id=key_id, latency_ms=20.0, cache="miss")
    make_entry(
        created_at=NOON,
        provider="anthropic",
        model="claude-3-5-haiku",
        latency_ms=40.0,
        cost_usd=Decimal("0.004"),
    )
    make_entry(created_at=NOON, provider="", model="", status=404, latency_ms=1.0, cost_usd=Decimal(0))
    window = {"from": "2026-11-20", "to": "2026-11-21"}

    # Biggest first: most requests, then most spend.
    def groups(by: str) -> list[tuple]:
        body = session_client.get(OVERVIEW, {**window, "group_by": by}).json()
        return [(g["key"], g["requests"], g["spend_usd"], g["latency_p50_ms"]) for g in body["groups"]]

    assert groups("team") == [(None, 2, "0.00400000", 20.5), (str(team.id), 2, "0.00200000", 15.0)]
    assert groups("key") == [(None, 2, "0.00400000", 20.5), (str(key_id), 2, "0.00200000", 15.0)]
    assert groups("provider") == [
        ("openai", 2, "0.00200000", 15.0),
        ("anthropic", 1, "0.00400000", 40.0),
        (None, 1, "0.00000000", 1.0),
    ]
    assert groups("model")[0] == ("gpt-4o-mini", 2, "0.00200000", 15.0)
    team_group = session_client.get(OVERVIEW, {**window, "group_by": "team"}).json()["groups"][1]
    assert (team_group["cache_hit_rate"], team_group["error_rate"]) == (0.5, 0.0)


def test_the_overview_can_be_narrowed_to_a_team_or_a_model(session_client, make_entry, organization):
    team = TeamFactory(organization=organization)
    make_entry(team_id=team.id, cost_usd=Decimal("0.25"))
    make_entry(requested_model="smart", cost_usd=Decimal("0.5"))

    by_team = session_client.get(OVERVIEW, {"team": str(team.id)}).json()["totals"]
    by_model = session_client.get(OVERVIEW, {"model": "smart"}).json()["totals"]

    assert (by_team["requests"], by_team["spend_usd"]) == (1, "0.25000000")
    assert (by_model["requests"], by_model["spend_usd"]) == (1, "0.50000000")


def test_each_organization_sees_only_its_own_numbers(
    session_client, outsider_client, make_entry, organization
):
    make_entry(cost_usd=Decimal("1"))  # each with its twin in the outsider's organization
    make_entry(cost_usd=Decimal("2"))
    AuditEntry.objects.filter(organization=organization).update(cost_usd=Decimal("100"))

    theirs = outsider_client.get(OVERVIEW).json()["totals"]
    mine = session_client.get(OVERVIEW).json()["totals"]

    assert (theirs["requests"], theirs["spend_usd"]) == (2, "3.00000000")
    assert (mine["requests"], mine["spend_usd"]) == (2, "200.00000000")


# Cache --------------------------------------------------------------------------------------------


def test_the_cache_breakdown_counts_hits_per_tier_misses_and_bypasses(session_client, make_entry):
    for cache, count in {"l1": 3, "l2": 2, "l3": 1, "miss": 4, "bypass": 2}.items():
        for _ in range(count):
            savings = Decimal("0.25") if cache in ("l1", "l2", "l3") else Decimal(0)
            make_entry(created_at=NOON, cache=cache, cache_savings_usd=savings)
    make_entry(created_at=NOON - timedelta(days=1), cache="l1")  # outside the range

    body = session_client.get(CACHE, {"from": "2026-11-20", "to": "2026-11-21"}).json()

    assert (body["from"], body["to"]) == ("2026-11-20T00:00:00Z", "2026-11-21T00:00:00Z")
    assert body["totals"] == {
        "requests": 12,
        "lookups": 10,
        "hits": 6,
        "misses": 4,
        "bypasses": 2,
        "hit_rate": 0.6,
        "savings_usd": "1.50000000",
        "tiers": {
            "l1": {"hits": 3, "hit_rate": 0.3},
            "l2": {"hits": 2, "hit_rate": 0.2},
            "l3": {"hits": 1, "hit_rate": 0.1},
        },
    }
    overview = session_client.get(OVERVIEW, {"from": "2026-11-20", "to": "2026-11-21"}).json()
    assert overview["totals"]["cache_hit_rate"] == 0.6


def test_the_cache_breakdown_groups_by_model(session_client, make_entry):
    make_entry(created_at=NOON, model="gpt-4o-mini", cache="l2")
    make_entry(created_at=NOON, model="gpt-4o-mini", cache="miss")
    make_entry(created_at=NOON, model="gpt-4o", cache="bypass")

    body = session_client.get(CACHE, {"from": "2026-11-20", "to": "2026-11-21", "group_by": "model"}).json()

    assert [
        (g["key"], g["lookups"], g["hits"], g["tiers"]["l2"]["hits"], g["hit_rate"]) for g in body["groups"]
    ] == [
        ("gpt-4o-mini", 2, 1, 1, 0.5),
        ("gpt-4o", 0, 0, 0, 0.0),
    ]


def test_cache_and_policy_report_zeros_when_nothing_was_recorded(session_client):
    cache = session_client.get(CACHE).json()["totals"]
    policy = session_client.get(POLICY).json()

    assert (cache["requests"], cache["hits"], cache["hit_rate"]) == (0, 0, 0.0)
    assert cache["tiers"]["l1"] == {"hits": 0, "hit_rate": 0.0}
    assert policy["requests"] == 0
    assert policy["actions"] == {"redacted": 0, "blocked": 0, "flagged": 0}
    assert policy["policies"] == []


# Policy -------------------------------------------------------------------------------------------


def test_policy_hits_are_counted_per_policy_and_action(session_client, make_entry):
    pii = {"policy": "pii", "action": "redacted", "matched": "email"}
    make_entry(created_at=NOON, policy_action="redacted", policy_decisions=[pii])
    # One request on which the same policy acted twice is one hit.
    make_entry(created_at=NOON, policy_action="redacted", policy_decisions=[pii, {**pii, "matched": "phone"}])
    make_entry(
        created_at=NOON,
        status=400,
        policy_action="blocked",
        policy_decisions=[pii, {"policy": "secrets", "action": "blocked"}],
    )
    make_entry(
        created_at=NOON,
        policy_action="flagged",
        policy_decisions=[{"policy": "toxicity", "action": "flagged"}],
    )
    make_entry(created_at=NOON, policy_decisions=["not an object", {"action": "flagged"}])  # no policy named
    make_entry(created_at=NOON)
    make_entry(
        created_at=NOON - timedelta(days=2), policy_action="blocked", policy_decisions=[pii]
    )  # outside

    body = session_client.get(POLICY, {"from": "2026-11-20", "to": "2026-11-21"}).json()

    assert body["requests"] == 6
    assert body["actions"] == {"redacted": 2, "blocked": 1, "flagged": 1}
    assert body["policies"] == [
        {"policy": "pii", "action": "redacted", "hits": 3},
        {"policy": "secrets", "action": "blocked", "hits": 1},
        {"policy": "toxicity", "action": "flagged", "hits": 1},
    ]


def test_the_policy_counts_can_be_narrowed_to_a_team(session_client, make_entry, organization):
    team = TeamFactory(organization=organization)
    make_entry(
        team_id=team.id,
        policy_action="blocked",
        policy_decisions=[{"policy": "secrets", "action": "blocked"}],
    )
    make_entry(policy_action="flagged", policy_decisions=[{"policy": "toxicity", "action": "flagged"}])

    body = session_client.get(POLICY, {"team": str(team.id)}).json()

    assert body["actions"] == {"redacted": 0, "blocked": 1, "flagged": 0}
    assert body["policies"] == [{"policy": "secrets", "action": "blocked", "hits": 1}]


def test_the_schema_documents_the_analytics_endpoints(api_client):
    paths = api_client.get("/api/v1/schema", {"format": "json"}).json()["paths"]

    assert {LOGS, f"{LOGS}/{{log_id}}", OVERVIEW, CACHE, POLICY} <= set(paths)
    parameters = {p["name"] for p in paths[LOGS]["get"]["parameters"]}
    assert {"from", "to", "period", "team", "status", "cache", "cursor", "limit"} <= parameters
