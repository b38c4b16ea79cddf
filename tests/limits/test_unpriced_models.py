"""Budgets cannot be skipped by naming a model without a price (issue 19, finding 3): where any
budget applies, an unpriced model is refused before the upstream is called, unless the organization
set a default price for unpriced models, which then reserves and bills. Through HTTP and the OpenAI
SDK against the gateway's ASGI app and a loopback upstream."""

from decimal import Decimal

import httpx
import openai
import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from apps.catalog.pricing import COST_QUANTUM, MILLION
from apps.limits import services as limits_services
from apps.organization_settings import services as organization_settings_services
from apps.proxy.settling import wait_for_settlements
from apps.proxy.upstream import close_sessions
from gateway_project.asgi import application
from tests.audit.entries import AuditEntryFactory
from tests.factories import MembershipFactory, TeamFactory, create_api_key
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer, entries

pytestmark = pytest.mark.django_db(transaction=True)

set_limits = database_sync_to_async(limits_services.limits_set)
set_settings = database_sync_to_async(organization_settings_services.organization_settings_update)


def chat(model: str, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, **extra}


def daily(amount: str) -> dict:
    return {"amount_usd": Decimal(amount), "period": "daily", "thresholds": [100]}


@pytest.fixture
async def routed(organization, upstream):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-unpriced")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await add_alias_async(organization, "mystery", ("openai", "my-unpriced-model"))
    # Priced itself, but its fallback is not: failover could reach the unpriced one.
    await add_alias_async(organization, "leaky", ("openai", "gpt-4o-mini"), fallbacks=["mystery"])
    return upstream


@pytest.fixture
async def team(organization):
    return await database_sync_to_async(TeamFactory)(organization=organization, slug="research")


@pytest.fixture
async def team_key(organization, team):
    return (await database_sync_to_async(create_api_key)(organization, team=team))[1]


async def spend_the_budget(organization, team) -> None:
    """The team's daily budget of 1 USD, spent today but for a millionth of a dollar: room for nothing
    a price covers, and, before the fix, for any number of requests that cost 0 for want of one."""
    await database_sync_to_async(AuditEntryFactory)(
        organization=organization, team_id=team.id, created_at=timezone.now(), cost_usd=Decimal("0.999999")
    )
    await set_limits(organization=organization, team=team, budget=daily("1.00"))


async def post(proxy, secret, path, body):
    response = await proxy.post(path, json=body, headers=bearer(secret))
    await wait_for_settlements()
    return response


# --- The proved attack --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/chat/completions", chat("openai/my-unpriced-model")),
        ("/v1/chat/completions", chat("openai/my-unpriced-model", stream=True)),
        ("/v1/chat/completions", chat("mystery")),
        ("/v1/chat/completions", chat("leaky")),
        ("/v1/embeddings", {"model": "openai/my-unpriced-embedder", "input": "hi"}),
    ],
    ids=["explicit", "stream", "alias", "unpriced-fallback", "embeddings"],
)
async def test_a_spent_budget_refuses_an_unpriced_model_before_any_upstream_call(
    proxy, organization, routed, team, team_key, path, body
):
    await spend_the_budget(organization, team)
    response = await post(proxy, team_key, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "model_not_priced",
        "model",
    )
    assert body["model"] in error["message"]
    assert "/api/v1/model-prices" in error["message"] and "default_price" in error["message"]
    assert routed.requests == []  # the upstream was never called


@pytest.mark.parametrize(
    "model", ["openai/o1-pro", "openai/o3", "openai/gpt-4.5-preview", "openai/gpt-5-pro"]
)
async def test_the_models_the_review_named_are_priced_now_and_a_spent_budget_refuses_them(
    proxy, organization, routed, team, team_key, model
):
    await spend_the_budget(organization, team)
    response = await post(proxy, team_key, "/v1/chat/completions", chat(model))
    assert response.status_code == 402
    assert response.json()["error"]["code"] == "budget_exceeded"
    assert routed.requests == []


async def test_any_budget_that_applies_refuses_an_unpriced_model_even_with_room_left(
    proxy, organization, routed
):
    secret = (await database_sync_to_async(create_api_key)(organization))[1]
    await set_limits(organization=organization, budget=daily("1000"))  # the organization's own
    response = await post(proxy, secret, "/v1/chat/completions", chat("openai/my-unpriced-model"))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "model_not_priced"
    assert routed.requests == []


async def test_the_openai_sdk_raises_a_bad_request_error_for_an_unpriced_model(
    organization, routed, team, team_key
):
    await spend_the_budget(organization, team)
    http_client = httpx.AsyncClient(transport=httpx.ASGITransport(app=application), timeout=30)
    async with openai.AsyncOpenAI(
        api_key=team_key, base_url="http://gateway/v1", http_client=http_client, max_retries=0
    ) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(
                model="openai/o9-unreleased", messages=[{"role": "user", "content": "hi"}]
            )
    await close_sessions()
    assert refused.value.code == "model_not_priced"
    assert routed.requests == []


# --- The default price for unpriced models ------------------------------------------------------------


def at_default(usage: dict) -> Decimal:
    """The cost at the default price the tests set: 5 USD in, 15 USD out per million tokens."""
    total = usage["prompt_tokens"] * Decimal(5) + usage["completion_tokens"] * Decimal(15)
    return (total / MILLION).quantize(COST_QUANTUM)


async def test_with_a_default_price_an_unpriced_model_is_reserved_and_billed_at_it(
    proxy, organization, routed, team, team_key
):
    await set_limits(organization=organization, team=team, budget=daily("10"))
    await set_settings(
        organization=organization,
        default_price={"input_per_mtok": Decimal("5"), "output_per_mtok": Decimal("15")},
    )
    response = await post(proxy, team_key, "/v1/chat/completions", chat("openai/my-unpriced-model"))
    assert response.status_code == 200, response.text
    cost = at_default(response.json()["usage"])
    assert cost > 0
    assert Decimal(response.headers["x-gateway-cost-usd"]) == cost
    (entry,) = await entries()  # the audit entry says which price it was
    assert (entry.cost_usd, entry.price_source) == (cost, "default")


async def test_a_stream_of_an_unpriced_model_is_billed_at_the_default_price(
    proxy, organization, routed, team, team_key
):
    await set_limits(organization=organization, team=team, budget=daily("10"))
    await set_settings(
        organization=organization,
        default_price={"input_per_mtok": Decimal("5"), "output_per_mtok": Decimal("15")},
    )
    body = chat("mystery", stream=True, stream_options={"include_usage": True})
    response = await post(proxy, team_key, "/v1/chat/completions", body)
    assert response.status_code == 200
    comment = next(line for line in response.text.splitlines() if line.startswith(": x-gateway-cost-usd="))
    assert Decimal(comment.partition("=")[2]) > 0
    (entry,) = await entries()
    assert entry.price_source == "default" and entry.cost_usd == Decimal(comment.partition("=")[2])


async def test_the_default_price_does_not_outrank_a_known_price(proxy, organization, routed, team, team_key):
    await set_limits(organization=organization, team=team, budget=daily("10"))
    await set_settings(
        organization=organization,
        default_price={"input_per_mtok": Decimal("5"), "output_per_mtok": Decimal("15")},
    )
    response = await post(proxy, team_key, "/v1/chat/completions", chat("fast"))
    usage = response.json()["usage"]
    tokens = usage["prompt_tokens"] * Decimal("0.15") + usage["completion_tokens"] * Decimal("0.60")
    shipped = tokens / MILLION
    assert Decimal(response.headers["x-gateway-cost-usd"]) == shipped.quantize(COST_QUANTUM)
    (entry,) = await entries()
    assert entry.price_source == "shipped"


async def test_another_organizations_default_price_prices_nothing_here(
    proxy, organization, routed, team, team_key
):
    outsider = await database_sync_to_async(MembershipFactory)(role="owner")
    await set_settings(
        organization=outsider.organization,
        default_price={"input_per_mtok": Decimal("5"), "output_per_mtok": Decimal("15")},
    )
    await set_limits(organization=organization, team=team, budget=daily("10"))
    response = await post(proxy, team_key, "/v1/chat/completions", chat("openai/my-unpriced-model"))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "model_not_priced"


# --- No budget anywhere ------------------------------------------------------------------------------


async def test_without_any_budget_an_unpriced_model_is_served_at_cost_zero_and_marked_unpriced(
    proxy, organization, routed, team_key
):
    response = await post(proxy, team_key, "/v1/chat/completions", chat("openai/my-unpriced-model"))
    assert response.status_code == 200
    assert response.headers["x-gateway-cost-usd"] == "0"
    (entry,) = await entries()
    assert (entry.cost_usd, entry.price_source) == (Decimal(0), "unpriced")
