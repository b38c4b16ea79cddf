"""A stand-in for the providers the gateway proxies to: a real HTTP server on loopback.

It speaks OpenAI's, Azure OpenAI's and Anthropic's wire formats (JSON and server-sent events): chat
completions, embeddings and models; OpenAI's Responses API, with the responses it stores per credential
(``previous_response_id``, retrieve, delete); Anthropic's messages and token counts. It records every
request it receives, and can be told to misbehave (``behave``) the way real providers do: error
statuses, hangs before the headers (``timeout``) or in the middle of a stream (``stall``), slow or cut
streams, broken JSON, dropped (``drop_connection``) or reset (``reset``, a TCP RST) connections.

It runs in a thread with its own event loop so that sync tests, async tests (on their own loops) and a
gateway subprocess can all reach it.
"""

import asyncio
import base64
import hashlib
import json
import re
import socket
import struct
import threading
import time
import typing
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import pytest
from aiohttp import web

Mode = Literal[
    "ok",
    "status",
    "timeout",
    "slow",
    "cut_stream",
    "invalid_json",
    "reject_stream_options",
    "drop_connection",
    "redirect",
    "error_event",
    "reset",
    "stall",
]
MODES: frozenset[str] = frozenset(typing.get_args(Mode))
Provider = Literal["openai", "azure", "anthropic"]
Finish = Literal["stop", "stop_sequence", "length", "tool"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

TOOL_TRIGGER = "call a tool"
TOOL_ARGUMENTS = json.dumps({"city": "Paris"})
EMBEDDING_DIMENSIONS = 8
DEFAULT_MODELS = ("gpt-4o-mini", "gpt-4o", "text-embedding-3-small")
MODELS_CREATED = 1_700_000_000
SYSTEM_FINGERPRINT = "fp_upstream"
INVALID_JSON = b'{"not json'

OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Anthropic rejects unknown top-level fields, which catches OpenAI fields leaking through a translation.
ANTHROPIC_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
    }
)
ANTHROPIC_COUNT_FIELDS = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers", "context_management"}
)
ANTHROPIC_PATHS = frozenset({"/v1/messages", "/v1/messages/count_tokens"})
# OpenAI rejects an unknown parameter, which catches chat fields (messages, max_tokens, response_format)
# leaking into a Responses request.
RESPONSES_FIELDS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_output_tokens",
        "max_tool_calls",
        "temperature",
        "top_p",
        "top_logprobs",
        "text",
        "stream",
        "stream_options",
        "store",
        "previous_response_id",
        "metadata",
        "background",
        "include",
        "reasoning",
        "truncation",
        "user",
        "safety_identifier",
        "service_tier",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_retention",
        "conversation",
        "context_management",
    }
)
RESPONSES_ROLES = ("assistant", "system", "developer", "user")
# The content parts each role may send; an assistant's earlier answer comes back as output_text.
RESPONSES_PARTS = {
    "assistant": ("output_text", "refusal"),
    "user": ("input_text", "input_image", "input_file", "input_audio"),
    "system": ("input_text",),
    "developer": ("input_text",),
}
RESPONSES_ITEMS = ("message", "function_call", "function_call_output")
RESPONSES_FORMATS = ("text", "json_object", "json_schema")
MIN_OUTPUT_TOKENS = 16
DEFAULT_MESSAGES = {
    400: "Invalid request.",
    401: "Incorrect API key provided.",
    403: "You are not allowed to perform this request.",
    404: "The requested resource was not found.",
    429: "Rate limit reached for requests.",
    500: "The server had an error while processing your request.",
    502: "Bad gateway.",
    503: "The server is overloaded or not ready yet.",
    529: "Overloaded",
}
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
OPENAI_ERROR_TYPES = {401: "invalid_request_error", 403: "permission_error", 429: "requests"}
OPENAI_ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
# Azure's API management layer answers these itself, in its own {"code", "message"} shape.
AZURE_GATEWAY_STATUSES = frozenset({401, 404, 429})


# --- What the server records and how it is told to behave ----------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    json: Any  # the parsed body, or None when it is not JSON
    body: bytes
    credential: str | None  # the API key, from the header this provider reads it from

    @property
    def system(self) -> Any:
        """The Anthropic ``system`` the request carried, to check the gateway's translation."""
        return self.json.get("system") if isinstance(self.json, dict) else None


@dataclass(eq=False)  # rules are removed by identity: two alike rules are still two rules
class _Rule:
    mode: Mode
    options: dict[str, Any]
    for_credential: str | None = None
    remaining: int | None = None  # None: until reset()

    def matches(self, credential: str | None) -> bool:
        return self.for_credential is None or self.for_credential == credential

    def option(self, name: str, default: float) -> float:
        return float(self.options.get(name, default))


OK = _Rule("ok", {})


@dataclass(frozen=True)
class _Exchange:
    """What the middleware learnt about a request, for the handlers."""

    provider: Provider
    recorded: RecordedRequest
    rule: _Rule


EXCHANGE = web.RequestKey("exchange", _Exchange)


class _Reject(Exception):
    """A request the provider refuses; the middleware renders it in the provider's error shape."""

    def __init__(
        self,
        status: int,
        message: str | None = None,
        *,
        param: str | None = None,
        error_type: str | None = None,
        code: str | None = None,
        shape: Provider | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message or DEFAULT_MESSAGES.get(status, "Error.")
        self.param = param
        self.error_type = error_type
        self.code = code
        self.shape = shape

    def response(self, provider: Provider) -> web.Response:
        shape = self.shape or provider
        body = error_body(
            shape, self.status, self.message, param=self.param, error_type=self.error_type, code=self.code
        )
        headers = {"retry-after": "1"} if self.status in (429, 529) else {}
        return web.json_response(body, status=self.status, headers=headers | request_id_header(shape))


# --- Answers: deterministic, so tests can predict them -------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True)
class Answer:
    text: str
    finish: Finish
    stop_sequence: str | None
    tool_call: ToolCall | None
    prompt_tokens: int
    completion_tokens: int


def words(text: str) -> int:
    return len(text.split())


def text_of(content: Any) -> str:
    """The text of a message's content: a string, OpenAI content parts or Anthropic blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(text for text in map(_text_of_part, content) if text)
    return ""


def _text_of_part(part: Any) -> str:
    if not isinstance(part, dict):
        return ""
    if isinstance(part.get("text"), str):
        return part["text"]
    if part.get("type") == "tool_result":
        return text_of(part.get("content"))
    return ""


def last_user_text(messages: list[dict[str, Any]]) -> str:
    return next((text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")


def word_pieces(text: str) -> list[str]:
    """One piece per word, each with the whitespace before it: the pieces add up to the text."""
    return re.findall(r"\s*\S+(?:\s+$)?", text)


def fragments(text: str, size: int = 6) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def compose_answer(
    name: str,
    prompt: str,
    prompt_tokens: int,
    *,
    tool: ToolCall | None,
    max_tokens: int | None,
    stops: list[str],
) -> Answer:
    if tool is not None:
        return Answer("", "tool", None, tool, prompt_tokens, words(tool.arguments))
    text, finish, matched = f"Hello from {name}: {prompt}", "stop", None
    hits = [(text.find(stop), stop) for stop in stops if stop and stop in text]
    if hits:
        index, matched = min(hits)
        text, finish = text[:index], "stop_sequence"
    if max_tokens is not None and words(text) > max_tokens:
        text, finish, matched = "".join(word_pieces(text)[:max_tokens]), "length", None
    return Answer(text, finish, matched, None, prompt_tokens, words(text))


def chosen_tool(
    names: list[str],
    messages: list[dict[str, Any]],
    *,
    choice: Literal["auto", "none", "required"],
    named: str | None,
) -> str | None:
    """The tool the model calls: the one tool_choice forces, or the first when the user asks for one
    and the conversation does not end with a tool's result (the model has what it asked for then,
    and answers: an agent's loop ends)."""
    if not names or choice == "none":
        return None
    if named:
        return named
    if choice == "required":
        return names[0]
    if TOOL_TRIGGER in last_user_text(messages).lower() and not ends_with_a_tool_result(messages):
        return names[0]
    return None


def ends_with_a_tool_result(messages: list[dict[str, Any]]) -> bool:
    """The last message is a tool's result: OpenAI's ``tool`` message, or Anthropic's user turn of
    ``tool_result`` blocks only."""
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return True
    content = last.get("content")
    return (
        last.get("role") == "user"
        and isinstance(content, list)
        and bool(content)
        and all(isinstance(block, dict) and block.get("type") == "tool_result" for block in content)
    )


def as_list(value: Any) -> list[str]:
    """OpenAI's ``stop`` and Anthropic's ``stop_sequences``: a string or a list of them."""
    if isinstance(value, str):
        return [value]
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def openai_tool_name(tool: Any) -> str | None:
    """The name of an OpenAI tool: {"type": "function", "function": {"name": ...}} (or "custom")."""
    if not isinstance(tool, dict):
        return None
    definition = tool.get(tool.get("type", "function"))
    return definition.get("name") if isinstance(definition, dict) else None


def embedding_for(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A deterministic vector for ``text``; multiples of 1/256, so exact in float32 (base64) too."""
    digest = hashlib.shake_256(text.encode()).digest(dimensions)
    return [byte / 256 - 0.5 for byte in digest]


# --- Wire formats ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sse:
    data: Any  # JSON-able, or a str sent as is ("[DONE]")
    event: str | None = None
    content: bool = False  # carries part of the answer: what cut_stream counts

    def encode(self) -> bytes:
        data = self.data if isinstance(self.data, str) else json.dumps(self.data, separators=(",", ":"))
        event = f"event: {self.event}\n" if self.event else ""
        return f"{event}data: {data}\n\n".encode()


def error_body(
    provider: Provider,
    status: int,
    message: str,
    *,
    param: str | None = None,
    error_type: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    if provider == "anthropic":
        kind = error_type or ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    if provider == "azure" and status in AZURE_GATEWAY_STATUSES:
        return {"error": {"code": str(status), "message": message}}
    default_type = "server_error" if status >= 500 else "invalid_request_error"
    kind = error_type or OPENAI_ERROR_TYPES.get(status, default_type)
    return {
        "error": {
            "message": message,
            "type": kind,
            "param": param,
            "code": code or OPENAI_ERROR_CODES.get(status),
        }
    }


def request_id_header(provider: Provider) -> dict[str, str]:
    return {"request-id" if provider == "anthropic" else "x-request-id": new_id("req_")}


def openai_usage(answer: Answer) -> dict[str, Any]:
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def openai_finish(answer: Answer) -> str:
    return {"tool": "tool_calls", "length": "length"}.get(answer.finish, "stop")


def openai_tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def openai_completion(answer: Answer, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": answer.text,
        "refusal": None,
        "annotations": [],
    }
    if answer.tool_call is not None:
        message |= {"content": None, "tool_calls": [openai_tool_call(answer.tool_call)]}
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": openai_finish(answer)}
        ],
        "usage": openai_usage(answer),
        "service_tier": "default",
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }


def openai_chunks(answer: Answer, model: str, *, include_usage: bool) -> list[Sse]:
    base: dict[str, Any] = {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "service_tier": "default",
        "system_fingerprint": SYSTEM_FINGERPRINT,
    }
    if include_usage:
        base["usage"] = None  # OpenAI sends usage: null on every chunk but the last

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, content: bool = False) -> Sse:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return Sse(base | {"choices": [choice]}, content=content)

    events = [chunk(delta, content=True) for delta in _openai_deltas(answer)]
    events.insert(0, chunk(_openai_first_delta(answer)))
    events.append(chunk({}, openai_finish(answer)))
    if include_usage:
        events.append(Sse(base | {"choices": [], "usage": openai_usage(answer)}))
    events.append(Sse("[DONE]"))
    return events


def _openai_first_delta(answer: Answer) -> dict[str, Any]:
    if answer.tool_call is None:
        return {"role": "assistant", "content": "", "refusal": None}
    call = openai_tool_call(answer.tool_call)
    call["function"]["arguments"] = ""
    return {"role": "assistant", "content": None, "tool_calls": [{"index": 0, **call}], "refusal": None}


def _openai_deltas(answer: Answer) -> list[dict[str, Any]]:
    if answer.tool_call is None:
        return [{"content": piece} for piece in word_pieces(answer.text)]
    return [
        {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}
        for part in fragments(answer.tool_call.arguments)
    ]


def openai_embeddings(body: dict[str, Any], model: str) -> dict[str, Any]:
    inputs = body["input"]
    # A list of strings (or of token lists) is a batch; a string or one token list is one input.
    if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    dimensions = int(body.get("dimensions") or EMBEDDING_DIMENSIONS)
    as_base64 = body.get("encoding_format") == "base64"
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": _encode_vector(_embedding_of(item, dimensions), as_base64),
        }
        for i, item in enumerate(inputs)
    ]
    tokens = sum(words(item) if isinstance(item, str) else len(item) for item in inputs)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}


def _embedding_of(item: Any, dimensions: int) -> list[float]:
    return embedding_for(item if isinstance(item, str) else json.dumps(item), dimensions)


def _encode_vector(vector: list[float], as_base64: bool) -> list[float] | str:
    if not as_base64:
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def anthropic_stop_reason(answer: Answer) -> str:
    return {"tool": "tool_use", "length": "max_tokens", "stop_sequence": "stop_sequence"}.get(
        answer.finish, "end_turn"
    )


def anthropic_usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def anthropic_block(answer: Answer) -> dict[str, Any]:
    call = answer.tool_call
    if call is None:
        return {"type": "text", "text": answer.text}
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": json.loads(call.arguments)}


def anthropic_message(answer: Answer, model: str, message_id: str) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [anthropic_block(answer)],
        "stop_reason": anthropic_stop_reason(answer),
        "stop_sequence": answer.stop_sequence,
        "usage": anthropic_usage(answer.prompt_tokens, answer.completion_tokens),
    }


def anthropic_events(answer: Answer, model: str, message_id: str) -> list[Sse]:
    start = anthropic_message(answer, model, message_id)
    start |= {"content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = anthropic_usage(answer.prompt_tokens, 1)
    block = anthropic_block(answer)
    block |= {"input": {}} if answer.tool_call else {"text": ""}
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": anthropic_stop_reason(answer), "stop_sequence": answer.stop_sequence},
        "usage": {"output_tokens": answer.completion_tokens},
    }
    return [
        _anthropic_event({"type": "message_start", "message": start}),
        _anthropic_event({"type": "content_block_start", "index": 0, "content_block": block}),
        _anthropic_event({"type": "ping"}),
        *(
            _anthropic_event({"type": "content_block_delta", "index": 0, "delta": d}, content=True)
            for d in _anthropic_deltas(answer)
        ),
        _anthropic_event({"type": "content_block_stop", "index": 0}),
        _anthropic_event(delta),
        _anthropic_event({"type": "message_stop"}),
    ]


def _anthropic_event(data: dict[str, Any], content: bool = False) -> Sse:
    return Sse(data, event=data["type"], content=content)


def _anthropic_deltas(answer: Answer) -> list[dict[str, str]]:
    if answer.tool_call is None:
        return [{"type": "text_delta", "text": piece} for piece in word_pieces(answer.text)]
    return [
        {"type": "input_json_delta", "partial_json": part} for part in fragments(answer.tool_call.arguments)
    ]


def anthropic_models(models: tuple[str, ...]) -> dict[str, Any]:
    data = [
        {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in models
    ]
    return {"data": data, "has_more": False, "first_id": models[0], "last_id": models[-1]}


def openai_models(models: tuple[str, ...]) -> dict[str, Any]:
    data = [{"id": m, "object": "model", "created": MODELS_CREATED, "owned_by": "system"} for m in models]
    return {"object": "list", "data": data}


@dataclass(frozen=True)
class StoredResponse:
    """A response OpenAI keeps (store: true), with the conversation a later previous_response_id continues."""

    response: dict[str, Any]
    items: list[dict[str, Any]]  # its input items, the earlier turns' included, then its output items


def responses_usage(answer: Answer) -> dict[str, Any]:
    return {
        "input_tokens": answer.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": answer.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
    }


def responses_output(answer: Answer) -> list[dict[str, Any]]:
    """The output items: one function call, or one assistant message with the text."""
    call = answer.tool_call
    if call is not None:
        return [
            {
                "id": new_id("fc_"),
                "type": "function_call",
                "status": "completed",
                "arguments": call.arguments,
                "call_id": call.id,
                "name": call.name,
            }
        ]
    text = {"type": "output_text", "annotations": [], "logprobs": [], "text": answer.text}
    status = "incomplete" if answer.finish == "length" else "completed"
    return [
        {"id": new_id("msg_"), "type": "message", "status": status, "role": "assistant", "content": [text]}
    ]


def openai_response(answer: Answer, body: dict[str, Any], output: list[dict[str, Any]]) -> dict[str, Any]:
    """A Response object: the output and its usage, and the request's settings echoed as OpenAI does."""
    incomplete = answer.finish == "length"
    created = int(time.time())
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": created,
        "status": "incomplete" if incomplete else "completed",
        "background": False,
        "completed_at": None if incomplete else created,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": body["model"],
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"} | (body.get("text") or {}),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [{"description": None, "strict": True} | tool for tool in body.get("tools") or []],
        "top_logprobs": body.get("top_logprobs", 0),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": responses_usage(answer),
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def responses_events(response: dict[str, Any]) -> list[Sse]:
    """OpenAI's Responses stream: each event named by its type and numbered in order; no [DONE]."""
    pending = response | {
        "status": "in_progress",
        "completed_at": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
    }
    steps = [
        ({"type": "response.created", "response": pending}, False),
        ({"type": "response.in_progress", "response": pending}, False),
    ]
    for index, item in enumerate(response["output"]):
        steps += _responses_item_events(index, item)
    final = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
    steps.append(({"type": final, "response": response}, False))
    return [
        Sse(data | {"sequence_number": number}, event=data["type"], content=content)
        for number, (data, content) in enumerate(steps)
    ]


def _responses_item_events(index: int, item: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """The events of one output item, each with whether it carries part of the answer."""
    at = {"output_index": index}
    if item["type"] == "function_call":
        ref = at | {"item_id": item["id"]}
        return [
            (
                {
                    "type": "response.output_item.added",
                    **at,
                    "item": item | {"status": "in_progress", "arguments": ""},
                },
                False,
            ),
            *(
                ({"type": "response.function_call_arguments.delta", **ref, "delta": part}, True)
                for part in fragments(item["arguments"])
            ),
            ({"type": "response.function_call_arguments.done", **ref, "arguments": item["arguments"]}, False),
            ({"type": "response.output_item.done", **at, "item": item}, False),
        ]
    (part,) = item["content"]
    ref = at | {"item_id": item["id"], "content_index": 0}
    return [
        (
            {
                "type": "response.output_item.added",
                **at,
                "item": item | {"status": "in_progress", "content": []},
            },
            False,
        ),
        ({"type": "response.content_part.added", **ref, "part": part | {"text": ""}}, False),
        *(
            ({"type": "response.output_text.delta", **ref, "delta": piece, "logprobs": []}, True)
            for piece in word_pieces(part["text"])
        ),
        ({"type": "response.output_text.done", **ref, "text": part["text"], "logprobs": []}, False),
        ({"type": "response.content_part.done", **ref, "part": part}, False),
        ({"type": "response.output_item.done", **at, "item": item}, False),
    ]


def schema_instance(schema: Any, text: str, root: Any) -> Any:
    """The smallest instance of a JSON schema, its strings saying ``text``: what a model held to it writes."""
    if not isinstance(schema, dict):
        return text
    if isinstance(ref := schema.get("$ref"), str) and ref.startswith("#/"):
        target = root
        for key in ref[2:].split("/"):
            target = target.get(key, {}) if isinstance(target, dict) else {}
        return schema_instance(target, text, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if options := schema.get("anyOf") or schema.get("oneOf"):
        return schema_instance(options[0], text, root)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return {
            name: schema_instance(sub, text, root) for name, sub in (schema.get("properties") or {}).items()
        }
    if kind == "array":
        return []
    return {"integer": 0, "number": 0, "boolean": False, "null": None}.get(kind, text)


# --- Request validation, as strict as the providers ----------------------------------------------


def provider_of(request: web.BaseRequest) -> Provider:
    if request.path.startswith("/openai/"):
        return "azure"
    if request.path in ANTHROPIC_PATHS or (
        request.path == "/v1/models" and "anthropic-version" in request.headers
    ):
        return "anthropic"
    return "openai"


def credential_of(headers: dict[str, str], provider: Provider) -> str | None:
    if provider == "anthropic":
        return headers.get("x-api-key") or None
    scheme, _, token = headers.get("authorization", "").partition(" ")
    bearer = token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return (headers.get("api-key") or bearer) if provider == "azure" else bearer


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def require_object(recorded: RecordedRequest) -> dict[str, Any]:
    if not isinstance(recorded.json, dict):
        raise _Reject(400, "We could not parse the JSON body of your request.")
    return recorded.json


def validate_openai_chat(body: dict[str, Any], *, model_required: bool) -> None:
    if model_required and not body.get("model"):
        raise _Reject(400, "you must provide a model parameter")
    _validate_openai_messages(body.get("messages"))
    if "stream_options" in body and not body.get("stream"):
        message = "The 'stream_options' parameter is only allowed when 'stream' is enabled."
        raise _Reject(400, message, param="stream_options")
    for field in ("max_tokens", "max_completion_tokens"):
        if body.get(field) is not None and (not isinstance(body[field], int) or body[field] < 1):
            raise _Reject(400, f"Invalid '{field}': expected an integer of at least 1.", param=field)
    _validate_openai_tools(body.get("tools") or [], body.get("tool_choice"))


def _validate_openai_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise _Reject(400, "[] is too short - 'messages'", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in OPENAI_ROLES:
            raise _Reject(400, f"Invalid value for 'messages[{i}].role'.", param=f"messages[{i}].role")


def _validate_openai_tools(tools: list[Any], choice: Any) -> None:
    # Catches, among others, Anthropic-shaped tools ({"name", "input_schema"}) sent to OpenAI.
    for i, tool in enumerate(tools):
        if not openai_tool_name(tool):
            param = f"tools[{i}].function"
            raise _Reject(400, f"Missing required parameter: '{param}'.", param=param)
    if choice is not None and choice not in ("none", "auto", "required") and not openai_tool_name(choice):
        raise _Reject(400, "Invalid value for 'tool_choice'.", param="tool_choice")


def validate_embeddings(body: dict[str, Any], *, model_required: bool) -> None:
    if model_required and not body.get("model"):
        raise _Reject(400, "you must provide a model parameter")
    inputs = body.get("input")
    if not inputs or not isinstance(inputs, str | list):
        raise _Reject(400, "'input' is a required property", param="input")
    if isinstance(inputs, list) and not all(isinstance(item, str | int | list) for item in inputs):
        raise _Reject(
            400, "'input' must be a string, an array of strings or an array of tokens", param="input"
        )


def check_anthropic_headers(recorded: RecordedRequest) -> None:
    if recorded.credential is None:
        raise _Reject(401, "x-api-key header is required")
    if "anthropic-version" not in recorded.headers:
        raise _Reject(400, "anthropic-version: header is required")


def validate_anthropic(body: dict[str, Any]) -> None:
    if extra := sorted(set(body) - ANTHROPIC_FIELDS):
        raise _Reject(400, f"{extra[0]}: Extra inputs are not permitted")
    for field in ("model", "max_tokens", "messages"):
        if field not in body:
            raise _Reject(400, f"{field}: Field required")
    if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
        raise _Reject(400, "max_tokens: Input should be greater than or equal to 1")
    temperature = body.get("temperature", 0)
    if not isinstance(temperature, int | float) or not 0 <= temperature <= 1:
        raise _Reject(400, "temperature: Input should be less than or equal to 1")
    _validate_anthropic_conversation(body)


def validate_anthropic_count(body: dict[str, Any]) -> None:
    """/v1/messages/count_tokens: the conversation of a message, without max_tokens, stream or sampling."""
    if extra := sorted(set(body) - ANTHROPIC_COUNT_FIELDS):
        raise _Reject(400, f"{extra[0]}: Extra inputs are not permitted")
    for field in ("model", "messages"):
        if field not in body:
            raise _Reject(400, f"{field}: Field required")
    _validate_anthropic_conversation(body)


def _validate_anthropic_conversation(body: dict[str, Any]) -> None:
    _validate_anthropic_system(body.get("system"))
    _validate_anthropic_messages(body["messages"])
    _validate_anthropic_tools(body.get("tools") or [])
    _validate_anthropic_tool_choice(body.get("tool_choice"))


def _validate_anthropic_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list) or any(
        not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str)
        for b in system
    ):
        raise _Reject(400, "system: Input should be a valid string or a list of text blocks")


def _validate_anthropic_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise _Reject(400, "messages: at least one message is required")
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            raise _Reject(
                400,
                'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
                'parameter, not "system" as an input message role.',
            )
        if role not in ("user", "assistant"):
            raise _Reject(400, f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        if not isinstance(content, str) and not (
            isinstance(content, list) and all(isinstance(b, dict) and "type" in b for b in content)
        ):
            raise _Reject(400, f"messages.{i}.content: Input should be a valid string or a list of blocks")


def _validate_anthropic_tools(tools: list[Any]) -> None:
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or "name" not in tool:
            raise _Reject(400, f"tools.{i}.name: Field required")
        if tool.get("type", "custom") == "custom" and "input_schema" not in tool:
            raise _Reject(400, f"tools.{i}.custom.input_schema: Field required")


def _validate_anthropic_tool_choice(choice: Any) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise _Reject(400, "tool_choice: Input should be an object with type 'auto', 'any', 'tool' or 'none'")
    if choice["type"] == "tool" and not choice.get("name"):
        raise _Reject(400, "tool_choice.tool.name: Field required")


def validate_openai_responses(body: dict[str, Any]) -> None:
    """A Responses request as OpenAI checks it; tools are function tools only (the stand-in has no others)."""
    if unknown := sorted(set(body) - RESPONSES_FIELDS):
        raise _Reject(400, f"Unknown parameter: '{unknown[0]}'.", param=unknown[0], code="unknown_parameter")
    if not body.get("model"):
        raise _missing("model")
    if body.get("background"):
        raise _Reject(400, "The upstream stand-in does not run background responses.", param="background")
    _validate_responses_input(body.get("input"))
    _validate_responses_tools(body.get("tools") or [], body.get("tool_choice"))
    limit = body.get("max_output_tokens")
    if limit is not None and (not isinstance(limit, int) or limit < MIN_OUTPUT_TOKENS):
        message = (
            "Invalid 'max_output_tokens': integer below minimum value. "
            f"Expected a value >= {MIN_OUTPUT_TOKENS}, but got {limit} instead."
        )
        raise _Reject(400, message, param="max_output_tokens", code="integer_below_min_value")
    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, int | float) or not 0 <= temperature <= 2):
        message = (
            "Invalid 'temperature': decimal above maximum value. "
            f"Expected a value <= 2, but got {temperature} instead."
        )
        raise _Reject(400, message, param="temperature", code="decimal_above_max_value")
    _validate_responses_format(body.get("text"))


def _missing(param: str) -> _Reject:
    return _Reject(
        400, f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _invalid_value(param: str, value: Any, supported: tuple[str, ...]) -> _Reject:
    listing = (
        ", ".join(f"'{v}'" for v in supported[:-1]) + f", and '{supported[-1]}'"
        if len(supported) > 1
        else f"'{supported[0]}'"
    )
    message = f"Invalid value: '{value}'. Supported values are: {listing}."
    return _Reject(400, message, param=param, code="invalid_value")


def _invalid_type(param: str, expected: str, value: Any) -> _Reject:
    message = f"Invalid type for '{param}': expected {expected}, but got {type(value).__name__} instead."
    return _Reject(400, message, param=param, code="invalid_type")


def _validate_responses_input(value: Any) -> None:
    if value is None:
        raise _missing("input")
    if isinstance(value, str):
        return
    if not isinstance(value, list):
        raise _invalid_type("input", "one of a string or an array of input items", value)
    for i, item in enumerate(value):
        _validate_responses_item(item, f"input[{i}]")


def _validate_responses_item(item: Any, at: str) -> None:
    if not isinstance(item, dict):
        raise _invalid_type(at, "an input item", item)
    kind = item.get("type", "message")
    if kind not in RESPONSES_ITEMS:
        raise _invalid_value(f"{at}.type", kind, RESPONSES_ITEMS)
    required = {
        "message": ("role", "content"),
        "function_call": ("call_id", "name", "arguments"),
        "function_call_output": ("call_id", "output"),
    }[kind]
    for field in required:
        if item.get(field) is None:
            raise _missing(f"{at}.{field}")
    if kind == "message":
        _validate_responses_message(item, at)


def _validate_responses_message(item: dict[str, Any], at: str) -> None:
    role, content = item["role"], item["content"]
    if role not in RESPONSES_ROLES:
        raise _invalid_value(f"{at}.role", role, RESPONSES_ROLES)
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _invalid_type(f"{at}.content", "one of a string or an array of content parts", content)
    # Catches chat-shaped parts ({"type": "text"}, "image_url") and a role sent with the other side's parts.
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in RESPONSES_PARTS[role]:
            raise _invalid_value(f"{at}.content[{j}].type", kind, RESPONSES_PARTS[role])
        if kind in ("input_text", "output_text") and not isinstance(part.get("text"), str):
            raise _missing(f"{at}.content[{j}].text")


def _validate_responses_tools(tools: list[Any], choice: Any) -> None:
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise _invalid_value(f"tools[{i}].type", kind, ("function",))
        if not tool.get("name"):  # a chat-shaped tool keeps its name under "function"
            raise _missing(f"tools[{i}].name")
    if choice is None or isinstance(choice, str):
        if choice not in (None, "none", "auto", "required"):
            raise _invalid_value("tool_choice", choice, ("none", "auto", "required"))
        return
    if not isinstance(choice, dict) or choice.get("type") != "function":
        raise _Reject(400, "Invalid value for 'tool_choice'.", param="tool_choice")
    if not choice.get("name"):
        raise _missing("tool_choice.name")


def _validate_responses_format(text: Any) -> None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in RESPONSES_FORMATS:
        raise _invalid_value("text.format.type", kind, RESPONSES_FORMATS)
    if kind == "json_schema":  # a chat-shaped format nests these under "json_schema"
        for field in ("name", "schema"):
            if field not in fmt:
                raise _missing(f"text.format.{field}")


def responses_input_items(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input as items: a string is one user message; a message may leave out its type."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [item if "type" in item else {"type": "message"} | item for item in value]


def check_tool_outputs(conversation: list[dict[str, Any]]) -> None:
    """Each function_call_output answers a function_call made earlier in the conversation."""
    calls: set[str] = set()
    for item in conversation:
        if item["type"] == "function_call":
            calls.add(item["call_id"])
        elif item["type"] == "function_call_output" and item["call_id"] not in calls:
            message = f"No tool call found for function call output with call_id {item['call_id']}."
            raise _Reject(400, message, param="input")


def responses_answer(name: str, body: dict[str, Any], conversation: list[dict[str, Any]]) -> Answer:
    """The chat endpoint's answer to the same conversation, read as a chat request, then formatted."""
    system = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
    choice = body.get("tool_choice", "auto")
    chat = {
        "messages": system + [_as_chat_message(item) for item in conversation],
        "tools": [
            {"type": "function", "function": {"name": tool["name"]}} for tool in body.get("tools") or []
        ],
        "tool_choice": {"type": "function", "function": {"name": choice["name"]}}
        if isinstance(choice, dict)
        else choice,
        "max_completion_tokens": body.get("max_output_tokens"),
    }
    return _formatted(openai_answer(name, chat), (body.get("text") or {}).get("format"))


def _as_chat_message(item: dict[str, Any]) -> dict[str, Any]:
    if item["type"] == "function_call":
        call = ToolCall(item["call_id"], item["name"], item["arguments"])
        return {"role": "assistant", "content": None, "tool_calls": [openai_tool_call(call)]}
    if item["type"] == "function_call_output":
        return {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}
    return {"role": item["role"], "content": item["content"]}


def chat_format(response_format: Any) -> Any:
    """Chat completions' ``response_format`` in the Responses API's ``text.format`` shape (what
    ``_formatted`` reads): a structured answer for chat as for Responses."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return response_format
    schema = response_format.get("json_schema") or {}
    return {"type": "json_schema", "name": schema.get("name"), "schema": schema.get("schema") or {}}


def _formatted(answer: Answer, fmt: Any) -> Answer:
    """The answer as the JSON a structured format asks for, its strings carrying the text."""
    if answer.tool_call is not None or not isinstance(fmt, dict) or fmt.get("type") == "text":
        return answer
    if fmt["type"] == "json_schema":
        value = schema_instance(fmt["schema"], answer.text, fmt["schema"])
    else:
        value = {"text": answer.text}
    text = json.dumps(value)
    return replace(answer, text=text, completion_tokens=words(text))


def openai_answer(name: str, body: dict[str, Any]) -> Answer:
    messages = body["messages"]
    names = [openai_tool_name(tool) or "" for tool in body.get("tools") or []]
    choice = body.get("tool_choice", "auto")
    forced = "required" if choice == "required" or isinstance(choice, dict) else choice
    named = openai_tool_name(choice) if isinstance(choice, dict) else None
    tool_name = chosen_tool(names, messages, choice=forced, named=named)
    tool = ToolCall(new_id("call_"), tool_name, TOOL_ARGUMENTS) if tool_name else None
    return compose_answer(
        name,
        last_user_text(messages),
        sum(words(text_of(m.get("content"))) for m in messages),
        tool=tool,
        max_tokens=body.get("max_completion_tokens") or body.get("max_tokens"),
        stops=as_list(body.get("stop")),
    )


def anthropic_answer(name: str, body: dict[str, Any]) -> Answer:
    messages = body["messages"]
    names = [tool["name"] for tool in body.get("tools") or []]
    choice = body.get("tool_choice") or {"type": "auto"}
    forced = {"none": "none", "any": "required", "tool": "required"}.get(choice["type"], "auto")
    tool_name = chosen_tool(names, messages, choice=forced, named=choice.get("name"))
    arguments = TOOL_ARGUMENTS
    if choice["type"] == "tool":  # a forced tool (structured output): its input follows its schema
        schema = next((tool.get("input_schema") for tool in body["tools"] if tool["name"] == tool_name), None)
        if isinstance(schema, dict) and schema.get("properties"):
            arguments = json.dumps(schema_instance(schema, last_user_text(messages), schema))
    tool = ToolCall(new_id("toolu_"), tool_name, arguments) if tool_name else None
    return compose_answer(
        name,
        last_user_text(messages),
        anthropic_input_tokens(body),
        tool=tool,
        max_tokens=body["max_tokens"],
        stops=as_list(body.get("stop_sequences")),
    )


def anthropic_input_tokens(body: dict[str, Any]) -> int:
    """What /v1/messages counts as input and /v1/messages/count_tokens answers: the system and messages."""
    return words(text_of(body.get("system"))) + sum(words(text_of(m["content"])) for m in body["messages"])


# --- The server -----------------------------------------------------------------------------------


class UpstreamServer:
    """A loopback HTTP server that answers like OpenAI, Azure OpenAI and Anthropic.

    Use it as a context manager (or ``start()``/``stop()``); ``behave()`` injects failures.
    """

    def __init__(self, name: str = "upstream", *, models: tuple[str, ...] = DEFAULT_MODELS) -> None:
        self.name = name
        self.models = tuple(models)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._requests: list[RecordedRequest] = []
        self._rules: list[_Rule] = []
        self._responses: dict[tuple[str | None, str], StoredResponse] = {}  # by (credential, id)
        self._disconnects = 0
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None

    # Lifecycle

    @property
    def base_url(self) -> str:
        if self._port is None:
            raise RuntimeError("the upstream server is not started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.base_url

    def start(self) -> "UpstreamServer":
        if self._thread is not None:
            raise RuntimeError("the upstream server is already started")
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))  # bound here so the port is known before the loop runs
        self._port = sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"upstream-{self.name}", daemon=True
        )
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(sock), self._loop).result(timeout=5)
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=5)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.close()
            self._loop = self._thread = None

    def __enter__(self) -> "UpstreamServer":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.base_url if self._port else "not started"
        return f"<UpstreamServer {self.name!r} {where}>"

    async def _serve(self, sock: socket.socket) -> None:
        self._stopping = asyncio.Event()
        # handler_cancellation: a client that goes away cancels its handler, even mid-sleep, which is
        # how a slow stream notices the disconnect at once.
        self._runner = web.AppRunner(
            self._make_app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.25
        )
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def _shutdown(self) -> None:
        assert self._stopping is not None and self._runner is not None
        self._stopping.set()  # wakes hanging and slow handlers, which then drop their connections
        await self._runner.cleanup()
        leftovers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self._openai_chat)
        app.router.add_post("/v1/embeddings", self._openai_embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/messages", self._anthropic_messages)
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self._azure_chat)
        app.router.add_post("/openai/deployments/{deployment}/embeddings", self._azure_embeddings)
        app.router.add_post("/v1/messages/count_tokens", self._anthropic_count_tokens)
        # The Responses API at OpenAI's base URL, at Azure's v1 API and at Azure's older, versioned paths.
        for prefix, versioned in (("/v1", False), ("/openai/v1", False), ("/openai", True)):
            wrap = self._versioned if versioned else _as_is
            app.router.add_post(f"{prefix}/responses", wrap(self._create_response))
            app.router.add_get(f"{prefix}/responses/{{response_id}}", wrap(self._retrieve_response))
            app.router.add_delete(f"{prefix}/responses/{{response_id}}", wrap(self._delete_response))
            app.router.add_post(f"{prefix}/responses/{{response_id}}/cancel", wrap(self._cancel_response))
        return app

    # Control, from any thread

    def behave(
        self, mode: Mode, *, for_credential: str | None = None, times: int | None = None, **options: Any
    ) -> None:
        """Makes the next ``times`` requests (all, if None) carrying ``for_credential`` (any, if None)
        behave as ``mode``; the most recent matching rule wins."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {sorted(MODES)}")
        if mode == "status" and not isinstance(options.get("status"), int):
            raise ValueError('behave("status") needs status=<int>')
        if mode == "redirect" and not isinstance(options.get("to"), str):
            raise ValueError('behave("redirect") needs to=<base URL of another server>')
        if times is not None and times < 1:
            raise ValueError("times must be at least 1")
        with self._lock:
            self._rules.append(_Rule(mode, options, for_credential, times))

    def reset(self) -> None:
        """Forgets the rules, the recorded requests, the stored responses and the disconnect count."""
        with self._lock:
            self._rules.clear()
            self._requests.clear()
            self._responses.clear()
            self._disconnects = 0

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def last_request(self) -> RecordedRequest:
        with self._lock:
            return self._requests[-1]

    def requests_for(self, credential: str | None) -> list[RecordedRequest]:
        """The requests that carried ``credential`` (None: those that carried none)."""
        return [r for r in self.requests if r.credential == credential]

    @property
    def disconnects(self) -> int:
        """Streams whose client went away before the end."""
        with self._lock:
            return self._disconnects

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        """Blocks until ``count`` requests arrived; from async code use ``asyncio.to_thread``."""
        return self._wait(lambda: len(self._requests) >= count, timeout)

    def wait_for_disconnects(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Blocks until ``count`` client disconnects were seen (they are detected asynchronously)."""
        return self._wait(lambda: self._disconnects >= count, timeout)

    def _wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    def _take_rule(self, credential: str | None) -> _Rule:
        with self._lock:
            for rule in reversed(self._rules):
                if rule.matches(credential):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                        if rule.remaining == 0:
                            self._rules.remove(rule)
                    return rule
        return OK

    def _record(self, request: RecordedRequest) -> None:
        with self._changed:
            self._requests.append(request)
            self._changed.notify_all()

    def _count_disconnect(self) -> None:
        with self._changed:
            self._disconnects += 1
            self._changed.notify_all()

    # Request pipeline: record, apply the behaviour, then answer as the provider would

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        provider = provider_of(request)
        recorded = await self._recorded(request, provider)
        rule = self._take_rule(recorded.credential)
        request[EXCHANGE] = _Exchange(provider, recorded, rule)
        try:
            if (response := await self._misbehave(request, rule, recorded)) is not None:
                return response
            return await handler(request)
        except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as exc:
            return _Reject(exc.status, f"Invalid URL ({request.method} {request.path})").response(provider)
        except _Reject as reject:
            return reject.response(provider)

    async def _recorded(self, request: web.Request, provider: Provider) -> RecordedRequest:
        body = await request.read()
        headers = {name.lower(): value for name, value in request.headers.items()}
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=headers,
            json=parse_json(body),
            body=body,
            credential=credential_of(headers, provider),
        )
        self._record(recorded)
        return recorded

    async def _misbehave(
        self, request: web.Request, rule: _Rule, recorded: RecordedRequest
    ) -> web.StreamResponse | None:
        """The response a failure mode answers with before the provider logic; None to go on."""
        if rule.mode == "status":
            status = rule.options["status"]
            raise _Reject(status, rule.options.get("message"), error_type=rule.options.get("type"))
        if rule.mode == "timeout":
            await self._pause(rule.option("seconds", 30))
            return self._drop(request)
        if rule.mode == "drop_connection":
            return self._drop(request)
        if rule.mode == "reset":
            return self._reset(request)
        if rule.mode == "invalid_json":
            return web.Response(body=INVALID_JSON, content_type="application/json")
        if rule.mode == "redirect":
            # The same path and query on another server: what a hijacked upstream or DNS answer sends.
            location = rule.options["to"].rstrip("/") + request.path_qs
            return web.Response(status=int(rule.options.get("status", 307)), headers={"location": location})
        if (
            rule.mode == "reject_stream_options"
            and isinstance(recorded.json, dict)
            and "stream_options" in recorded.json
        ):
            message = "Unrecognized request argument supplied: stream_options"
            raise _Reject(400, message, param="stream_options", shape="openai")
        return None

    async def _openai_chat(self, request: web.Request) -> web.StreamResponse:
        body = self._authorized_body(request)
        validate_openai_chat(body, model_required=True)
        return await self._chat_completion(request, body, body["model"])

    async def _azure_chat(self, request: web.Request) -> web.StreamResponse:
        self._require_api_version(request)
        body = self._authorized_body(request)
        validate_openai_chat(body, model_required=False)
        return await self._chat_completion(
            request, body, body.get("model") or request.match_info["deployment"]
        )

    async def _chat_completion(
        self, request: web.Request, body: dict[str, Any], model: str
    ) -> web.StreamResponse:
        answer = _formatted(openai_answer(self.name, body), chat_format(body.get("response_format")))
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, openai_chunks(answer, model, include_usage=include_usage))
        return await self._reply(request, openai_completion(answer, model))

    async def _openai_embeddings(self, request: web.Request) -> web.StreamResponse:
        body = self._authorized_body(request)
        validate_embeddings(body, model_required=True)
        return await self._reply(request, openai_embeddings(body, body["model"]))

    async def _azure_embeddings(self, request: web.Request) -> web.StreamResponse:
        self._require_api_version(request)
        body = self._authorized_body(request)
        validate_embeddings(body, model_required=False)
        model = body.get("model") or request.match_info["deployment"]
        return await self._reply(request, openai_embeddings(body, model))

    async def _models(self, request: web.Request) -> web.StreamResponse:
        recorded = request[EXCHANGE].recorded
        if request[EXCHANGE].provider == "anthropic":
            check_anthropic_headers(recorded)
            return await self._reply(request, anthropic_models(self.models))
        if recorded.credential is None:
            raise _Reject(401, "You didn't provide an API key.")
        return await self._reply(request, openai_models(self.models))

    async def _anthropic_messages(self, request: web.Request) -> web.StreamResponse:
        recorded = request[EXCHANGE].recorded
        check_anthropic_headers(recorded)
        body = require_object(recorded)
        validate_anthropic(body)
        answer = anthropic_answer(self.name, body)
        message_id = new_id("msg_")
        if body.get("stream"):
            return await self._stream(request, anthropic_events(answer, body["model"], message_id))
        return await self._reply(request, anthropic_message(answer, body["model"], message_id))

    async def _anthropic_count_tokens(self, request: web.Request) -> web.StreamResponse:
        recorded = request[EXCHANGE].recorded
        check_anthropic_headers(recorded)
        body = require_object(recorded)
        validate_anthropic_count(body)
        return await self._reply(request, {"input_tokens": anthropic_input_tokens(body)})

    # The Responses API: it answers what the chat endpoint answers to the same conversation. Stored
    # responses are kept per API key: the stand-in takes each key for a project of its own, and OpenAI
    # finds no response of another project (a 404, not a 403).

    async def _create_response(self, request: web.Request) -> web.StreamResponse:
        body = self._authorized_body(request)
        validate_openai_responses(body)
        credential = request[EXCHANGE].recorded.credential
        earlier: list[dict[str, Any]] = []
        if previous := body.get("previous_response_id"):
            earlier = self._stored_response(credential, previous, as_previous=True).items
        conversation = earlier + responses_input_items(body["input"])
        check_tool_outputs(conversation)
        answer = responses_answer(self.name, body, conversation)
        response = openai_response(answer, body, responses_output(answer))
        if body.get("store", True):
            with self._lock:
                stored = StoredResponse(response, conversation + response["output"])
                self._responses[(credential, response["id"])] = stored
        if body.get("stream"):
            return await self._stream(request, responses_events(response))
        return await self._reply(request, response)

    async def _retrieve_response(self, request: web.Request) -> web.StreamResponse:
        stored = self._stored_response(self._credential(request), request.match_info["response_id"])
        return await self._reply(request, stored.response)

    async def _delete_response(self, request: web.Request) -> web.StreamResponse:
        credential, response_id = self._credential(request), request.match_info["response_id"]
        self._stored_response(credential, response_id)
        with self._lock:
            self._responses.pop((credential, response_id), None)
        return await self._reply(request, {"id": response_id, "object": "response", "deleted": True})

    async def _cancel_response(self, request: web.Request) -> web.StreamResponse:
        self._stored_response(self._credential(request), request.match_info["response_id"])
        raise _Reject(400, "Only background responses can be cancelled.")  # none is: background is refused

    def _stored_response(
        self, credential: str | None, response_id: str, *, as_previous: bool = False
    ) -> StoredResponse:
        with self._lock:
            stored = self._responses.get((credential, response_id))
        if stored is not None:
            return stored
        # Azure answers these from the model service, in OpenAI's shape (not its gateway's).
        if as_previous:
            raise _Reject(
                404,
                f"Previous response with id '{response_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
                shape="openai",
            )
        raise _Reject(404, f"Response with id '{response_id}' not found.", shape="openai")

    def _credential(self, request: web.Request) -> str:
        credential = request[EXCHANGE].recorded.credential
        if credential is None:
            raise _Reject(401, "You didn't provide an API key.")
        return credential

    def _authorized_body(self, request: web.Request) -> dict[str, Any]:
        self._credential(request)
        return require_object(request[EXCHANGE].recorded)

    @staticmethod
    def _require_api_version(request: web.Request) -> None:
        if "api-version" not in request.query:
            raise _Reject(404, "Resource not found")

    def _versioned(self, handler: Handler) -> Handler:
        """Azure's paths before its v1 API, which are not found without an api-version."""

        async def versioned(request: web.Request) -> web.StreamResponse:
            self._require_api_version(request)
            return await handler(request)

        return versioned

    # Sending: where "slow" and "cut_stream" act

    async def _reply(self, request: web.Request, payload: dict[str, Any]) -> web.StreamResponse:
        rule = request[EXCHANGE].rule
        if rule.mode == "slow" and await self._pause(rule.option("delay", 1.0)):
            return self._drop(request)  # the server is stopping
        body = json.dumps(payload).encode()
        # As a provider's CDN does: a cookie on every answer, which a client is meant to send back.
        headers = request_id_header(request[EXCHANGE].provider) | {
            "set-cookie": f"__cf_bm={uuid.uuid4().hex}; Path=/; HttpOnly"
        }
        if rule.mode == "cut_stream":
            return await self._send_half(request, body, headers)
        if rule.mode == "stall":
            return await self._send_half(request, body, headers, stall=rule.option("seconds", 3600))
        return web.Response(body=body, content_type="application/json", headers=headers)

    async def _send_half(
        self, request: web.Request, body: bytes, headers: dict[str, str], *, stall: float = 0
    ) -> web.StreamResponse:
        """A non-streaming response cut short: the full Content-Length, half the body (after ``stall``
        seconds of silence, if given)."""
        response = web.StreamResponse(headers=headers)
        response.content_type = "application/json"
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body[: len(body) // 2])
        await request.writer.drain()
        if stall:
            await self._pause(stall)
        self._abort(request)
        return response

    async def _stream(self, request: web.Request, events: list[Sse]) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"cache-control": "no-cache", **request_id_header(request[EXCHANGE].provider)}
        )
        response.content_type = "text/event-stream"
        response.charset = "utf-8"
        await response.prepare(request)
        try:
            await self._write_events(request, response, events)
        except ConnectionResetError:  # ClientConnectionResetError too: the client went away mid-write
            self._count_disconnect_unless_stopping()
        except asyncio.CancelledError:  # the client went away while we waited (handler_cancellation)
            self._count_disconnect_unless_stopping()
            raise
        return response

    async def _write_events(
        self, request: web.Request, response: web.StreamResponse, events: list[Sse]
    ) -> None:
        rule = request[EXCHANGE].rule
        delay = rule.option("delay", 1.0) if rule.mode == "slow" else 0.0
        cut_after = self._cut_point(rule, events)
        last_content = max((i for i, e in enumerate(events) if e.content), default=-1)
        sent = 0
        for index, event in enumerate(events):
            if rule.mode == "error_event" and sent >= int(rule.options.get("after", 2)) and event.content:
                await response.write(self._error_event(request, rule, sequence_number=index).encode())
                return  # a provider's mid-stream failure: an error event, then the end
            if cut_after is not None and sent >= cut_after and (event.content or index > last_content):
                self._abort(request)  # no [DONE], no message_stop: the connection just dies
                return
            if rule.mode == "stall" and sent >= int(rule.options.get("after", 1)) and event.content:
                # The connection stays open and silent: a provider stuck in the middle of an answer.
                await self._pause(rule.option("seconds", 3600))
                self._abort(request)
                return
            if index and delay and await self._pause(delay):
                self._abort(request)  # the server is stopping
                return
            await response.write(event.encode())
            await request.writer.drain()  # each event leaves on its own, as a provider streams it
            sent += event.content

    @staticmethod
    def _error_event(request: web.Request, rule: _Rule, *, sequence_number: int) -> Sse:
        provider = request[EXCHANGE].provider
        message = rule.options.get("message", "The server had an error while processing your request.")
        if request.path.endswith("/responses"):  # a Responses stream: an event of its own, numbered
            data = {"type": "error", "code": "server_error", "message": message, "param": None}
            return Sse(data | {"sequence_number": sequence_number}, event="error")
        body = error_body(provider, 529 if provider == "anthropic" else 500, message)
        return Sse(body, event="error" if provider == "anthropic" else None)

    @staticmethod
    def _cut_point(rule: _Rule, events: list[Sse]) -> int | None:
        if rule.mode != "cut_stream":
            return None
        return min(int(rule.options.get("after", 2)), sum(e.content for e in events))

    def _count_disconnect_unless_stopping(self) -> None:
        if self._stopping is not None and not self._stopping.is_set():
            self._count_disconnect()

    async def _pause(self, seconds: float) -> bool:
        """Sleeps ``seconds``, waking early if the server stops; True if it is stopping."""
        assert self._stopping is not None
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True

    @staticmethod
    def _drop(request: web.Request) -> web.Response:
        """Closes the connection without a response; aiohttp's attempt to send this one fails quietly."""
        if request.transport is not None:
            request.transport.close()
        return web.Response()

    @staticmethod
    def _reset(request: web.Request) -> web.Response:
        """Resets the connection (a TCP RST, as a crashed or overloaded balancer sends) without a response."""
        transport = request.transport
        if transport is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        return web.Response()

    @staticmethod
    def _abort(request: web.Request) -> None:
        if request.transport is not None:
            request.transport.abort()


def _as_is(handler: Handler) -> Handler:
    return handler


@pytest.fixture
def upstream() -> Iterator[UpstreamServer]:
    """A started stand-in provider named "upstream", stopped after the test."""
    with UpstreamServer() as server:
        yield server


@pytest.fixture
def make_upstream() -> Iterator[Callable[..., UpstreamServer]]:
    """Starts more stand-ins (say a primary and a fallback, by name); all are stopped after the test."""
    servers: list[UpstreamServer] = []

    def make(name: str = "upstream", **kwargs: Any) -> UpstreamServer:
        server = UpstreamServer(name, **kwargs).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()
