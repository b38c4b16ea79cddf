"""Chat completions, embeddings and models through the gateway, with the official async OpenAI SDK."""

import json
from decimal import Decimal

import openai
import pytest
from channels.db import database_sync_to_async

from apps.catalog.pricing import shipped_price
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]


def shipped_cost(provider: str, model: str, prompt_tokens: int, completion_tokens: int) -> Decimal:
    from django.utils import timezone

    price = shipped_price(provider, model, timezone.now())
    cost = (prompt_tokens * price.input + completion_tokens * price.output) / Decimal(1_000_000)
    return cost.quantize(Decimal("0.00000001"))


@pytest.fixture
async def openai_upstream(organization, upstream):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    return upstream


async def test_a_chat_completion_comes_back_from_the_upstream_with_its_cost(sdk, openai_upstream):
    raw = await sdk.chat.completions.with_raw_response.create(model="fast", messages=HELLO)
    completion = raw.parse()

    assert completion.choices[0].message.content == "Hello from upstream: hi"
    assert completion.choices[0].finish_reason == "stop"
    sent = openai_upstream.last_request
    assert sent.path == "/v1/chat/completions"
    assert sent.credential == "sk-upstream-one"
    assert sent.json["model"] == "gpt-4o-mini"
    headers = raw.headers
    assert headers["x-gateway-provider"] == "openai"
    assert headers["x-gateway-model"] == "gpt-4o-mini"
    assert headers["x-gateway-cache"] == "bypass"  # no temperature: not cacheable (docs/cache.md)
    usage = completion.usage
    expected = shipped_cost("openai", "gpt-4o-mini", usage.prompt_tokens, usage.completion_tokens)
    assert expected > 0
    assert Decimal(headers["x-gateway-cost-usd"]) == expected
    assert raw.request_id == headers["x-gateway-request-id"]
    latency, overhead = float(headers["x-gateway-latency-ms"]), float(headers["x-gateway-overhead-ms"])
    assert 0 <= overhead <= latency
    assert "x-gateway-ttft-ms" not in headers


async def test_fields_the_gateway_does_not_know_pass_through_untouched(sdk, openai_upstream):
    await sdk.chat.completions.create(
        model="fast",
        messages=HELLO,
        temperature=0.2,
        extra_body={"vendor_option": {"depth": 3}, "seed": 7},
    )
    sent = openai_upstream.last_request.json
    assert sent["vendor_option"] == {"depth": 3}
    assert sent["seed"] == 7
    assert sent["temperature"] == 0.2
    # Nothing of the client's own credentials travels upstream.
    assert openai_upstream.last_request.headers["authorization"] == "Bearer sk-upstream-one"


async def test_a_stream_arrives_chunk_by_chunk_and_ends_with_its_cost(
    sdk, openai_upstream, proxy, gateway_key
):
    stream = await sdk.chat.completions.create(model="fast", messages=HELLO, stream=True)
    chunks = [chunk async for chunk in stream]

    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "Hello from upstream: hi"
    assert all(chunk.usage is None for chunk in chunks)  # the client did not ask for usage
    # The gateway asked the upstream for usage, to price the stream.
    assert openai_upstream.last_request.json["stream_options"] == {"include_usage": True}

    async with proxy.stream(
        "POST",
        "/v1/chat/completions",
        headers=bearer(gateway_key[1]),
        json={"model": "fast", "messages": HELLO, "stream": True},
    ) as response:
        body = (await response.aread()).decode()
    assert response.headers["content-type"].startswith("text/event-stream")
    assert float(response.headers["x-gateway-ttft-ms"]) >= 0
    assert "x-gateway-cost-usd" not in response.headers
    lines = [line for line in body.split("\n") if line]
    assert lines[-1] == "data: [DONE]"
    assert lines[-2].startswith(": x-gateway-cost-usd=")
    assert Decimal(lines[-2].split("=", 1)[1]) > 0


async def test_a_stream_keeps_the_usage_chunk_when_the_client_asks_for_it(sdk, openai_upstream):
    stream = await sdk.chat.completions.create(
        model="fast", messages=HELLO, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]

    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 4


async def test_stream_usage_is_estimated_for_a_server_that_refuses_stream_options(
    sdk, organization, upstream, records
):
    upstream.behave("reject_stream_options")
    await add_provider_key_async(
        organization, upstream, provider="openai_compatible", supports_stream_usage=False
    )
    await add_alias_async(organization, "local", ("openai_compatible", "llama-3"))

    stream = await sdk.chat.completions.create(
        model="local", messages=HELLO, stream=True, stream_options={"include_usage": True}
    )
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

    assert text == "Hello from upstream: hi"
    assert "stream_options" not in upstream.last_request.json
    [record] = records
    assert record.usage.estimated
    assert record.usage.output_tokens == -(-len(text) // 4)


async def test_embeddings_come_back_with_their_cost(sdk, openai_upstream):
    raw = await sdk.embeddings.with_raw_response.create(
        model="openai/text-embedding-3-small", input=["one", "two"]
    )
    result = raw.parse()

    assert [item.index for item in result.data] == [0, 1]
    assert len(result.data[0].embedding) == 8
    assert openai_upstream.last_request.path == "/v1/embeddings"
    assert raw.headers["x-gateway-model"] == "text-embedding-3-small"
    expected = shipped_cost("openai", "text-embedding-3-small", result.usage.prompt_tokens, 0)
    assert Decimal(raw.headers["x-gateway-cost-usd"]) == expected


async def test_the_model_list_shows_the_organizations_aliases(sdk, openai_upstream, organization):
    await add_alias_async(organization, "smart", ("openai", "gpt-4o"))

    models = await sdk.models.list()

    assert [model.id for model in models.data] == ["fast", "smart"]
    assert all(model.object == "model" for model in models.data)


async def test_one_model_is_retrieved_by_its_alias_and_an_unknown_one_is_openais_404(
    sdk, openai_upstream, outsider, records
):
    await add_alias_async(outsider.organization, "theirs", ("openai", "gpt-4o"))

    model = await sdk.models.retrieve("fast")

    assert (model.id, model.object, model.owned_by) == ("fast", "model", "organization")
    assert model.created > 0
    for unknown in ("theirs", "no-such-model", "openai/gpt-4o"):
        with pytest.raises(openai.NotFoundError) as raised:
            await sdk.models.retrieve(unknown)
        assert raised.value.body["code"] == "model_not_found"
        assert unknown in raised.value.body["message"]
    assert openai_upstream.requests == []
    # The audit log names the endpoint, not each model's path.
    assert {record.endpoint for record in records} == {"/v1/models/{model}"}


async def test_the_legacy_completions_api_is_a_404_that_names_chat_completions(sdk, openai_upstream):
    with pytest.raises(openai.NotFoundError) as raised:
        await sdk.completions.create(model="fast", prompt="Say hi")

    assert raised.value.body["code"] == "unknown_url"
    assert "/v1/chat/completions" in raised.value.body["message"]
    assert openai_upstream.requests == []


async def test_a_provider_and_model_can_be_named_without_an_alias(sdk, openai_upstream):
    raw = await sdk.chat.completions.with_raw_response.create(model="openai/gpt-4o", messages=HELLO)

    assert openai_upstream.last_request.json["model"] == "gpt-4o"
    assert raw.headers["x-gateway-model"] == "gpt-4o"


async def test_azure_openai_is_called_on_its_deployment_with_its_api_version(sdk, organization, upstream):
    await add_provider_key_async(organization, upstream, provider="azure_openai", secret="azure-secret")
    await add_alias_async(organization, "azure-mini", ("azure_openai", "my-deployment"))

    completion = await sdk.chat.completions.create(model="azure-mini", messages=HELLO)

    sent = upstream.last_request
    assert sent.path == "/openai/deployments/my-deployment/chat/completions"
    assert sent.query == {"api-version": "2024-10-21"}
    assert sent.headers["api-key"] == "azure-secret"
    assert "authorization" not in sent.headers
    assert completion.choices[0].message.content == "Hello from upstream: hi"


async def test_the_outsiders_catalog_and_keys_are_never_used(sdk, outsider, upstream):
    await add_provider_key_async(outsider.organization, upstream)
    await add_alias_async(outsider.organization, "theirs", ("openai", "gpt-4o-mini"))

    with pytest.raises(openai.NotFoundError):
        await sdk.chat.completions.create(model="theirs", messages=HELLO)
    with pytest.raises(openai.InternalServerError) as raised:  # 503: this organization holds no key
        await sdk.chat.completions.create(model="openai/gpt-4o-mini", messages=HELLO)
    assert raised.value.status_code == 503
    assert raised.value.body["code"] == "no_provider_key"
    assert upstream.requests == []
    assert (await sdk.models.list()).data == []


@pytest.fixture
async def anthropic_upstream(organization, upstream):
    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "claude", ("anthropic", "claude-3-5-haiku-latest"))
    return upstream


async def test_an_anthropic_upstream_answers_in_openai_shape(sdk, anthropic_upstream):
    raw = await sdk.chat.completions.with_raw_response.create(
        model="claude",
        messages=[{"role": "system", "content": "Be brief."}, *HELLO],
        max_tokens=50,
        seed=3,  # OpenAI-only: dropped, or Anthropic would refuse the request
    )
    completion = raw.parse()

    assert completion.choices[0].message.content == "Hello from upstream: hi"
    assert completion.choices[0].finish_reason == "stop"
    sent = anthropic_upstream.last_request
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "sk-ant-upstream"
    assert sent.json["system"] == "Be brief."
    assert sent.json["max_tokens"] == 50
    assert raw.headers["x-gateway-provider"] == "anthropic"
    usage = completion.usage
    expected = shipped_cost(
        "anthropic", "claude-3-5-haiku-latest", usage.prompt_tokens, usage.completion_tokens
    )
    assert Decimal(raw.headers["x-gateway-cost-usd"]) == expected > 0


async def test_an_anthropic_tool_call_arrives_as_an_openai_tool_call(sdk, anthropic_upstream):
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    completion = await sdk.chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "call a tool"}], tools=[tool]
    )

    [call] = completion.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert completion.choices[0].finish_reason == "tool_calls"


async def test_an_anthropic_stream_arrives_as_openai_chunks_with_usage(sdk, anthropic_upstream, records):
    stream = await sdk.chat.completions.create(
        model="claude", messages=HELLO, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]

    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "Hello from upstream: hi"
    assert chunks[-1].usage.completion_tokens == 4
    [record] = records
    assert record.usage.output_tokens == 4
    assert not record.usage.estimated
    assert record.cost_usd > 0
    assert record.stream_completed is True


async def test_embeddings_of_an_anthropic_only_model_are_refused_clearly(sdk, anthropic_upstream):
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.embeddings.create(model="claude", input="hi")
    assert raised.value.body["code"] == "model_not_supported"
    assert anthropic_upstream.requests == []


async def test_a_request_costs_the_organizations_price_in_force_at_its_time(
    sdk, openai_upstream, organization
):
    from datetime import timedelta

    import time_machine
    from django.utils import timezone

    from apps.catalog.services import model_price_create

    now = timezone.now()
    for days, input_price, output_price in ((-1, "1.00", "2.00"), (1, "10.00", "20.00")):
        await database_sync_to_async(model_price_create)(
            organization=organization,
            data={
                "provider": "openai",
                "model": "gpt-4o-mini",
                "input_per_mtok": input_price,
                "output_per_mtok": output_price,
                "effective_from": now + timedelta(days=days),
            },
        )

    def cost_of(raw, input_price: int, output_price: int) -> Decimal:
        usage = raw.parse().usage
        cost = (usage.prompt_tokens * input_price + usage.completion_tokens * output_price) / Decimal(
            1_000_000
        )
        return cost.quantize(Decimal("0.00000001"))

    today = await sdk.chat.completions.with_raw_response.create(model="fast", messages=HELLO)
    assert Decimal(today.headers["x-gateway-cost-usd"]) == cost_of(today, 1, 2)

    with time_machine.travel(now + timedelta(days=2)):
        later = await sdk.chat.completions.with_raw_response.create(model="fast", messages=HELLO)
    assert Decimal(later.headers["x-gateway-cost-usd"]) == cost_of(later, 10, 20)
