"""Reconcile: the spend rollups against what the audit log says (the budget counters it also
rebuilds: tests/limits/test_budget_reconcile.py)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.db.models import Sum
from django.utils import timezone
from rest_framework.test import APIClient

from apps.audit.models import AuditEntry, SpendRollup
from apps.catalog.services import model_price_create
from apps.core.redis import redis_key, sync_client
from apps.outbox.outbox import outbox
from tests.conftest import login
from tests.factories import TeamFactory, create_api_key
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/analytics/reconcile"
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture
def admin_client(owner) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {login(client, owner.user.email)['access']}")
    return client


async def send_traffic(proxy, organization, upstream, outsider=None) -> None:
    """Requests of two teams and two keys through the gateway; the outsider's too, if given."""
    await add_provider_key_async(organization, upstream)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    teams = [await database_sync_to_async(TeamFactory)(organization=organization) for _ in range(2)]
    for team in teams:
        _, secret = await database_sync_to_async(create_api_key)(organization, team=team)
        for _ in range(3):
            response = await proxy.post(
                "/v1/chat/completions", json={"model": "fast", "messages": HELLO}, headers=bearer(secret)
            )
            assert response.status_code == 200
    if outsider is not None:
        await add_provider_key_async(outsider.organization, upstream)
        _, secret = await database_sync_to_async(create_api_key)(outsider.organization)
        await proxy.post(
            "/v1/chat/completions", json={"model": "openai/gpt-4o", "messages": HELLO}, headers=bearer(secret)
        )
    assert outbox().flush()


def period() -> dict:
    now = timezone.now()
    return {"from": (now - timedelta(hours=2)).isoformat(), "to": (now + timedelta(hours=1)).isoformat()}


async def test_the_aggregates_match_the_log_after_ordinary_traffic(
    proxy, organization, upstream, admin_client
):
    await send_traffic(proxy, organization, upstream)

    report = (await database_sync_to_async(admin_client.post)(URL, period(), format="json")).json()

    assert report["differences"] == []
    assert report["applied"] is False
    logged = await database_sync_to_async(
        lambda: AuditEntry.objects.aggregate(total=Sum("cost_usd"))["total"]
    )()
    assert Decimal(report["expected"]["cost_usd"]) == Decimal(report["found"]["cost_usd"]) == logged > 0
    assert report["expected"]["requests"] == 6


async def test_a_degraded_secondary_path_is_reported_then_corrected_and_reconcile_is_idempotent(
    proxy, organization, outsider, upstream, admin_client
):
    await send_traffic(proxy, organization, upstream, outsider=outsider)
    # The secondary path lost one team's updates and counted another's twice.
    rollups = SpendRollup.objects.filter(organization=organization)
    # (One row per team, or two if the traffic straddled an hour: degrade every row of each team.)
    rows = await database_sync_to_async(lambda: list(rollups.order_by("team_id", "hour")))()
    lost_team, doubled_team = sorted({row.team_id for row in rows})
    for row in rows:
        if row.team_id == lost_team:
            await row.adelete()
        else:
            row.requests *= 2
            row.cost_usd *= 2
            await row.asave()

    dry_run = (await database_sync_to_async(admin_client.post)(URL, period(), format="json")).json()

    assert dry_run["applied"] is False and dry_run["budget_counters"] is None
    assert {
        (d["team_id"], d["expected"]["requests"], d["found"]["requests"]) for d in dry_run["differences"]
    } == {
        (lost_team, 3, 0),
        (doubled_team, 3, 6),
    }
    assert all(d["provider"] == "openai" for d in dry_run["differences"])
    assert {str(outsider.organization.id)} & {d["team_id"] for d in dry_run["differences"]} == set()

    applied = (
        await database_sync_to_async(admin_client.post)(URL, {**period(), "apply": True}, format="json")
    ).json()
    again = (
        await database_sync_to_async(admin_client.post)(URL, {**period(), "apply": True}, format="json")
    ).json()

    assert applied["applied"] is True
    assert applied["budget_counters"] == {"rebuilt": [], "error": None}  # the organization has no budget
    assert again["differences"] == [] and again["applied"] is False
    logged = await database_sync_to_async(
        lambda: AuditEntry.objects.filter(organization=organization).aggregate(total=Sum("cost_usd"))["total"]
    )()
    rolled = await database_sync_to_async(lambda: rollups.aggregate(total=Sum("cost_usd"))["total"])()
    assert rolled == logged
    # The outsider's aggregates were never touched.
    assert await SpendRollup.objects.filter(organization=outsider.organization).aexists()


@pytest.mark.skipif(not settings.REDIS_URL, reason="Redis is not configured")
async def test_the_ingest_writes_no_spend_counters_to_redis(proxy, organization, upstream):
    # Budgets are charged by the proxy alone (docs/budgets.md): the ingest keeps only the rollups.
    await send_traffic(proxy, organization, upstream)

    assert await SpendRollup.objects.filter(organization=organization).aexists()
    assert (
        list(sync_client().scan_iter(match=redis_key("spend", str(organization.id), "*"), count=1000)) == []
    )


async def test_a_price_changed_after_the_fact_shows_as_a_difference(
    proxy, organization, upstream, admin_client
):
    await send_traffic(proxy, organization, upstream)
    await database_sync_to_async(model_price_create)(
        organization=organization,
        data={
            "provider": "openai",
            "model": "gpt-4o-mini",
            "input_per_mtok": "100",
            "output_per_mtok": "100",
            "effective_from": timezone.now() - timedelta(days=1),
        },
    )

    report = (await database_sync_to_async(admin_client.post)(URL, period(), format="json")).json()

    assert len(report["differences"]) == 2
    tokens = report["expected"]["input_tokens"] + report["expected"]["output_tokens"]
    assert Decimal(report["expected"]["cost_usd"]) == Decimal(tokens * 100) / Decimal(1_000_000)


def test_an_empty_period_reconciles_to_nothing(admin_client):
    start = (timezone.now() - timedelta(days=3)).strftime("%Y-%m-%d")
    end = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%d")
    for apply in (False, True):
        report = admin_client.post(URL, {"from": start, "to": end, "apply": apply}, format="json")
        assert report.status_code == 200, report.content
        assert report.json()["differences"] == []
        assert report.json()["expected"]["requests"] == 0
        assert report.json()["applied"] is False


@pytest.mark.parametrize(
    "body",
    [
        {"from": "2026-02-01", "to": "2026-01-01"},
        {"from": "yesterday"},
        {"period": "fortnight"},
        {},
        {"from": 20260101},
        {"from": "2020-01-01", "to": "2026-01-01"},
        {"period": "24h", "apply": "maybe"},
        {"period": "24h", "apply": 0},  # JSON true or false only: 0 was taken as a dry run
        {"period": "24h", "apply": "true"},
    ],
)
def test_it_refuses_a_bad_period(admin_client, body):
    response = admin_client.post(URL, body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"


def test_it_refuses_a_period_that_retention_may_have_emptied(admin_client, organization):
    organization.log_retention_days = 7
    organization.save(update_fields=["log_retention_days"])
    start = (timezone.now() - timedelta(days=8)).isoformat()

    response = admin_client.post(URL, {"from": start, "apply": True}, format="json")

    assert response.status_code == 400
    assert "keeps 7 days" in response.json()["error"]["fields"]["from"][0]


def test_members_cannot_reconcile(organization, client_for):
    member = client_for(organization, "member")
    assert member.post(URL, {"period": "24h"}, format="json").status_code == 403
