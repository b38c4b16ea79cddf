"""Anthropic's Messages API over chat completions, for upstreams that do not speak it (docs/proxy.md,
"The Messages API"): the other way round from the Anthropic adapter, which serves chat completions
from Anthropic's Messages.

``chat_request`` rebuilds a Messages request as a chat request: the system prompt, text, image and
PDF blocks, tool use and tool results, tools and ``tool_choice``, ``stop_sequences``, ``max_tokens``,
``temperature``, ``top_p``, and thinking as a reasoning effort. What a chat upstream cannot do
(Anthropic's server tools, MCP servers, a code-execution container, files given by id or URL) is a
400 naming the field, never a silent drop; prompt-caching marks (``cache_control``) are hints and
pass unsent. ``message_from_chat`` turns the chat answer into a Message, and ``MessageEvents`` a
chat stream into the Messages events the Anthropic SDK reads (``message_start`` ...
``content_block_delta`` ... ``message_stop``).
"""

import json
from typing import Any

from apps.catalog.pricing import Usage
from apps.core.errors import InvalidRequest

from ..adapters.base import StreamTranslator, UpstreamProtocolError, dumps, named_sse
from .common import array, new_id, refuse, unanswered_call
from .streams import OverChat

# Fields that ask nothing of the upstream's answer, or only hint at how to serve it: never sent.
IGNORED_FIELDS = frozenset({"stream", "service_tier", "context_management", "cache_control"})
MAPPED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "tools",
        "tool_choice",
        "metadata",
        "thinking",
    }
)
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
# A thinking budget, as the reasoning effort of an OpenAI-style model: below 4,096 tokens low,
# below 16,384 medium, else high.
EFFORTS = ((4096, "low"), (16384, "medium"))


# --- Requests: a Messages request, as chat completions' ------------------------------------------


def chat_request(body: dict[str, Any], *, provider: str) -> dict[str, Any]:
    """The chat request asking ``provider``'s upstream what ``body`` (a Messages request) asks."""
    for name in body:
        if name not in MAPPED_FIELDS and name not in IGNORED_FIELDS:
            raise refuse(
                name,
                f"'{name}' cannot be sent to {provider} models: the gateway serves the Messages API for "
                "them through chat completions, which have no such field.",
            )
    chat: dict[str, Any] = {
        "model": body["model"],
        "messages": [*_system(body.get("system")), *_messages(body)],
    }
    if body.get("stream") is True:
        chat["stream"] = True
    # OpenAI's own models take max_completion_tokens (reasoning models refuse max_tokens); other
    # OpenAI-compatible servers know max_tokens.
    chat["max_tokens" if provider == "openai_compatible" else "max_completion_tokens"] = body["max_tokens"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("top_k") is not None:
        if provider != "openai_compatible":
            raise refuse("top_k", f"'top_k' cannot be sent to {provider} models, which have no such setting.")
        chat["top_k"] = body["top_k"]
    if stop := body.get("stop_sequences"):
        chat["stop"] = _strings(stop, "stop_sequences")
    if tools := body.get("tools"):
        chat["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(array(tools, "tools"))]
    if body.get("tool_choice") is not None:
        choice, parallel = _tool_choice(body["tool_choice"])
        if choice is not None:
            chat["tool_choice"] = choice
        if parallel is False and tools:
            chat["parallel_tool_calls"] = False
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    if (effort := _effort(body.get("thinking"))) is not None:
        chat["reasoning_effort"] = effort
    return chat


def _system(system: Any) -> list[dict[str, Any]]:
    if system is None or system == "":
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    texts = []
    for i, block in enumerate(array(system, "system")):
        if (
            not isinstance(block, dict)
            or block.get("type") != "text"
            or not isinstance(block.get("text"), str)
        ):
            raise refuse(f"system[{i}]", f"'system[{i}]' must be a text block.", "invalid_type")
        texts.append(block["text"])
    return [{"role": "system", "content": "\n\n".join(texts)}] if texts else []


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = _turns(body)
    if (call_id := unanswered_call(messages)) is not None:
        # As Anthropic answers it: each tool_use is answered by its tool_result in the next turn.
        raise refuse(
            "messages",
            f"tool_use ids were found without tool_result blocks immediately after: {call_id}.",
            "invalid_value",
        )
    return messages


def _turns(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i, message in enumerate(array(body.get("messages"), "messages")):
        param = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise refuse(f"{param}.role", f"'{param}.role' must be user or assistant.", "invalid_value")
        content = message.get("content")
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
            continue
        blocks = array(content, f"{param}.content")
        if role == "assistant":
            messages.append(_assistant(blocks, param))
        else:
            messages.extend(_user(blocks, param))
    return messages


def _assistant(blocks: list[Any], param: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        where = f"{param}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text(block, where))
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise refuse(where, f"'{where}' must have an id and a name.", "invalid_type")
            arguments = dumps(block.get("input") if block.get("input") is not None else {}).decode()
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": arguments},
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue  # the model's own reasoning of an earlier turn: no chat upstream reads it back
        else:
            raise _block_refused(kind, where)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return message


def _user(blocks: list[Any], param: str) -> list[dict[str, Any]]:
    """A user turn: its tool results first (chat completions wants them right after the calls), as
    tool messages, then what else it says as one user message."""
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        where = f"{param}.content[{j}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            results.append(_tool_result(block, where))
        elif kind == "text":
            parts.append({"type": "text", "text": _text(block, where)})
        elif kind == "image":
            parts.append(_image(block, where))
        elif kind == "document":
            parts.append(_document(block, where))
        else:
            raise _block_refused(kind, where)
    return [*results, {"role": "user", "content": parts}] if parts else results


def _text(block: dict[str, Any], where: str) -> str:
    if not isinstance(block.get("text"), str):
        raise refuse(f"{where}.text", f"'{where}.text' must be a string.", "invalid_type")
    return block["text"]


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = _object(block, "source")
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        url = f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise refuse(
            f"{where}.source",
            f"'{where}.source' must be a base64 image or an image URL: a file_id names a file stored at "
            "Anthropic, which this model's provider cannot read.",
        )
    return {"type": "image_url", "image_url": {"url": url}}


def _document(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = _object(block, "source")
    if source.get("type") == "text" and isinstance(source.get("data"), str):
        return {"type": "text", "text": source["data"]}
    if source.get("type") == "base64" and source.get("media_type") == "application/pdf":
        return {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{source.get('data')}"}}
    raise refuse(
        f"{where}.source",
        f"'{where}.source' must be a base64 PDF or plain text for this model's provider (a URL or a "
        "file_id names a document it cannot fetch).",
    )


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    tool_use_id = block.get("tool_use_id")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise refuse(f"{where}.tool_use_id", f"'{where}.tool_use_id' must be a string.", "invalid_type")
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        texts = []
        for k, part in enumerate(array(content, f"{where}.content")):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise refuse(
                    f"{where}.content[{k}]",
                    f"'{where}.content[{k}]': a tool result may hold text only for this model's provider "
                    "(chat completions' tool messages are text).",
                )
            texts.append(_text(part, f"{where}.content[{k}]"))
        text = "\n".join(texts)
    return {"role": "tool", "tool_call_id": tool_use_id, "content": text}


def _block_refused(kind: Any, where: str) -> InvalidRequest:
    return refuse(
        f"{where}.type",
        f"'{where}' is a {kind!r} block, which this model's provider cannot read (server tools' blocks "
        "exist only at Anthropic).",
    )


def _tool(tool: Any, param: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise refuse(param, f"'{param}' must be an object.", "invalid_type")
    if tool.get("type") not in (None, "custom"):
        raise refuse(
            f"{param}.type",
            f"'{param}' is Anthropic's {tool.get('type')!r} server tool, which this model's provider does "
            "not run: it takes client tools (a name and an input_schema) only.",
        )
    if not isinstance(tool.get("name"), str) or not tool["name"]:
        raise refuse(f"{param}.name", f"'{param}.name' must be a string.", "invalid_type")
    function: dict[str, Any] = {
        "name": tool["name"],
        "parameters": tool.get("input_schema") or {"type": "object"},
    }
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> tuple[Any, bool | None]:
    kind = choice.get("type") if isinstance(choice, dict) else None
    parallel = False if isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is True else None
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", None
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    raise refuse(
        "tool_choice", "'tool_choice.type' must be auto, any, tool (with a name) or none.", "invalid_value"
    )


def _effort(thinking: Any) -> str | None:
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return None
    budget = thinking.get("budget_tokens")
    budget = budget if isinstance(budget, int) and not isinstance(budget, bool) else 0
    return next((effort for bound, effort in EFFORTS if budget < bound), "high")


def _strings(value: Any, param: str) -> list[str]:
    items = array(value, param)
    if not all(isinstance(item, str) for item in items):
        raise refuse(param, f"'{param}' must be a list of strings.", "invalid_type")
    return items


# --- Answers: chat completions' answer, as a Message ---------------------------------------------


def message_usage(usage: Usage | None) -> dict[str, int]:
    """Anthropic's counts: its ``input_tokens`` leave out what was read from the cache."""
    if usage is None:
        return {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    return {
        "input_tokens": max(0, usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens),
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cached_input_tokens,
    }


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments as Anthropic's ``input`` (an object)."""
    try:
        parsed = json.loads(arguments or "{}")
    except (TypeError, ValueError, RecursionError) as error:
        raise UpstreamProtocolError("the upstream called a tool with arguments that are not JSON") from error
    if not isinstance(parsed, dict):
        raise UpstreamProtocolError("the upstream called a tool with arguments that are not an object")
    return parsed


def message_from_chat(
    chat: dict[str, Any], *, message_id: str, model: str, usage: Usage | None
) -> dict[str, Any]:
    """The Message whose answer is ``chat`` (a ``chat.completion``)."""
    choices = chat.get("choices") if isinstance(chat.get("choices"), list) else []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    reply = _object(choice, "message")
    content: list[dict[str, Any]] = []
    if isinstance(reply.get("content"), str) and reply["content"]:
        content.append({"type": "text", "text": reply["content"]})
    for call in reply.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            content.append(
                {
                    "type": "tool_use",
                    "id": str(call.get("id") or new_id("toolu")),
                    "name": str(function.get("name") or ""),
                    "input": tool_input(function.get("arguments")),
                }
            )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": chat.get("model") if isinstance(chat.get("model"), str) else model,
        "content": content,
        "stop_reason": STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn"),
        "stop_sequence": None,
        "usage": message_usage(usage),
    }


# --- Streams: chat completions' chunks, as Messages events ---------------------------------------


def _event(payload: dict[str, Any]) -> bytes:
    return named_sse(payload["type"], dumps(payload))


class MessageEvents:
    """Writes the Messages events of one streamed answer from its chat chunks (parsed): a content
    block per text run and per tool call, each closed before the next opens."""

    sequence = 0  # Anthropic's events are not numbered

    def __init__(self, *, message_id: str, model: str) -> None:
        self.message_id, self.model = message_id, model
        self.started = False
        self.finish_reason: Any = None
        self._block: dict[str, Any] | None = None  # the open block: its index, kind, chat tool index
        self._count = 0

    def _start(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": message_usage(None),
        }
        return [_event({"type": "message_start", "message": message})]

    def chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        frames = self._start()
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = _object(choice, "delta")
            if isinstance(delta.get("content"), str) and delta["content"]:
                frames += self._text(delta["content"])
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict) and isinstance(call.get("index", 0), int):
                    frames += self._call(call)
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
        return frames

    def _open(self, kind: str, block: dict[str, Any], tool_index: Any = None) -> list[bytes]:
        frames = self._close()
        self._block = {"index": self._count, "kind": kind, "tool": tool_index}
        self._count += 1
        frames.append(
            _event({"type": "content_block_start", "index": self._block["index"], "content_block": block})
        )
        return frames

    def _close(self) -> list[bytes]:
        block, self._block = self._block, None
        return [] if block is None else [_event({"type": "content_block_stop", "index": block["index"]})]

    def _text(self, text: str) -> list[bytes]:
        frames = (
            []
            if self._block is not None and self._block["kind"] == "text"
            else self._open("text", {"type": "text", "text": ""})
        )
        assert self._block is not None
        delta = {
            "type": "content_block_delta",
            "index": self._block["index"],
            "delta": {"type": "text_delta", "text": text},
        }
        return [*frames, _event(delta)]

    def _call(self, call: dict[str, Any]) -> list[bytes]:
        function = _object(call, "function")
        index = call.get("index", 0)
        frames: list[bytes] = []
        if self._block is None or self._block["kind"] != "tool_use" or self._block["tool"] != index:
            block = {
                "type": "tool_use",
                "id": str(call.get("id") or new_id("toolu")),
                "name": str(function.get("name") or ""),
                "input": {},
            }
            frames += self._open("tool_use", block, index)
        assert self._block is not None
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            frames.append(
                _event({"type": "content_block_delta", "index": self._block["index"], "delta": delta})
            )
        return frames

    def close(self, usage: Usage | None) -> list[bytes]:
        frames = [*self._start(), *self._close()]
        counts = message_usage(usage)
        delta = {"stop_reason": STOP_REASONS.get(str(self.finish_reason), "end_turn"), "stop_sequence": None}
        frames.append(_event({"type": "message_delta", "delta": delta, "usage": counts}))
        frames.append(_event({"type": "message_stop"}))
        return frames

    def error(self, message: str, code: str | None) -> list[bytes]:
        return [_event({"type": "error", "error": {"type": "api_error", "message": message}})]


def over_chat(inner: StreamTranslator, *, message_id: str, model: str) -> StreamTranslator:
    """The Messages events of an upstream's chat stream (``inner``: its adapter's chat chunks)."""
    return OverChat(inner, MessageEvents(message_id=message_id, model=model))


def _object(mapping: dict[str, Any], name: str) -> dict[str, Any]:
    """``mapping[name]`` if it is an object, else an empty one."""
    value = mapping.get(name)
    return value if isinstance(value, dict) else {}
