"""Budgets and rate limits across processes: two Daphne servers sharing PostgreSQL and Redis, as a
deployment runs them, hit at once by concurrent clients through a loopback upstream."""

import asyncio
import time
from decimal import Decimal

import httpx
import pytest
from django.conf import settings

from apps.core.redis import sync_client
from apps.events.models import Event
from apps.limits.counters import budget_key
from apps.limits.models import Scope
from apps.limits.services import limits_set
from apps.limits.windows import window_at
from apps.outbox.outbox import outbox
from tests.factories import TeamFactory, create_api_key
from tests.proxy.conftest import add_alias, add_provider_key
from tests.servers import daphne_server

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
# What one CHAT can cost at most (docs/budgets.md): 10 input tokens (the 2 bytes of "hi" and a
# message's 8), 5 output tokens, at gpt-4o-mini's $0.15 and $0.60 a million.
MAX_COST = Decimal("0.0000045")


@pytest.fixture
def gateways(tmp_path):
    if not settings.REDIS_URL or settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        pytest.skip("two processes share their counters through Redis and PostgreSQL")
    # One spool directory for both, this test process's: its outbox writes what they spooled.
    shared = {"GATEWAY_OUTBOX_DIR": str(settings.GATEWAY_OUTBOX_DIR)}
    with daphne_server(tmp_path, **shared) as first, daphne_server(tmp_path, **shared) as second:
        yield first, second


@pytest.fixture
def team(organization, upstream):
    add_provider_key(organization, upstream, secret="sk-upstream-across")
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    return TeamFactory(organization=organization)


@pytest.fixture
def team_key(organization, team):
    return create_api_key(organization, team=team)[1]


async def burst(gateways, secret: str, count: int, body=CHAT) -> list[httpx.Response]:
    """``count`` requests at once, alternately to each server."""
    async with httpx.AsyncClient(timeout=30) as client:
        return await asyncio.gather(
            *(
                client.post(
                    f"{gateways[i % 2]}/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {secret}"},
                )
                for i in range(count)
            )
        )


def run_burst(gateways, secret: str, count: int, body=CHAT) -> list[httpx.Response]:
    return asyncio.run(burst(gateways, secret, count, body))


def spent_in_redis(organization, team) -> tuple[int, int]:
    from django.utils import timezone

    window = window_at("daily", timezone.now())
    spent, reserved = sync_client().hmget(
        budget_key(str(organization.id), Scope.TEAM, str(team.id), window), "spent", "reserved"
    )
    return int(spent or 0), int(reserved or 0)


def settled(organization, team, expected_nanos: int) -> tuple[int, int]:
    """The counters once every answered request has settled (each server settles just after sending)."""
    deadline = time.monotonic() + 5
    spent, reserved = spent_in_redis(organization, team)
    while (spent, reserved) != (expected_nanos, 0) and time.monotonic() < deadline:
        time.sleep(0.02)
        spent, reserved = spent_in_redis(organization, team)
    return spent, reserved


def test_a_burst_against_a_small_team_budget_never_overshoots_it(
    gateways, organization, team, team_key, upstream
):
    budget = Decimal("0.00004")  # room for 8 requests' maximum cost at once
    limits_set(organization=organization, team=team, budget={"amount_usd": budget, "period": "daily"})
    answers = run_burst(gateways, team_key, 50)
    statuses = [answer.status_code for answer in answers]
    served = [answer for answer in answers if answer.status_code == 200]
    assert set(statuses) == {200, 402}
    # At least what the reservations fit; more when earlier answers settled (for less) in time.
    assert len(served) >= int(budget / MAX_COST)
    cost = sum(Decimal(answer.headers["x-gateway-cost-usd"]) for answer in served)
    assert 0 < cost <= budget  # max_tokens is set: the overshoot bound is zero
    assert len(upstream.requests) == len(served)  # a refused request reaches no upstream
    spent, reserved = settled(organization, team, int(cost * 10**9))
    assert (spent, reserved) == (int(cost * 10**9), 0)


def test_a_rate_limit_holds_exactly_across_both_processes(gateways, organization, team, team_key):
    limits_set(organization=organization, team=team, rate_limits={"rpm": 10, "tpm": None})
    answers = run_burst(gateways, team_key, 30)
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] * 10 + [429] * 20
    refused = next(answer for answer in answers if answer.status_code == 429)
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.headers["x-ratelimit-limit-requests"] == "10"


def test_a_budget_change_applies_in_both_processes_at_once(gateways, organization, team, team_key):
    def one_each():
        return [
            httpx.post(
                f"{url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {team_key}"}
            )
            for url in gateways
        ]

    assert [r.status_code for r in one_each()] == [200, 200]  # both hold the configuration now
    limits_set(
        organization=organization, team=team, budget={"amount_usd": Decimal("0.000001"), "period": "daily"}
    )
    assert [r.status_code for r in one_each()] == [402, 402]
    limits_set(organization=organization, team=team, budget={"amount_usd": Decimal("5"), "period": "daily"})
    assert [r.status_code for r in one_each()] == [200, 200]
    limits_set(organization=organization, team=team, budget=None, rate_limits={"rpm": 0, "tpm": None})
    assert [r.status_code for r in one_each()] == [429, 429]


def test_each_threshold_is_announced_once_whichever_process_crosses_it(
    tmp_path, organization, team, team_key, upstream
):
    if not settings.REDIS_URL or settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        pytest.skip("two processes share their counters through Redis and PostgreSQL")
    limits_set(
        organization=organization,
        team=team,
        budget={"amount_usd": Decimal("0.00004"), "period": "daily", "thresholds": [25, 50, 75, 100]},
    )
    shared = {"GATEWAY_OUTBOX_DIR": str(settings.GATEWAY_OUTBOX_DIR)}
    with daphne_server(tmp_path, **shared) as first, daphne_server(tmp_path, **shared) as second:
        for _ in range(4):
            run_burst((first, second), team_key, 10)
        spent, _ = spent_in_redis(organization, team)
    # The servers have stopped: everything they spooled is sealed for the ingest.
    assert outbox().flush()
    reached = sorted(
        event.data["threshold"] for event in Event.objects.filter(type="budget.threshold_reached")
    )
    crossed = [t for t in (25, 50, 75, 100) if spent * 100 >= t * 40_000]
    assert reached == crossed and len(crossed) >= 3
    assert Event.objects.filter(type="budget.exceeded").count() == 1
