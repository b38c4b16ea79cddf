"""The console's log browser: the API's filters, messages and cursor pagination, one entry as the API
shows it, and the compliance export of what the filters select; never another organization's."""

import base64
import csv
import io
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync
from django.utils.html import escape

from tests.audit.entries import AuditEntryFactory
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _frozen(time_machine):
    time_machine.move_to(NOW, tick=False)


def entry(organization, *, ago: timedelta = timedelta(hours=1), **fields):
    return AuditEntryFactory(organization=organization, created_at=NOW - ago, **fields)


def listed(page: str) -> list[str]:
    """The entry ids of a log page, in order."""
    return re.findall(r'href="/console/logs/([0-9a-f-]{36})/"', page)


def streamed(response) -> str:
    """The body of a streamed export: an async iterator, as Daphne would read it."""

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read)().decode()


def test_a_visitor_without_a_session_is_sent_to_the_sign_in_page(client):
    for path in ("/console/logs/", f"/console/logs/{uuid.uuid4()}/", "/console/logs/export.csv"):
        response = client.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/console/login/")


def test_a_member_lists_the_organizations_entries_newest_first_without_bodies(
    console_for, organization, outsider
):
    old = entry(organization, ago=timedelta(hours=3), requested_model="fast", model="gpt-4o-mini")
    new = entry(organization, ago=timedelta(minutes=5), status=429, error_code="rate_limit_exceeded")
    theirs = entry(outsider.organization, requested_model="their-secret-model")

    response = console_for(organization, "member").get("/console/logs/")

    assert response.status_code == 200
    page = response.content.decode()
    assert listed(page) == [str(new.id), str(old.id)]
    assert str(theirs.id) not in page and "their-secret-model" not in page
    # The model asked for; what served it in the cell's title (and on the entry's page).
    assert re.search(r'title="served by [a-z_]+ / gpt-4o-mini">fast</td>', page)
    assert 'title="rate_limit_exceeded">429</span>' in page
    assert "secret prompt" not in page and "secret answer" not in page  # the list never shows bodies
    assert "Export CSV" not in page  # the export is for admins and owners


# Each filter of GET /api/v1/analytics/logs: (parameters, the matching entry, one that does not match).
TEAM = uuid.uuid4()
KEY = uuid.uuid4()
REQUEST = uuid.uuid4()
FILTER_CASES = {
    "team": ({"team": str(TEAM)}, {"team_id": TEAM}, {"team_id": None}),
    "api_key": ({"api_key": str(KEY)}, {"api_key_id": KEY}, {}),
    "model asked": (
        {"model": "fast"},
        {"requested_model": "fast", "model": "x"},
        {"requested_model": "slow"},
    ),
    "model served": (
        {"model": "gpt-4o"},
        {"requested_model": "a", "model": "gpt-4o"},
        {"model": "gpt-4o-mini"},
    ),
    "provider": ({"provider": "anthropic"}, {"provider": "anthropic"}, {"provider": "openai"}),
    "prompt": ({"prompt": "welcome"}, {"prompt_template": "welcome"}, {"prompt_template": "other"}),
    "status code": ({"status": "429"}, {"status": 429}, {"status": 404}),
    "status class": ({"status": "5xx"}, {"status": 502}, {"status": 404}),
    "status error": ({"status": "error"}, {"status": 404}, {"status": 200}),
    "policy action": (
        {"policy_action": "blocked"},
        {"policy_action": "blocked"},
        {"policy_action": "flagged"},
    ),
    "cache": ({"cache": "l2"}, {"cache": "l2"}, {"cache": "miss"}),
    "request id": ({"request_id": str(REQUEST)}, {"id": REQUEST}, {}),
    "from and to": (
        {"from": "2026-11-20T10:00:00Z", "to": "2026-11-20T11:00:00Z"},
        {"ago": timedelta(minutes=90)},
        {"ago": timedelta(minutes=30)},
    ),
    "period": ({"period": "24h"}, {"ago": timedelta(hours=23)}, {"ago": timedelta(hours=25)}),
}


@pytest.mark.parametrize("case", FILTER_CASES.values(), ids=FILTER_CASES.keys())
def test_every_filter_of_the_api_narrows_the_list(console_for, organization, outsider, case):
    params, matching, other = case
    wanted = entry(organization, **matching)
    unwanted = entry(organization, **other)
    entry(outsider.organization, **{k: v for k, v in matching.items() if k != "id"})

    page = console_for(organization, "member").get("/console/logs/", params).content.decode()

    assert listed(page) == [str(wanted.id)], unwanted.id
    for value in params.values():  # the form shows the filter it applied
        assert f'value="{value}"' in page or "selected>" in page


@pytest.mark.parametrize(
    "params",
    [
        {"to": "2026-11-01"},
        {"from": "2026-11-02", "to": "2026-11-01"},
        {"period": "1y"},
        {"period": "24h", "from": "2026-11-01"},
        {"status": "teapot"},
        {"cache": "l4"},
        {"policy_action": "shrugged"},
        {"team": "not-a-uuid"},
        {"request_id": "42"},
        {"model": "bad\x00model"},
        {"provider": "p" * 33},
        {"limit": "lots"},
    ],
)
def test_a_bad_filter_is_a_400_with_the_apis_own_message(console_for, client_for, organization, params):
    api = client_for(organization, "member").get("/api/v1/analytics/logs", params)
    assert api.status_code == 400
    message = api.json()["error"]["message"]

    response = console_for(organization, "member").get("/console/logs/", params)

    assert response.status_code == 400
    page = response.content.decode()
    assert escape(message) in page


def test_pages_follow_the_apis_cursor_and_keep_the_filters(console_for, organization):
    team = TeamFactory(organization=organization)
    ours = [entry(organization, team_id=team.id, ago=timedelta(minutes=n)) for n in range(1, 6)]
    entry(organization, ago=timedelta(seconds=30))  # newest, but another team's
    client = console_for(organization, "member")

    first = client.get("/console/logs/", {"team": str(team.id), "limit": "2"}).content.decode()
    assert listed(first) == [str(e.id) for e in ours[:2]]
    next_link = re.search(r'<a href="([^"]+)" rel="next">', first).group(1).replace("&amp;", "&")
    assert next_link.startswith("/console/logs/?") and f"team={team.id}" in next_link

    second = client.get(next_link).content.decode()
    assert listed(second) == [str(e.id) for e in ours[2:4]]
    assert 'rel="prev"' in second

    tampered = client.get("/console/logs/", {"cursor": base64.b64encode(b"o=x&p=2026").decode()})
    assert tampered.status_code == 404


def test_one_entrys_page_shows_what_the_api_answers(console_for, client_for, organization):
    team = TeamFactory(organization=organization, name="Search")
    shown = entry(
        organization,
        team_id=team.id,
        status=200,
        cache="miss",
        cost_usd=Decimal("0.00042150"),
        policy_action="redacted",
        policy_reason="pii: email",
        policy_decisions=[{"policy": "pii", "action": "redacted", "detector": "email"}],
        attempts=[
            {
                "provider": "openai",
                "provider_key_id": str(uuid.uuid4()),
                "model": "gpt-4o-mini",
                "alias": "fast",
                "status": 503,
                "outcome": "upstream_error",
                "latency_ms": 12.0,
                "error": "overloaded",
            },
            {
                "provider": "openai",
                "provider_key_id": str(uuid.uuid4()),
                "model": "gpt-4o-mini",
                "alias": "fast",
                "status": 200,
                "outcome": "ok",
                "latency_ms": 30.0,
                "error": None,
            },
        ],
        body_mode="redacted",
        request_body='{"messages": [{"role": "user", "content": "mail [REDACTED:email]"}]}',
        response_body='{"choices": []}',
    )
    api = client_for(organization, "member").get(f"/api/v1/analytics/logs/{shown.id}").json()

    response = console_for(organization, "member").get(f"/console/logs/{shown.id}/")

    assert response.status_code == 200
    page = response.content.decode()
    for attempt in api["attempts"]:
        assert attempt["outcome"] in page and attempt["provider_key_id"] in page
    assert "overloaded" in page and "pii: email" in page and "<code>detector</code>: email" in page
    assert api["cost_usd"] == "0.00042150" and "0.00042150 USD" in page
    assert "x-gateway-request-id" in page and str(shown.id) in page
    assert "<code>x-gateway-cost-usd</code></td><td><code>0.00042150</code>" in page
    assert "<code>x-gateway-policy-action</code></td><td><code>redacted</code>" in page
    assert "Search" in page
    assert "mail [REDACTED:email]" in page  # the body exactly as kept (and as the API answers it)
    assert api["request_body"] == shown.request_body


def test_the_list_names_keys_and_teams_marks_cache_hits_and_reads_numbers_at_a_glance(
    console_for, organization
):
    from tests.factories import create_api_key

    team = TeamFactory(organization=organization, name="Checkout")
    key, _ = create_api_key(organization, name="checkout-service", team=team)
    entry(
        organization,
        api_key_id=key.id,
        api_key_prefix=key.key_prefix,
        team_id=team.id,
        cache="l2",
        provider="",
        input_tokens=12_345,
        output_tokens=678,
        cost_usd=Decimal("0.00015321"),
        latency_ms=1_250,
    )

    page = console_for(organization, "member").get("/console/logs/").content.decode()

    row = re.search(r'<tr data-log-id="[^"]+">(.*?)</tr>', page, re.S).group(1)
    cells = [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    assert cells[2:] == [
        "fast",
        "checkout-service",
        "Checkout",
        "12.3k / 678",
        "$0.00015",
        "1.25 s",
        "hit L2",
    ]
    assert 'class="tag tag-hit"' in row
    assert 'title="0.00015321 USD"' in row and 'title="12,345 in, 678 out"' in row


def test_an_embeddings_answer_is_summarised_and_a_long_body_folded(console_for, organization):
    vector = [0.0123] * 1536
    answer = {
        "object": "list",
        "data": [{"index": 0, "embedding": vector}, {"index": 1, "embedding": vector}],
    }
    long_prompt = {"messages": [{"role": "user", "content": f"line {number}"} for number in range(60)]}
    shown = entry(
        organization,
        endpoint="/v1/embeddings",
        request_body=json.dumps(long_prompt),
        response_body=json.dumps(answer),
    )

    page = console_for(organization, "member").get(f"/console/logs/{shown.id}/").content.decode()

    assert "2 embeddings of 1,536 dimensions (vectors not shown)" in page
    assert "0.0123" not in page and "[1,536 numbers]" in page
    request = page.split("<h3>Request</h3>")[1].split("<h3>Response</h3>")[0]
    assert '<details class="log-body-fold">' in request and "line 59" in request


def test_an_entry_without_kept_bodies_says_so(console_for, organization):
    shown = entry(organization, body_mode="metadata", request_body="", response_body="")
    page = console_for(organization, "member").get(f"/console/logs/{shown.id}/").content.decode()
    assert "keeps no bodies" in page


def test_another_organizations_entry_answers_404(console_for, organization, outsider):
    theirs = entry(outsider.organization)
    client = console_for(organization, "owner")
    assert client.get(f"/console/logs/{theirs.id}/").status_code == 404
    assert client.get(f"/console/logs/{uuid.uuid4()}/").status_code == 404
    assert client.get("/console/logs/not-a-uuid/").status_code == 404


def test_an_admin_exports_what_the_filters_select_as_csv_without_bodies(console_for, organization, outsider):
    wanted = entry(organization, provider="anthropic", status=502, ago=timedelta(hours=2))
    entry(organization, provider="openai", status=502)
    entry(organization, provider="anthropic", status=200)
    entry(outsider.organization, provider="anthropic", status=502)
    client = console_for(organization, "admin")

    page = client.get(
        "/console/logs/", {"provider": "anthropic", "status": "5xx", "period": "24h"}
    ).content.decode()
    link = re.search(r'href="(/console/logs/export\.csv[^"]*)"', page).group(1).replace("&amp;", "&")
    assert "provider=anthropic" in link and "status=5xx" in link

    response = client.get(link)

    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith(
        f'attachment; filename="compliance-export-{organization.slug}-'
    )
    assert response["Cache-Control"] == "no-store"
    text = streamed(response)
    assert "# filters: provider=anthropic; status=5xx" in text
    assert "(period 24h)" in text
    rows = list(csv.DictReader(line for line in io.StringIO(text) if not line.startswith("#")))
    assert [row["request_id"] for row in rows] == [str(wanted.id)]
    assert "secret prompt" not in text and "secret answer" not in text
    assert text.endswith("# end of export: 1 rows\r\n")


def test_an_export_without_a_range_holds_what_the_organization_keeps(console_for, organization):
    organization.log_retention_days = 30
    organization.save()
    kept = entry(organization, ago=timedelta(days=29))
    entry(organization, ago=timedelta(days=31))  # past retention: the hourly task deletes it

    response = console_for(organization, "owner").get("/console/logs/export.jsonl")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    lines = [json.loads(line) for line in streamed(response).splitlines()]
    assert lines[0]["type"] == "export_header" and lines[0]["range"]["from"] == "2026-10-21T12:00:00Z"
    assert [line["request_id"] for line in lines if line["type"] == "audit_entry"] == [str(kept.id)]
    assert lines[-1] == {"type": "export_end", "rows": 1}


def test_a_member_is_refused_the_export_on_the_server(console_for, organization):
    entry(organization)
    client = console_for(organization, "member")
    for path in ("/console/logs/export.csv", "/console/logs/export.jsonl"):
        response = client.get(path, {"period": "24h"})
        assert response.status_code == 403
        assert "request_id" not in response.content.decode()


def test_a_bad_filter_refuses_the_export_with_the_apis_message(console_for, organization):
    response = console_for(organization, "admin").get("/console/logs/export.csv", {"status": "teapot"})
    assert response.status_code == 400
    assert (
        "Use an HTTP status (404), a class (2xx, 4xx, 5xx) or &#x27;error&#x27;." in response.content.decode()
    )


def test_the_logs_link_is_current_on_the_log_pages_only(console_for, organization):
    shown = entry(organization)
    client = console_for(organization, "member")
    for path in ("/console/logs/", f"/console/logs/{shown.id}/"):
        assert '<a href="/console/logs/" aria-current="page">Logs</a>' in client.get(path).content.decode()
    assert 'aria-current="page">Logs' not in client.get("/console/tail/").content.decode()


def test_the_log_pages_take_no_post(console_for, organization):
    client = console_for(organization, "owner")
    assert client.post("/console/logs/").status_code == 403  # CSRF first


def test_the_filter_forms_empty_fields_are_dropped_by_a_redirect(console_for, organization):
    entry(organization, model="claude-3-5-haiku")
    client = console_for(organization, "member")
    response = client.get("/console/logs/?period=&team=&model=claude-3-5-haiku&status=&limit=")
    assert response.status_code == 302 and response["Location"] == "/console/logs/?model=claude-3-5-haiku"
    assert client.get("/console/logs/?period=&limit=")["Location"] == "/console/logs/"
    page = client.get(response["Location"]).content.decode()
    assert "claude-3-5-haiku" in page
