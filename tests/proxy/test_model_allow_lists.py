"""Model allow-lists (issue 19, finding 3): an organization, a team and an API key may each restrict
which models may be called; a request must pass every list that applies, /v1/models lists only what
the caller may call, and one organization's lists touch nobody else. Through the OpenAI SDK and HTTP
against the gateway's ASGI app and a loopback upstream."""

import openai
import pytest
from channels.db import database_sync_to_async

from apps.keys import services as key_services
from apps.organizations import services as organization_services
from apps.teams import services as team_services
from tests.factories import MembershipFactory, TeamFactory, create_api_key
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer

pytestmark = pytest.mark.django_db(transaction=True)

update_team = database_sync_to_async(team_services.team_update)
update_key = database_sync_to_async(key_services.api_key_update)


async def update_organization(*, organization, **changes) -> None:
    update = database_sync_to_async(organization_services.organization_update)
    await update(organization=organization, data=changes)


def chat(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


@pytest.fixture
async def catalog(organization, upstream):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-allow")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await add_alias_async(organization, "smart", ("openai", "gpt-4o"))
    await add_alias_async(organization, "embed", ("openai", "text-embedding-3-small"))
    return upstream


@pytest.fixture
async def team(organization):
    return await database_sync_to_async(TeamFactory)(organization=organization, slug="research")


@pytest.fixture
async def team_key(organization, team):
    return await database_sync_to_async(create_api_key)(organization, team=team)


async def call(proxy, secret, model):
    return await proxy.post("/v1/chat/completions", json=chat(model), headers=bearer(secret))


async def listed(proxy, secret) -> list[str]:
    response = await proxy.get("/v1/models", headers=bearer(secret))
    assert response.status_code == 200
    return [model["id"] for model in response.json()["data"]]


def assert_refused(response, model: str, scope: str) -> None:
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("permission_error", "model_not_allowed")
    assert error["param"] == "model"
    assert model in error["message"] and f"{scope}'s model allow-list" in error["message"]
    assert response.headers["x-should-retry"] == "false"


async def test_an_organizations_list_refuses_other_models_before_any_upstream_call(
    proxy, organization, catalog, gateway_key
):
    await update_organization(organization=organization, allowed_models=["fast", "openai/gpt-4o-mini*"])
    secret = gateway_key[1]
    for model in ("smart", "openai/gpt-4o", "openai/o1-pro", "no-such-model"):
        assert_refused(await call(proxy, secret, model), model, "organization")
    assert catalog.requests == []
    assert (await call(proxy, secret, "fast")).status_code == 200
    assert (await call(proxy, secret, "openai/gpt-4o-mini-2024-07-18")).status_code == 200
    assert await listed(proxy, secret) == ["fast"]


async def test_a_pattern_allows_an_alias_whose_every_deployment_it_matches(
    proxy, organization, catalog, team, team_key
):
    await update_team(team=team, data={"allowed_models": ["openai/gpt-4o-mini*"]})
    secret = team_key[1]
    assert (await call(proxy, secret, "fast")).status_code == 200  # fast is served by openai/gpt-4o-mini
    assert_refused(await call(proxy, secret, "smart"), "smart", "team")
    assert_refused(await call(proxy, secret, "openai/gpt-4o"), "openai/gpt-4o", "team")
    assert await listed(proxy, secret) == ["fast"]
    # One model is retrieved as the list shows it: one outside the list reads as unknown.
    assert (await proxy.get("/v1/models/fast", headers=bearer(secret))).json()["id"] == "fast"
    refused = await proxy.get("/v1/models/smart", headers=bearer(secret))
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "model_not_found"


async def test_a_team_list_narrows_the_organizations_and_never_widens_it(
    proxy, organization, catalog, team, team_key
):
    await update_organization(organization=organization, allowed_models=["fast", "smart"])
    await update_team(team=team, data={"allowed_models": ["smart", "anthropic/*"]})
    secret = team_key[1]
    assert (await call(proxy, secret, "smart")).status_code == 200
    assert_refused(await call(proxy, secret, "fast"), "fast", "team")
    # The team's anthropic/* does not widen the organization's list.
    model = "anthropic/claude-3-5-haiku"
    assert_refused(await call(proxy, secret, model), model, "organization")
    assert await listed(proxy, secret) == ["smart"]


async def test_a_keys_list_narrows_its_teams_and_other_keys_are_untouched(
    proxy, organization, catalog, team, team_key, gateway_key
):
    await update_team(team=team, data={"allowed_models": ["fast", "smart"]})
    api_key, secret = team_key
    await update_key(api_key=api_key, data={"allowed_models": ["smart"]})
    assert (await call(proxy, secret, "smart")).status_code == 200
    assert_refused(await call(proxy, secret, "fast"), "fast", "API key")
    assert await listed(proxy, secret) == ["smart"]
    # A key of no team, with no list of its own, answers to the organization's (none) only.
    assert (await call(proxy, gateway_key[1], "openai/gpt-4o")).status_code == 200
    assert await listed(proxy, gateway_key[1]) == ["embed", "fast", "smart"]


async def test_embeddings_and_streams_are_held_to_the_list_too(proxy, organization, catalog, team_key):
    api_key, secret = team_key
    await update_key(api_key=api_key, data={"allowed_models": ["fast"]})
    embeddings = await proxy.post(
        "/v1/embeddings", json={"model": "embed", "input": "hi"}, headers=bearer(secret)
    )
    assert_refused(embeddings, "embed", "API key")
    stream = await proxy.post(
        "/v1/chat/completions", json={**chat("smart"), "stream": True}, headers=bearer(secret)
    )
    assert_refused(stream, "smart", "API key")
    assert catalog.requests == []


async def test_a_cleared_list_applies_to_the_next_request(proxy, organization, catalog, gateway_key):
    await update_organization(organization=organization, allowed_models=["fast"])
    assert (await call(proxy, gateway_key[1], "smart")).status_code == 403
    await update_organization(organization=organization, allowed_models=None)
    assert (await call(proxy, gateway_key[1], "smart")).status_code == 200


async def test_the_openai_sdk_raises_permission_denied_and_lists_only_what_it_may_call(
    organization, catalog, gateway_key, sdk
):
    await update_key(api_key=gateway_key[0], data={"allowed_models": ["fast"]})
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await sdk.chat.completions.create(model="smart", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "model_not_allowed"
    assert [model.id async for model in sdk.models.list()] == ["fast"]


async def test_another_organizations_lists_restrict_nobody_here(proxy, organization, catalog, gateway_key):
    outsider = await database_sync_to_async(MembershipFactory)(role="owner")
    await update_organization(organization=outsider.organization, allowed_models=["nothing-at-all"])
    assert (await call(proxy, gateway_key[1], "smart")).status_code == 200
    assert await listed(proxy, gateway_key[1]) == ["embed", "fast", "smart"]
