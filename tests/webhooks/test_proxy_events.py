"""Events the proxy raises reach webhooks signed, and a receiver that hangs or fails never slows a
proxied request: the request only spools its event, and the delivery happens later, off the request."""

import json
import time
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async

from apps.limits import services as limits_services
from apps.outbox.outbox import outbox
from apps.policies.services import policy_create
from apps.proxy.settling import wait_for_settlements
from apps.webhooks import services
from apps.webhooks.models import WebhookDelivery
from apps.webhooks.transport import READ_TIMEOUT
from tests.factories import create_api_key
from tests.proxy.conftest import (  # noqa: F401 (the proxy's fixtures)
    _fresh_routing_state,
    add_alias_async,
    add_provider_key_async,
    bearer,
    proxy,
    upstream,
)
from tests.webhooks.conftest import verify_signature

pytestmark = pytest.mark.django_db(transaction=True)

create_webhook = database_sync_to_async(services.webhook_create)
create_policy = database_sync_to_async(policy_create)
set_limits = database_sync_to_async(limits_services.limits_set)


@pytest.fixture
async def routed(organization, upstream):  # noqa: F811
    await add_provider_key_async(organization, upstream, secret="sk-upstream-webhooks")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    return upstream


@pytest.fixture
async def team_key(organization, team):
    return (await database_sync_to_async(create_api_key)(organization, team=team))[1]


def chat_body(content: str = "hi") -> dict:
    return {"model": "fast", "messages": [{"role": "user", "content": content}], "max_tokens": 5}


async def test_a_policy_block_arrives_as_a_signed_event_without_the_blocked_text(
    proxy,  # noqa: F811
    routed,
    organization,
    team_key,
    receiver,
):
    _, secret = await create_webhook(
        organization=organization, data={"url": receiver.url(), "events": ["policy.blocked"]}
    )
    await create_policy(
        organization=organization, data={"name": "no secrets", "action": "block", "terms": ["project falcon"]}
    )

    response = await proxy.post(
        "/v1/chat/completions", json=chat_body("Tell me about Project Falcon"), headers=bearer(team_key)
    )

    assert response.status_code == 400
    assert outbox().flush()
    [received] = receiver.received
    assert verify_signature(secret, received.headers["x-gateway-signature"], received.body)
    payload = json.loads(received.body)
    assert payload["type"] == "policy.blocked" and payload["organization_id"] == str(organization.id)
    assert payload["data"]["request_id"] == response.headers["x-gateway-request-id"]
    assert payload["data"]["decisions"][0]["policy"] == "no secrets"
    assert b"falcon" not in received.body.lower()


async def test_a_budget_threshold_arrives_as_a_signed_event(
    proxy,  # noqa: F811
    routed,
    organization,
    team_key,
    receiver,
):
    _, secret = await create_webhook(
        organization=organization, data={"url": receiver.url(), "events": ["budget.threshold_reached"]}
    )
    # 1 % of a budget of 20 millionths of a dollar is crossed by the first request's cost.
    budget = {"amount_usd": Decimal("0.00002"), "period": "daily", "thresholds": [1]}
    await set_limits(organization=organization, budget=budget)
    response = await proxy.post("/v1/chat/completions", json=chat_body(), headers=bearer(team_key))
    await wait_for_settlements()
    assert response.status_code == 200

    assert outbox().flush()
    crossed = [json.loads(received.body) for received in receiver.received]
    assert crossed and all(event["type"] == "budget.threshold_reached" for event in crossed)
    assert {event["data"]["scope"] for event in crossed} == {"organization"}
    assert crossed[0]["data"]["threshold"] == 1
    for received in receiver.received:
        assert verify_signature(secret, received.headers["x-gateway-signature"], received.body)


@pytest.mark.parametrize("trouble", ["hang", "500"])
async def test_a_receiver_that_hangs_or_fails_never_delays_a_proxied_request(
    proxy,  # noqa: F811
    routed,
    organization,
    team_key,
    receiver,
    trouble,
):
    if trouble == "hang":
        receiver.hang = True
    else:
        receiver.always = 500
    await create_webhook(
        organization=organization, data={"url": receiver.url(), "events": ["policy.blocked"]}
    )
    await create_policy(
        organization=organization, data={"name": "no secrets", "action": "block", "terms": ["project falcon"]}
    )
    await proxy.post("/v1/chat/completions", json=chat_body(), headers=bearer(team_key))  # warm

    started = time.monotonic()
    response = await proxy.post(
        "/v1/chat/completions", json=chat_body("Project Falcon"), headers=bearer(team_key)
    )
    elapsed = time.monotonic() - started

    assert response.status_code == 400
    # Far below the receiver's hang (READ_TIMEOUT): the request never waited on it.
    assert elapsed < 0.5 < READ_TIMEOUT
    assert outbox().flush()
    [failed] = [delivery async for delivery in WebhookDelivery.objects.filter(event_type="policy.blocked")]
    assert failed.status == "failed" and len(receiver.received) == 1
