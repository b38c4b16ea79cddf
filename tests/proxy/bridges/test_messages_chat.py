"""The Messages-over-chat bridge, both ways, with bodies as Claude Code and the Anthropic SDK send them
and chat answers as OpenAI-compatible servers give them; every Message and event it writes is checked
against the Anthropic SDK's own types."""

import json

import pytest
from anthropic.types import (
    Message,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
)

from apps.catalog.pricing import Usage
from apps.core.errors import InvalidRequest
from apps.proxy.bridges.messages_chat import MessageEvents, chat_request, message_from_chat

EVENT_TYPES = {
    "message_start": RawMessageStartEvent,
    "content_block_start": RawContentBlockStartEvent,
    "content_block_delta": RawContentBlockDeltaEvent,
    "content_block_stop": RawContentBlockStopEvent,
    "message_delta": RawMessageDeltaEvent,
    "message_stop": RawMessageStopEvent,
}

# A Claude Code turn after a tool ran: cached system blocks, its tools, the model's earlier thinking
# and tool use, the tool's result and the user's next words in one turn.
CLAUDE_CODE_TURN = {
    "model": "claude-sonnet-4-5-20250929",
    "max_tokens": 32000,
    "stream": True,
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Working directory: /repo"},
    ],
    "tools": [
        {
            "name": "Read",
            "description": "Reads a file.",
            "input_schema": {
                "type": "object",
                "properties": {"file_path": {"type": "string"}},
                "required": ["file_path"],
            },
        }
    ],
    "metadata": {"user_id": "user_abc_session_1"},
    "thinking": {"type": "enabled", "budget_tokens": 8000},
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in README.md?", "cache_control": {"type": "ephemeral"}}
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should read it.", "signature": "sig"},
                {"type": "text", "text": "Reading it."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "Read",
                    "input": {"file_path": "/repo/README.md"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "text", "text": "# Gateway"}],
                },
                {"type": "text", "text": "Summarise it."},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        },
    ],
}


def test_a_claude_code_turn_becomes_a_chat_request():
    chat = chat_request(CLAUDE_CODE_TURN, provider="openai")

    assert chat["messages"] == [
        {"role": "system", "content": "You are Claude Code.\n\nWorking directory: /repo"},
        {"role": "user", "content": [{"type": "text", "text": "What is in README.md?"}]},
        {
            "role": "assistant",
            "content": "Reading it.",
            "tool_calls": [
                {
                    "id": "toolu_01",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"file_path":"/repo/README.md"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01", "content": "# Gateway"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Summarise it."},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
    ]
    assert chat["tools"][0]["function"]["parameters"]["required"] == ["file_path"]
    assert (chat["max_completion_tokens"], chat["user"], chat["reasoning_effort"], chat["stream"]) == (
        32000,
        "user_abc_session_1",
        "medium",
        True,
    )
    assert "max_tokens" not in chat
    # An OpenAI-compatible server takes max_tokens (and top_k) instead.
    compat = chat_request({**CLAUDE_CODE_TURN, "top_k": 40}, provider="openai_compatible")
    assert (compat["max_tokens"], compat["top_k"]) == (32000, 40)


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        ({"mcp_servers": [{"type": "url", "url": "https://mcp.example"}]}, "mcp_servers"),
        ({"top_k": 5}, "top_k"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "server_tool_use", "id": "s", "name": "w", "input": {}}],
                    }
                ]
            },
            "messages[0].content[0].type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                    }
                ]
            },
            "messages[0].content[0].source",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "image", "source": {}}],
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].content[0]",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "toolu_9", "name": "Read", "input": {}}],
                    },
                    {"role": "user", "content": "go on"},
                ]
            },
            "messages",
        ),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ],
)
def test_what_a_chat_upstream_cannot_do_is_a_400_naming_the_field(change, param):
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], **change}

    with pytest.raises(InvalidRequest) as raised:
        chat_request(body, provider="openai")

    assert raised.value.param == param


CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "gpt-4o-mini-2024-07-18",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "Read", "arguments": '{"file_path":"a.md"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 120,
        "completion_tokens": 20,
        "total_tokens": 140,
        "prompt_tokens_details": {"cached_tokens": 100},
    },
}


def test_a_chat_answer_becomes_a_message_the_sdk_reads():
    usage = Usage(input_tokens=120, output_tokens=20, cached_input_tokens=100)

    message = Message.model_validate(
        message_from_chat(CHAT_ANSWER, message_id="msg_1", model="claude", usage=usage)
    )

    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"file_path": "a.md"} and message.content[1].id == "call_1"
    assert message.stop_reason == "tool_use"
    # Anthropic counts cache reads apart from the input.
    assert (
        message.usage.input_tokens,
        message.usage.cache_read_input_tokens,
        message.usage.output_tokens,
    ) == (20, 100, 20)


CHAT_CHUNKS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "Let me "}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "look."}, "finish_reason": None}]},
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_7",
                            "type": "function",
                            "function": {"name": "Read", "arguments": ""},
                        }
                    ]
                },
                "finish_reason": None,
            }
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"file_'}}]},
                "finish_reason": None,
            }
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'path":"a.md"}'}}]},
                "finish_reason": None,
            }
        ]
    },
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
]


def test_a_chat_stream_becomes_the_messages_events_in_order():
    writer = MessageEvents(message_id="msg_s", model="claude")
    frames = [frame for chunk in CHAT_CHUNKS for frame in writer.chunk(chunk)]
    frames += writer.close(Usage(input_tokens=30, output_tokens=12))

    events = []
    for frame in frames:
        name, data = frame.decode().strip().split("\n")
        payload = json.loads(data.removeprefix("data: "))
        assert name == f"event: {payload['type']}"
        EVENT_TYPES[payload["type"]].model_validate(payload)
        events.append(payload)

    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[5]["content_block"] == {"type": "tool_use", "id": "call_7", "name": "Read", "input": {}}
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    arguments = "".join(delta["partial_json"] for delta in deltas if delta["type"] == "input_json_delta")
    assert json.loads(arguments) == {"file_path": "a.md"}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert events[-2]["usage"]["output_tokens"] == 12
