"""GET /api/v1/teams/{id}/usage and /api/v1/api-keys/{id}/usage (and a key's detail): spend in the
budget's current window from the counters the proxy admits requests against (Redis when the suite
has one, this process's otherwise), or, without a budget, the current UTC month from the audit
log's rollups; and who may read it."""

import asyncio
import uuid
from datetime import UTC, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.audit.rollups import Totals, hour_of, rollups_add
from apps.core.generations import SEED, generation_key, local_generation, new_seed
from apps.core.redis import sync_client
from apps.limits.counters import BudgetCharge, local_counters, redis_counters
from apps.limits.selectors import usd_to_nanos
from apps.limits.services import limits_set
from apps.limits.windows import window_at
from apps.teams.models import TeamMembership
from tests.audit.entries import AuditEntryFactory
from tests.factories import TeamFactory, create_api_key
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

FIELDS = {"period", "period_start", "spent_usd", "reserved_usd", "budget_usd", "remaining_usd"}


@pytest.fixture(autouse=True)
def _fresh_local_counters():
    local_counters.clear()
    yield
    local_counters.clear()


def counters():
    """The counters the proxy of this configuration uses."""
    return redis_counters if sync_client() is not None else local_counters


def charge(organization, scope, scope_id, limits, reserve_usd="0"):
    window = window_at(limits.budget_period, timezone.now())
    return BudgetCharge.of(
        str(organization.id),
        scope,
        str(scope_id),
        window,
        usd_to_nanos(limits.budget_usd),
        usd_to_nanos(Decimal(reserve_usd)),
        limits.budget_thresholds,
    )


def run_requests(organization, budget: BudgetCharge, *, seeded_usd: str, reserved_usd: str, settled_usd: str):
    """What the proxy does: loads the spend so far, reserves two requests' maximum cost, and settles
    the first at its actual cost."""
    engine, now = counters(), timezone.now()
    client = sync_client()
    # Read as the proxy does: a counter nobody bumped yet is seeded, never 0 (apps/core/generations.py).
    generation = (
        int(client.eval(SEED, 1, generation_key(str(organization.id)), new_seed()))
        if client
        else local_generation(organization.id)
    )

    async def go():
        await engine.seed(now=now, spent=[(budget, usd_to_nanos(Decimal(seeded_usd)))])
        reserve = BudgetCharge.of(
            str(organization.id),
            budget.scope,
            budget.scope_id,
            budget.window,
            budget.limit_nanos,
            usd_to_nanos(Decimal(reserved_usd)) // 2,
            budget.thresholds,
        )
        for request_id in ("first", "second"):
            admission = await engine.admit(
                key_id=str(uuid.uuid4()),
                organization_id=str(organization.id),
                expected_generation=generation,
                request_id=request_id,
                now=now,
                reservation_seconds=600,
                rates=[],
                budgets=[reserve],
            )
            assert admission.admitted, admission
        await engine.settle(
            request_id="first", now=now, budgets=[(reserve, usd_to_nanos(Decimal(settled_usd)))], tokens=[]
        )

    asyncio.run(go())


def rollup(organization, *, cost: str, team=None, api_key=None, hour=None, model="gpt-4o-mini", at=None):
    """A logged request and its hourly rollup, as the ingest leaves them (the usage reads the rollups
    for whole hours and the log for part-hours)."""
    at = at or hour or window_at("monthly", timezone.now()).start
    AuditEntryFactory(
        organization=organization,
        created_at=at,
        team_id=team.id if team else None,
        api_key_id=api_key.id if api_key else None,
        model=model,
        cost_usd=Decimal(cost),
    )
    row = (
        str(organization.id),
        hour_of(at),
        str(team.id) if team else "",
        str(api_key.id) if api_key else "",
    )
    rollups_add({(*row, "openai", model): Totals(requests=1, cost_usd=Decimal(cost))})


def test_a_teams_usage_is_its_budget_windows_counters(session_client, organization, team):
    limits = limits_set(
        organization=organization, team=team, budget={"amount_usd": Decimal("10"), "period": "daily"}
    )
    run_requests(
        organization,
        charge(organization, "team", team.id, limits),
        seeded_usd="2.5",
        reserved_usd="2",
        settled_usd="0.25",
    )

    response = session_client.get(f"/api/v1/teams/{team.id}/usage")

    assert response.status_code == 200, response.content
    today = timezone.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    # Seeded 2.5, two reservations of 1, the first settled at 0.25: spent 2.75, reserved 1.
    assert response.json() == {
        "period": "daily",
        "period_start": today.isoformat().replace("+00:00", "Z"),
        "spent_usd": "2.75",
        "reserved_usd": "1",
        "budget_usd": "10",
        "remaining_usd": "6.25",
    }


def test_remaining_never_goes_below_zero(session_client, organization, team):
    limits = limits_set(
        organization=organization, team=team, budget={"amount_usd": Decimal("1"), "period": "monthly"}
    )
    run_requests(
        organization,
        charge(organization, "team", team.id, limits),
        seeded_usd="0.5",
        reserved_usd="0.5",
        settled_usd="0.9",
    )

    body = session_client.get(f"/api/v1/teams/{team.id}/usage").json()

    assert (body["spent_usd"], body["reserved_usd"], body["remaining_usd"]) == ("1.4", "0.25", "0")


def test_a_keys_usage_is_in_its_usage_endpoint_and_its_detail(session_client, organization):
    key, _ = create_api_key(organization)
    limits = limits_set(
        organization=organization, api_key=key, budget={"amount_usd": Decimal("5"), "period": "weekly"}
    )
    run_requests(
        organization,
        charge(organization, "api_key", key.id, limits),
        seeded_usd="1",
        reserved_usd="1",
        settled_usd="0.5",
    )

    usage = session_client.get(f"/api/v1/api-keys/{key.id}/usage").json()

    assert (usage["period"], usage["spent_usd"], usage["reserved_usd"]) == ("weekly", "1.5", "0.5")
    assert (usage["budget_usd"], usage["remaining_usd"]) == ("5", "3")
    monday = window_at("weekly", timezone.now()).start
    assert usage["period_start"] == monday.isoformat().replace("+00:00", "Z")
    assert session_client.get(f"/api/v1/api-keys/{key.id}").json()["usage"] == usage
    [listed] = session_client.get("/api/v1/api-keys").json()["results"]
    assert "usage" not in listed


def test_without_a_budget_usage_is_this_months_spend_from_the_rollups(
    session_client, organization, team, outsider
):
    key, _ = create_api_key(organization, team=team)
    other_team = TeamFactory(organization=organization)
    month_start = window_at("monthly", timezone.now()).start
    rollup(organization, cost="1.25", team=team, api_key=key)
    rollup(organization, cost="0.50", team=team, model="gpt-4o")
    rollup(organization, cost="7", team=other_team)
    rollup(organization, cost="9", team=team, hour=month_start - timedelta(hours=1))  # last month
    rollup(outsider.organization, cost="11", team=team)  # never: another organization's rows

    team_usage = session_client.get(f"/api/v1/teams/{team.id}/usage").json()
    key_usage = session_client.get(f"/api/v1/api-keys/{key.id}/usage").json()

    assert team_usage == {
        "period": "monthly",
        "period_start": month_start.isoformat().replace("+00:00", "Z"),
        "spent_usd": "1.75",
        "reserved_usd": "0",
        "budget_usd": None,
        "remaining_usd": None,
    }
    assert (key_usage["spent_usd"], key_usage["budget_usd"]) == ("1.25", None)


def test_a_fixed_budget_not_yet_in_force_reports_the_month(session_client, organization, team):
    starts = timezone.now() + timedelta(days=40)
    budget = {
        "amount_usd": Decimal("10"),
        "period": "fixed",
        "starts_at": starts,
        "ends_at": starts + timedelta(days=1),
    }
    limits_set(organization=organization, team=team, budget=budget)
    rollup(organization, cost="3", team=team)

    body = session_client.get(f"/api/v1/teams/{team.id}/usage").json()

    assert (body["period"], body["spent_usd"], body["budget_usd"], body["remaining_usd"]) == (
        "monthly",
        "3",
        None,
        None,
    )


def test_a_fixed_window_that_starts_mid_hour_counts_exactly_its_own_spend(session_client, organization, team):
    now = timezone.now()
    starts = hour_of(now) - timedelta(hours=2) + timedelta(minutes=20)
    budget = {
        "amount_usd": Decimal("10"),
        "period": "fixed",
        "starts_at": starts,
        "ends_at": now + timedelta(days=1),
    }
    limits_set(organization=organization, team=team, budget=budget)
    rollup(organization, cost="1", team=team, at=starts - timedelta(minutes=10))  # before the window
    rollup(organization, cost="0.25", team=team, at=starts + timedelta(minutes=5))  # its first part-hour
    rollup(organization, cost="0.5", team=team, at=hour_of(now) - timedelta(minutes=30))  # a whole hour

    body = session_client.get(f"/api/v1/teams/{team.id}/usage").json()

    assert (body["period"], body["period_start"]) == ("fixed", starts.isoformat().replace("+00:00", "Z"))
    assert (body["spent_usd"], body["remaining_usd"]) == ("0.75", "9.25")


def test_before_the_counters_are_loaded_the_logs_figure_is_answered(session_client, organization, team):
    # After a restart (or before the window's first request) the counters hold nothing yet.
    limits_set(
        organization=organization, team=team, budget={"amount_usd": Decimal("10"), "period": "monthly"}
    )
    rollup(organization, cost="4", team=team)

    body = session_client.get(f"/api/v1/teams/{team.id}/usage").json()

    assert (body["spent_usd"], body["reserved_usd"], body["remaining_usd"]) == ("4", "0", "6")


def test_a_member_reads_the_usage_of_their_teams_and_of_their_teams_keys_only(client_for, organization):
    mine, theirs = TeamFactory(organization=organization), TeamFactory(organization=organization)
    my_key, _ = create_api_key(organization, team=mine)
    their_key, _ = create_api_key(organization, team=theirs)
    loose_key, _ = create_api_key(organization)
    member = client_for(organization, "member")
    user = organization.memberships.get(role="member").user
    TeamMembership.objects.create(team=mine, user=user)

    assert member.get(f"/api/v1/teams/{mine.id}/usage").status_code == 200
    assert member.get(f"/api/v1/api-keys/{my_key.id}/usage").status_code == 200
    assert set(member.get(f"/api/v1/api-keys/{my_key.id}").json()["usage"]) == FIELDS
    for url in (
        f"/api/v1/teams/{theirs.id}/usage",
        f"/api/v1/api-keys/{their_key.id}/usage",
        f"/api/v1/api-keys/{loose_key.id}/usage",
    ):
        assert_error(member.get(url), 404, "not_found")
    # The key itself stays readable, as every key is to a member; its usage is not.
    assert member.get(f"/api/v1/api-keys/{their_key.id}").json()["usage"] is None


def test_an_admin_reads_every_teams_and_keys_usage(client_for, organization, team):
    key, _ = create_api_key(organization)
    admin = client_for(organization, "admin")

    assert set(admin.get(f"/api/v1/teams/{team.id}/usage").json()) == FIELDS
    assert set(admin.get(f"/api/v1/api-keys/{key.id}/usage").json()) == FIELDS


def test_another_organizations_usage_is_not_found(session_client, outsider):
    theirs = TeamFactory(organization=outsider.organization)
    their_key, _ = create_api_key(outsider.organization, team=theirs)

    assert_error(session_client.get(f"/api/v1/teams/{theirs.id}/usage"), 404, "not_found")
    assert_error(session_client.get(f"/api/v1/api-keys/{their_key.id}/usage"), 404, "not_found")


def test_reading_usage_bumps_nothing(session_client, organization, team, django_capture_on_commit_callbacks):
    before = local_generation(organization.id)
    with django_capture_on_commit_callbacks(execute=True):
        session_client.get(f"/api/v1/teams/{team.id}/usage")
    assert local_generation(organization.id) == before
