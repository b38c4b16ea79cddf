"""The Responses-over-chat bridge, both ways, with bodies as the OpenAI SDK and the Agents SDK send
them and chat answers as OpenAI-compatible servers give them; every Response and event it writes is
checked against the OpenAI SDK's own types."""

import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent

from apps.catalog.pricing import Usage
from apps.core.errors import InvalidRequest
from apps.proxy.bridges.responses_chat import ResponseEvents, chat_request, response_from_chat

# Each event type's own class in the SDK (the union's errors would list every member).
EVENT_TYPES = {
    member.model_fields["type"].annotation.__args__[0]: member
    for member in ResponseStreamEvent.__origin__.__args__
}

# An Agents SDK turn after its tool ran: instructions, the user's message, the model's call and
# the tool's output (the items its Runner sends back on the next call).
AGENT_TURN = {
    "model": "fast",
    "instructions": "You are a weather bot.",
    "input": [
        {"content": "What's the weather in Paris?", "role": "user"},
        {
            "arguments": '{"city":"Paris"}',
            "call_id": "call_kcJ1fEdw8nFQ1vN3",
            "name": "get_weather",
            "type": "function_call",
            "id": "fc_68e1",
            "status": "completed",
        },
        {"call_id": "call_kcJ1fEdw8nFQ1vN3", "output": "Sunny, 21 C", "type": "function_call_output"},
    ],
    "tools": [
        {
            "name": "get_weather",
            "parameters": {
                "properties": {"city": {"title": "City", "type": "string"}},
                "required": ["city"],
                "title": "get_weather_args",
                "type": "object",
                "additionalProperties": False,
            },
            "strict": True,
            "type": "function",
            "description": "Today's weather in a city.",
        }
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "temperature": 0.3,
    "max_output_tokens": 200,
    "include": [],
    "stream": True,
    "store": True,
}


def test_an_agent_turn_becomes_a_chat_request_with_its_tool_call_and_output():
    chat = chat_request(AGENT_TURN, provider="anthropic")

    assert chat["messages"] == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_kcJ1fEdw8nFQ1vN3",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_kcJ1fEdw8nFQ1vN3", "content": "Sunny, 21 C"},
    ]
    [tool] = chat["tools"]
    assert tool["function"]["name"] == "get_weather"
    assert tool["function"]["strict"] is True
    assert tool["function"]["parameters"]["required"] == ["city"]
    assert (chat["tool_choice"], chat["parallel_tool_calls"]) == ("auto", False)
    assert (chat["temperature"], chat["max_tokens"], chat["stream"]) == (0.3, 200, True)
    # What the gateway itself honours is never sent on.
    assert not {"store", "include", "instructions", "input", "max_output_tokens"} & set(chat)


def test_text_image_and_file_parts_map_to_chat_parts():
    body = {
        "model": "fast",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is in this image?"},
                    {
                        "type": "input_image",
                        "image_url": "data:image/png;base64,iVBORw0KGgo=",
                        "detail": "low",
                    },
                    {
                        "type": "input_file",
                        "filename": "a.pdf",
                        "file_data": "data:application/pdf;base64,JVBERi0=",
                    },
                ],
            },
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [{"type": "output_text", "text": "A cat.", "annotations": []}],
            },
            {"role": "developer", "content": [{"type": "input_text", "text": "Answer in French."}]},
        ],
    }

    messages = chat_request(body, provider="openai_compatible")["messages"]

    assert messages[0]["content"] == [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}},
    ]
    assert messages[1] == {"role": "assistant", "content": "A cat."}
    assert messages[2] == {"role": "developer", "content": "Answer in French."}


def test_a_string_input_and_a_json_schema_format():
    body = {
        "model": "fast",
        "input": "List two colours.",
        "text": {
            "format": {
                "type": "json_schema",
                "name": "colours",
                "schema": {"type": "object", "properties": {"colours": {"type": "array"}}},
                "strict": True,
            }
        },
        "reasoning": {"effort": "low"},
        "safety_identifier": "user-42",
    }

    chat = chat_request(body, provider="openai_compatible")

    assert chat["messages"] == [{"role": "user", "content": "List two colours."}]
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "colours",
            "schema": {"type": "object", "properties": {"colours": {"type": "array"}}},
            "strict": True,
        },
    }
    assert chat["reasoning_effort"] == "low"
    assert chat["user"] == "user-42"


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0].type"),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
        ({"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input[0].type"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": [{"type": "telepathy"}]}, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]},
            "input[0].content[0].image_url",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]},
            "input[0].content[0].file_data",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": {"a": 1}}]},
            "input[0].output",
        ),
        ({"background": True}, "background"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"text": {"format": {"type": "grammar"}}}, "text.format.type"),
        ({"input": 42}, "input"),
        # A function call must be answered by its output before the conversation goes on.
        (
            {
                "input": [
                    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                    {"role": "user", "content": "and?"},
                ]
            },
            "input",
        ),
        ({"input": [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]}, "input"),
    ],
)
def test_what_a_chat_upstream_cannot_do_is_a_400_naming_the_field(change, param):
    body = {"model": "fast", "input": "hi", **change}

    with pytest.raises(InvalidRequest) as raised:
        chat_request(body, provider="anthropic")

    assert raised.value.param == param
    assert raised.value.status == 400
    assert raised.value.message


# An OpenAI-compatible server's answer that calls two tools after a word of text.
CHAT_ANSWER = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "qwen2.5-7b-instruct",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Checking both.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                    },
                ],
                "refusal": None,
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
}


def test_a_chat_answer_becomes_a_response_the_sdk_reads():
    usage = Usage(input_tokens=82, output_tokens=17, cached_input_tokens=5)

    body = response_from_chat(CHAT_ANSWER, AGENT_TURN, response_id="resp_abc", usage=usage)
    response = Response.model_validate(body)

    assert (response.id, response.status, response.model) == ("resp_abc", "completed", "qwen2.5-7b-instruct")
    assert response.output_text == "Checking both."
    calls = [item for item in response.output if item.type == "function_call"]
    assert [(call.call_id, call.name, json.loads(call.arguments)) for call in calls] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "get_weather", {"city": "Rome"}),
    ]
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (
        82,
        17,
        99,
    )
    assert response.usage.input_tokens_details.cached_tokens == 5
    assert (response.instructions, response.temperature, response.max_output_tokens) == (
        "You are a weather bot.",
        0.3,
        200,
    )
    assert response.tools[0].name == "get_weather"


def test_an_answer_cut_by_its_token_limit_is_incomplete():
    chat = {
        **CHAT_ANSWER,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Once upon"}, "finish_reason": "length"}
        ],
    }

    response = Response.model_validate(
        response_from_chat(chat, {"model": "fast", "input": "hi"}, response_id="resp_1", usage=None)
    )

    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "Once upon"
    assert response.usage is None


# A chat stream as OpenAI-compatible servers send it: text, then a tool call whose arguments
# arrive in fragments, the finish reason, then the usage chunk.
CHAT_CHUNKS = [
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "Let me "}, "finish_reason": None}],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "check."}, "finish_reason": None}],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]},
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'ty":"Oslo"}'}}]},
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    },
    {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
    },
]


def parse_events(frames: list[bytes]) -> list[dict]:
    events = []
    for frame in frames:
        name_line, data_line = frame.decode().strip().split("\n")
        payload = json.loads(data_line.removeprefix("data: "))
        assert name_line == f"event: {payload['type']}"
        EVENT_TYPES[payload["type"]].model_validate(payload)  # the SDK's own type for the event
        events.append(payload)
    return events


def test_a_chat_stream_becomes_the_responses_events_in_order():
    writer = ResponseEvents(AGENT_TURN, response_id="resp_s", model="fast")
    frames = [frame for chunk in CHAT_CHUNKS for frame in writer.chunk(chunk)]
    frames += writer.close(Usage(input_tokens=40, output_tokens=12))

    events = parse_events(frames)

    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[0]["response"]["status"] == "in_progress"
    assert events[6]["text"] == "Let me check."
    assert events[12]["arguments"] == '{"city":"Oslo"}'
    final = Response.model_validate(events[-1]["response"])
    assert final.status == "completed"
    assert final.output_text == "Let me check."
    assert [
        (item.type, item.output_index if hasattr(item, "output_index") else i)
        for i, item in enumerate(final.output)
    ] == [
        ("message", 0),
        ("function_call", 1),
    ]
    assert final.output[1].call_id == "call_9"
    assert final.usage.total_tokens == 52
    # The item ids agree between the events and the final response.
    assert events[2]["item"]["id"] == final.output[0].id
    assert events[9]["item"]["id"] == final.output[1].id


def test_a_stream_that_fails_ends_with_an_error_and_response_failed():
    writer = ResponseEvents({"model": "fast", "input": "hi"}, response_id="resp_f", model="fast")
    frames = writer.chunk(CHAT_CHUNKS[1]) + writer.error("The upstream failed.", "stream_interrupted")

    events = parse_events(frames)

    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert events[-1]["response"]["status"] == "failed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Let me "


def test_a_streamed_refusal_becomes_a_refusal_part():
    chunks = [
        {
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "refusal": "I can't "}, "finish_reason": None}
            ]
        },
        {"choices": [{"index": 0, "delta": {"refusal": "help with that."}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    writer = ResponseEvents({"model": "fast", "input": "hi"}, response_id="resp_r", model="fast")
    frames = [frame for chunk in chunks for frame in writer.chunk(chunk)] + writer.close(None)

    events = parse_events(frames)

    assert "response.refusal.delta" in [e["type"] for e in events]
    [done] = [e for e in events if e["type"] == "response.refusal.done"]
    assert done["refusal"] == "I can't help with that."
    final = Response.model_validate(events[-1]["response"])
    assert final.output[0].content[0].type == "refusal"
    assert final.output[0].content[0].refusal == "I can't help with that."
