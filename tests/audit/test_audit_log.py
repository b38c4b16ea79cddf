"""Every proxied request leaves exactly one audit entry, written off the request."""

import json
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async
from django.test import override_settings

from apps.organizations import services as organization_services
from apps.outbox.outbox import outbox
from tests.factories import TeamFactory, create_api_key
from tests.proxy.conftest import add_provider_key_async, bearer, entries

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]


async def test_a_completion_leaves_one_entry_with_its_routing_outcome_and_cost(proxy, routed, organization):
    team = await database_sync_to_async(TeamFactory)(organization=organization)
    api_key, secret = await database_sync_to_async(create_api_key)(organization, team=team)

    response = await proxy.post(
        "/v1/chat/completions",
        json={"model": "fast", "messages": HELLO},
        headers={**bearer(secret), "user-agent": "pytest-agent"},
    )

    [entry] = await entries()
    assert str(entry.id) == response.headers["x-gateway-request-id"]
    assert entry.organization_id == organization.id
    assert entry.team_id == team.id
    assert entry.api_key_id == api_key.id
    assert entry.api_key_prefix == api_key.key_prefix
    assert entry.endpoint == "/v1/chat/completions"
    assert (entry.requested_model, entry.provider, entry.model) == ("fast", "openai", "gpt-4o-mini")
    assert entry.status == 200
    usage = response.json()["usage"]
    assert (entry.input_tokens, entry.output_tokens) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert entry.cost_usd == Decimal(response.headers["x-gateway-cost-usd"]) > 0
    [attempt] = entry.attempts
    assert attempt["provider"] == "openai"
    assert attempt["status"] == 200
    assert attempt["outcome"] == "ok"
    assert entry.latency_ms > 0
    assert entry.client_ip == "203.0.113.7"
    assert entry.user_agent == "pytest-agent"
    assert entry.cache == "bypass"  # no temperature: not cacheable (docs/cache.md)


async def test_a_failover_is_recorded_attempt_by_attempt(proxy, routed, organization, gateway_key):
    await add_provider_key_async(organization, routed, secret="sk-upstream-two", weight=0.1)
    routed.behave("status", status=503, for_credential="sk-upstream-one")

    await proxy.post(
        "/v1/chat/completions", json={"model": "fast", "messages": HELLO}, headers=bearer(gateway_key[1])
    )

    [entry] = await entries()
    assert [(a["status"], a["outcome"]) for a in entry.attempts] == [(503, "upstream_error"), (200, "ok")]
    assert entry.status == 200


async def test_refused_and_failed_requests_are_recorded_too(proxy, routed, gateway_key):
    unknown = await proxy.post(
        "/v1/chat/completions", json={"model": "nope", "messages": HELLO}, headers=bearer(gateway_key[1])
    )
    routed.behave("status", status=500)
    failed = await proxy.post(
        "/v1/chat/completions", json={"model": "fast", "messages": HELLO}, headers=bearer(gateway_key[1])
    )
    await proxy.get("/v1/models", headers=bearer("sk_live_not-a-key"))  # no organization: no entry

    by_id = {str(entry.id): entry for entry in await entries()}
    assert set(by_id) == {unknown.headers["x-gateway-request-id"], failed.headers["x-gateway-request-id"]}
    assert (
        by_id[unknown.headers["x-gateway-request-id"]].status,
        by_id[unknown.headers["x-gateway-request-id"]].error_code,
    ) == (404, "model_not_found")
    failed_entry = by_id[failed.headers["x-gateway-request-id"]]
    assert failed_entry.status == 502
    assert failed_entry.error_code == "upstream_failed"
    assert [a["status"] for a in failed_entry.attempts] == [500, 500, 500]  # the only key, retried
    assert failed_entry.cost_usd == 0


async def test_a_stream_is_recorded_with_its_usage_time_to_first_token_and_cost(proxy, routed, gateway_key):
    async with proxy.stream(
        "POST",
        "/v1/chat/completions",
        json={"model": "fast", "messages": HELLO, "stream": True},
        headers=bearer(gateway_key[1]),
    ) as response:
        body = (await response.aread()).decode()

    [entry] = await entries()
    assert entry.stream is True
    assert entry.stream_completed is True
    assert entry.ttft_ms == float(response.headers["x-gateway-ttft-ms"])
    assert entry.output_tokens == 4
    assert not entry.usage_estimated
    assert f": x-gateway-cost-usd={entry.cost_usd}" in body


@pytest.mark.parametrize("mode", ["full", "redacted", "metadata"])
async def test_bodies_are_kept_as_the_organization_says(proxy, routed, organization, gateway_key, mode):
    await database_sync_to_async(organization_services.organization_update)(
        organization=organization, data={"log_bodies": mode}
    )
    content = "mail ada@example.com, my key is sk-proj-abcdefghijklmnopqrstuv"

    await proxy.post(
        "/v1/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": content}]},
        headers=bearer(gateway_key[1]),
    )

    [entry] = await entries()
    assert entry.body_mode == mode
    stored = entry.request_body + entry.response_body
    assert "sk-proj-abcdefghijklmnopqrstuv" not in stored  # never a credential, whatever the mode
    assert gateway_key[1] not in stored
    if mode == "metadata":
        assert stored == ""
    elif mode == "redacted":
        assert "ada@example.com" not in stored
        assert json.loads(entry.request_body)["model"] == "fast"
    else:
        assert "ada@example.com" in entry.request_body
        assert "Hello from upstream" in entry.response_body


@override_settings(GATEWAY_API_KEY_PREFIX="acme.gw-")
async def test_gateway_keys_of_a_custom_prefix_are_masked_in_bodies(proxy, routed, organization):
    await database_sync_to_async(organization_services.organization_update)(
        organization=organization, data={"log_bodies": "full"}
    )
    _, secret = await database_sync_to_async(create_api_key)(organization)
    assert secret.startswith("acme.gw-")
    content = f"my gateway key is {secret} and the old one sk_live_{'Z' * 43}, say hi"

    response = await proxy.post(
        "/v1/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": content}]},
        headers=bearer(secret),
    )

    assert response.status_code == 200
    [entry] = await entries()
    assert secret not in entry.request_body
    assert secret[len("acme.gw-") :] not in entry.request_body
    assert "sk_live_ZZZZ" not in entry.request_body
    assert "say hi" in entry.request_body


async def test_credentials_an_upstream_echoes_in_its_error_are_masked_in_the_attempts(
    proxy, routed, gateway_key
):
    echoed = "sk-proj-" + "Q" * 40
    routed.behave("status", status=401, message=f"Incorrect API key provided: {echoed}.")

    await proxy.post(
        "/v1/chat/completions", json={"model": "fast", "messages": HELLO}, headers=bearer(gateway_key[1])
    )

    [entry] = await entries()
    [attempt] = entry.attempts
    assert "Incorrect API key provided" in attempt["error"]
    assert "QQQQ" not in json.dumps(entry.attempts)


async def test_embeddings_leave_an_entry_too(proxy, routed, gateway_key):
    response = await proxy.post(
        "/v1/embeddings",
        json={"model": "openai/text-embedding-3-small", "input": "hi"},
        headers=bearer(gateway_key[1]),
    )

    [entry] = await entries()
    assert entry.endpoint == "/v1/embeddings"
    assert entry.model == "text-embedding-3-small"
    assert entry.cost_usd == Decimal(response.headers["x-gateway-cost-usd"])


async def test_the_overview_adds_up_to_what_was_sent(proxy, routed, gateway_key, owner):
    from rest_framework.test import APIClient

    from tests.conftest import login

    costs, statuses = [], []
    for model in ["fast"] * 5 + ["missing"] * 2:
        response = await proxy.post(
            "/v1/chat/completions", json={"model": model, "messages": HELLO}, headers=bearer(gateway_key[1])
        )
        costs.append(Decimal(response.headers["x-gateway-cost-usd"]))
        statuses.append(response.status_code)
    assert outbox().flush()

    client = APIClient()
    tokens = await database_sync_to_async(login)(client, owner.user.email)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")
    overview = (
        await database_sync_to_async(client.get)("/api/v1/analytics/overview", {"period": "24h"})
    ).json()

    totals = overview["totals"]
    assert totals["requests"] == 7
    assert Decimal(totals["spend_usd"]) == sum(costs)
    assert totals["error_rate"] == pytest.approx(2 / 7)
