"""Routing: weighted rotation, failover, fallbacks, the circuit breaker, data regions and teams."""

from collections import Counter

import openai
import pytest
from channels.db import database_sync_to_async

from apps.events.models import Event
from apps.organizations import services as organization_services
from apps.proxy.runtime import runtime
from tests.factories import TeamFactory, create_api_key
from tests.proxy.conftest import FakeClock, add_alias_async, add_provider_key_async, bearer, entries

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
CHAT = {"model": "fast", "messages": HELLO}


@pytest.fixture
def clock():
    fake = FakeClock()
    real, runtime.breaker.clock = runtime.breaker.clock, fake
    yield fake
    runtime.breaker.clock = real


async def test_traffic_is_shared_by_weight(sdk, organization, upstream):
    await add_provider_key_async(organization, upstream, secret="heavy", weight=3)
    await add_provider_key_async(organization, upstream, secret="light", weight=1)
    await add_provider_key_async(organization, upstream, secret="drained", weight=0)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))

    for _ in range(400):
        await sdk.chat.completions.create(model="fast", messages=HELLO)

    shares = Counter(request.credential for request in upstream.requests)
    assert shares == {"heavy": 300, "light": 100}
    # Smooth rotation interleaves: the light key never waits more than four requests.
    order = [request.credential for request in upstream.requests[:8]]
    assert order.count("light") == 2


async def test_a_failing_key_fails_over_to_the_next_and_the_attempts_are_recorded(
    sdk, organization, upstream, records
):
    first = await add_provider_key_async(organization, upstream, secret="first", weight=10)
    second = await add_provider_key_async(organization, upstream, secret="second", weight=1)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("status", status=500, for_credential="first")

    raw = await sdk.chat.completions.with_raw_response.create(model="fast", messages=HELLO)

    assert raw.parse().choices[0].message.content == "Hello from upstream: hi"
    [record] = records
    assert [(a.provider_key_id, a.status, a.outcome) for a in record.attempts] == [
        (str(first.id), 500, "upstream_error"),
        (str(second.id), 200, "ok"),
    ]
    assert all(a.latency_ms >= 0 for a in record.attempts)
    assert record.provider_key_id == str(second.id)
    assert record.status == 200
    await entries()  # the outbox flushed: the event travelled with the record
    [event] = [event async for event in Event.objects.filter(type="provider.failover")]
    assert event.data["request_id"] == raw.headers["x-gateway-request-id"]
    assert (event.data["from"]["provider_key_id"], event.data["from"]["status"]) == (str(first.id), 500)
    assert (event.data["to"]["provider_key_id"], event.data["succeeded"]) == (str(second.id), True)


@pytest.mark.parametrize(
    ("mode", "options"),
    [
        ("status", {"status": 429}),
        ("status", {"status": 503}),
        ("status", {"status": 401}),  # the gateway's own key is refused: another key can do better
        ("drop_connection", {}),
        ("invalid_json", {}),
    ],
)
async def test_it_fails_over_on_what_another_key_can_fix(sdk, organization, upstream, mode, options):
    await add_provider_key_async(organization, upstream, secret="first", weight=10)
    await add_provider_key_async(organization, upstream, secret="second", weight=1)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave(mode, for_credential="first", **options)

    completion = await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert completion.choices[0].message.content == "Hello from upstream: hi"
    assert [r.credential for r in upstream.requests] == ["first", "second"]


async def test_an_invalid_request_is_returned_as_the_upstream_said_and_not_retried(
    sdk, organization, upstream, records
):
    await add_provider_key_async(organization, upstream, secret="first")
    await add_provider_key_async(organization, upstream, secret="second")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("status", status=400, message="'temperature' is out of range.")

    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert "'temperature' is out of range." in raised.value.message
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert len(upstream.requests) == 1
    assert [a.outcome for a in records[0].attempts] == ["client_error"]


async def test_when_every_deployment_fails_the_fallback_alias_answers(sdk, organization, make_upstream):
    primary, backup = make_upstream("primary"), make_upstream("backup")
    await add_provider_key_async(organization, primary, provider="openai")
    await add_provider_key_async(organization, backup, provider="openai_compatible")
    await add_alias_async(organization, "backup-model", ("openai_compatible", "llama-3"))
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"), fallbacks=["backup-model"])
    primary.behave("status", status=500)

    raw = await sdk.chat.completions.with_raw_response.create(model="fast", messages=HELLO)

    assert raw.parse().choices[0].message.content == "Hello from backup: hi"
    assert raw.headers["x-gateway-provider"] == "openai_compatible"
    assert raw.headers["x-gateway-model"] == "llama-3"
    assert backup.last_request.json["model"] == "llama-3"


async def test_a_deployment_that_fails_gives_way_to_the_next_deployment(sdk, organization, make_upstream):
    first, second = make_upstream("first"), make_upstream("second")
    await add_provider_key_async(organization, first, provider="openai")
    await add_provider_key_async(organization, second, provider="openai_compatible")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"), ("openai_compatible", "mini"))
    first.behave("drop_connection")

    completion = await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert completion.choices[0].message.content == "Hello from second: hi"


async def test_every_candidate_failing_is_a_502_with_every_attempt_recorded(
    sdk, organization, upstream, records, settings
):
    settings.GATEWAY_MAX_ATTEMPTS = 3
    for secret in ("sk-a", "sk-b", "sk-c", "sk-d"):
        await add_provider_key_async(organization, upstream, secret=secret)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("status", status=500)

    with pytest.raises(openai.InternalServerError) as raised:
        await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert raised.value.status_code == 502
    assert raised.value.body["code"] == "upstream_failed"
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert len(upstream.requests) == 3  # bounded by GATEWAY_MAX_ATTEMPTS
    [record] = records
    assert [a.status for a in record.attempts] == [500, 500, 500]
    assert len({a.provider_key_id for a in record.attempts}) == 3
    assert record.status == 502


async def test_a_key_that_keeps_failing_cools_down_and_comes_back(
    sdk, organization, upstream, clock, settings
):
    settings.GATEWAY_BREAKER_FAILURES = 3
    settings.GATEWAY_BREAKER_COOLDOWN_SECONDS = 30
    await add_provider_key_async(organization, upstream, secret="flaky", weight=100)
    await add_provider_key_async(organization, upstream, secret="steady", weight=1)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("status", status=500, for_credential="flaky")

    for _ in range(3):
        await sdk.chat.completions.create(model="fast", messages=HELLO)
    upstream.reset()
    for _ in range(5):
        await sdk.chat.completions.create(model="fast", messages=HELLO)
    assert {r.credential for r in upstream.requests} == {"steady"}  # cooling down: skipped

    clock.now += 31
    upstream.reset()  # the flaky key has recovered
    await sdk.chat.completions.create(model="fast", messages=HELLO)
    assert [r.credential for r in upstream.requests] == ["flaky"]


async def test_when_every_key_cools_down_it_is_a_503_with_retry_after(
    sdk, organization, upstream, clock, settings
):
    settings.GATEWAY_BREAKER_FAILURES = 1
    await add_provider_key_async(organization, upstream)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("status", status=503)
    with pytest.raises(openai.APIStatusError):
        await sdk.chat.completions.create(model="fast", messages=HELLO)

    with pytest.raises(openai.InternalServerError) as raised:
        await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert raised.value.status_code == 503
    assert raised.value.body["code"] == "upstreams_cooling_down"
    assert int(raised.value.response.headers["retry-after"]) >= 1
    assert len(upstream.requests) == 1


async def test_only_keys_in_an_allowed_region_are_used(proxy, organization, make_upstream, gateway_key):
    us, eu = make_upstream("us"), make_upstream("eu")
    await add_provider_key_async(organization, us, data_region="us")
    await add_provider_key_async(organization, eu, data_region="eu")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    headers = {**bearer(gateway_key[1]), "x-gateway-data-region": "eu"}

    for _ in range(4):
        response = await proxy.post("/v1/chat/completions", json=CHAT, headers=headers)
        assert response.status_code == 200

    assert len(eu.requests) == 4
    assert us.requests == []


async def test_the_region_header_can_only_narrow_what_the_organization_allows(
    proxy, organization, upstream, gateway_key
):
    await add_provider_key_async(organization, upstream, data_region="eu")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await database_sync_to_async(organization_services.organization_update)(
        organization=organization, data={"allowed_data_regions": ["us"]}
    )

    for region_header in ({}, {"x-gateway-data-region": "eu"}):
        response = await proxy.post(
            "/v1/chat/completions", json=CHAT, headers={**bearer(gateway_key[1]), **region_header}
        )
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "no_key_in_region"
        assert response.headers["x-should-retry"] == "false"
    assert upstream.requests == []


async def test_a_keys_own_regions_restrict_its_requests(proxy, organization, make_upstream):
    us, eu = make_upstream("us"), make_upstream("eu")
    await add_provider_key_async(organization, us, data_region="us")
    await add_provider_key_async(organization, eu, data_region="eu")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = await database_sync_to_async(create_api_key)(organization, allowed_data_regions=["eu"])

    for _ in range(3):
        assert (
            await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
        ).status_code == 200

    assert len(eu.requests) == 3
    assert us.requests == []


async def test_a_team_is_charged_by_its_key_or_by_the_team_header(proxy, organization, upstream, records):
    await add_provider_key_async(organization, upstream)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    bound_team = await database_sync_to_async(TeamFactory)(organization=organization)
    named_team = await database_sync_to_async(TeamFactory)(organization=organization)
    _, bound_secret = await database_sync_to_async(create_api_key)(organization, team=bound_team)
    _, free_secret = await database_sync_to_async(create_api_key)(organization)

    await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(bound_secret))
    await proxy.post(
        "/v1/chat/completions", json=CHAT, headers={**bearer(free_secret), "x-gateway-team": named_team.slug}
    )
    await proxy.post(
        "/v1/chat/completions",
        json=CHAT,
        headers={**bearer(free_secret), "x-gateway-team": str(named_team.id)},
    )
    await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(free_secret))

    assert [r.team_id for r in records] == [str(bound_team.id), str(named_team.id), str(named_team.id), None]
    assert all(r.status == 200 for r in records)


async def test_a_team_header_that_contradicts_the_keys_team_is_refused(proxy, organization, upstream):
    await add_provider_key_async(organization, upstream)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    bound_team = await database_sync_to_async(TeamFactory)(organization=organization)
    other_team = await database_sync_to_async(TeamFactory)(organization=organization)
    _, secret = await database_sync_to_async(create_api_key)(organization, team=bound_team)

    refused = await proxy.post(
        "/v1/chat/completions", json=CHAT, headers={**bearer(secret), "x-gateway-team": other_team.slug}
    )
    same = await proxy.post(
        "/v1/chat/completions", json=CHAT, headers={**bearer(secret), "x-gateway-team": bound_team.slug}
    )

    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "team_mismatch"
    assert same.status_code == 200


async def test_an_unknown_team_and_an_outsiders_team_read_the_same(
    proxy, organization, outsider, upstream, gateway_key
):
    await add_provider_key_async(organization, upstream)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    their_team = await database_sync_to_async(TeamFactory)(organization=outsider.organization)

    answers = []
    for named in (their_team.slug, str(their_team.id), "no-such-team"):
        response = await proxy.post(
            "/v1/chat/completions", json=CHAT, headers={**bearer(gateway_key[1]), "x-gateway-team": named}
        )
        answers.append((response.status_code, response.json()["error"]["code"]))

    assert answers == [(403, "team_not_found")] * 3
    assert upstream.requests == []


async def test_a_change_to_the_catalog_applies_to_the_next_request(sdk, organization, make_upstream):
    old, new = make_upstream("old"), make_upstream("new")
    await add_provider_key_async(organization, old, provider="openai")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    assert (
        (await sdk.chat.completions.create(model="fast", messages=HELLO))
        .choices[0]
        .message.content.startswith("Hello from old")
    )

    await add_provider_key_async(organization, new, provider="openai_compatible")
    from apps.catalog.models import ModelAlias
    from apps.catalog.services import model_alias_update

    alias = await ModelAlias.objects.aget(organization=organization, alias="fast")
    await database_sync_to_async(model_alias_update)(
        model_alias=alias, data={"deployments": [{"provider": "openai_compatible", "upstream_model": "mini"}]}
    )

    completion = await sdk.chat.completions.create(model="fast", messages=HELLO)
    assert completion.choices[0].message.content.startswith("Hello from new")
