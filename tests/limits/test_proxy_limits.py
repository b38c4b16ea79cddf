"""Budgets and rate limits at the proxy, through HTTP against the gateway's ASGI app and a loopback
upstream: in Redis when the suite has one, in this process otherwise (the embedded default)."""

import contextlib
from datetime import timedelta
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.events.models import Event
from apps.limits import services as limits_services
from apps.outbox.outbox import outbox
from apps.proxy.limit_refusals import duration
from apps.proxy.settling import wait_for_settlements
from tests.audit.entries import AuditEntryFactory
from tests.factories import TeamFactory, create_api_key
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer

pytestmark = pytest.mark.django_db(transaction=True)

# gpt-4o-mini: $0.15 per million input tokens, $0.60 per million output tokens (the shipped price).
CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


@pytest.fixture
async def routed(organization, upstream):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-limits")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    return upstream


@pytest.fixture
async def team(organization):
    return await database_sync_to_async(TeamFactory)(organization=organization, slug="research")


@pytest.fixture
async def team_key(organization, team):
    return (await database_sync_to_async(create_api_key)(organization, team=team))[1]


@pytest.fixture
async def plain_key(organization):
    return (await database_sync_to_async(create_api_key)(organization))[1]


set_limits = database_sync_to_async(limits_services.limits_set)


async def chat(proxy, secret, body=CHAT, **headers):
    response = await proxy.post("/v1/chat/completions", json=body, headers={**bearer(secret), **headers})
    await wait_for_settlements()
    return response


async def events(event_type):
    assert outbox().flush()
    return [event async for event in Event.objects.filter(type=event_type).order_by("created_at")]


# --- Rate limits ------------------------------------------------------------------------------------


async def test_without_a_limit_there_are_no_rate_limit_headers(proxy, routed, plain_key):
    response = await chat(proxy, plain_key)
    assert response.status_code == 200
    assert not [name for name in response.headers if name.startswith("x-ratelimit")]


async def test_a_keys_requests_per_minute_hold_and_the_next_is_told_when_to_retry(
    proxy, organization, routed, plain_key
):
    api_key = await database_sync_to_async(lambda: organization.api_keys.get())()
    await set_limits(organization=organization, api_key=api_key, rate_limits={"rpm": 3, "tpm": None})
    answers = [await chat(proxy, plain_key) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    first, refused = answers[0], answers[3]
    assert first.headers["x-ratelimit-limit-requests"] == "3"
    assert first.headers["x-ratelimit-remaining-requests"] == "2"
    assert first.headers["x-ratelimit-reset-requests"] == "20s"
    assert "x-ratelimit-limit-tokens" not in first.headers
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert 1 <= int(refused.headers["retry-after"]) <= 20
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert len(routed.requests) == 3  # the refused one never reached the upstream


async def test_the_organizations_limit_is_each_keys_default(proxy, organization, routed, plain_key):
    other = (await database_sync_to_async(create_api_key)(organization))[1]
    await set_limits(organization=organization, rate_limits={"rpm": 1, "tpm": None})
    assert (await chat(proxy, plain_key)).status_code == 200
    assert (await chat(proxy, plain_key)).status_code == 429
    assert (await chat(proxy, other)).status_code == 200  # a bucket of its own


async def test_a_limit_of_zero_refuses_every_request_and_says_so(proxy, organization, routed, team, team_key):
    await set_limits(organization=organization, team=team, rate_limits={"rpm": 0, "tpm": None})
    response = await chat(proxy, team_key)
    assert response.status_code == 429
    assert "0 requests per minute" in response.json()["error"]["message"]
    assert response.headers["x-should-retry"] == "false"
    assert routed.requests == []


async def test_the_most_restrictive_limit_is_reported(proxy, organization, routed, team, team_key):
    api_key = await database_sync_to_async(lambda: organization.api_keys.get())()
    await set_limits(organization=organization, api_key=api_key, rate_limits={"rpm": 100, "tpm": None})
    await set_limits(organization=organization, team=team, rate_limits={"rpm": 10, "tpm": 10_000})
    response = await chat(proxy, team_key)
    assert response.headers["x-ratelimit-limit-requests"] == "10"
    assert response.headers["x-ratelimit-remaining-requests"] == "9"
    assert response.headers["x-ratelimit-limit-tokens"] == "10000"


async def test_tokens_per_minute_count_the_answer_and_refuse_what_cannot_fit(
    proxy, organization, routed, team, team_key
):
    await set_limits(organization=organization, team=team, rate_limits={"rpm": None, "tpm": 60})
    big = {**CHAT, "max_tokens": 100}
    too_big = await chat(proxy, team_key, big)
    assert too_big.status_code == 429
    assert too_big.headers["x-should-retry"] == "false"
    assert "Request too large" in too_big.json()["error"]["message"]
    ok = await chat(proxy, team_key)
    assert ok.status_code == 200
    assert int(ok.headers["x-ratelimit-remaining-tokens"]) < 60


async def test_a_rate_limit_change_applies_to_the_next_request(proxy, organization, routed, plain_key):
    api_key = await database_sync_to_async(lambda: organization.api_keys.get())()
    await set_limits(organization=organization, api_key=api_key, rate_limits={"rpm": 1, "tpm": None})
    assert (await chat(proxy, plain_key)).status_code == 200
    assert (await chat(proxy, plain_key)).status_code == 429
    await set_limits(organization=organization, api_key=api_key, rate_limits=None)
    response = await chat(proxy, plain_key)
    assert response.status_code == 200
    assert "x-ratelimit-limit-requests" not in response.headers


def test_reset_durations_read_like_openais():
    assert [duration(ms) for ms in (20, 1000, 1500, 360_000, 90_500)] == [
        "20ms",
        "1s",
        "1.5s",
        "6m0s",
        "1m30.5s",
    ]


# --- Budgets ------------------------------------------------------------------------------------------


def daily(amount: str, thresholds=(50, 80, 100)) -> dict:
    return {"amount_usd": Decimal(amount), "period": "daily", "thresholds": list(thresholds)}


async def test_a_team_budget_refuses_what_would_not_fit_before_any_upstream_call(
    proxy, organization, routed, team, team_key
):
    # One request reserves at most (hi + overhead) input tokens and 5 output tokens of gpt-4o-mini:
    # well under a millionth of a dollar; a budget of 0.000001 USD holds about 2 such requests.
    await set_limits(organization=organization, team=team, budget=daily("0.00002"))
    statuses = []
    for _ in range(40):
        statuses.append((await chat(proxy, team_key)).status_code)
        if statuses[-1] != 200:
            break
    assert statuses[-1] == 402 and statuses.count(200) >= 1
    refused = await chat(proxy, team_key)
    assert refused.status_code == 402
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("insufficient_quota", "budget_exceeded")
    assert "team's budget" in error["message"]
    assert refused.headers["x-should-retry"] == "false"
    assert len(routed.requests) == statuses.count(200)
    assert outbox().flush()
    spent = sum([entry.cost_usd async for entry in AuditEntry.objects.filter(status=200)], Decimal(0))
    assert spent <= Decimal("0.00002")  # max_tokens set: the reservation is the true maximum


async def test_spend_before_the_budget_was_set_counts(proxy, organization, routed, team, team_key):
    await database_sync_to_async(AuditEntryFactory)(
        organization=organization, team_id=team.id, created_at=timezone.now(), cost_usd=Decimal("0.99")
    )
    await set_limits(organization=organization, team=team, budget=daily("1.00"))
    assert (await chat(proxy, team_key, {**CHAT, "max_tokens": 1_000_000})).status_code == 402
    assert (await chat(proxy, team_key)).status_code == 200


async def test_every_budget_that_applies_is_checked(proxy, organization, routed, team, team_key, plain_key):
    await set_limits(organization=organization, team=team, budget=daily("100"))
    await set_limits(organization=organization, budget=daily("0.000001"))
    for secret in (team_key, plain_key):
        response = await chat(proxy, secret)
        assert response.status_code == 402
        assert "organization's budget" in response.json()["error"]["message"]


async def test_a_budget_change_applies_to_the_next_request(proxy, organization, routed, team, team_key):
    await set_limits(organization=organization, team=team, budget=daily("0.000001"))
    assert (await chat(proxy, team_key)).status_code == 402
    await set_limits(organization=organization, team=team, budget=daily("10"))
    assert (await chat(proxy, team_key)).status_code == 200


async def test_a_fixed_window_outside_its_dates_does_not_apply(proxy, organization, routed, team, team_key):
    later = timezone.now() + timedelta(days=1)
    fixed = {
        "amount_usd": Decimal("0.000001"),
        "period": "fixed",
        "starts_at": later,
        "ends_at": later + timedelta(days=1),
    }
    await set_limits(organization=organization, team=team, budget=fixed)
    assert (await chat(proxy, team_key)).status_code == 200


async def test_thresholds_and_the_first_refusal_are_announced_once_each(
    proxy, organization, routed, team, team_key
):
    await set_limits(organization=organization, team=team, budget=daily("0.00002", thresholds=(1, 100)))
    for _ in range(60):
        if (await chat(proxy, team_key)).status_code == 402:
            break
    for _ in range(3):
        assert (await chat(proxy, team_key)).status_code == 402
    reached = await events("budget.threshold_reached")
    assert [event.data["threshold"] for event in reached] == [1]
    exceeded = await events("budget.exceeded")
    assert len(exceeded) == 1
    assert exceeded[0].data["scope"] == "team" and exceeded[0].data["scope_id"] == str(team.id)
    assert exceeded[0].data["budget_usd"] == "0.000020000"
    assert str(exceeded[0].organization_id) == str(organization.id)


async def test_a_failed_request_costs_nothing_and_gives_its_reservation_back(
    proxy, organization, routed, team, team_key
):
    await set_limits(organization=organization, team=team, budget=daily("0.000005"))
    routed.behave("status", status=500, times=10)
    assert (await chat(proxy, team_key)).status_code == 502
    routed.reset()
    assert (await chat(proxy, team_key)).status_code == 200


# --- Redis unreachable ----------------------------------------------------------------------------------


@contextlib.contextmanager
def redis_down():
    """Redis configured but nothing answers: a closed port on loopback."""
    from django.test import override_settings

    from apps.core import redis as gateway_redis

    def forget_clients():
        gateway_redis.sync_client.cache_clear()
        gateway_redis._async_clients.clear()

    forget_clients()
    with override_settings(REDIS_URL="redis://127.0.0.1:9/0"):
        yield
    forget_clients()


async def set_fail_mode(organization, mode):
    from apps.organizations.services import organization_update

    await database_sync_to_async(organization_update)(
        organization=organization, data={"limits_fail_mode": mode}
    )


@pytest.mark.parametrize("mode, status", [("open", 200), ("closed", 503)])
async def test_with_redis_unreachable_the_organization_chooses_to_serve_or_refuse(
    proxy, organization, routed, team, team_key, plain_key, mode, status
):
    await set_limits(
        organization=organization, team=team, budget=daily("10"), rate_limits={"rpm": 5, "tpm": None}
    )
    await set_fail_mode(organization, mode)
    with redis_down():
        with_limits = await chat(proxy, team_key)
        without = await chat(proxy, plain_key)
    assert with_limits.status_code == status
    if status == 503:
        assert with_limits.json()["error"]["code"] == "limits_unavailable"
        assert with_limits.headers["retry-after"] == "5"
    assert not [name for name in with_limits.headers if name.startswith("x-ratelimit")]
    assert without.status_code == 200  # no limit applies to this key: served either way


async def test_a_key_update_reaches_the_next_request_although_the_key_was_cached(
    proxy, organization, routed, plain_key
):
    from apps.keys.services import api_key_update

    assert (await chat(proxy, plain_key)).status_code == 200  # the key is held by this worker now
    api_key = await database_sync_to_async(lambda: organization.api_keys.get())()
    await database_sync_to_async(api_key_update)(api_key=api_key, data={"allowed_data_regions": ["eu"]})
    response = await chat(proxy, plain_key)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_key_in_region"  # the upstream key is in "us"


# --- Through the OpenAI SDK, and across midnight ---------------------------------------------------------


async def test_the_openai_sdk_raises_its_own_errors_for_a_rate_limit_and_a_spent_budget(
    organization, routed, team, team_key
):
    import httpx
    import openai

    from gateway_project.asgi import application

    transport = httpx.ASGITransport(app=application, client=("203.0.113.7", 5000))
    async with openai.AsyncOpenAI(
        api_key=team_key,
        base_url="http://gateway/v1",
        http_client=httpx.AsyncClient(transport=transport),
        max_retries=0,
    ) as client:
        await set_limits(organization=organization, team=team, rate_limits={"rpm": 1, "tpm": None})
        raw = await client.chat.completions.with_raw_response.create(model="fast", messages=CHAT["messages"])
        assert raw.headers["x-ratelimit-remaining-requests"] == "0"
        with pytest.raises(openai.RateLimitError) as limited:
            await client.chat.completions.create(model="fast", messages=CHAT["messages"])
        assert limited.value.code == "rate_limit_exceeded"
        await set_limits(organization=organization, team=team, rate_limits=None, budget=daily("0.000001"))
        with pytest.raises(openai.APIStatusError) as refused:
            await client.chat.completions.create(model="fast", messages=CHAT["messages"], max_tokens=5)
        assert refused.value.status_code == 402
        assert refused.value.code == "budget_exceeded"
        assert refused.value.type == "insufficient_quota"


async def test_a_new_day_starts_from_zero_and_a_request_in_flight_at_midnight_counts_for_its_own_day(
    proxy, organization, routed, team, team_key, time_machine
):
    from datetime import UTC, datetime

    from apps.limits.counters import budget_key, counters
    from apps.limits.models import Scope
    from apps.limits.windows import window_at

    def spent_on(moment) -> int:
        key = budget_key(str(organization.id), Scope.TEAM, str(team.id), window_at("daily", moment))
        return counters().usage(key).spent_nanos

    before_midnight = datetime(2026, 11, 23, 23, 59, 59, 500_000, tzinfo=UTC)
    time_machine.move_to(before_midnight, tick=True)
    await set_limits(organization=organization, team=team, budget=daily("0.00001"))
    answered = 0
    while (await chat(proxy, team_key)).status_code == 200:
        answered += 1
    assert answered >= 2 and spent_on(before_midnight) > 0
    # Over the last budget of the day: the upstream takes a moment, the clock passes midnight meanwhile.
    routed.behave("slow", delay=0.4, times=1)
    time_machine.move_to(datetime(2026, 11, 23, 23, 59, 59, 900_000, tzinfo=UTC), tick=True)
    await set_limits(organization=organization, team=team, budget=daily("1"))  # room for one more
    day_one = spent_on(before_midnight)
    assert (await chat(proxy, team_key)).status_code == 200
    after_midnight = datetime(2026, 11, 24, 0, 0, 0, 500_000, tzinfo=UTC)
    assert timezone.now() >= after_midnight.replace(microsecond=0)
    assert spent_on(before_midnight) > day_one  # charged to the day it was let through
    assert spent_on(after_midnight) == 0
    await set_limits(organization=organization, team=team, budget=daily("0.00001"))
    assert (await chat(proxy, team_key)).status_code == 200  # a new day: the small budget has room again


async def test_budgets_hold_on_the_responses_and_messages_apis_too(
    proxy, organization, routed, team, team_key
):
    """The reservation counts each API's own fields (input items, max_output_tokens; the system
    prompt, max_tokens), and each refusal leaves in its API's shape."""
    await set_limits(organization=organization, team=team, budget=daily("0.00002"))
    response = await proxy.post(
        "/v1/responses",
        json={"model": "fast", "input": "hi", "max_output_tokens": 1_000_000},
        headers=bearer(team_key),
    )
    message = await proxy.post(
        "/v1/messages",
        json={"model": "fast", "max_tokens": 1_000_000, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": team_key},
    )
    await wait_for_settlements()

    assert response.status_code == 402
    assert response.json()["error"]["code"] == "budget_exceeded"
    assert message.status_code == 402
    assert message.json()["error"]["type"] == "billing_error"
    assert message.headers["x-gateway-error-code"] == "budget_exceeded"
    assert routed.requests == []
    allowed = await proxy.post(
        "/v1/responses",
        json={"model": "fast", "input": "hi", "max_output_tokens": 16},
        headers=bearer(team_key),
    )
    assert allowed.status_code == 200
