"""The Anthropic adapter against the loopback stand-in, which validates requests as strictly as
Anthropic does: each request the adapter builds is sent over HTTP, and what comes back is translated
and parsed with the OpenAI SDK's own types, so the shapes are proven to be what OpenAI clients read.
"""

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from apps.catalog.pricing import Usage
from apps.core.errors import InvalidRequest
from apps.proxy.adapters import adapter_for
from apps.proxy.adapters.anthropic import AnthropicAdapter, AnthropicStreamTranslator
from apps.proxy.adapters.base import Completion, Target, UpstreamProtocolError
from tests import upstreams
from tests.upstreams import TOOL_TRIGGER, UpstreamServer

# The fixture, bound here so pytest finds it (a conftest would import them instead).
upstream = upstreams.upstream

MODEL = "claude-sonnet-4-5"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CLOCK_TOOL = {"type": "function", "function": {"name": "get_time"}}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def target_for(server: UpstreamServer) -> Target:
    return Target(
        provider="anthropic",
        provider_key_id="pk_test",
        secret="sk-ant-test",
        base_url=server.anthropic_base_url,
        model=MODEL,
    )


class Driver:
    """Sends what the adapter builds to the stand-in, and gives the adapter the answer back."""

    def __init__(self, server: UpstreamServer, client: httpx.Client) -> None:
        self.adapter = adapter_for("anthropic")
        self.target = target_for(server)
        self.client = client

    def send(self, body: dict[str, Any]) -> httpx.Response:
        request = self.adapter.chat_request(self.target, body, stream=False, client_wants_usage=False)
        return self.client.post(request.url, headers=request.headers, content=request.body)

    def complete(self, body: dict[str, Any]) -> tuple[ChatCompletion, Completion]:
        response = self.send(body)
        assert response.status_code == 200, response.text
        completion = self.adapter.chat_completion(self.target, response.content)
        return ChatCompletion.model_validate_json(completion.body), completion

    def stream(
        self, body: dict[str, Any], *, client_wants_usage: bool = False
    ) -> tuple[list[ChatCompletionChunk], AnthropicStreamTranslator]:
        """Streams the request and feeds each server-sent event, parsed line by line, to a translator."""
        request = self.adapter.chat_request(
            self.target, body, stream=True, client_wants_usage=client_wants_usage
        )
        translator = self.adapter.stream_translator(self.target, client_wants_usage=client_wants_usage)
        assert isinstance(translator, AnthropicStreamTranslator)
        frames: list[bytes] = []
        with self.client.stream(
            "POST", request.url, headers=request.headers, content=request.body
        ) as response:
            assert response.status_code == 200, response.read()
            event, data = "", []
            for line in response.iter_lines():
                if line.startswith("event:"):
                    event = line.removeprefix("event:").strip()
                elif line.startswith("data:"):
                    data.append(line.removeprefix("data:").removeprefix(" "))
                elif not line and data:
                    frames.extend(translator.feed(event, "\n".join(data)))
                    event, data = "", []
        chunks = [ChatCompletionChunk.model_validate(frame_json(frame)) for frame in frames]
        return chunks, translator


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    # One client for the module: making one costs more than a request to the stand-in.
    with httpx.Client(timeout=5) as client:
        yield client


@pytest.fixture
def anthropic(upstream: UpstreamServer, http: httpx.Client) -> Driver:
    return Driver(upstream, http)


def frame_json(frame: bytes) -> Any:
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n")
    assert frame != b"data: [DONE]\n\n"  # the proxy writes [DONE], never a translator
    return json.loads(frame.removeprefix(b"data: "))


def sent(server: UpstreamServer) -> dict[str, Any]:
    return server.last_request.json


def message_start() -> dict[str, Any]:
    message = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1},
    }
    return {"type": "message_start", "message": message}


def text_of(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


# --- Requests -------------------------------------------------------------------------------------


def test_it_posts_to_the_messages_endpoint_with_anthropics_headers(
    anthropic: Driver, upstream: UpstreamServer
) -> None:
    completion, _ = anthropic.complete({"model": "alias", "messages": [user("hi there")]})

    request = upstream.last_request
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.credential == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    assert sent(upstream) == {
        "model": MODEL,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}],
        "max_tokens": 4096,  # Anthropic requires it; OpenAI clients often leave it out
    }
    assert completion.object == "chat.completion"
    assert completion.model == MODEL
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == "Hello from upstream: hi there"
    assert completion.choices[0].finish_reason == "stop"


def test_it_translates_a_system_prompt(anthropic: Driver, upstream: UpstreamServer) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "developer",
            "content": [{"type": "text", "text": "Answer"}, {"type": "text", "text": "kindly."}],
        },
        user("hi there"),
    ]
    completion, _ = anthropic.complete({"model": MODEL, "messages": messages})

    assert upstream.last_request.system == "Be brief.\n\nAnswer\nkindly."
    assert [m["role"] for m in sent(upstream)["messages"]] == ["user"]
    assert completion.usage is not None and completion.usage.prompt_tokens == 6  # the system's words too


def test_it_merges_a_multi_turn_conversation_into_alternating_turns(
    anthropic: Driver, upstream: UpstreamServer
) -> None:
    messages = [
        user("first question"),
        user([{"type": "text", "text": "more context"}]),
        {"role": "assistant", "content": "an answer"},
        {"role": "system", "content": "Stay on topic."},
        user("second question"),
    ]
    completion, _ = anthropic.complete({"model": MODEL, "messages": messages})

    assert sent(upstream)["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "first question"}, {"type": "text", "text": "more context"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "an answer"}]},
        {"role": "user", "content": [{"type": "text", "text": "second question"}]},
    ]
    assert sent(upstream)["system"] == "Stay on topic."
    assert completion.choices[0].message.content == "Hello from upstream: second question"


def test_it_translates_images_to_base64_and_url_sources(anthropic: Driver, upstream: UpstreamServer) -> None:
    content = [
        {"type": "text", "text": "compare these"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]
    anthropic.complete({"model": MODEL, "messages": [user(content)]})

    assert sent(upstream)["messages"][0]["content"][1:] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


def test_it_drops_openai_only_fields_that_anthropic_would_reject(
    anthropic: Driver, upstream: UpstreamServer
) -> None:
    body = {
        "model": MODEL,
        "messages": [user("hi there")],
        "n": 1,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
        "logprobs": True,
        "top_logprobs": 2,
        "logit_bias": {"50256": -100},
        "seed": 7,
        "store": False,
        "metadata": {"purpose": "test"},
        "service_tier": "default",
        "stream_options": {"include_usage": True},
        "temperature": 1.7,
        "top_p": 0.9,
        "user": "end-user-42",
    }
    completion, _ = anthropic.complete(body)  # the stand-in answers 400 to any unknown field

    assert sent(upstream) == {
        "model": MODEL,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi there"}]}],
        "max_tokens": 4096,
        "temperature": 1.0,  # OpenAI's 0..2 clamped to Anthropic's 0..1
        "top_p": 0.9,
        "metadata": {"user_id": "end-user-42"},
    }
    assert completion.choices[0].finish_reason == "stop"


def test_it_refuses_more_than_one_choice(anthropic: Driver, upstream: UpstreamServer) -> None:
    with pytest.raises(InvalidRequest) as error:
        anthropic.send({"model": MODEL, "messages": [user("hi")], "n": 2})

    assert error.value.param == "n" and "n=1" in error.value.message
    assert upstream.requests == []


def test_it_refuses_tool_call_arguments_that_are_not_a_json_object(
    anthropic: Driver, upstream: UpstreamServer
) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city"'}}
    messages = [user("hi"), {"role": "assistant", "content": None, "tool_calls": [call]}]

    with pytest.raises(InvalidRequest) as error:
        anthropic.send({"model": MODEL, "messages": messages, "tools": [WEATHER_TOOL]})

    assert error.value.param == "messages[1].tool_calls[0].function.arguments"


# --- Tools ----------------------------------------------------------------------------------------


def test_it_round_trips_a_tool_call(anthropic: Driver, upstream: UpstreamServer) -> None:
    question = user(f"Please {TOOL_TRIGGER} for the weather in Paris")
    body = {"model": MODEL, "messages": [question], "tools": [WEATHER_TOOL, CLOCK_TOOL]}
    asked, _ = anthropic.complete(body)

    assert sent(upstream)["tools"] == [
        {
            "name": "get_weather",
            "input_schema": WEATHER_TOOL["function"]["parameters"],
            "description": "The weather in a city.",
        },
        {"name": "get_time", "input_schema": {"type": "object", "properties": {}}},
    ]
    choice = asked.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert (call.type, call.function.name) == ("function", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    history = [
        question,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": [{"type": "text", "text": "Sunny, 21 degrees"}]},
        user("Thanks!"),
    ]
    answered, _ = anthropic.complete({**body, "messages": history})

    assert sent(upstream)["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": call.id, "name": "get_weather", "input": {"city": "Paris"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": call.id,
                    "content": [{"type": "text", "text": "Sunny, 21 degrees"}],
                },
                {"type": "text", "text": "Thanks!"},  # after the tool results, as Anthropic requires
            ],
        },
    ]
    assert answered.choices[0].finish_reason == "stop"
    assert answered.choices[0].message.content == "Hello from upstream: Sunny, 21 degrees Thanks!"


@pytest.mark.parametrize(
    ("tool_choice", "parallel_tool_calls", "anthropic_choice", "finish_reason"),
    [
        pytest.param("auto", None, {"type": "auto"}, "stop", id="auto"),
        pytest.param("none", None, {"type": "none"}, "stop", id="none"),
        pytest.param("required", None, {"type": "any"}, "tool_calls", id="required"),
        pytest.param(
            {"type": "function", "function": {"name": "get_time"}},
            None,
            {"type": "tool", "name": "get_time"},
            "tool_calls",
            id="named",
        ),
        pytest.param(
            None, False, {"type": "auto", "disable_parallel_tool_use": True}, "stop", id="no-parallel-calls"
        ),
        pytest.param(
            "required",
            False,
            {"type": "any", "disable_parallel_tool_use": True},
            "tool_calls",
            id="required-one",
        ),
    ],
)
def test_it_translates_tool_choice(
    anthropic: Driver,
    upstream: UpstreamServer,
    tool_choice: Any,
    parallel_tool_calls: bool | None,
    anthropic_choice: dict[str, Any],
    finish_reason: str,
) -> None:
    body = {"model": MODEL, "messages": [user("hi there")], "tools": [WEATHER_TOOL, CLOCK_TOOL]}
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    if parallel_tool_calls is not None:
        body["parallel_tool_calls"] = parallel_tool_calls
    completion, _ = anthropic.complete(body)

    assert sent(upstream)["tool_choice"] == anthropic_choice
    assert completion.choices[0].finish_reason == finish_reason


def test_it_sends_no_tool_choice_without_tools(anthropic: Driver, upstream: UpstreamServer) -> None:
    anthropic.complete({"model": MODEL, "messages": [user("hi")], "tool_choice": "none", "tools": []})

    assert "tool_choice" not in sent(upstream) and "tools" not in sent(upstream)


# --- Finish reasons and usage ---------------------------------------------------------------------


def test_it_maps_stop_sequences_to_stop(anthropic: Driver, upstream: UpstreamServer) -> None:
    as_string, _ = anthropic.complete({"model": MODEL, "messages": [user("one two three")], "stop": "three"})
    assert sent(upstream)["stop_sequences"] == ["three"]
    as_list, _ = anthropic.complete(
        {"model": MODEL, "messages": [user("one two three")], "stop": ["x", "two"]}
    )
    assert sent(upstream)["stop_sequences"] == ["x", "two"]

    assert as_string.choices[0].message.content == "Hello from upstream: one two "
    assert as_list.choices[0].message.content == "Hello from upstream: one "
    assert as_string.choices[0].finish_reason == as_list.choices[0].finish_reason == "stop"


def test_it_maps_max_tokens_to_length(anthropic: Driver, upstream: UpstreamServer) -> None:
    body = {"model": MODEL, "messages": [user("one two three")], "max_tokens": 50, "max_completion_tokens": 4}
    completion, _ = anthropic.complete(body)

    assert sent(upstream)["max_tokens"] == 4  # max_completion_tokens supersedes max_tokens
    assert completion.choices[0].message.content == "Hello from upstream: one"
    assert completion.choices[0].finish_reason == "length"


def test_it_reports_the_usage_anthropic_counted(anthropic: Driver, upstream: UpstreamServer) -> None:
    messages = [{"role": "system", "content": "Be brief."}, user("one two three")]
    completion, translated = anthropic.complete({"model": MODEL, "messages": messages})

    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (5, 6)
    assert completion.usage.total_tokens == 11
    assert completion.usage.prompt_tokens_details.cached_tokens == 0
    assert translated.usage == Usage(input_tokens=5, output_tokens=6)
    assert translated.model == MODEL


def test_it_counts_cache_reads_and_writes_as_input_and_each_apart(upstream: UpstreamServer) -> None:
    # The stand-in never caches, so this is Anthropic's answer to a request that read and wrote the cache.
    payload = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "Hi."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": 200,
            "cache_read_input_tokens": 1000,
            "output_tokens": 3,
        },
    }
    translated = AnthropicAdapter().chat_completion(target_for(upstream), json.dumps(payload).encode())
    completion = ChatCompletion.model_validate_json(translated.body)

    assert translated.usage == Usage(
        input_tokens=1210, output_tokens=3, cached_input_tokens=1000, cache_write_tokens=200
    )
    assert translated.model == "claude-sonnet-4-5-20250929"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.total_tokens) == (1210, 1213)
    assert completion.usage.prompt_tokens_details.cached_tokens == 1000


def test_it_refuses_an_answer_that_is_not_anthropics_format(
    anthropic: Driver, upstream: UpstreamServer
) -> None:
    upstream.behave("invalid_json")
    response = anthropic.send({"model": MODEL, "messages": [user("hi")]})

    with pytest.raises(UpstreamProtocolError):
        AnthropicAdapter().chat_completion(target_for(upstream), response.content)
    with pytest.raises(UpstreamProtocolError):
        AnthropicAdapter().chat_completion(target_for(upstream), b'{"type": "message"}')


# --- Streaming ------------------------------------------------------------------------------------


def test_it_streams_text_as_openai_chunks(anthropic: Driver, upstream: UpstreamServer) -> None:
    chunks, translator = anthropic.stream({"model": MODEL, "messages": [user("one two three")]})

    assert sent(upstream)["stream"] is True
    assert chunks[0].choices[0].delta.role == "assistant"
    assert text_of(chunks) == "Hello from upstream: one two three"
    assert [chunk.choices[0].finish_reason for chunk in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(chunk.usage is None for chunk in chunks)  # the client did not ask for it
    assert len({chunk.id for chunk in chunks}) == 1 and chunks[0].id.startswith("msg_")
    assert {chunk.model for chunk in chunks} == {MODEL}
    assert translator.usage == Usage(input_tokens=3, output_tokens=6)
    assert translator.finished and translator.error is None
    assert translator.output_chars == len("Hello from upstream: one two three")


def test_it_streams_a_last_usage_chunk_when_the_client_asks(
    anthropic: Driver, upstream: UpstreamServer
) -> None:
    chunks, translator = anthropic.stream(
        {"model": MODEL, "messages": [user("one two three")]}, client_wants_usage=True
    )

    *answer, last = chunks
    assert answer[-1].choices[0].finish_reason == "stop"
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (3, 6, 9)
    assert translator.usage == Usage(input_tokens=3, output_tokens=6)


def test_it_streams_the_length_finish_reason(anthropic: Driver, upstream: UpstreamServer) -> None:
    chunks, _ = anthropic.stream({"model": MODEL, "messages": [user("one two three")], "max_tokens": 3})

    assert text_of(chunks) == "Hello from upstream:"
    assert chunks[-1].choices[0].finish_reason == "length"


def test_it_streams_a_tool_call(anthropic: Driver, upstream: UpstreamServer) -> None:
    body = {"model": MODEL, "messages": [user(TOOL_TRIGGER)], "tools": [WEATHER_TOOL]}
    chunks, translator = anthropic.stream(body, client_wants_usage=True)

    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or ()]
    first, *fragments = calls
    assert (first.index, first.type, first.function.name) == (0, "function", "get_weather")
    assert first.id.startswith("toolu_")
    assert all(call.index == 0 and call.id is None for call in fragments)
    arguments = "".join(call.function.arguments for call in calls)
    assert json.loads(arguments) == {"city": "Paris"}
    assert text_of(chunks) == ""
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2
    assert translator.output_chars == len(arguments)


def test_it_turns_an_error_event_into_an_openai_error_frame(upstream: UpstreamServer) -> None:
    # Anthropic's overloaded error arrives mid-stream, after a 200; the stand-in cannot send one.
    translator = AnthropicAdapter().stream_translator(target_for(upstream), client_wants_usage=False)
    event = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

    assert translator.feed("message_start", json.dumps(message_start())) == []  # nothing sent yet
    (frame,) = translator.feed("error", json.dumps(event))

    assert frame_json(frame) == {
        "error": {"message": "Overloaded", "type": "overloaded_error", "param": None, "code": None}
    }
    assert translator.error == "Overloaded"
    assert not translator.finished


def test_it_numbers_tool_calls_apart_from_text_and_thinking_blocks(upstream: UpstreamServer) -> None:
    # Anthropic's blocks share one numbering; OpenAI's tool calls have their own. The stand-in sends
    # one block per answer, so these are the events of an answer with thinking, text and two tools.
    def tool(index: int, name: str) -> dict[str, Any]:
        block = {"type": "tool_use", "id": f"toolu_{index}", "name": name, "input": {}}
        return {"type": "content_block_start", "index": index, "content_block": block}

    def delta(index: int, **fields: str) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": fields}

    events = [
        message_start(),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        delta(0, type="thinking_delta", thinking="Two calls."),
        delta(0, type="signature_delta", signature="sig"),
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        delta(1, type="text_delta", text="Checking."),
        tool(2, "get_weather"),
        delta(2, type="input_json_delta", partial_json=""),
        delta(2, type="input_json_delta", partial_json='{"city": "Paris"}'),
        tool(3, "get_time"),
        delta(3, type="input_json_delta", partial_json="{}"),
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 40}},
        {"type": "message_stop"},
    ]
    translator = AnthropicAdapter().stream_translator(target_for(upstream), client_wants_usage=False)
    frames = [frame for event in events for frame in translator.feed(event["type"], json.dumps(event))]
    chunks = [ChatCompletionChunk.model_validate(frame_json(frame)) for frame in frames]

    assert chunks[0].choices[0].delta.role == "assistant"
    assert text_of(chunks) == "Checking."
    calls = [call for chunk in chunks for call in chunk.choices[0].delta.tool_calls or ()]
    assert [(call.index, call.id, call.function.name, call.function.arguments) for call in calls] == [
        (0, "toolu_2", "get_weather", ""),
        (0, None, None, '{"city": "Paris"}'),
        (1, "toolu_3", "get_time", ""),
        (1, None, None, "{}"),
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert translator.usage == Usage(input_tokens=12, output_tokens=40)
    assert translator.output_chars == len("Two calls.Checking.") + len('{"city": "Paris"}{}')


def test_it_refuses_stream_data_it_cannot_parse(upstream: UpstreamServer) -> None:
    translator = AnthropicAdapter().stream_translator(target_for(upstream), client_wants_usage=False)

    with pytest.raises(UpstreamProtocolError):
        translator.feed("content_block_delta", '{"type": "content_block_delta", "index": 0, "delta":')
    with pytest.raises(UpstreamProtocolError):
        translator.feed("message_start", '{"type": "message_start"}')


# --- Errors and embeddings ------------------------------------------------------------------------


def test_it_reads_anthropics_error_body(anthropic: Driver, upstream: UpstreamServer) -> None:
    invalid = anthropic.send({"model": MODEL, "messages": [user("hi")], "max_tokens": 0})
    upstream.behave("status", status=529, message="Overloaded")
    overloaded = anthropic.send({"model": MODEL, "messages": [user("hi")]})

    adapter = AnthropicAdapter()
    assert invalid.status_code == 400
    assert (
        adapter.error_message(400, invalid.content)
        == "max_tokens: Input should be greater than or equal to 1"
    )
    assert overloaded.status_code == 529
    assert adapter.error_message(529, overloaded.content) == "Overloaded"
    assert adapter.error_message(502, b"<html>Bad gateway</html>") == "The upstream answered HTTP 502."


def test_it_serves_no_embeddings() -> None:
    assert AnthropicAdapter().supports_embeddings() is False


def test_a_response_format_is_answered_through_a_forced_tool(
    anthropic: Driver, upstream: UpstreamServer
) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    body = {
        "model": MODEL,
        "messages": [user("Where?")],
        "response_format": {"type": "json_schema", "json_schema": {"name": "place", "schema": schema}},
    }

    completion, _ = anthropic.complete(body)

    sent_body = sent(upstream)
    assert sent_body["tool_choice"] == {"type": "tool", "name": "gateway_structured_output"}
    assert sent_body["tools"] == [
        {
            "name": "gateway_structured_output",
            "description": "Give the answer as this JSON.",
            "input_schema": schema,
        }
    ]
    message = completion.choices[0].message
    assert message.tool_calls is None and completion.choices[0].finish_reason == "stop"
    assert set(json.loads(message.content)) == {"city"}
