"""Reconcile with apply rebuilds the budget counters: every budget's current window gets the audit
log's spend and counts as loaded, while what requests in flight reserved and the thresholds already
announced stay. Through POST /api/v1/analytics/reconcile, against the counters the proxy admits
requests with (Redis when the suite has one, this process's otherwise)."""

import asyncio
import logging
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from apps.audit.models import SpendRollup
from apps.core.generations import SEED, generation_key, local_generation, new_seed
from apps.core.redis import sync_client
from apps.limits.counters import BudgetCharge, local_counters, redis_counters
from apps.limits.selectors import usd_to_nanos
from apps.limits.services import limits_set
from apps.limits.windows import window_at
from tests.audit.entries import AuditEntryFactory
from tests.factories import TeamFactory, create_api_key

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/analytics/reconcile"


@pytest.fixture(autouse=True)
def _fresh_local_counters():
    local_counters.clear()
    yield
    local_counters.clear()


def nanos(usd: str) -> int:
    return usd_to_nanos(Decimal(usd))


def charge(organization, limits, reserve_usd: str = "0") -> BudgetCharge:
    """The charge the proxy makes for ``limits``' budget in its current window."""
    return BudgetCharge.of(
        str(organization.id),
        str(limits.scope),
        limits.scope_id,
        limits_window(limits),
        usd_to_nanos(limits.budget_usd),
        nanos(reserve_usd),
        limits.budget_thresholds,
    )


def limits_window(limits):
    return window_at(
        limits.budget_period,
        timezone.now(),
        starts_at=limits.budget_starts_at,
        ends_at=limits.budget_ends_at,
    )


def engine():
    return redis_counters if sync_client() is not None else local_counters


def counters(budget: BudgetCharge):
    return engine().usage(budget.key)


def seed(budget: BudgetCharge, usd: str) -> None:
    """The window's spend so far loaded, as the proxy's first request in it does."""
    asyncio.run(engine().seed(now=timezone.now(), spent=[(budget, nanos(usd))]))


def admit(organization, budget: BudgetCharge, request_id: str):
    client = sync_client()
    # Read as the proxy does: a counter nobody bumped yet is seeded, never 0 (apps/core/generations.py).
    generation = (
        int(client.eval(SEED, 1, generation_key(str(organization.id)), new_seed()))
        if client
        else local_generation(organization.id)
    )
    return asyncio.run(
        engine().admit(
            key_id=str(uuid.uuid4()),
            organization_id=str(organization.id),
            expected_generation=generation,
            request_id=request_id,
            now=timezone.now(),
            reservation_seconds=600,
            rates=[],
            budgets=[budget],
        )
    )


def settle(budget: BudgetCharge, request_id: str, usd: str):
    """The crossings announced."""
    return asyncio.run(
        engine().settle(request_id=request_id, now=timezone.now(), budgets=[(budget, nanos(usd))], tokens=[])
    )


def logged(organization, *, cost: str, team=None, api_key=None, at=None) -> None:
    """A request in the audit log that cost ``cost``: output tokens of gpt-4o at its built-in price
    of 10 USD a million, so that reconcile, which prices the logged usage again, agrees."""
    AuditEntryFactory(
        organization=organization,
        created_at=at or timezone.now() - timedelta(seconds=2),
        team_id=team.id if team else None,
        api_key_id=api_key.id if api_key else None,
        model="gpt-4o",
        input_tokens=0,
        output_tokens=int(Decimal(cost) * 100_000),
        cost_usd=Decimal(cost),
    )


def reconcile(client, start, end, apply=True) -> dict:
    response = client.post(
        URL, {"from": start.isoformat(), "to": end.isoformat(), "apply": apply}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_apply_sets_every_budget_window_to_the_logs_spend_and_keeps_reservations_and_flags(
    session_client, organization, outsider
):
    team = TeamFactory(organization=organization)
    key, _ = create_api_key(organization, team=team)
    org_limits = limits_set(
        organization=organization, budget={"amount_usd": Decimal("100"), "period": "monthly"}
    )
    team_limits = limits_set(
        organization=organization, team=team, budget={"amount_usd": Decimal("10"), "period": "daily"}
    )
    key_limits = limits_set(
        organization=organization,
        api_key=key,
        budget={"amount_usd": Decimal("1"), "period": "weekly", "thresholds": [50, 80, 100]},
    )
    for _ in range(3):
        logged(organization, cost="0.1", team=team, api_key=key)
    logged(organization, cost="0.05")  # a request of no team and no key: the organization's only
    org_budget, team_budget = charge(organization, org_limits), charge(organization, team_limits)
    key_budget = charge(organization, key_limits)

    # The organization's counters are right. The team's were lost (Redis emptied, or never loaded).
    seed(org_budget, "0.35")
    # The key's: a request settled at 0.6 (t50 announced), one still in flight with 0.2 reserved,
    # then 5 charged that the log never saw (t80 and t100 announced).
    seed(key_budget, "0")
    first, second = charge(organization, key_limits, "0.1"), charge(organization, key_limits, "0.2")
    assert admit(organization, first, "first").admitted
    assert admit(organization, second, "second").admitted
    assert [c.threshold for c in settle(first, "first", "0.6")] == [50]
    assert [c.threshold for c in settle(key_budget, "counted-twice", "5")] == [80, 100]
    # Another organization's counters, wrong by the same measure, are not this reconcile's to fix.
    their_team = TeamFactory(organization=outsider.organization)
    their_limits = limits_set(
        organization=outsider.organization,
        team=their_team,
        budget={"amount_usd": Decimal("10"), "period": "daily"},
    )
    their_budget = charge(outsider.organization, their_limits)
    seed(their_budget, "7")

    now = timezone.now()
    report = reconcile(session_client, now - timedelta(hours=2), now + timedelta(hours=1))

    rebuilt = sorted(report["budget_counters"]["rebuilt"], key=lambda change: change["scope"])
    assert report["budget_counters"]["error"] is None
    assert [(c["scope"], c["scope_id"], c["spent_before_usd"], c["spent_usd"]) for c in rebuilt] == [
        ("api_key", str(key.id), "5.6", "0.3"),
        ("team", str(team.id), None, "0.3"),
    ]
    assert rebuilt[1]["period_start"] == team_budget.window.start.isoformat().replace("+00:00", "Z")
    assert (counters(key_budget).spent_nanos, counters(key_budget).reserved_nanos) == (
        nanos("0.3"),
        nanos("0.2"),
    )
    assert counters(team_budget).spent_nanos == nanos("0.3")
    assert counters(org_budget).spent_nanos == nanos("0.35")
    assert counters(their_budget).spent_nanos == nanos("7")
    usage = session_client.get(f"/api/v1/api-keys/{key.id}/usage").json()
    assert (usage["spent_usd"], usage["reserved_usd"], usage["remaining_usd"]) == ("0.3", "0.2", "0.5")

    # The team's window counts as loaded: the next request is admitted without loading it again.
    admission = admit(organization, charge(organization, team_limits, "0.5"), "third")
    assert admission.admitted and admission.unseeded == []
    # The request in flight settles against its own reservation; t50, announced before, is not again.
    assert settle(second, "second", "0.3") == []
    assert counters(key_budget) == type(counters(key_budget))(nanos("0.6"), 0)

    # Nothing left to change the second time (the request settled since is in no log yet: the lag).
    assert reconcile(session_client, now - timedelta(hours=2), now + timedelta(hours=1))[
        "budget_counters"
    ] == {
        "rebuilt": [{**rebuilt[0], "spent_before_usd": "0.6"}],
        "error": None,
    }


def test_a_budget_whose_window_is_outside_the_period_is_untouched(session_client, organization):
    now = timezone.now()
    recent, older = TeamFactory(organization=organization), TeamFactory(organization=organization)
    recent_limits = limits_set(
        organization=organization,
        team=recent,
        budget={
            "amount_usd": Decimal("10"),
            "period": "fixed",
            "starts_at": now - timedelta(hours=1),
            "ends_at": now + timedelta(days=1),
        },
    )
    older_limits = limits_set(
        organization=organization,
        team=older,
        budget={
            "amount_usd": Decimal("10"),
            "period": "fixed",
            "starts_at": now - timedelta(days=3),
            "ends_at": now + timedelta(days=1),
        },
    )
    logged(organization, cost="0.4", team=older, at=now - timedelta(hours=26))
    logged(organization, cost="0.1", team=older)  # after the period, in the window: counted too
    logged(organization, cost="0.2", team=recent)
    recent_budget, older_budget = charge(organization, recent_limits), charge(organization, older_limits)
    seed(recent_budget, "9")
    seed(older_budget, "9")

    report = reconcile(session_client, now - timedelta(hours=30), now - timedelta(hours=2))

    assert [(c["scope_id"], c["spent_usd"]) for c in report["budget_counters"]["rebuilt"]] == [
        (str(older.id), "0.5")
    ]
    assert counters(older_budget).spent_nanos == nanos("0.5")
    assert counters(recent_budget).spent_nanos == nanos("9")


def test_a_dry_run_leaves_the_budget_counters_alone(session_client, organization, team):
    limits = limits_set(
        organization=organization, team=team, budget={"amount_usd": Decimal("10"), "period": "daily"}
    )
    budget = charge(organization, limits)
    seed(budget, "3")
    logged(organization, cost="1", team=team)
    now = timezone.now()

    report = reconcile(session_client, now - timedelta(hours=1), now + timedelta(hours=1), apply=False)

    assert report["budget_counters"] is None
    assert counters(budget).spent_nanos == nanos("3")


@pytest.mark.skipif(not settings.REDIS_URL, reason="Redis is not configured")
def test_redis_unreachable_is_reported_and_the_rollups_are_rebuilt_all_the_same(
    session_client, organization, team, caplog
):
    limits_set(organization=organization, team=team, budget={"amount_usd": Decimal("10"), "period": "daily"})
    logged(organization, cost="1", team=team)  # no rollup yet: reconcile finds a difference
    now = timezone.now()

    with caplog.at_level(logging.WARNING, logger="apps.audit.reconcile"):
        sync_client.cache_clear()
        try:
            with override_settings(REDIS_URL="redis://127.0.0.1:9/0"):  # nothing listens there
                report = reconcile(session_client, now - timedelta(hours=1), now + timedelta(hours=1))
        finally:
            sync_client.cache_clear()

    assert report["applied"] is True
    assert SpendRollup.objects.filter(organization=organization, team_id=str(team.id)).get().cost_usd == 1
    assert report["budget_counters"]["rebuilt"] == []
    assert "Redis could not be reached" in report["budget_counters"]["error"]
    assert "could not rebuild the budget counters" in caplog.text
