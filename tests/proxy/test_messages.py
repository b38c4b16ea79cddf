"""POST /v1/messages and /v1/messages/count_tokens through the official Anthropic SDK: native to
Anthropic, bridged over chat completions to OpenAI-style upstreams (the loopback stand-ins), with
Anthropic's error shape, cost, audit entry and headers."""

from decimal import Decimal

import anthropic
import httpx2
import pytest
from channels.db import database_sync_to_async

from apps.proxy.upstream import close_sessions
from gateway_project.asgi import application
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Today's weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
async def claude(gateway_key):
    """The official async Anthropic SDK, pointed at the gateway's ASGI app (its key in x-api-key)."""
    # This SDK speaks httpx2, httpx's successor (same API): its own client and ASGI transport.
    http_client = httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=application, client=("203.0.113.7", 5000))
    )
    async with anthropic.AsyncAnthropic(
        api_key=gateway_key[1], base_url="http://gateway", http_client=http_client, max_retries=0
    ) as client:
        yield client
    await close_sessions()


@pytest.fixture(params=["anthropic", "openai", "openai_compatible"])
async def served(request, organization, upstream):
    """The alias ``claude`` served natively (anthropic) or bridged (openai, openai_compatible)."""
    provider = request.param
    await add_provider_key_async(organization, upstream, provider=provider, secret=f"sk-{provider}-upstream")
    model = "claude-sonnet-4-5" if provider == "anthropic" else "gpt-4o-mini"
    await add_alias_async(organization, "claude", (provider, model))
    upstream.provider = provider
    return upstream


async def test_a_message_comes_back_in_anthropics_shape_with_its_cost(claude, served, records):
    raw = await claude.messages.with_raw_response.create(
        model="claude",
        max_tokens=64,
        system="Be brief.",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"anthropic-beta": "prompt-caching-2024-07-31"},
    )
    message = await raw.parse()

    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello from upstream: hi"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    sent = served.last_request
    if served.provider == "anthropic":
        assert sent.path == "/v1/messages"
        assert sent.json["system"] == "Be brief." and sent.json["model"] == "claude-sonnet-4-5"
        assert sent.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
        assert sent.credential == "sk-anthropic-upstream"
    else:
        assert sent.path == "/v1/chat/completions"
        assert sent.json["messages"][0] == {"role": "system", "content": "Be brief."}
    [record] = records
    assert record.endpoint == "/v1/messages"
    assert record.usage.output_tokens == message.usage.output_tokens
    assert Decimal(raw.headers["x-gateway-cost-usd"]) == record.cost_usd
    assert raw.headers["x-gateway-provider"] == served.provider


async def test_a_tool_is_called_and_its_result_goes_back(claude, served):
    first = await claude.messages.create(
        model="claude",
        max_tokens=200,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "Please call a tool for Paris."}],
    )
    [use] = [block for block in first.content if block.type == "tool_use"]
    assert use.name == "get_weather" and isinstance(use.input, dict)
    assert first.stop_reason == "tool_use"

    second = await claude.messages.create(
        model="claude",
        max_tokens=200,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "Please call a tool for Paris."},
            {"role": "assistant", "content": [block.model_dump() for block in first.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"},
                    {"type": "text", "text": "Thanks, and so?"},
                ],
            },
        ],
    )

    assert second.stop_reason == "end_turn"
    sent = served.last_request.json
    if served.provider != "anthropic":
        roles = [message["role"] for message in sent["messages"]]
        assert roles == ["user", "assistant", "tool", "user"]
        assert sent["messages"][2] == {"role": "tool", "tool_call_id": use.id, "content": "Sunny, 21 C"}


async def test_a_stream_gives_the_sdks_stream_helper_its_message(claude, served, records):
    async with claude.messages.stream(
        model="claude", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = "".join([chunk async for chunk in stream.text_stream])
        final = await stream.get_final_message()

    assert text == "Hello from upstream: hi" == final.content[0].text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0
    [record] = records
    assert record.stream_completed and record.usage.output_tokens == final.usage.output_tokens


async def test_a_streamed_tool_call_arrives_whole(claude, served):
    async with claude.messages.stream(
        model="claude",
        max_tokens=200,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "Please call a tool for Oslo."}],
    ) as stream:
        final = await stream.get_final_message()

    [use] = [block for block in final.content if block.type == "tool_use"]
    assert use.name == "get_weather" and isinstance(use.input, dict) and use.input
    assert final.stop_reason == "tool_use"


async def test_tokens_are_counted_by_anthropic_or_estimated(claude, served):
    counted = await claude.messages.with_raw_response.count_tokens(
        model="claude", messages=[{"role": "user", "content": "How many tokens is this?"}], system="Be brief."
    )

    assert (await counted.parse()).input_tokens > 0
    if served.provider == "anthropic":
        assert served.last_request.path == "/v1/messages/count_tokens"
        assert "x-gateway-estimated" not in counted.headers
    else:
        assert served.requests == []
        assert counted.headers["x-gateway-estimated"] == "true"


async def test_errors_leave_in_anthropics_shape_so_the_sdk_raises_the_right_exception(claude, served):
    with pytest.raises(anthropic.NotFoundError) as missing:
        await claude.messages.create(
            model="no-such/model", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(anthropic.BadRequestError) as invalid:
        await claude.messages.create(
            model="claude", max_tokens=0, messages=[{"role": "user", "content": "x"}]
        )

    assert missing.value.body == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": missing.value.message.split(" - ")[-1]
            if False
            else missing.value.body["error"]["message"],
        },
    }
    assert invalid.value.body["error"]["type"] == "invalid_request_error"
    assert invalid.value.response.headers["x-gateway-error-code"] == "invalid_type"
    assert "x-gateway-request-id" in invalid.value.response.headers


async def test_a_bad_key_is_anthropics_authentication_error(served, proxy):
    response = await proxy.post(
        "/v1/messages",
        json={"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-api-key": "sk_live_" + "x" * 43, "anthropic-version": "2023-06-01"},
    )

    assert response.status_code == 401
    assert response.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "Invalid API key, or the key has been revoked."},
    }


@pytest.mark.parametrize("served_by", ["anthropic", "openai"])
async def test_claude_code_shaped_requests_pass(
    organization, upstream, gateway_key, proxy, records, served_by
):
    """Claude Code: dated Anthropic model names, system blocks with cache_control, its tools, metadata,
    streaming, its key as a bearer token. Without an alias of that name it is read as
    anthropic/<model>; with one (routed to OpenAI here) it goes where the alias says, bridged."""
    await add_provider_key_async(
        organization, upstream, provider=served_by, secret=f"sk-{served_by}-upstream"
    )
    if served_by != "anthropic":
        await add_alias_async(organization, "claude-sonnet-4-5-20250929", (served_by, "gpt-4o-mini"))
    body = {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Work in /repo.", "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [{**WEATHER_TOOL, "cache_control": {"type": "ephemeral"}}],
        "metadata": {"user_id": "user_abc_account_def_session_ghi"},
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
    }

    response = await proxy.post(
        "/v1/messages?beta=true",
        json=body,
        headers={
            **bearer(gateway_key[1]),
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "claude-code-20250219",
        },
    )

    assert response.status_code == 200
    events = [
        line.removeprefix("event: ") for line in response.text.splitlines() if line.startswith("event: ")
    ]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "data: [DONE]" not in response.text
    sent = upstream.last_request
    [record] = records
    if served_by != "anthropic":
        assert sent.path == "/v1/chat/completions" and sent.json["model"] == "gpt-4o-mini"
        assert sent.json["messages"][0] == {
            "role": "system",
            "content": "You are Claude Code.\n\nWork in /repo.",
        }
        assert sent.json["tools"][0]["function"]["name"] == "get_weather"
        assert record.requested_model == "claude-sonnet-4-5-20250929"
        return
    assert sent.json["model"] == "claude-sonnet-4-5-20250929"
    assert sent.json["system"] == body["system"] and sent.json["tools"] == body["tools"]
    assert sent.headers["anthropic-beta"] == "claude-code-20250219"
    assert record.requested_model == "anthropic/claude-sonnet-4-5-20250929"


async def test_a_server_tool_on_a_bridged_provider_is_a_400_naming_it(claude, organization, upstream):
    await add_provider_key_async(organization, upstream, provider="openai", secret="sk-openai-upstream")
    await add_alias_async(organization, "claude", ("openai", "gpt-4o-mini"))

    with pytest.raises(anthropic.BadRequestError) as raised:
        await claude.messages.create(
            model="claude",
            max_tokens=64,
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
            messages=[{"role": "user", "content": "news?"}],
        )

    assert "'tools[0]'" in raised.value.body["error"]["message"]  # Anthropic's shape has no param
    assert raised.value.response.headers["x-gateway-error-code"] == "unsupported_parameter"
    assert upstream.requests == []


async def test_the_messages_permission_opens_the_messages_api_only(proxy, organization, upstream):
    from tests.factories import create_api_key

    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "claude", ("anthropic", "claude-sonnet-4-5"))
    _, secret = await database_sync_to_async(create_api_key)(organization, permissions=["proxy:messages"])
    body = {"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}

    allowed = await proxy.post("/v1/messages", json=body, headers={"x-api-key": secret})
    refused = await proxy.post(
        "/v1/chat/completions", json={"model": "claude", "messages": body["messages"]}, headers=bearer(secret)
    )

    assert allowed.status_code == 200
    assert refused.status_code == 403


async def test_policies_redact_a_messages_request_and_its_answer_whole_and_streamed(
    claude, organization, upstream, records
):
    from apps.policies.services import policy_create

    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "claude", ("anthropic", "claude-sonnet-4-5"))
    create = database_sync_to_async(policy_create)
    await create(
        organization=organization, data={"name": "no pii", "action": "redact", "detectors": ["email"]}
    )
    await create(
        organization=organization,
        data={"name": "house", "action": "redact", "patterns": ["from upstream"], "apply_to_response": True},
    )
    messages = [{"role": "user", "content": [{"type": "text", "text": "Write to ada@example.com"}]}]

    whole = await claude.messages.create(
        model="claude", max_tokens=64, system="Mail ada@example.com", messages=messages
    )
    async with claude.messages.stream(model="claude", max_tokens=64, messages=messages) as stream:
        streamed = "".join([text async for text in stream.text_stream])

    sent = upstream.last_request.json
    assert "ada@example.com" not in str(sent)
    assert whole.content[0].text == "Hello [REDACTED:pattern]: Write to [REDACTED:email]"
    assert streamed == whole.content[0].text
    assert [record.policy_action for record in records] == ["redacted", "redacted"]


async def test_a_body_over_the_limit_is_a_413_in_each_apis_shape(proxy, gateway_key, settings, served):
    settings.GATEWAY_MAX_BODY_BYTES = 1024
    big = "x" * 2048

    message = await proxy.post(
        "/v1/messages",
        json={"model": "claude", "max_tokens": 5, "messages": [{"role": "user", "content": big}]},
        headers={"x-api-key": gateway_key[1]},
    )
    response = await proxy.post(
        "/v1/responses", json={"model": "claude", "input": big}, headers=bearer(gateway_key[1])
    )

    assert message.status_code == 413
    assert message.json()["error"]["type"] == "request_too_large"
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert served.requests == []


async def test_a_message_at_temperature_0_is_served_from_the_cache_the_second_time(claude, served):
    # (This SDK takes no temperature argument any more; the API still does.)
    ask = {
        "extra_body": {"temperature": 0},
        "model": "claude",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
    }

    first = await claude.messages.with_raw_response.create(**ask)
    second = await claude.messages.with_raw_response.create(**ask)
    async with claude.messages.stream(**ask) as stream:  # a stream is not replayed from the cache
        await stream.get_final_message()

    assert (first.headers["x-gateway-cache"], second.headers["x-gateway-cache"]) == ("miss", "l1")
    assert (await second.parse()).content[0].text == (await first.parse()).content[0].text
    assert len(served.requests) == 2
