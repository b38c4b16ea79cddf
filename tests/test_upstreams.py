"""The upstream stand-in must speak the providers' formats faithfully, or gateway tests prove nothing.

OpenAI and Azure (chat, embeddings, the Responses API) are checked with the official SDK; Anthropic (whose
SDK is not installed) with httpx.
"""

import asyncio
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from tests import upstreams
from tests.upstreams import EMBEDDING_DIMENSIONS, UpstreamServer, embedding_for

# The fixtures, bound here so pytest finds them (a conftest would import them instead).
upstream = upstreams.upstream
make_upstream = upstreams.make_upstream

USER = [{"role": "user", "content": "hi there"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ANTHROPIC_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
RESPONSES_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
ANTHROPIC_VERSION = "2023-06-01"


SdkFactory = Callable[..., openai.OpenAI]
AsyncSdkFactory = Callable[..., openai.AsyncOpenAI]


@pytest.fixture
def sdk() -> Iterator[SdkFactory]:
    """Makes OpenAI clients for a server (no retries, so a failure surfaces at once); closes them after."""
    clients: list[openai.OpenAI] = []

    def make(server: UpstreamServer, key: str = "sk-test", **options: Any) -> openai.OpenAI:
        clients.append(openai.OpenAI(base_url=server.openai_base_url, api_key=key, max_retries=0, **options))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


@pytest.fixture
async def async_sdk() -> AsyncIterator[AsyncSdkFactory]:
    clients: list[openai.AsyncOpenAI] = []

    def make(server: UpstreamServer, key: str = "sk-test") -> openai.AsyncOpenAI:
        clients.append(openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=key, max_retries=0))
        return clients[-1]

    yield make
    for client in clients:
        await client.close()


def chat(client: openai.OpenAI, content: str = "hi there", **params: Any) -> Any:
    return client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": content}], **params
    )


def anthropic_headers(key: str = "sk-ant") -> dict[str, str]:
    return {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}


def anthropic_body(content: Any = "hi there", **fields: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": content}],
    } | fields


def anthropic_post(
    server: UpstreamServer, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    headers = anthropic_headers() if headers is None else headers
    return httpx.post(f"{server.anthropic_base_url}/v1/messages", json=body, headers=headers, timeout=5)


def parse_sse(text: str) -> list[tuple[str | None, Any]]:
    """(event, data) per server-sent event; data is JSON-decoded unless it is [DONE]."""
    events = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        data = fields["data"]
        events.append((fields.get("event"), data if data == "[DONE]" else json.loads(data)))
    return events


def anthropic_stream(server: UpstreamServer, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    response = anthropic_post(server, body | {"stream": True})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


# --- Lifecycle ------------------------------------------------------------------------------------


def test_urls_follow_each_sdks_convention(upstream: UpstreamServer) -> None:
    assert upstream.base_url.startswith("http://127.0.0.1:")
    assert upstream.openai_base_url == upstream.base_url + "/v1"
    assert upstream.anthropic_base_url == upstream.base_url
    response = httpx.get(f"{upstream.openai_base_url}/models", headers={"Authorization": "Bearer k"})
    assert response.status_code == 200


def test_stop_is_fast_even_with_a_hanging_request(sdk: SdkFactory) -> None:
    server = UpstreamServer().start()
    server.behave("timeout")
    outcome: list[BaseException] = []

    def hang() -> None:
        try:
            chat(sdk(server, timeout=10))
        except openai.APIError as exc:
            outcome.append(exc)

    client = threading.Thread(target=hang)
    client.start()
    assert server.wait_for_requests(1)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 1
    client.join(timeout=2)
    assert isinstance(outcome[0], openai.APIConnectionError)  # the hung request ends when the server stops


# --- OpenAI ---------------------------------------------------------------------------------------


def test_openai_chat_completion(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi there"}]
    completion = sdk(upstream, key="sk-a").chat.completions.create(model="gpt-4o", messages=messages)

    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "gpt-4o"
    choice = completion.choices[0]
    assert (choice.message.role, choice.message.content) == ("assistant", "Hello from upstream: hi there")
    assert choice.finish_reason == "stop"
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (4, 5, 9)
    assert usage.prompt_tokens_details.cached_tokens == 0
    assert usage.completion_tokens_details.reasoning_tokens == 0

    request = upstream.last_request
    assert (request.method, request.path, request.credential) == ("POST", "/v1/chat/completions", "sk-a")
    assert request.headers["authorization"] == "Bearer sk-a"
    assert request.json["messages"] == messages
    assert json.loads(request.body) == request.json


async def test_openai_stream_with_usage(upstream: UpstreamServer, async_sdk: AsyncSdkFactory) -> None:
    stream = await async_sdk(upstream).chat.completions.create(
        model="gpt-4o-mini", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]

    assert all(chunk.object == "chat.completion.chunk" and chunk.model == "gpt-4o-mini" for chunk in chunks)
    first, *content, finish, usage = chunks
    assert (first.choices[0].delta.role, first.choices[0].delta.content) == ("assistant", "")
    assert [c.choices[0].delta.content for c in content] == ["Hello", " from", " upstream:", " hi", " there"]
    assert finish.choices[0].finish_reason == "stop"
    assert finish.choices[0].delta.content is None
    assert usage.choices == []
    assert (usage.usage.prompt_tokens, usage.usage.completion_tokens, usage.usage.total_tokens) == (2, 5, 7)
    assert all(chunk.usage is None for chunk in chunks[:-1])


def test_openai_stream_on_the_wire(upstream: UpstreamServer) -> None:
    body = {"model": "gpt-4o-mini", "messages": USER, "stream": True}
    response = httpx.post(
        f"{upstream.openai_base_url}/chat/completions", json=body, headers={"Authorization": "Bearer k"}
    )

    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert all(line.startswith("data: ") for line in response.text.splitlines() if line)
    events = parse_sse(response.text)
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    assert not any("usage" in chunk for chunk in chunks)  # no usage chunk unless asked for
    assert chunks[-1]["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]


def test_openai_embeddings(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    client = sdk(upstream)
    as_floats = client.embeddings.create(
        model="text-embedding-3-small", input="hello world", encoding_format="float"
    )
    as_base64 = client.embeddings.create(model="text-embedding-3-small", input=["hello world", "bye"])

    assert as_floats.object == "list" and as_floats.model == "text-embedding-3-small"
    assert as_floats.data[0].object == "embedding"
    assert as_floats.data[0].embedding == embedding_for("hello world")
    assert len(as_floats.data[0].embedding) == EMBEDDING_DIMENSIONS
    assert (as_floats.usage.prompt_tokens, as_floats.usage.total_tokens) == (2, 2)
    assert upstream.requests[1].json["encoding_format"] == "base64"  # the SDK's default, decoded by it
    assert [item.index for item in as_base64.data] == [0, 1]
    assert [item.embedding for item in as_base64.data] == [embedding_for("hello world"), embedding_for("bye")]
    assert as_base64.usage.prompt_tokens == 3


def test_openai_models(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    models = sdk(upstream).models.list()
    assert [model.id for model in models] == ["gpt-4o-mini", "gpt-4o", "text-embedding-3-small"]
    assert all(model.object == "model" for model in models)


def test_openai_tool_call(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    completion = chat(sdk(upstream), "Please call a tool", tools=[WEATHER_TOOL])

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Paris"}')


async def test_openai_streamed_tool_call_arrives_in_pieces(
    upstream: UpstreamServer, async_sdk: AsyncSdkFactory
) -> None:
    stream = await async_sdk(upstream).chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "call a tool"}],
        tools=[WEATHER_TOOL],
        stream=True,
    )
    chunks = [chunk async for chunk in stream]

    head = chunks[0].choices[0].delta.tool_calls[0]
    assert (head.index, head.type, head.function.name) == (0, "function", "get_weather")
    assert head.id.startswith("call_") and head.function.arguments == ""
    pieces = [c.choices[0].delta.tool_calls[0].function.arguments for c in chunks[1:-1]]
    assert len(pieces) > 1 and "".join(pieces) == '{"city": "Paris"}'
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_openai_max_tokens_and_stop(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    client = sdk(upstream)
    truncated = chat(client, "one two three", max_tokens=3)
    stopped = chat(client, "one two three", stop=["two"])

    assert truncated.choices[0].message.content == "Hello from upstream:"
    assert truncated.choices[0].finish_reason == "length"
    assert stopped.choices[0].message.content == "Hello from upstream: one "
    assert stopped.choices[0].finish_reason == "stop"


def test_openai_refuses_a_request_without_api_key(upstream: UpstreamServer) -> None:
    response = httpx.post(
        f"{upstream.openai_base_url}/chat/completions", json={"model": "m", "messages": USER}
    )
    assert response.status_code == 401
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert upstream.last_request.credential is None


@pytest.mark.parametrize(
    ("params", "param"),
    [
        pytest.param(
            {"stream_options": {"include_usage": True}}, "stream_options", id="stream-options-alone"
        ),
        pytest.param({"tools": [ANTHROPIC_TOOL]}, "tools[0].function", id="anthropic-shaped-tool"),
        pytest.param({"max_tokens": 0}, "max_tokens", id="max-tokens"),
        pytest.param({"tool_choice": "sometimes"}, "tool_choice", id="tool-choice"),
    ],
)
def test_openai_validates_like_openai(
    upstream: UpstreamServer, params: dict[str, Any], param: str, sdk: SdkFactory
) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        chat(sdk(upstream), **params)
    assert error.value.param == param


def test_tool_choice_forces_or_forbids_a_call(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    client = sdk(upstream)
    required = chat(client, tools=[WEATHER_TOOL], tool_choice="required")
    named = chat(
        client,
        tools=[WEATHER_TOOL, other],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    forbidden = chat(client, "call a tool", tools=[WEATHER_TOOL], tool_choice="none")
    anthropic = anthropic_post(
        upstream, anthropic_body(tools=[ANTHROPIC_TOOL], tool_choice={"type": "tool", "name": "get_weather"})
    ).json()

    assert required.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert named.choices[0].message.tool_calls[0].function.name == "get_time"
    assert forbidden.choices[0].finish_reason == "stop"
    assert anthropic["content"][0]["type"] == "tool_use"


# --- Azure OpenAI ---------------------------------------------------------------------------------


def test_azure_chat_and_embeddings(upstream: UpstreamServer) -> None:
    with openai.AzureOpenAI(
        azure_endpoint=upstream.base_url, api_version="2024-10-21", api_key="azure-key", max_retries=0
    ) as client:
        completion = client.chat.completions.create(model="my-deployment", messages=USER)
        embeddings = client.embeddings.create(model="my-embedder", input="hello", encoding_format="float")

    assert completion.choices[0].message.content == "Hello from upstream: hi there"
    assert embeddings.data[0].embedding == embedding_for("hello")
    chat_request, embeddings_request = upstream.requests
    assert chat_request.path == "/openai/deployments/my-deployment/chat/completions"
    assert embeddings_request.path == "/openai/deployments/my-embedder/embeddings"
    assert chat_request.query == {"api-version": "2024-10-21"}
    assert chat_request.credential == "azure-key"
    assert chat_request.headers["api-key"] == "azure-key"


def test_azure_without_api_version_is_not_found(upstream: UpstreamServer) -> None:
    response = httpx.post(
        f"{upstream.base_url}/openai/deployments/d/chat/completions",
        json={"messages": USER},
        headers={"api-key": "k"},
    )
    assert response.status_code == 404
    assert response.json() == {"error": {"code": "404", "message": "Resource not found"}}


# --- OpenAI Responses API -------------------------------------------------------------------------


def respond(client: openai.OpenAI, content: Any = "hi there", **params: Any) -> Any:
    return client.responses.create(model="gpt-4o-mini", input=content, **params)


def responses_stream_on_the_wire(
    server: UpstreamServer, body: dict[str, Any]
) -> list[tuple[str | None, Any]]:
    response = httpx.post(
        f"{server.openai_base_url}/responses",
        json={"model": "gpt-4o-mini", "stream": True} | body,
        headers={"Authorization": "Bearer sk-test"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    return parse_sse(response.text)


def test_openai_response(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    response = sdk(upstream, key="sk-a").responses.create(
        model="gpt-4o", input="hi there", instructions="Be brief.", temperature=0.5, metadata={"run": "1"}
    )

    assert response.id.startswith("resp_") and response.object == "response"
    assert (response.status, response.model) == ("completed", "gpt-4o")
    assert response.output_text == "Hello from upstream: hi there"
    (message,) = response.output
    assert message.id.startswith("msg_")
    assert (message.type, message.role, message.status) == ("message", "assistant", "completed")
    assert [(part.type, part.text, part.annotations) for part in message.content] == [
        ("output_text", "Hello from upstream: hi there", [])
    ]
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (4, 5, 9)  # instructions count
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0
    assert response.created_at <= response.completed_at
    echoed = (
        response.instructions,
        response.temperature,
        response.top_p,
        response.tools,
        response.tool_choice,
        response.parallel_tool_calls,
        response.store,
        response.previous_response_id,
        response.metadata,
        response.max_output_tokens,
        response.text.format.type,
    )
    assert echoed == ("Be brief.", 0.5, 1.0, [], "auto", True, True, None, {"run": "1"}, None, "text")

    request = upstream.last_request
    assert (request.method, request.path, request.credential) == ("POST", "/v1/responses", "sk-a")
    assert request.json["input"] == "hi there" and request.json["instructions"] == "Be brief."


def test_openai_response_reads_input_items(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    items = [
        {"role": "developer", "content": "Be brief."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look at this"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
            ],
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A cat."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "and again"}]},
    ]
    response = respond(sdk(upstream), items)

    assert response.output_text == "Hello from upstream: and again"  # the last user text, as in chat
    assert response.usage.input_tokens == 9  # every message's text, the developer's included
    assert upstream.last_request.json["input"] == items


def test_openai_response_stream(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    with sdk(upstream).responses.stream(model="gpt-4o-mini", input="hi there") as stream:
        events = list(stream)
        final = stream.get_final_response()

    assert [event.type for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 5,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    created = events[0].response
    assert (created.status, created.output, created.usage) == ("in_progress", [], None)
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert deltas == ["Hello", " from", " upstream:", " hi", " there"]
    assert events[-4].text == "Hello from upstream: hi there"
    assert final.id == created.id and final.status == "completed"
    assert final.output_text == "Hello from upstream: hi there"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (2, 5)


def test_openai_response_stream_on_the_wire(upstream: UpstreamServer) -> None:
    events = responses_stream_on_the_wire(upstream, {"input": "hi there"})

    assert all(name == data["type"] for name, data in events)  # each event named by its type
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    name, completed = events[-1]
    assert name == "response.completed"  # the end; no [DONE] after it
    assert completed["response"]["status"] == "completed"
    assert completed["response"]["usage"]["total_tokens"] == 7
    item = events[2][1]["item"]
    assert (item["type"], item["status"], item["content"]) == ("message", "in_progress", [])
    assert events[3][1]["part"] == {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}


def test_openai_response_function_call_and_its_output(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    client = sdk(upstream)
    asked = respond(client, "Please call a tool", tools=[RESPONSES_TOOL])

    (call,) = asked.output
    assert (call.type, call.status, call.name, call.arguments) == (
        "function_call",
        "completed",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert asked.output_text == ""
    assert asked.tools[0].name == "get_weather" and asked.tools[0].strict is True

    # The next turn sends the conversation back: the call, its output, then the user's next words.
    history = [
        {"role": "user", "content": "Please call a tool"},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 degrees"},
        {"role": "user", "content": "Thanks!"},
    ]
    answered = respond(client, history, tools=[RESPONSES_TOOL])

    assert answered.output_text == "Hello from upstream: Thanks!"
    assert answered.usage.input_tokens == 8  # the question, the tool's output and the thanks
    assert upstream.last_request.json["input"][2]["type"] == "function_call_output"


async def test_openai_response_streamed_function_call(
    upstream: UpstreamServer, async_sdk: AsyncSdkFactory
) -> None:
    stream = await async_sdk(upstream).responses.create(
        model="gpt-4o", input="call a tool", tools=[RESPONSES_TOOL], stream=True
    )
    events = [event async for event in stream]

    assert [event.type for event in events[:3]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ]
    added = events[2].item
    assert (added.type, added.status, added.name, added.arguments) == (
        "function_call",
        "in_progress",
        "get_weather",
        "",
    )
    deltas = [event for event in events if event.type == "response.function_call_arguments.delta"]
    assert len(deltas) > 1 and "".join(event.delta for event in deltas) == '{"city": "Paris"}'
    assert all(event.item_id == added.id and event.output_index == 0 for event in deltas)
    done, item_done, completed = events[-3:]
    assert (done.type, done.arguments) == ("response.function_call_arguments.done", '{"city": "Paris"}')
    assert (item_done.type, item_done.item.status) == ("response.output_item.done", "completed")
    assert completed.type == "response.completed"
    assert completed.response.output[0].call_id == added.call_id


def test_tool_choice_in_the_responses_shape(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    other = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
    client = sdk(upstream)
    required = respond(client, tools=[RESPONSES_TOOL], tool_choice="required")
    named = respond(
        client, tools=[RESPONSES_TOOL, other], tool_choice={"type": "function", "name": "get_time"}
    )
    forbidden = respond(client, "call a tool", tools=[RESPONSES_TOOL], tool_choice="none")

    assert required.output[0].name == "get_weather"
    assert named.output[0].name == "get_time"
    assert named.tool_choice.name == "get_time"
    assert forbidden.output_text == "Hello from upstream: call a tool"


def test_json_schema_text_format(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    class Forecast(BaseModel):
        summary: str
        degrees: int
        sunny: bool
        tags: list[str]

    parsed = sdk(upstream).responses.parse(model="gpt-4o", input="hi there", text_format=Forecast)

    assert parsed.output_parsed == Forecast(
        summary="Hello from upstream: hi there", degrees=0, sunny=False, tags=[]
    )
    assert json.loads(parsed.output_text)["summary"] == "Hello from upstream: hi there"
    fmt = upstream.last_request.json["text"]["format"]
    assert (fmt["type"], fmt["name"], fmt["strict"]) == ("json_schema", "Forecast", True)
    assert (parsed.text.format.type, parsed.text.format.name) == ("json_schema", "Forecast")  # echoed


def test_previous_response_id_continues_the_conversation(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    client = sdk(upstream)
    first = respond(client, "hi there", instructions="Be brief.")
    second = respond(client, "and again", previous_response_id=first.id)

    assert second.output_text == "Hello from upstream: and again"
    assert second.previous_response_id == first.id
    # The first turn's input and output come before this input; its instructions do not carry over.
    assert second.usage.input_tokens == 2 + 5 + 2

    asked = respond(client, "call a tool", tools=[RESPONSES_TOOL], previous_response_id=second.id)
    output = {"type": "function_call_output", "call_id": asked.output[0].call_id, "output": "Sunny"}
    answered = respond(
        client, [output, {"role": "user", "content": "Thanks!"}], previous_response_id=asked.id
    )
    assert answered.output_text == "Hello from upstream: Thanks!"  # the call is found in the stored turn


def test_previous_response_id_is_kept_per_api_key(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    first = respond(sdk(upstream, key="key-a"))
    unstored = respond(sdk(upstream, key="key-a"), store=False)

    for key, response_id in (("key-b", first.id), ("key-a", unstored.id), ("key-a", "resp_unknown")):
        with pytest.raises(openai.NotFoundError) as error:
            respond(sdk(upstream, key=key), "and again", previous_response_id=response_id)
        assert error.value.response.json() == {
            "error": {
                "message": f"Previous response with id '{response_id}' not found.",
                "type": "invalid_request_error",
                "param": "previous_response_id",
                "code": "previous_response_not_found",
            }
        }
    assert unstored.store is False
    assert respond(sdk(upstream, key="key-a"), previous_response_id=first.id).status == "completed"


def test_retrieve_and_delete_a_stored_response(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    owner, other = sdk(upstream, key="key-a"), sdk(upstream, key="key-b")
    created = respond(owner)

    assert owner.responses.retrieve(created.id).model_dump() == created.model_dump()
    with pytest.raises(openai.NotFoundError) as error:
        other.responses.retrieve(created.id)
    assert error.value.response.json()["error"]["message"] == f"Response with id '{created.id}' not found."
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(created.id)

    deleted = owner.responses.with_raw_response.delete(created.id)
    assert deleted.http_response.json() == {"id": created.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        owner.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        owner.responses.delete(created.id)

    calls = [(r.method, r.path, r.credential) for r in upstream.requests[1:3]]
    assert calls == [
        ("GET", f"/v1/responses/{created.id}", "key-a"),
        ("GET", f"/v1/responses/{created.id}", "key-b"),
    ]


def test_only_background_responses_can_be_cancelled(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    client = sdk(upstream)
    created = respond(client)

    with pytest.raises(openai.BadRequestError) as error:
        client.responses.cancel(created.id)
    assert error.value.response.json()["error"]["message"] == "Only background responses can be cancelled."
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_unknown")
    with pytest.raises(openai.BadRequestError) as error:
        respond(client, background=True)  # the stand-in does not run them
    assert error.value.param == "background"


def test_max_output_tokens_leaves_the_response_incomplete(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    prompt = " ".join(f"w{i}" for i in range(20))
    response = respond(sdk(upstream), prompt, max_output_tokens=16)

    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete"
    assert response.output_text == "Hello from upstream: " + " ".join(f"w{i}" for i in range(13))
    assert response.usage.output_tokens == 16
    events = responses_stream_on_the_wire(upstream, {"input": prompt, "max_output_tokens": 16})
    assert events[-1][0] == "response.incomplete"


@pytest.mark.parametrize(
    ("params", "param"),
    [
        pytest.param({"tools": [WEATHER_TOOL]}, "tools[0].name", id="chat-shaped-tool"),
        pytest.param(
            {
                "tools": [RESPONSES_TOOL],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            },
            "tool_choice.name",
            id="chat-shaped-tool-choice",
        ),
        pytest.param({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", id="role"),
        pytest.param(
            {"input": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
            "input[0].content[0].type",
            id="chat-shaped-part",
        ),
        pytest.param(
            {"input": [{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}]},
            "input[0].content[0].type",
            id="assistant-input-text",
        ),
        pytest.param(
            {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input[0].call_id",
            id="call-without-id",
        ),
        pytest.param({"input": [{"type": "reasoning_text"}]}, "input[0].type", id="item-type"),
        pytest.param({"max_output_tokens": 5}, "max_output_tokens", id="max-output-tokens"),
        pytest.param(
            {"text": {"format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}},
            "text.format.name",
            id="chat-shaped-format",
        ),
        pytest.param({"extra_body": {"messages": USER}}, "messages", id="chat-field"),
        pytest.param({"extra_body": {"max_tokens": 10}}, "max_tokens", id="chat-max-tokens"),
    ],
)
def test_responses_validate_like_openai(
    upstream: UpstreamServer, params: dict[str, Any], param: str, sdk: SdkFactory
) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        sdk(upstream).responses.create(model="gpt-4o-mini", **{"input": "hi there"} | params)
    assert error.value.param == param
    assert error.value.type == "invalid_request_error"


def test_a_function_call_output_needs_an_earlier_call(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    orphan = {"type": "function_call_output", "call_id": "call_nowhere", "output": "Sunny"}
    with pytest.raises(openai.BadRequestError) as error:
        respond(sdk(upstream), [{"role": "user", "content": "hi"}, orphan])

    assert error.value.response.json() == {
        "error": {
            "message": "No tool call found for function call output with call_id call_nowhere.",
            "type": "invalid_request_error",
            "param": "input",
            "code": None,
        }
    }


def test_azure_responses(upstream: UpstreamServer) -> None:
    with (
        openai.AzureOpenAI(
            azure_endpoint=upstream.base_url,
            api_version="2025-04-01-preview",
            api_key="azure-key",
            max_retries=0,
        ) as versioned,
        openai.OpenAI(base_url=f"{upstream.base_url}/openai/v1", api_key="azure-key", max_retries=0) as v1,
    ):
        created = versioned.responses.create(model="my-deployment", input="hi there")
        continued = v1.responses.create(
            model="my-deployment", input="and again", previous_response_id=created.id
        )
        retrieved = v1.responses.retrieve(continued.id)
        with pytest.raises(openai.NotFoundError) as error:
            versioned.responses.retrieve("resp_unknown")

    assert created.output_text == "Hello from upstream: hi there"
    assert (created.model, retrieved.id) == ("my-deployment", continued.id)
    assert continued.usage.input_tokens == 2 + 5 + 2
    assert (
        error.value.response.json()["error"]["type"] == "invalid_request_error"
    )  # the model service's shape
    first, second, third, _ = upstream.requests
    assert (first.path, first.query, first.credential) == (
        "/openai/responses",
        {"api-version": "2025-04-01-preview"},
        "azure-key",
    )
    assert (second.path, third.path) == ("/openai/v1/responses", f"/openai/v1/responses/{continued.id}")

    unversioned = httpx.post(
        f"{upstream.base_url}/openai/responses", json={"model": "d", "input": "hi"}, headers={"api-key": "k"}
    )
    assert unversioned.status_code == 404
    assert unversioned.json() == {"error": {"code": "404", "message": "Resource not found"}}


# --- Anthropic ------------------------------------------------------------------------------------


def test_anthropic_message(upstream: UpstreamServer) -> None:
    system = [{"type": "text", "text": "Be brief."}]
    content = [{"type": "text", "text": "hi there"}]
    response = anthropic_post(upstream, anthropic_body(content, system=system))

    assert response.status_code == 200, response.text
    message = response.json()
    assert message["id"].startswith("msg_")
    assert (message["type"], message["role"]) == ("message", "assistant")
    assert message["model"] == "claude-sonnet-4-5"
    assert message["content"] == [{"type": "text", "text": "Hello from upstream: hi there"}]
    assert (message["stop_reason"], message["stop_sequence"]) == ("end_turn", None)
    assert message["usage"] == {
        "input_tokens": 4,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert upstream.last_request.system == system
    assert upstream.last_request.credential == "sk-ant"


def test_anthropic_stream(upstream: UpstreamServer) -> None:
    events = anthropic_stream(upstream, anthropic_body(system="Be brief."))

    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert all(name == data["type"] for name, data in events)
    start = events[0][1]["message"]
    assert (start["content"], start["stop_reason"]) == ([], None)
    assert (start["usage"]["input_tokens"], start["usage"]["output_tokens"]) == (4, 1)
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert all(delta["type"] == "text_delta" for delta in deltas)
    assert "".join(delta["text"] for delta in deltas) == "Hello from upstream: hi there"
    assert events[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[-2][1]["usage"] == {"output_tokens": 5}


def test_anthropic_tool_use(upstream: UpstreamServer) -> None:
    message = anthropic_post(upstream, anthropic_body("call a tool", tools=[ANTHROPIC_TOOL])).json()

    assert message["stop_reason"] == "tool_use"
    (block,) = message["content"]
    assert block["id"].startswith("toolu_")
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "get_weather", {"city": "Paris"})


def test_anthropic_streamed_tool_use(upstream: UpstreamServer) -> None:
    events = anthropic_stream(upstream, anthropic_body("call a tool", tools=[ANTHROPIC_TOOL]))

    block = events[1][1]["content_block"]
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "get_weather", {})
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert all(delta["type"] == "input_json_delta" for delta in deltas)
    assert json.loads("".join(delta["partial_json"] for delta in deltas)) == {"city": "Paris"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_max_tokens_and_stop_sequences(upstream: UpstreamServer) -> None:
    truncated = anthropic_post(upstream, anthropic_body("one two three", max_tokens=4)).json()
    stopped = anthropic_post(upstream, anthropic_body("one two three", stop_sequences=["three"])).json()

    assert truncated["content"][0]["text"] == "Hello from upstream: one"
    assert (truncated["stop_reason"], truncated["usage"]["output_tokens"]) == ("max_tokens", 4)
    assert stopped["content"][0]["text"] == "Hello from upstream: one two "
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", "three")


@pytest.mark.parametrize(
    ("body", "headers", "status", "error_type"),
    [
        pytest.param({"max_tokens": None}, None, 400, "invalid_request_error", id="missing-max-tokens"),
        pytest.param({}, {"x-api-key": "k"}, 400, "invalid_request_error", id="missing-version"),
        pytest.param(
            {}, {"anthropic-version": ANTHROPIC_VERSION}, 401, "authentication_error", id="missing-key"
        ),
        pytest.param(
            {"messages": [{"role": "system", "content": "x"}]},
            None,
            400,
            "invalid_request_error",
            id="system-role",
        ),
        pytest.param({"stream_options": {}}, None, 400, "invalid_request_error", id="openai-field"),
        pytest.param({"temperature": 1.5}, None, 400, "invalid_request_error", id="temperature"),
        pytest.param({"tool_choice": "auto"}, None, 400, "invalid_request_error", id="openai-tool-choice"),
        pytest.param({"tools": [WEATHER_TOOL]}, None, 400, "invalid_request_error", id="openai-shaped-tool"),
    ],
)
def test_anthropic_validates_like_anthropic(
    upstream: UpstreamServer,
    body: dict[str, Any],
    headers: dict[str, str] | None,
    status: int,
    error_type: str,
) -> None:
    request = {key: value for key, value in (anthropic_body() | body).items() if value is not None}
    response = anthropic_post(upstream, request, headers)

    assert response.status_code == status
    error = response.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == error_type and error["error"]["message"]


def test_anthropic_models_list(upstream: UpstreamServer) -> None:
    response = httpx.get(f"{upstream.anthropic_base_url}/v1/models", headers=anthropic_headers())
    assert response.json()["data"][0] == {
        "type": "model",
        "id": "gpt-4o-mini",
        "display_name": "gpt-4o-mini",
        "created_at": "2025-01-01T00:00:00Z",
    }


def test_anthropic_count_tokens_counts_as_messages_does(upstream: UpstreamServer) -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "call a tool"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 degrees"},
                    {"type": "text", "text": "Thanks!"},
                ],
            },
        ],
        "tools": [ANTHROPIC_TOOL],
    }
    counted = httpx.post(
        f"{upstream.anthropic_base_url}/v1/messages/count_tokens",
        json=body,
        headers=anthropic_headers("sk-c"),
    )
    sent = anthropic_post(upstream, body | {"max_tokens": 100, "tool_choice": {"type": "none"}}).json()

    assert counted.status_code == 200
    assert counted.json() == {"input_tokens": 9}
    assert sent["usage"]["input_tokens"] == 9
    request = upstream.requests[0]
    assert (request.method, request.path, request.credential) == ("POST", "/v1/messages/count_tokens", "sk-c")


@pytest.mark.parametrize(
    ("body", "headers", "status", "message"),
    [
        pytest.param(
            {}, {"x-api-key": "k"}, 400, "anthropic-version: header is required", id="missing-version"
        ),
        pytest.param(
            {},
            {"anthropic-version": ANTHROPIC_VERSION},
            401,
            "x-api-key header is required",
            id="missing-key",
        ),
        pytest.param(
            {"max_tokens": 100}, None, 400, "max_tokens: Extra inputs are not permitted", id="max-tokens"
        ),
        pytest.param({"messages": None}, None, 400, "messages: Field required", id="missing-messages"),
        pytest.param(
            {"tools": [WEATHER_TOOL]}, None, 400, "tools.0.name: Field required", id="openai-shaped-tool"
        ),
    ],
)
def test_anthropic_count_tokens_validates_like_anthropic(
    upstream: UpstreamServer, body: dict[str, Any], headers: dict[str, str] | None, status: int, message: str
) -> None:
    request = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]} | body
    response = httpx.post(
        f"{upstream.anthropic_base_url}/v1/messages/count_tokens",
        json={key: value for key, value in request.items() if value is not None},
        headers=anthropic_headers() if headers is None else headers,
    )

    assert response.status_code == status
    assert response.json()["type"] == "error"
    assert response.json()["error"]["message"] == message


# --- Behaviours -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (502, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_status_raises_the_sdks_matching_error(
    upstream: UpstreamServer, status: int, error_class: type[openai.APIStatusError], sdk: SdkFactory
) -> None:
    upstream.behave("status", status=status)
    with pytest.raises(error_class) as error:
        chat(sdk(upstream))

    assert error.value.status_code == status
    assert set(error.value.response.json()["error"]) == {"message", "type", "param", "code"}
    assert (error.value.response.headers.get("retry-after") == "1") == (status == 429)


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(429, "rate_limit_error"), (529, "overloaded_error"), (500, "api_error"), (401, "authentication_error")],
)
def test_status_in_anthropics_shape(upstream: UpstreamServer, status: int, error_type: str) -> None:
    upstream.behave("status", status=status, message="nope")
    response = anthropic_post(upstream, anthropic_body())

    assert response.status_code == status
    assert response.json() == {"type": "error", "error": {"type": error_type, "message": "nope"}}


def test_timeout_raises_api_timeout_error(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("timeout")
    with pytest.raises(openai.APITimeoutError):
        chat(sdk(upstream, timeout=0.3))


def test_timeout_drops_the_connection_after_its_seconds(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("timeout", seconds=0.2)
    with pytest.raises(openai.APIConnectionError) as error:
        chat(sdk(upstream, timeout=5))
    assert not isinstance(error.value, openai.APITimeoutError)


def test_slow_delays_the_response(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("slow", delay=0.3)
    started = time.monotonic()
    completion = chat(sdk(upstream))

    assert time.monotonic() - started >= 0.3
    assert completion.choices[0].message.content == "Hello from upstream: hi there"


def test_slow_stream_sends_each_event_as_it_comes(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("slow", delay=0.1)
    started = time.monotonic()
    arrivals = []
    for _chunk in chat(sdk(upstream), stream=True):
        arrivals.append(time.monotonic() - started)

    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert len(arrivals) == 7  # role, five words, finish
    assert all(gap >= 0.08 for gap in gaps)


def test_cut_stream_dies_after_some_content(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("cut_stream")
    received = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in chat(sdk(upstream), stream=True, stream_options={"include_usage": True}):
            received.append(chunk)

    assert [c.choices[0].delta.content for c in received] == ["", "Hello", " from"]


def test_cut_anthropic_stream_has_no_message_stop(upstream: UpstreamServer) -> None:
    upstream.behave("cut_stream", after=1)
    events = []
    with httpx.stream(
        "POST",
        f"{upstream.base_url}/v1/messages",
        json=anthropic_body(stream=True),
        headers=anthropic_headers(),
    ) as response:
        with pytest.raises(httpx.RemoteProtocolError):
            for line in response.iter_lines():
                if line.startswith("event: "):
                    events.append(line.removeprefix("event: "))

    assert events == ["message_start", "content_block_start", "ping", "content_block_delta"]


def test_cut_non_streaming_response(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("cut_stream")
    with pytest.raises(openai.APIConnectionError):
        chat(sdk(upstream))


def test_invalid_json(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("invalid_json")
    response = httpx.post(
        f"{upstream.openai_base_url}/chat/completions", json={}, headers={"Authorization": "Bearer k"}
    )

    assert (response.status_code, response.headers["content-type"]) == (200, "application/json")
    assert response.content == b'{"not json'
    with pytest.raises(json.JSONDecodeError):  # what the SDK lets through for a 200 it cannot parse
        chat(sdk(upstream))


def test_reject_stream_options(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("reject_stream_options")
    client = sdk(upstream)
    with pytest.raises(openai.BadRequestError) as error:
        chat(client, stream=True, stream_options={"include_usage": True})

    assert error.value.param == "stream_options"
    assert len(list(chat(client, stream=True))) == 7


def test_drop_connection(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("drop_connection")
    with pytest.raises(openai.APIConnectionError) as error:
        chat(sdk(upstream))
    assert not isinstance(error.value, openai.APITimeoutError)


def test_redirect_sends_the_same_path_to_another_server(make_upstream: Callable[..., UpstreamServer]) -> None:
    first, second = make_upstream("first"), make_upstream("second")
    first.behave("redirect", to=second.base_url)
    url = f"{first.openai_base_url}/chat/completions?x=1"
    body = {"model": "gpt-4o-mini", "messages": USER}

    answer = httpx.post(url, json=body, headers={"authorization": "Bearer sk-test"})
    assert answer.status_code == 307
    assert answer.headers["location"] == f"{second.base_url}/v1/chat/completions?x=1"

    httpx.post(url, json=body, follow_redirects=True)
    assert [(r.method, r.path, r.json) for r in second.requests] == [("POST", "/v1/chat/completions", body)]
    assert len(first.requests) == 2


def test_error_event_fails_a_stream_after_some_content(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("error_event", after=1, message="boom")
    received = []
    with pytest.raises(openai.APIError, match="boom"):
        for chunk in chat(sdk(upstream), stream=True):
            received.append(chunk.choices[0].delta.content or "")
    assert "".join(received) == "Hello"

    events = anthropic_stream(upstream, anthropic_body())
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "boom"}}
    assert events[-1] == ("error", error)
    assert [name for name, _ in events].count("content_block_delta") == 1


def test_rules_are_scoped_by_credential_and_times(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("status", status=500, for_credential="key-a")
    upstream.behave("status", status=429, for_credential="key-b", times=1)

    with pytest.raises(openai.InternalServerError):
        chat(sdk(upstream, key="key-a"))
    with pytest.raises(openai.RateLimitError):
        chat(sdk(upstream, key="key-b"))
    assert chat(sdk(upstream, key="key-b")).choices[0].finish_reason == "stop"  # its one time is used up
    assert chat(sdk(upstream, key="key-c")).choices[0].finish_reason == "stop"
    with pytest.raises(openai.InternalServerError):
        chat(sdk(upstream, key="key-a"))  # no times: until reset
    assert [r.credential for r in upstream.requests_for("key-b")] == ["key-b", "key-b"]

    upstream.reset()
    assert upstream.requests == []
    assert chat(sdk(upstream, key="key-a")).choices[0].finish_reason == "stop"


def test_the_most_recent_matching_rule_wins(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("status", status=503)
    upstream.behave("ok", times=1)

    assert chat(sdk(upstream)).choices[0].finish_reason == "stop"
    with pytest.raises(openai.InternalServerError):
        chat(sdk(upstream))


def test_behave_refuses_what_it_cannot_do(upstream: UpstreamServer) -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        upstream.behave("explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="status"):
        upstream.behave("status")
    with pytest.raises(ValueError, match="redirect"):
        upstream.behave("redirect")
    with pytest.raises(ValueError, match="times"):
        upstream.behave("ok", times=0)


async def test_client_disconnect_is_counted(upstream: UpstreamServer, async_sdk: AsyncSdkFactory) -> None:
    upstream.behave("slow", delay=0.05)
    client = async_sdk(upstream)
    async with await client.chat.completions.create(model="m", messages=USER, stream=True) as stream:
        async for _chunk in stream:
            break  # go away after the first event, mid-stream

    assert await asyncio.to_thread(upstream.wait_for_disconnects, 1, 2.0)
    assert upstream.disconnects == 1


async def test_a_stream_read_to_the_end_is_no_disconnect(
    upstream: UpstreamServer, async_sdk: AsyncSdkFactory
) -> None:
    stream = await async_sdk(upstream).chat.completions.create(model="m", messages=USER, stream=True)
    assert len([chunk async for chunk in stream]) == 7
    await asyncio.sleep(0.1)
    assert upstream.disconnects == 0


def test_requests_and_rules_from_many_threads(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    upstream.behave("status", status=503, times=5)

    def call(index: int) -> str:
        try:
            return chat(sdk(upstream, key=f"key-{index}"), f"number {index}").choices[0].message.content
        except openai.InternalServerError:
            return "failed"

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(call, range(24)))

    assert answers.count("failed") == 5  # a rule's times are counted atomically
    assert {f"Hello from upstream: number {i}" for i in range(24)} >= set(answers) - {"failed"}
    assert sorted(r.credential for r in upstream.requests) == sorted(f"key-{i}" for i in range(24))


def test_the_name_tells_upstreams_apart(
    make_upstream: Callable[..., UpstreamServer], sdk: SdkFactory
) -> None:
    primary, fallback = make_upstream("primary"), make_upstream("fallback")

    assert chat(sdk(primary)).choices[0].message.content == "Hello from primary: hi there"
    assert chat(sdk(fallback)).choices[0].message.content == "Hello from fallback: hi there"
    assert primary.base_url != fallback.base_url


def test_rules_apply_to_the_new_routes(upstream: UpstreamServer, sdk: SdkFactory) -> None:
    client = sdk(upstream)
    created = respond(client)
    upstream.behave("status", status=429, times=3)

    with pytest.raises(openai.RateLimitError):
        respond(client)
    with pytest.raises(openai.RateLimitError):
        client.responses.retrieve(created.id)
    counted = httpx.post(
        f"{upstream.anthropic_base_url}/v1/messages/count_tokens",
        json={"model": "m", "messages": USER},
        headers=anthropic_headers(),
    )
    assert counted.status_code == 429 and counted.json()["error"]["type"] == "rate_limit_error"
    assert client.responses.retrieve(created.id).id == created.id  # the rule's times are used up


def test_cut_responses_stream_has_no_completed_event(upstream: UpstreamServer) -> None:
    upstream.behave("cut_stream", after=1)
    events = []
    with httpx.stream(
        "POST",
        f"{upstream.openai_base_url}/responses",
        json={"model": "gpt-4o-mini", "input": "hi there", "stream": True},
        headers={"Authorization": "Bearer k"},
    ) as response:
        with pytest.raises(httpx.RemoteProtocolError):
            for line in response.iter_lines():
                if line.startswith("event: "):
                    events.append(line.removeprefix("event: "))

    assert events == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]


def test_error_event_in_a_responses_stream(upstream: UpstreamServer) -> None:
    upstream.behave("error_event", after=1, message="boom")
    events = responses_stream_on_the_wire(upstream, {"input": "hi there"})

    assert [name for name, _ in events].count("response.output_text.delta") == 1
    name, error = events[-1]
    assert name == "error"
    assert error == {
        "type": "error",
        "code": "server_error",
        "message": "boom",
        "param": None,
        "sequence_number": len(events) - 1,
    }
