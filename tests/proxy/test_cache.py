"""The response cache through the proxy (docs/cache.md): L1, L2 and L3 hits with their headers, the
temperature rule, Cache-Control, streamed replays the SDK reads like live streams, savings in the
audit log, organizations kept apart, purge, and Redis or the embeddings call failing."""

import asyncio
from decimal import Decimal

import openai
import pytest
from channels.db import database_sync_to_async
from django.conf import settings

from apps.cache.memory import local_cache
from apps.cache.services import cache_purge
from apps.organizations.services import organization_update
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer, entries

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
needs_redis = pytest.mark.skipif(not settings.REDIS_URL, reason="L2 lives in Redis")

purge = database_sync_to_async(cache_purge)


async def update_organization(*, organization, **changes) -> None:
    await database_sync_to_async(organization_update)(organization=organization, data=changes)


@pytest.fixture
async def cached(organization, upstream):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    return upstream


async def ask(sdk, **options):
    options.setdefault("temperature", 0)
    options.setdefault("messages", QUESTION)
    return await sdk.chat.completions.with_raw_response.create(model="fast", **options)


async def test_a_repeat_at_temperature_0_is_an_l1_hit_that_costs_nothing_and_records_its_savings(sdk, cached):
    first = await ask(sdk)
    second = await ask(sdk, user="someone-else")  # `user` does not change the answer

    assert first.headers["x-gateway-cache"] == "miss"
    assert first.headers["cache-status"] == "gateway; fwd=uri-miss"
    assert second.headers["x-gateway-cache"] == "l1"
    assert second.headers["cache-status"] == "gateway; hit; detail=l1"
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert "x-gateway-provider" not in second.headers and "x-gateway-model" not in second.headers
    assert Decimal(second.headers["x-gateway-cost-usd"]) == 0
    assert len(cached.requests) == 1
    paid = Decimal(first.headers["x-gateway-cost-usd"])
    assert paid > 0
    logged = await entries()
    assert [(e.cache, e.cost_usd, e.cache_savings_usd) for e in logged] == [
        ("miss", paid, 0),
        ("l1", 0, paid),
    ]


async def test_only_an_explicit_temperature_of_0_is_cached_unless_the_organization_widens_it(
    sdk, cached, organization
):
    for _ in range(2):
        assert (await ask(sdk, temperature=None)).headers["x-gateway-cache"] == "bypass"
        assert (await ask(sdk, temperature=0.7)).headers["x-gateway-cache"] == "bypass"
    assert len(cached.requests) == 4

    await update_organization(organization=organization, cache_any_temperature=True)
    assert (await ask(sdk, temperature=0.7)).headers["x-gateway-cache"] == "miss"
    assert (await ask(sdk, temperature=0.7)).headers["x-gateway-cache"] == "l1"


async def test_cache_control_no_cache_skips_the_look_up_but_stores_and_no_store_does_neither(sdk, cached):
    assert (await ask(sdk, extra_headers={"Cache-Control": "no-store"})).headers[
        "x-gateway-cache"
    ] == "bypass"
    assert (await ask(sdk)).headers["x-gateway-cache"] == "miss"  # no-store stored nothing

    local_cache.clear()
    no_cache = await ask(sdk, extra_headers={"Cache-Control": "no-cache"})
    assert no_cache.headers["x-gateway-cache"] == "bypass"
    assert (await ask(sdk)).headers["x-gateway-cache"] == "l1"  # what no-cache fetched was stored
    assert len(cached.requests) == 3


async def test_a_stored_answer_replays_as_a_stream_the_sdk_reads_like_a_live_one(sdk, cached):
    live = await sdk.chat.completions.create(
        model="fast", messages=QUESTION, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    live_text = "".join([c.choices[0].delta.content or "" async for c in live if c.choices])

    raw = await sdk.chat.completions.with_raw_response.create(
        model="fast", messages=QUESTION, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    assert raw.headers["x-gateway-cache"] == "l1"
    chunks = [chunk async for chunk in raw.parse()]
    replayed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert replayed == live_text != ""
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    whole = (await ask(sdk)).parse()  # the streamed miss was stored as a whole answer too
    assert whole.choices[0].message.content == live_text
    assert len(cached.requests) == 1


async def test_entries_never_cross_organizations(sdk, cached, outsider, upstream, proxy):
    from tests.factories import create_api_key

    await ask(sdk)
    await add_provider_key_async(outsider.organization, upstream, secret="sk-upstream-two")
    await add_alias_async(outsider.organization, "fast", ("openai", "gpt-4o-mini"))
    _, their_secret = await database_sync_to_async(create_api_key)(outsider.organization)

    body = {"model": "fast", "messages": QUESTION, "temperature": 0}
    theirs = await proxy.post("/v1/chat/completions", json=body, headers=bearer(their_secret))

    assert theirs.headers["x-gateway-cache"] == "miss"
    assert [r.credential for r in cached.requests] == ["sk-upstream-one", "sk-upstream-two"]


async def test_a_purge_empties_the_cache(sdk, cached, organization):
    await ask(sdk)
    assert (await ask(sdk)).headers["x-gateway-cache"] == "l1"

    await purge(organization=organization)

    assert (await ask(sdk)).headers["x-gateway-cache"] == "miss"


@needs_redis
async def test_another_process_hits_l2_and_fills_its_l1(sdk, cached):
    await ask(sdk)
    await background_done()  # the L2 write goes after the answer
    local_cache.clear()  # what a second process holds: nothing in its own memory

    assert (await ask(sdk)).headers["x-gateway-cache"] == "l2"
    assert (await ask(sdk)).headers["x-gateway-cache"] == "l1"
    assert len(cached.requests) == 1


async def test_with_l2_unreachable_requests_are_served_from_the_upstream(sdk, cached, monkeypatch):
    import redis.asyncio as aioredis

    from apps.cache import shared

    closed = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    monkeypatch.setattr(shared.shared_cache, "_client", lambda: closed)
    monkeypatch.setattr(shared.shared_cache, "_paused_until", 0.0)

    first = await ask(sdk)
    local_cache.clear()
    second = await ask(sdk)

    assert [first.status_code, second.status_code] == [200, 200]
    assert [first.headers["x-gateway-cache"], second.headers["x-gateway-cache"]] == ["miss", "miss"]


@pytest.fixture
async def semantic(organization, cached):
    await add_alias_async(organization, "embedder", ("openai", "text-embedding-3-small"))
    await update_organization(
        organization=organization, cache_semantic_enabled=True, cache_embedding_model="embedder"
    )
    return cached


async def test_l3_serves_an_earlier_answer_to_the_same_prompt_asked_another_way(sdk, semantic):
    first = await ask(sdk)
    # The same words as a content part: another exact key, the same prompt to the embeddings model.
    parts = [{"role": "user", "content": [{"type": "text", "text": QUESTION[0]["content"]}]}]
    await _written(semantic_writes=1)
    local_cache.clear()
    again = await sdk.chat.completions.with_raw_response.create(model="fast", messages=parts, temperature=0)

    assert again.headers["x-gateway-cache"] == "l3"
    assert again.headers["cache-status"] == "gateway; hit; detail=l3"
    assert again.parse().choices[0].message.content == first.parse().choices[0].message.content
    chat_calls = [r for r in semantic.requests if r.path == "/v1/chat/completions"]
    embedding_calls = [r for r in semantic.requests if r.path == "/v1/embeddings"]
    assert (len(chat_calls), len(embedding_calls)) == (1, 2)
    logged = await entries()
    # Each embeddings call is an audit entry of its own, charged on its own.
    assert sorted(e.endpoint for e in logged).count("/v1/embeddings") == 2


async def test_when_the_embeddings_call_fails_l3_is_skipped_and_the_request_served(sdk, semantic):
    semantic.behave("status", status=500, times=1)  # the first call upstream: the prompt's embedding

    answer = await ask(sdk)

    assert answer.status_code == 200
    assert answer.headers["x-gateway-cache"] == "miss"
    assert [r.path for r in semantic.requests] == ["/v1/embeddings", "/v1/chat/completions"]


async def background_done() -> None:
    """Until the proxy's background writes (L2, L3) have finished and left its set. A finished task
    leaves the set in a callback run on the loop's next turn, and awaiting a finished task does not
    yield: each round gives the loop a turn, or this would spin forever on a task that is done."""
    from apps.proxy.runtime import runtime

    while runtime.background:
        await asyncio.gather(*runtime.background, return_exceptions=True)
        await asyncio.sleep(0)


async def _written(*, semantic_writes: int) -> None:
    """Waits for the L2 and L3 writes made after the answers so far."""
    from apps.cache.models import SemanticEntry

    await background_done()
    assert await SemanticEntry.objects.acount() == semantic_writes


# --- What L3 may not treat as the same prompt (issue 19, finding 5) ---------------------------------


def with_image(pixel: str) -> list[dict]:
    """The question beside an image: the words are the same whatever the image shows."""
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{pixel}"}}
    return [{"role": "user", "content": [{"type": "text", "text": QUESTION[0]["content"]}, image]}]


def chat_calls(server) -> list:
    return [r for r in server.requests if r.path == "/v1/chat/completions"]


async def test_l3_never_answers_a_prompt_with_an_image_from_another_images_answer(sdk, semantic):
    await ask(sdk, messages=with_image("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAA"))
    await _written(semantic_writes=0)  # what an image held is never an L3 entry
    local_cache.clear()

    other = await ask(sdk, messages=with_image("iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAYAAAB"))

    assert other.headers["x-gateway-cache"] == "miss"
    assert len(chat_calls(semantic)) == 2
    # L3 is not even looked up: the embeddings model would only have seen the words.
    assert [r for r in semantic.requests if r.path == "/v1/embeddings"] == []


WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
STOCKS = {"type": "function", "function": {"name": "stocks", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"tools": [WEATHER]}, {"tools": [STOCKS]}),
        ({}, {"response_format": {"type": "json_object"}}),
        ({"max_tokens": 50}, {"max_tokens": 3}),
        ({}, {"seed": 7}),
    ],
    ids=["tools", "response_format", "max_tokens", "seed"],
)
async def test_the_same_words_with_other_parameters_are_no_cache_hit(sdk, semantic, first, second):
    await ask(sdk, **first)
    await _written(semantic_writes=1)

    # The same words: the embedding is the same; only what else shapes the answer differs.
    other = await ask(sdk, **second)

    assert other.headers["x-gateway-cache"] == "miss"
    assert len(chat_calls(semantic)) == 2
    assert (await ask(sdk, **second)).headers["x-gateway-cache"] == "l1"  # its own entry, then


# --- Data regions (issue 19, finding 7) -------------------------------------------------------------


@pytest.fixture
async def regional(organization, upstream):
    """A US key and an EU key of one organization (one loopback server, told apart by their secrets),
    a team allowed only the US and one allowed only the EU."""
    from apps.teams.services import team_create

    await add_provider_key_async(organization, upstream, secret="sk-upstream-us", data_region="us")
    await add_provider_key_async(organization, upstream, secret="sk-upstream-eu", data_region="eu")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    create_team = database_sync_to_async(team_create)
    await create_team(
        organization=organization, data={"name": "US", "slug": "us-team", "allowed_data_regions": ["us"]}
    )
    await create_team(
        organization=organization, data={"name": "EU", "slug": "eu-team", "allowed_data_regions": ["eu"]}
    )
    return upstream


def team(slug: str) -> dict:
    return {"extra_headers": {"x-gateway-team": slug}}


async def test_a_team_restricted_to_a_region_without_a_key_is_not_served_another_regions_answer(
    sdk, cached, organization
):
    from apps.teams.services import team_create

    await database_sync_to_async(team_create)(
        organization=organization, data={"name": "EU", "slug": "eu-team", "allowed_data_regions": ["eu"]}
    )
    assert (await ask(sdk)).headers["x-gateway-cache"] == "miss"  # answered in the US

    with pytest.raises(openai.APIStatusError) as refused:
        await ask(sdk, **team("eu-team"))

    assert refused.value.status_code == 503
    assert refused.value.body["code"] == "no_key_in_region"
    assert len(cached.requests) == 1


async def test_l3_without_an_embeddings_key_in_the_requests_regions_is_skipped_with_one_line(
    sdk, semantic, organization, caplog
):
    from apps.teams.services import team_create

    await database_sync_to_async(team_create)(
        organization=organization, data={"name": "EU", "slug": "eu-team", "allowed_data_regions": ["eu"]}
    )

    with (
        caplog.at_level("WARNING", logger="apps.proxy.caching"),
        pytest.raises(openai.APIStatusError) as refused,
    ):
        await ask(sdk, **team("eu-team"))

    assert refused.value.body["code"] == "no_key_in_region"
    skipped = [record for record in caplog.records if record.name == "apps.proxy.caching"]
    assert [record.getMessage() for record in skipped] == [
        "The L3 cache's embedding model cannot be called (no_key_in_region); L3 skipped"
    ]
    assert skipped[0].exc_info is None  # an expected refusal, not a traceback in every request's log
    assert semantic.requests == []  # the prompt went to no embeddings model outside the team's regions


async def test_an_eu_team_is_not_served_from_l1_what_was_answered_in_the_us(sdk, regional):
    assert (await ask(sdk, **team("us-team"))).headers["x-gateway-cache"] == "miss"

    eu = await ask(sdk, **team("eu-team"))

    assert eu.headers["x-gateway-cache"] == "miss"
    assert (await ask(sdk, **team("eu-team"))).headers["x-gateway-cache"] == "l1"
    assert [r.credential for r in regional.requests] == ["sk-upstream-us", "sk-upstream-eu"]


@needs_redis
async def test_an_eu_team_is_not_served_from_l2_what_was_answered_in_the_us(sdk, regional):
    await ask(sdk, **team("us-team"))
    await _written(semantic_writes=0)
    local_cache.clear()

    assert (await ask(sdk, **team("eu-team"))).headers["x-gateway-cache"] == "miss"
    assert [r.credential for r in regional.requests] == ["sk-upstream-us", "sk-upstream-eu"]


async def test_an_eu_team_is_not_served_from_l3_what_was_answered_in_the_us(sdk, regional, organization):
    await add_alias_async(organization, "embedder", ("openai", "text-embedding-3-small"))
    await update_organization(
        organization=organization, cache_semantic_enabled=True, cache_embedding_model="embedder"
    )
    await ask(sdk, **team("us-team"))
    await _written(semantic_writes=1)
    # The same words as a content part: another exact key (no L1 or L2 hit), the same embedding.
    parts = [{"role": "user", "content": [{"type": "text", "text": QUESTION[0]["content"]}]}]

    eu = await ask(sdk, messages=parts, **team("eu-team"))

    assert eu.headers["x-gateway-cache"] == "miss"
    assert [r.credential for r in chat_calls(regional)] == ["sk-upstream-us", "sk-upstream-eu"]
    us = await ask(sdk, messages=parts, **team("us-team"))
    assert us.headers["x-gateway-cache"] == "l3"  # a team of the same regions still shares it
