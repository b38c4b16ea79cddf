"""The console's dashboard: the analytics API's numbers over a chosen period, charts, budgets' burn;
every role reads it, only the organization's own numbers, and a member only their teams' budgets."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.limits.services import limits_set
from apps.teams.models import TeamMembership
from tests.audit.entries import AuditEntryFactory
from tests.factories import TeamFactory, create_api_key

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 20, 12, 30, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _frozen(time_machine):
    time_machine.move_to(NOW, tick=False)


def entry(organization, *, ago: timedelta = timedelta(minutes=10), **fields):
    return AuditEntryFactory(organization=organization, created_at=NOW - ago, **fields)


def cards(page: str) -> dict[str, str]:
    return dict(
        (label, value)
        for label, value in re.findall(
            r'<div class="label">([^<]+)</div><div class="value">([^<]+)</div>', page
        )
    )


def test_a_visitor_without_a_session_is_sent_to_the_sign_in_page(client):
    response = client.get("/console/dashboard/")
    assert response.status_code == 302 and response["Location"].startswith("/console/login/")


def test_the_console_opens_on_the_dashboard(console_for, organization):
    response = console_for(organization, "member").get("/console/")
    assert response.status_code == 302 and response["Location"] == "/console/dashboard/"


def test_a_member_reads_the_organizations_totals_and_never_another_organizations(
    console_for, organization, outsider
):
    entry(organization, cost_usd=Decimal("1.50"), latency_ms=100, cache="miss")
    entry(organization, cost_usd=Decimal("0.50"), latency_ms=300, cache="l1", ago=timedelta(days=2))
    entry(organization, status=502, cost_usd=0, latency_ms=200, cache="l2", ago=timedelta(days=6))
    entry(organization, cost_usd=Decimal("9"), ago=timedelta(days=8))  # outside the default 7 days
    entry(outsider.organization, cost_usd=Decimal("1000"), model="their-secret-model")

    response = console_for(organization, "member").get("/console/dashboard/")

    assert response.status_code == 200
    page = response.content.decode()
    numbers = cards(page)
    assert numbers["Spend"] == "$2.00"
    assert numbers["Requests"] == "3"
    assert numbers["Error rate"] == "33.3%"
    assert numbers["Latency p50"] == "200 ms"
    assert numbers["Latency p95"] == "290 ms"  # interpolated as percentile_cont does
    assert numbers["Cache hit rate"] == "66.7%"
    assert "L1 33.3% · L2 33.3% · L3 0.0%" in page
    assert "their-secret-model" not in page and "1,000" not in page


def test_the_period_is_chosen_with_a_get_form(console_for, organization):
    entry(organization, cost_usd=Decimal("1"), ago=timedelta(hours=2))
    entry(organization, cost_usd=Decimal("2"), ago=timedelta(days=3))
    entry(organization, cost_usd=Decimal("4"), ago=timedelta(days=20))
    entry(organization, cost_usd=Decimal("8"), ago=timedelta(days=60))
    client = console_for(organization, "member")

    spends = {
        period: cards(client.get("/console/dashboard/", {"period": period}).content.decode())["Spend"]
        for period in ("24h", "7d", "30d", "90d")
    }

    assert spends == {"24h": "$1.00", "7d": "$3.00", "30d": "$7.00", "90d": "$15.00"}
    page = client.get("/console/dashboard/").content.decode()
    assert '<form method="get" action="/console/dashboard/"' in page
    assert '<option value="7d" selected>' in page


def test_an_unknown_period_is_a_400_that_says_why(console_for, organization):
    response = console_for(organization, "member").get("/console/dashboard/", {"period": "1y"})
    assert response.status_code == 400
    assert (
        "Invalid value for &#x27;period&#x27;: Expected one of 24h, 7d, 30d, 90d."
        in response.content.decode()
    )


def test_charts_by_day_team_model_and_provider_are_drawn_on_the_server(console_for, organization):
    team = TeamFactory(organization=organization, name='<img src=x onerror="alert(1)">')
    entry(organization, team_id=team.id, model="gpt-4o-mini", provider="openai", cost_usd=Decimal("0.2"))
    entry(
        organization,
        model="claude-3-5-haiku",
        provider="anthropic",
        cost_usd=Decimal("0.1"),
        ago=timedelta(days=1),
    )

    page = console_for(organization, "member").get("/console/dashboard/").content.decode()

    for chart in (
        "spend-by-time",
        "requests-by-time",
        "latency-by-time",
        "spend-by-team",
        "spend-by-model",
        "spend-by-provider",
    ):
        assert f'aria-labelledby="chart-{chart}-title chart-{chart}-desc"' in page
    assert "<script" not in page.split("</head>")[1]  # no script in the body: the charts are SVG
    assert "<img src=x" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert "No team" in page and "claude-3-5-haiku" in page and "anthropic" in page
    # The time axis has every day of the period, those without requests too.
    assert page.count('<time datetime="2026-11-') >= 8


def test_hour_buckets_for_the_last_24_hours(console_for, organization):
    entry(organization, ago=timedelta(hours=3))
    page = console_for(organization, "member").get("/console/dashboard/", {"period": "24h"}).content.decode()
    assert "Spend per hour" in page and "2026-11-20 09:00" in page


def test_a_first_day_of_requests_draws_by_the_hour_over_a_longer_period(console_for, organization):
    entry(organization, ago=timedelta(hours=5), latency_ms=120)
    entry(organization, ago=timedelta(hours=1), latency_ms=80)

    page = console_for(organization, "member").get("/console/dashboard/", {"period": "7d"}).content.decode()

    # Hours from the first request's on, not seven days of which one has two dots.
    assert "Latency per hour" in page and "Spend per day" not in page
    hours = re.findall(r'<time datetime="2026-11-20T(\d\d):00:00\+00:00">', page)
    assert hours == ["07", "08", "09", "10", "11", "12"]


def test_with_no_request_the_dashboard_says_what_to_do_next(console_for, organization):
    page = console_for(organization, "member").get("/console/dashboard/").content.decode()
    assert "No requests in this period" in page
    assert 'href="/console/playground/"' in page and 'href="/console/api-keys/"' in page
    assert 'class="chart"' not in page  # no empty charts


def budgets_fixture(organization):
    mine, other = (
        TeamFactory(organization=organization, name="Mine"),
        TeamFactory(organization=organization, name="Other"),
    )
    my_key, _ = create_api_key(organization, name="my-key", team=mine)
    their_key, _ = create_api_key(organization, name="their-key", team=other)
    limits_set(organization=organization, budget={"amount_usd": Decimal("10"), "period": "monthly"})
    limits_set(organization=organization, team=mine, budget={"amount_usd": Decimal("4"), "period": "daily"})
    limits_set(
        organization=organization, team=other, budget={"amount_usd": Decimal("2"), "period": "monthly"}
    )
    limits_set(
        organization=organization, api_key=my_key, budget={"amount_usd": Decimal("1"), "period": "weekly"}
    )
    limits_set(
        organization=organization, api_key=their_key, budget={"amount_usd": Decimal("1"), "period": "weekly"}
    )
    entry(organization, team_id=mine.id, api_key_id=my_key.id, cost_usd=Decimal("3"))
    entry(organization, team_id=other.id, api_key_id=their_key.id, cost_usd=Decimal("2.5"))
    return mine, other


def budget_rows(page: str) -> list[str]:
    table = page.split('class="dash-budgets"')[1].split("</table>")[0]
    return [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip()
        for row in re.findall(r"<tr.*?</tr>", table, re.S)[1:]
    ]


def test_an_admin_reads_every_budgets_burn(console_for, organization):
    budgets_fixture(organization)
    rows = budget_rows(console_for(organization, "admin").get("/console/dashboard/").content.decode())
    assert rows == [
        "The organization monthly from Nov 1, 00:00 $5.50 $0 $10.00 $4.50 55.0% 55.0%",
        "Team Mine daily from Nov 20, 00:00 $3.00 $0 $4.00 $1.00 75.0% 75.0%",
        "Team Other monthly from Nov 1, 00:00 $2.50 $0 $2.00 $0 125.0% 125.0%",
        "Key my-key weekly from Nov 16, 00:00 $3.00 $0 $1.00 $0 300.0% 300.0%",
        "Key their-key weekly from Nov 16, 00:00 $2.50 $0 $1.00 $0 250.0% 250.0%",
    ]


def test_a_member_reads_the_organizations_budget_and_their_teams_only(console_for, organization):
    mine, _ = budgets_fixture(organization)
    client = console_for(organization, "member")
    TeamMembership.objects.create(team=mine, user=client.membership.user)

    page = client.get("/console/dashboard/").content.decode()

    rows = budget_rows(page)
    assert [row.split(" monthly")[0].split(" daily")[0].split(" weekly")[0] for row in rows] == [
        "The organization",
        "Team Mine",
        "Key my-key",
    ]
    assert "Other" not in page.split('class="dash-budgets"')[1].split("</table>")[0]
    assert "2 more budgets of teams you are not in" in page


def test_the_dashboard_changes_nothing_and_takes_no_post(console_for, organization):
    client = console_for(organization, "owner")
    response = client.post("/console/dashboard/", {"period": "24h"})
    assert response.status_code in (403, 405)  # CSRF refuses it first; without the check, 405
