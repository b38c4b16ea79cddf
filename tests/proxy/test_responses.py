"""POST /v1/responses through the official OpenAI SDK: bridged over chat completions to Anthropic and
OpenAI-compatible upstreams (the loopback stand-ins of tests/upstreams.py), with cost, audit entry
and headers as on chat completions."""

import json
from decimal import Decimal

import openai
import pytest
from channels.db import database_sync_to_async

from tests.proxy.conftest import add_alias_async, add_provider_key_async

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Today's weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(params=["anthropic", "openai_compatible"])
async def bridged(request, organization, upstream):
    """The alias ``bridged`` served by a provider that does not speak the Responses API."""
    provider = request.param
    await add_provider_key_async(organization, upstream, provider=provider, secret=f"sk-{provider}-upstream")
    model = "claude-3-5-haiku-latest" if provider == "anthropic" else "qwen2.5-7b-instruct"
    await add_alias_async(organization, "bridged", (provider, model))
    return upstream


async def test_a_bridged_response_comes_back_in_openais_shape_with_its_cost(sdk, bridged, records):
    raw = await sdk.responses.with_raw_response.create(
        model="bridged", instructions="Be brief.", input="hi", max_output_tokens=50
    )
    response = raw.parse()

    assert response.object == "response"
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.output_text == "Hello from upstream: hi"
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.instructions == "Be brief."
    sent = bridged.last_request
    assert sent.path in ("/v1/messages", "/v1/chat/completions")  # never /v1/responses
    if sent.path == "/v1/messages":
        assert sent.json["system"] == "Be brief."
        assert sent.json["max_tokens"] == 50
    else:
        assert sent.json["messages"][0] == {"role": "system", "content": "Be brief."}
        assert sent.json["max_tokens"] == 50
    assert Decimal(raw.headers["x-gateway-cost-usd"]) >= 0
    assert raw.headers["x-gateway-cache"] == "bypass"
    [record] = records
    assert record.endpoint == "/v1/responses"
    assert (record.usage.input_tokens, record.usage.output_tokens) == (
        response.usage.input_tokens,
        response.usage.output_tokens,
    )


async def test_a_bridged_tool_call_and_its_output_go_round_trip(sdk, bridged):
    first = await sdk.responses.create(
        model="bridged", input="Please call a tool for Paris.", tools=[WEATHER_TOOL]
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather"
    json.loads(call.arguments)

    second = await sdk.responses.create(
        model="bridged",
        input=[
            {"role": "user", "content": "Please call a tool for Paris."},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"},
        ],
        tools=[WEATHER_TOOL],
    )

    assert second.status == "completed"
    sent = bridged.last_request.json
    if "system" in sent or bridged.last_request.path == "/v1/messages":
        assert sent["messages"][-1]["content"][0]["type"] == "tool_result"
    else:
        assert sent["messages"][-1] == {
            "role": "tool",
            "tool_call_id": call.call_id,
            "content": "Sunny, 21 C",
        }


async def test_a_bridged_stream_gives_the_sdks_stream_helper_its_events(sdk, bridged, records):
    async with sdk.responses.stream(model="bridged", input="hi") as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()

    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert final.output_text == "Hello from upstream: hi"
    assert final.usage.output_tokens > 0
    [record] = records
    assert record.stream and record.stream_completed
    assert record.usage.output_tokens == final.usage.output_tokens


async def test_a_streamed_tool_call_arrives_whole(sdk, bridged):
    stream = await sdk.responses.create(
        model="bridged", input="Please call a tool for Oslo.", tools=[WEATHER_TOOL], stream=True
    )
    events = [event async for event in stream]

    done = [event for event in events if event.type == "response.function_call_arguments.done"]
    assert len(done) == 1
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert deltas == done[0].arguments
    completed = events[-1].response
    [call] = [item for item in completed.output if item.type == "function_call"]
    assert call.arguments == done[0].arguments
    assert [event.sequence_number for event in events] == list(range(len(events)))


async def test_a_built_in_tool_on_a_bridged_provider_is_a_400_naming_it(sdk, bridged, records):
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.responses.create(model="bridged", input="news?", tools=[{"type": "web_search"}])

    assert raised.value.body["param"] == "tools[0].type"
    assert bridged.requests == []
    [record] = records
    assert record.status == 400


async def test_a_body_without_input_is_a_400(sdk, bridged):
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.responses.create(model="bridged")  # type: ignore[call-overload]

    assert raised.value.body["param"] == "input"


@pytest.fixture(params=["openai", "azure_openai"])
async def native(request, organization, upstream):
    """The alias ``native`` served by a provider that speaks the Responses API itself."""
    provider = request.param
    await add_provider_key_async(organization, upstream, provider=provider, secret=f"sk-{provider}-upstream")
    await add_alias_async(organization, "native", (provider, "gpt-4o-mini"))
    return upstream


async def test_a_native_response_is_passed_through_with_its_cost(sdk, native, records):
    raw = await sdk.responses.with_raw_response.create(
        model="native", instructions="Be brief.", input="hi", max_output_tokens=50, metadata={"run": "7"}
    )
    response = raw.parse()

    sent = native.last_request
    assert sent.path in ("/v1/responses", "/openai/v1/responses")
    assert sent.json["model"] == "gpt-4o-mini"
    assert (sent.json["instructions"], sent.json["metadata"]) == ("Be brief.", {"run": "7"})
    assert response.output_text == "Hello from upstream: hi"
    assert response.id.startswith("resp_")
    [record] = records
    assert record.endpoint == "/v1/responses"
    assert (record.usage.input_tokens, record.usage.output_tokens) == (
        response.usage.input_tokens,
        response.usage.output_tokens,
    )
    assert Decimal(raw.headers["x-gateway-cost-usd"]) == record.cost_usd > 0


async def test_a_native_stream_is_passed_through_event_by_event(sdk, native, records):
    async with sdk.responses.stream(model="native", input="hi", tools=[WEATHER_TOOL]) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()

    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert final.output_text == "Hello from upstream: hi"
    [record] = records
    assert record.stream_completed
    assert record.usage.output_tokens == final.usage.output_tokens > 0
    assert record.cost_usd > 0


async def test_a_native_structured_output_parses(sdk, native):
    from pydantic import BaseModel

    class Colours(BaseModel):
        colours: list[str]

    parsed = await sdk.responses.parse(model="native", input="Two colours?", text_format=Colours)

    assert isinstance(parsed.output_parsed, Colours)
    assert native.last_request.json["text"]["format"]["type"] == "json_schema"


# --- Conversation state ----------------------------------------------------------------------------


async def sdk_of(secret: str):
    import httpx

    from gateway_project.asgi import application

    transport = httpx.ASGITransport(app=application, client=("203.0.113.8", 5000))
    return openai.AsyncOpenAI(
        api_key=secret,
        base_url="http://gateway/v1",
        http_client=httpx.AsyncClient(transport=transport),
        max_retries=0,
    )


async def test_a_bridged_turn_is_stored_and_continued_by_its_id(sdk, bridged):
    first = await sdk.responses.create(model="bridged", instructions="Be brief.", input="My name is Ada.")

    second = await sdk.responses.create(
        model="bridged", input="What is my name?", previous_response_id=first.id
    )

    sent = bridged.last_request.json
    texts = str(sent["messages"])
    assert "My name is Ada." in texts and "Hello from upstream: My name is Ada." in texts
    assert "What is my name?" in texts
    assert "Be brief." not in texts  # instructions are not carried over, as at OpenAI
    assert second.previous_response_id == first.id
    # A third turn replays both earlier ones, in order.
    await sdk.responses.create(model="bridged", input="And again?", previous_response_id=second.id)
    replayed = str(bridged.last_request.json["messages"])
    assert (
        replayed.index("My name is Ada.") < replayed.index("What is my name?") < replayed.index("And again?")
    )


async def test_a_streamed_bridged_turn_is_stored_too(sdk, bridged):
    async with sdk.responses.stream(model="bridged", input="Remember 42.") as stream:
        first = await stream.get_final_response()

    await sdk.responses.create(model="bridged", input="Which number?", previous_response_id=first.id)

    assert "Remember 42." in str(bridged.last_request.json["messages"])


async def test_store_false_keeps_nothing(sdk, bridged):
    first = await sdk.responses.create(model="bridged", input="hi", store=False)

    with pytest.raises(openai.NotFoundError) as raised:
        await sdk.responses.create(model="bridged", input="again", previous_response_id=first.id)

    assert raised.value.body["code"] == "previous_response_not_found"
    assert raised.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.retrieve(first.id)


async def test_a_bridged_response_is_retrieved_and_deleted(sdk, bridged):
    made = await sdk.responses.create(model="bridged", input="hi", metadata={"k": "v"})

    got = await sdk.responses.retrieve(made.id)
    deleted = await sdk.responses.with_raw_response.delete(made.id)

    assert (got.id, got.output_text, got.metadata) == (made.id, made.output_text, {"k": "v"})
    assert deleted.http_response.status_code == 200
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.retrieve(made.id)
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.responses.cancel((await sdk.responses.create(model="bridged", input="x")).id)
    assert "background" in raised.value.message


async def test_another_organizations_response_is_unknown(sdk, bridged, outsider):
    from tests.factories import create_api_key

    made = await sdk.responses.create(model="bridged", input="secret plans")
    _, secret = await database_sync_to_async(create_api_key)(outsider.organization)
    async with await sdk_of(secret) as theirs:
        with pytest.raises(openai.NotFoundError):
            await theirs.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError):
            await theirs.responses.delete(made.id)
        with pytest.raises(openai.NotFoundError):
            await theirs.responses.create(model="openai/gpt-4o", input="x", previous_response_id=made.id)
    assert (await sdk.responses.retrieve(made.id)).id == made.id


async def test_a_stored_turn_outlives_the_hot_tier_and_is_encrypted_at_rest(sdk, bridged, organization):
    from apps.conversations.hot import hot_turns
    from apps.conversations.models import StoredResponse
    from tests.proxy.conftest import entries

    first = await sdk.responses.create(model="bridged", input="The code word is tangerine.")
    await entries()  # the outbox's ingest has written the turn
    await hot_turns().delete(str(organization.id), first.id)  # as if its hour in the hot tier were over

    await sdk.responses.create(model="bridged", input="Which word?", previous_response_id=first.id)

    assert "tangerine" in str(bridged.last_request.json["messages"])
    row = await StoredResponse.objects.aget(response_id=first.id)
    assert not row.native and row.content_encrypted and "tangerine" not in row.content_encrypted


@pytest.fixture
async def two_keys(organization, upstream):
    """``native`` served by two OpenAI keys of equal weight: each holds only its own responses."""
    for secret in ("sk-openai-one", "sk-openai-two"):
        await add_provider_key_async(organization, upstream, provider="openai", secret=secret)
    await add_alias_async(organization, "native", ("openai", "gpt-4o-mini"))
    return upstream


async def test_a_native_follow_up_goes_to_the_key_that_made_the_response(sdk, two_keys):
    first = await sdk.responses.create(model="native", input="My name is Ada.")
    maker = two_keys.last_request.credential

    for _ in range(6):  # rotation alone would send about half of them to the other key (a 404 there)
        sent_before = len(two_keys.requests)
        follow = await sdk.responses.create(model="native", input="Name?", previous_response_id=first.id)
        [sent] = two_keys.requests[sent_before:]  # one attempt: no failover from the other key
        assert (sent.credential, sent.json["previous_response_id"]) == (maker, first.id)
        assert follow.previous_response_id == first.id

    got = await sdk.responses.retrieve(first.id)
    assert got.id == first.id and two_keys.last_request.credential == maker
    await sdk.responses.delete(first.id)
    assert two_keys.last_request.method == "DELETE"
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.retrieve(first.id)


async def test_a_native_response_the_upstream_no_longer_holds_is_its_404(sdk, two_keys):
    first = await sdk.responses.create(model="native", input="hi")
    two_keys.reset()  # the upstream forgot it (expired there)

    with pytest.raises(openai.NotFoundError) as raised:
        await sdk.responses.create(model="native", input="again", previous_response_id=first.id)

    assert "not found" in raised.value.message
    assert len(two_keys.requests) == 1  # the one key that could know it, no failover


@pytest.mark.parametrize(("permissions", "status"), [(["proxy:responses"], 200), (["proxy:chat"], 403)])
async def test_the_responses_permission_opens_the_responses_api_only(
    proxy, bridged, organization, permissions, status
):
    from tests.factories import create_api_key
    from tests.proxy.conftest import bearer

    _, secret = await database_sync_to_async(create_api_key)(organization, permissions=permissions)

    response = await proxy.post(
        "/v1/responses", json={"model": "bridged", "input": "hi"}, headers=bearer(secret)
    )
    chat = await proxy.post(
        "/v1/chat/completions",
        json={"model": "bridged", "messages": [{"role": "user", "content": "hi"}]},
        headers=bearer(secret),
    )

    assert response.status_code == status
    assert chat.status_code == (403 if status == 200 else 200)


async def test_an_openai_compatible_server_that_speaks_responses_gets_them_passed_through(
    sdk, organization, upstream
):
    from apps.providers.models import ProviderKey

    key = await add_provider_key_async(
        organization, upstream, provider="openai_compatible", secret="sk-vllm-upstream", speaks_responses=True
    )
    await add_alias_async(organization, "vllm", ("openai_compatible", "qwen3-8b"))

    response = await sdk.responses.create(model="vllm", input="hi", store=False)

    assert upstream.last_request.path == "/v1/responses"
    assert upstream.last_request.json["model"] == "qwen3-8b"
    assert response.output_text == "Hello from upstream: hi"
    assert (await ProviderKey.objects.aget(pk=key.pk)).speaks_responses


async def test_only_an_unstored_response_at_temperature_0_is_served_from_the_cache(sdk, bridged):
    unstored = {"model": "bridged", "input": "hi", "temperature": 0, "store": False}

    first = await sdk.responses.with_raw_response.create(**unstored)
    second = await sdk.responses.with_raw_response.create(**unstored)
    stored = await sdk.responses.with_raw_response.create(**{**unstored, "store": True})

    assert (first.headers["x-gateway-cache"], second.headers["x-gateway-cache"]) == ("miss", "l1")
    assert stored.headers["x-gateway-cache"] == "bypass"  # a stored Response is a conversation's turn
    assert len(bridged.requests) == 2


async def test_structured_output_through_the_bridge_parses(sdk, organization, upstream):
    from pydantic import BaseModel

    class Colours(BaseModel):
        colours: list[str]

    await add_provider_key_async(
        organization, upstream, provider="openai_compatible", secret="sk-compat-upstream"
    )
    await add_alias_async(organization, "compat", ("openai_compatible", "qwen2.5-7b-instruct"))

    parsed = await sdk.responses.parse(model="compat", input="Two colours?", text_format=Colours)

    assert isinstance(parsed.output_parsed, Colours)
    sent = upstream.last_request.json["response_format"]
    assert (
        sent["type"] == "json_schema"
        and sent["json_schema"]["schema"]["properties"]["colours"]["type"] == "array"
    )


async def test_structured_output_reaches_an_anthropic_model_through_a_forced_tool(
    sdk, organization, upstream
):
    from pydantic import BaseModel

    class Colours(BaseModel):
        colours: list[str]

    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "claude", ("anthropic", "claude-sonnet-4-5"))

    parsed = await sdk.responses.parse(model="claude", input="Two colours?", text_format=Colours)
    async with sdk.responses.stream(model="claude", input="Two colours?", text_format=Colours) as stream:
        streamed = await stream.get_final_response()

    assert isinstance(parsed.output_parsed, Colours)
    assert isinstance(streamed.output_parsed, Colours)
    sent = upstream.last_request.json
    assert sent["tool_choice"] == {"type": "tool", "name": "gateway_structured_output"}
    assert sent["tools"][0]["input_schema"]["properties"]["colours"]["type"] == "array"
    assert [item.type for item in parsed.output] == ["message"]  # the tool call is the answer's text
