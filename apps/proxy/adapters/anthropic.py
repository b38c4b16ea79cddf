"""Anthropic's Messages API behind OpenAI's chat completions.

Unlike the OpenAI adapters, nothing is forwarded as the client sent it. The request is rebuilt field
by field, because Anthropic rejects top-level fields it does not know: an OpenAI field with no
Anthropic equivalent (seed, logprobs, presence_penalty ...) is dropped, one the gateway cannot honour
at all (n > 1) is refused, and ``response_format`` is answered through a forced tool whose input is
the answer (``STRUCTURED_OUTPUT_TOOL``), given back as the text. Answers and streams are rewritten
into OpenAI's ``chat.completion`` and ``chat.completion.chunk`` shapes, usage included.
"""

import json
import re
import time
from typing import Any, cast

from apps.catalog.pricing import Usage
from apps.core.errors import InvalidRequest
from apps.providers.protocols import ANTHROPIC_VERSION

from ..scrubbing import ERROR_FIELD_LIMIT, scrub_error
from .base import (
    Adapter,
    Completion,
    StreamTranslator,
    Target,
    UpstreamProtocolError,
    UpstreamRequest,
    dumps,
    loads_object,
    named_sse,
    sse,
)

# Anthropic requires max_tokens; OpenAI lets the client leave it out.
DEFAULT_MAX_TOKENS = 4096
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",  # a server tool paused a long turn; the client sees an ordinary stop
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
DATA_URL = re.compile(r"data:(?P<media_type>[^;,]+);base64,(?P<data>.*)", re.DOTALL)
EMPTY_SCHEMA = {"type": "object", "properties": {}}
# The tool a structured-output request is answered through (response_format has no Anthropic
# equivalent); a call of it is given back as the answer's text. A name no client tool is likely to take.
STRUCTURED_OUTPUT_TOOL = "gateway_structured_output"


# --- Requests: OpenAI's body, rebuilt as Anthropic's ---------------------------------------------


def anthropic_body(target: Target, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    n = body.get("n")
    if n is not None and n != 1:
        raise InvalidRequest(
            "Anthropic models return one choice per request; send n=1 or leave n out.",
            code="unsupported_parameter",
            param="n",
        )
    system, messages = _conversation(body.get("messages"))
    upstream: dict[str, Any] = {
        "model": target.model,
        "messages": messages,
        "max_tokens": _max_tokens(body),
    }
    if system:
        upstream["system"] = system
    if stream:
        upstream["stream"] = True
    if (temperature := _number(body, "temperature")) is not None:
        # OpenAI's range is 0..2, Anthropic's 0..1 (it rejects more).
        upstream["temperature"] = min(max(temperature, 0.0), 1.0)
    if (top_p := _number(body, "top_p")) is not None:
        upstream["top_p"] = top_p
    if stop := _stop_sequences(body.get("stop")):
        upstream["stop_sequences"] = stop
    tools = _tools(body.get("tools"))
    if tools:
        upstream["tools"] = tools
        if (choice := _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))) is not None:
            upstream["tool_choice"] = choice
    if (schema := _json_schema(body.get("response_format"))) is not None:
        if tools:
            raise InvalidRequest(
                "Anthropic models take structured output ('response_format') or tools, not both in one "
                "request through the gateway.",
                code="unsupported_parameter",
                param="response_format",
            )
        # Anthropic has no response format: the model is made to call one tool whose input is the
        # answer, and the answer is given back as that JSON (STRUCTURED_OUTPUT_TOOL).
        upstream["tools"] = [
            {
                "name": STRUCTURED_OUTPUT_TOOL,
                "description": "Give the answer as this JSON.",
                "input_schema": schema,
            }
        ]
        upstream["tool_choice"] = {"type": "tool", "name": STRUCTURED_OUTPUT_TOOL}
    # safety_identifier is OpenAI's successor to user; both name the end user.
    user = body.get("safety_identifier") or body.get("user")
    if isinstance(user, str) and user:
        upstream["metadata"] = {"user_id": user}
    return upstream


def _json_schema(response_format: Any) -> dict[str, Any] | None:
    """The schema a ``response_format`` asks the answer to follow (``json_object``: any object)."""
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise InvalidRequest(
            "'response_format.json_schema.schema' must be a JSON schema object.",
            code="invalid_value",
            param="response_format",
        )
    return schema


def _max_tokens(body: dict[str, Any]) -> Any:
    # max_completion_tokens supersedes the deprecated max_tokens at OpenAI; Anthropic checks the value.
    for field in ("max_completion_tokens", "max_tokens"):
        if body.get(field) is not None:
            return body[field]
    return DEFAULT_MAX_TOKENS


def _number(body: dict[str, Any], field: str) -> float | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"'{field}' must be a number.", code="invalid_type", param=field)
    return value


def _stop_sequences(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        return stop
    raise InvalidRequest("'stop' must be a string or a list of strings.", code="invalid_type", param="stop")


def _conversation(messages: Any) -> tuple[str, list[dict[str, Any]]]:
    """The system prompt and the alternating user/assistant turns Anthropic requires."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list.", code="invalid_type", param="messages")
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            # Anthropic has one top-level system prompt; OpenAI allows them anywhere.
            if text := _text(message.get("content"), f"{param}.content"):
                system.append(text)
            continue
        if role == "user":
            blocks = _blocks(message.get("content"), f"{param}.content")
        elif role == "assistant":
            blocks = _assistant_blocks(message, param)
        elif role == "tool":
            role, blocks = "user", [_tool_result(message, param)]
        else:
            raise InvalidRequest(
                f"'{param}.role' must be system, developer, user, assistant or tool.",
                code="invalid_value",
                param=f"{param}.role",
            )
        if not blocks:
            continue
        # Consecutive messages of one role (several tool results, say) become one turn.
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(system), turns


def _text(content: Any, param: str) -> str:
    """The text of a system or developer message: a string or text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = [part.get("text") if isinstance(part, dict) else None for part in content]
        if all(isinstance(text, str) for text in texts):
            return "\n".join(cast(list[str], texts))
    raise InvalidRequest(f"'{param}' must be a string or a list of text parts.", param=param)


def _blocks(content: Any, param: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        # Anthropic rejects empty text blocks.
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest(f"'{param}' must be a string or a list of content parts.", param=param)
    blocks = [_block(part, f"{param}[{j}]") for j, part in enumerate(content)]
    return [block for block in blocks if block is not None]


def _block(part: Any, param: str) -> dict[str, Any] | None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("text", "refusal"):  # refusal: an earlier assistant answer's, kept as its text
        text = part.get(kind)
        if not isinstance(text, str):
            raise InvalidRequest(f"'{param}.{kind}' must be a string.", param=f"{param}.{kind}")
        return {"type": "text", "text": text} if text else None
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str):
            raise InvalidRequest(f"'{param}.image_url.url' must be a string.", param=f"{param}.image_url")
        return {"type": "image", "source": _image_source(url, f"{param}.image_url")}
    if kind == "file":
        return _document(part.get("file"), f"{param}.file")
    raise InvalidRequest(
        f"Content parts of type {kind!r} are not supported by Anthropic models.",
        code="unsupported_value",
        param=param,
    )


def _image_source(url: str, param: str) -> dict[str, str]:
    if match := DATA_URL.fullmatch(url):
        return {"type": "base64", "media_type": match["media_type"], "data": match["data"]}
    if url.startswith(("https://", "http://")):
        return {"type": "url", "url": url}
    raise InvalidRequest(
        "An image must be an http(s) URL or a base64 data: URL.", code="invalid_value", param=param
    )


def _document(file: Any, param: str) -> dict[str, Any]:
    # OpenAI's inline file (file_data) maps to Anthropic's PDF document; uploaded file_ids live at
    # OpenAI and cannot be sent on.
    data = file.get("file_data") if isinstance(file, dict) else None
    match = DATA_URL.fullmatch(data) if isinstance(data, str) else None
    if match is None or match["media_type"] != "application/pdf":
        raise InvalidRequest(
            "Anthropic models accept files as base64 PDF data: URLs in 'file_data' only.",
            code="unsupported_value",
            param=param,
        )
    source = {"type": "base64", "media_type": "application/pdf", "data": match["data"]}
    return {"type": "document", "source": source}


def _assistant_blocks(message: dict[str, Any], param: str) -> list[dict[str, Any]]:
    blocks = _blocks(message.get("content"), f"{param}.content")
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise InvalidRequest(f"'{param}.tool_calls' must be a list.", param=f"{param}.tool_calls")
    blocks.extend(_tool_use(call, f"{param}.tool_calls[{j}]") for j, call in enumerate(calls))
    return blocks


def _tool_use(call: Any, param: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not call.get("id") or not function.get("name"):
        raise InvalidRequest(f"'{param}' must have an id and a function name.", param=param)
    arguments = function.get("arguments") or "{}"
    # Invalid arguments are refused rather than sent as {}: the model would be told it called the
    # tool with nothing, and the conversation would go on from a history that never happened.
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        raise InvalidRequest(
            f"'{param}.function.arguments' must be a JSON object: Anthropic models take tool input "
            "as an object.",
            code="invalid_value",
            param=f"{param}.function.arguments",
        )
    return {"type": "tool_use", "id": call["id"], "name": function["name"], "input": parsed}


def _tool_result(message: dict[str, Any], param: str) -> dict[str, Any]:
    tool_use_id = message.get("tool_call_id")
    if not isinstance(tool_use_id, str) or not tool_use_id:
        raise InvalidRequest(f"'{param}.tool_call_id' is required.", param=f"{param}.tool_call_id")
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id}
    if content := _blocks(message.get("content"), f"{param}.content"):
        result["content"] = content
    return result


def _tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be a list.", code="invalid_type", param="tools")
    translated = []
    for i, tool in enumerate(tools):
        is_function = isinstance(tool, dict) and tool.get("type", "function") == "function"
        function = tool.get("function") if is_function else None
        if not isinstance(function, dict):
            raise InvalidRequest(
                "Anthropic models take function tools only.", code="unsupported_value", param=f"tools[{i}]"
            )
        if not isinstance(function.get("name"), str):
            raise InvalidRequest("A function tool needs a name.", param=f"tools[{i}].function.name")
        definition = {"name": function["name"], "input_schema": function.get("parameters") or EMPTY_SCHEMA}
        if function.get("description"):
            definition["description"] = function["description"]
        translated.append(definition)
    return translated


def _tool_choice(choice: Any, parallel_tool_calls: Any) -> dict[str, Any] | None:
    translated: dict[str, Any] | None
    if choice is None:
        translated = {"type": "auto"} if parallel_tool_calls is False else None
    elif choice == "auto":
        translated = {"type": "auto"}
    elif choice == "none":
        return {"type": "none"}  # takes no disable_parallel_tool_use: no tool is called at all
    elif choice == "required":
        translated = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(name := _function_name(choice), str):
        translated = {"type": "tool", "name": name}
    else:
        raise InvalidRequest(
            "'tool_choice' must be auto, none, required or a named function.",
            code="invalid_value",
            param="tool_choice",
        )
    if translated is not None and parallel_tool_calls is False:
        translated["disable_parallel_tool_use"] = True
    return translated


def _function_name(choice: dict[str, Any]) -> Any:
    function = choice.get("function")
    return function.get("name") if isinstance(function, dict) else None


# --- Answers: Anthropic's message, as OpenAI's chat.completion -----------------------------------


def _is_structured_output(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "tool_use"
        and block.get("name") == STRUCTURED_OUTPUT_TOOL
    )


def usage_from_anthropic(counts: dict[str, Any]) -> Usage:
    # Anthropic's input_tokens leaves out the tokens read from or written to the cache; OpenAI's
    # prompt_tokens (and the price's input) include them.
    cache_read = _count(counts.get("cache_read_input_tokens"))
    cache_write = _count(counts.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=_count(counts.get("input_tokens")) + cache_read + cache_write,
        output_tokens=_count(counts.get("output_tokens")),
        cached_input_tokens=cache_read,
        cache_write_tokens=cache_write,  # priced at the cache-write rate (1.25 times the input)
    )


def openai_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
    }


def finish_reason(stop_reason: Any) -> str:
    return FINISH_REASONS.get(stop_reason, "stop")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _completion_body(message: dict[str, Any], model: str, usage: Usage) -> dict[str, Any]:
    content = message["content"]
    structured = [block for block in content if _is_structured_output(block)]
    if structured:  # the answer of a structured-output request: its JSON is the text
        content = [{"type": "text", "text": dumps(structured[0].get("input") or {}).decode()}]
        message = {**message, "stop_reason": "end_turn"}
    text = "".join(block.get("text") or "" for block in content if block.get("type") == "text")
    tool_calls = [
        {
            "id": block.get("id"),
            "type": "function",
            "function": {"name": block.get("name"), "arguments": dumps(block.get("input") or {}).decode()},
        }
        for block in content
        if block.get("type") == "tool_use"
    ]
    reply: dict[str, Any] = {
        "role": "assistant",
        # OpenAI's content is null when the answer is only tool calls.
        "content": text if text or not tool_calls else None,
        "refusal": None,
    }
    if tool_calls:
        reply["tool_calls"] = tool_calls
    return {
        "id": message.get("id") or "",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": reply,
                "logprobs": None,
                "finish_reason": finish_reason(message.get("stop_reason")),
            }
        ],
        "usage": openai_usage(usage),
    }


# --- Streams: Anthropic's events, as OpenAI's chunks ---------------------------------------------


class AnthropicStreamTranslator(StreamTranslator):
    """Rewrites Anthropic's message_start / content_block_* / message_delta / message_stop events."""

    def __init__(self, target: Target, *, client_wants_usage: bool) -> None:
        super().__init__(target, client_wants_usage=client_wants_usage)
        self._id = ""
        self._created = int(time.time())
        # Anthropic reports usage in message_start, then cumulative counts in message_delta.
        self._counts: dict[str, Any] = {}
        # Anthropic numbers content blocks (text and tool_use alike); OpenAI numbers tool calls.
        self._tool_calls: dict[int, int] = {}
        # The blocks of the structured-output tool: their input is the answer's text.
        self._structured: set[int] = set()
        self._opened = False

    def feed(self, event: str, data: str) -> list[bytes]:
        payload = _event_payload(data)
        kind = payload.get("type") or event
        if kind == "message_start":
            return self._message_start(payload)
        if kind == "content_block_start":
            return self._block_start(payload)
        if kind == "content_block_delta":
            return self._block_delta(payload)
        if kind == "message_delta":
            return self._message_delta(payload)
        if kind == "message_stop":
            self.finished = True
            if self.client_wants_usage and self.usage is not None:
                return [self._chunk(choices=[], usage=openai_usage(self.usage))]
            return []
        if kind == "error":
            return self._error(payload)
        # ping, content_block_stop, and event types Anthropic may add: nothing for the client.
        return []

    def _message_start(self, payload: dict[str, Any]) -> list[bytes]:
        message = _field(payload, "message", dict)
        self._id = message.get("id") or ""
        if isinstance(message.get("model"), str):
            self.model = message["model"]
        self._add_usage(message.get("usage"))
        return []

    def _block_start(self, payload: dict[str, Any]) -> list[bytes]:
        index = _field(payload, "index", int)
        block = _field(payload, "content_block", dict)
        frames = self._opening()
        if block.get("type") == "text":
            frames.extend(self._text(block.get("text") or ""))
        elif _is_structured_output(block):
            self._structured.add(index)  # its input is the answer: streamed as the text
        elif block.get("type") == "tool_use":
            self._tool_calls[index] = len(self._tool_calls)
            call = {
                "index": self._tool_calls[index],
                "id": block.get("id"),
                "type": "function",
                "function": {"name": block.get("name"), "arguments": ""},
            }
            frames.append(self._delta({"tool_calls": [call]}))
        # thinking and server tool blocks have no place in OpenAI's answer
        return frames

    def _opening(self) -> list[bytes]:
        """OpenAI's first chunk, with the role. It waits for the first content block rather than
        going out with message_start, so that an error event right after message_start (Anthropic's
        overloaded_error comes this way) finds nothing sent yet and the stream can be failed over."""
        if self._opened:
            return []
        self._opened = True
        return [self._delta({"role": "assistant", "content": ""})]

    def _block_delta(self, payload: dict[str, Any]) -> list[bytes]:
        index = _field(payload, "index", int)
        delta = _field(payload, "delta", dict)
        kind = delta.get("type")
        if kind == "text_delta":
            return self._text(delta.get("text") or "")
        if kind == "input_json_delta" and index in self._structured:
            return self._text(delta.get("partial_json") or "")
        if kind == "input_json_delta":
            if index not in self._tool_calls:
                raise UpstreamProtocolError("the upstream sent tool input for a block that is no tool call")
            fragment = delta.get("partial_json") or ""
            if not fragment:
                return []
            self.output_chars += len(fragment)
            call = {"index": self._tool_calls[index], "function": {"arguments": fragment}}
            return [self._delta({"tool_calls": [call]})]
        if kind == "thinking_delta":
            # Not shown to the client, but generated (and billed) all the same.
            self.output_chars += len(delta.get("thinking") or "")
        return []

    def _message_delta(self, payload: dict[str, Any]) -> list[bytes]:
        delta = _field(payload, "delta", dict)
        self._add_usage(payload.get("usage"))
        # A structured answer ends in the call that carried it: to the client, an ordinary stop.
        reason = "end_turn" if self._structured and not self._tool_calls else delta.get("stop_reason")
        finish = self._chunk(choices=[_choice({}, finish_reason(reason))])
        return [*self._opening(), finish]

    def _error(self, payload: dict[str, Any]) -> list[bytes]:
        self.error, kind = scrubbed_failure(payload, self.target.secret)
        return [sse({"error": {"message": self.error, "type": kind, "param": None, "code": None}})]

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            # message_delta's counts are cumulative, and null when it has nothing new to say.
            self._counts.update((name, count) for name, count in usage.items() if count is not None)
            self.usage = usage_from_anthropic(self._counts)

    def _text(self, text: str) -> list[bytes]:
        if not text:
            return []
        self.output_chars += len(text)
        return [self._delta({"content": text})]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return self._chunk(choices=[_choice(delta, None)])

    def _chunk(self, **fields: Any) -> bytes:
        return sse(
            {
                "id": self._id,
                "object": "chat.completion.chunk",
                "created": self._created,
                "model": self.model,
                **fields,
            }
        )


def _event_payload(data: str) -> dict[str, Any]:
    """One of Anthropic's events, parsed: an object, or the upstream broke its format."""
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise UpstreamProtocolError("the upstream sent an event that is not JSON") from error
    if not isinstance(payload, dict):
        raise UpstreamProtocolError("the upstream sent an event that is not a JSON object")
    return payload


def scrubbed_failure(payload: dict[str, Any], secret: str) -> tuple[str, str]:
    """An error event's message and type, each cut and scrubbed of the provider key once (the event
    may be megabytes long; apps/proxy/scrubbing.py); nothing else of it goes on."""
    error = _object(payload, "error")
    message = found if isinstance(found := error.get("message"), str) else "The upstream failed."
    kind = found if isinstance(found := error.get("type"), str) else "api_error"
    return scrub_error(message, secret), scrub_error(kind, secret, ERROR_FIELD_LIMIT)


def _choice(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def _field(payload: dict[str, Any], name: str, kind: type) -> Any:
    value = payload.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise UpstreamProtocolError(f"the upstream sent a {payload.get('type')} event without {name}")
    return value


# --- The Messages API, passed through ----------------------------------------------------------

_DELTA_TEXT = re.compile(r'"(?:text|thinking|partial_json)":\s*"((?:[^"\\]|\\.)*)"')


class MessagesStreamTranslator(StreamTranslator):
    """Anthropic's own events for a client of the Messages API: forwarded with their names, read for
    the usage (``message_start``, then ``message_delta``'s cumulative counts), the end
    (``message_stop``) and errors, which are rebuilt scrubbed."""

    def __init__(self, target: Target) -> None:
        super().__init__(target, client_wants_usage=True)
        self._counts: dict[str, Any] = {}
        # What comes before the first content block (message_start, pings), held back: an error
        # right after message_start (Anthropic's overloaded_error comes this way) then finds nothing
        # sent yet, and the request can still fail over.
        self._held: list[bytes] | None = []

    def feed(self, event: str, data: str) -> list[bytes]:
        frames = self._frames(event, data)
        if self._held is None:
            return frames
        if self.error is not None:
            return frames
        if event in ("content_block_start", "message_delta", "message_stop"):
            held, self._held = self._held, None
            return [*held, *frames]
        self._held.extend(frames)
        return []

    def _frames(self, event: str, data: str) -> list[bytes]:
        if event == "content_block_delta":
            # Generated text of every kind (billed when the stream is cut before its usage).
            if match := _DELTA_TEXT.search(data):
                self.output_chars += len(match.group(1))
            return [named_sse(event, data.encode())]
        if event in ("ping", "content_block_start", "content_block_stop"):
            return [named_sse(event, data.encode())]
        payload = _event_payload(data)
        kind = payload.get("type") or event
        if kind == "message_start":
            message = _object(payload, "message")
            if isinstance(message.get("model"), str):
                self.model = message["model"]
            self._add_usage(message.get("usage"))
        elif kind == "message_delta":
            self._add_usage(payload.get("usage"))
        elif kind == "message_stop":
            self.finished = True
        elif kind == "error":
            self.error, error_type = scrubbed_failure(payload, self.target.secret)
            rebuilt = {"message": self.error, "type": error_type}
            return [named_sse("error", dumps({"type": "error", "error": rebuilt}))]
        return [named_sse(str(kind), data.encode())]

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._counts.update((name, count) for name, count in usage.items() if count is not None)
            self.usage = usage_from_anthropic(self._counts)


# --- The adapter ----------------------------------------------------------------------------------


class AnthropicAdapter(Adapter):
    def chat_request(
        self, target: Target, body: dict[str, Any], *, stream: bool, client_wants_usage: bool
    ) -> UpstreamRequest:
        # client_wants_usage changes nothing here: Anthropic always reports a stream's usage.
        headers = {
            "x-api-key": target.secret,
            "anthropic-version": ANTHROPIC_VERSION,
            "content-type": "application/json",
        }
        return UpstreamRequest(
            url=f"{target.base_url}/v1/messages",
            headers=headers,
            body=dumps(anthropic_body(target, body, stream=stream)),
        )

    def chat_completion(self, target: Target, payload: bytes) -> Completion:
        message = loads_object(payload)
        content = message.get("content")
        if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
            raise UpstreamProtocolError("the upstream's answer has no content blocks")
        model = found if isinstance(found := message.get("model"), str) else target.model
        counts = found if isinstance(found := message.get("usage"), dict) else None
        usage = usage_from_anthropic(counts or {})
        body = _completion_body(message, model, usage)
        return Completion(body=dumps(body), usage=usage if counts is not None else None, model=model)

    def stream_translator(self, target: Target, *, client_wants_usage: bool) -> StreamTranslator:
        return AnthropicStreamTranslator(target, client_wants_usage=client_wants_usage)

    def _headers(self, target: Target, client: dict[str, str]) -> dict[str, str]:
        headers = {
            "x-api-key": target.secret,
            "anthropic-version": client.get("anthropic-version") or ANTHROPIC_VERSION,
            "content-type": "application/json",
        }
        if client.get("anthropic-beta"):
            headers["anthropic-beta"] = client["anthropic-beta"]
        return headers

    def messages_request(
        self, target: Target, body: dict[str, Any], headers: dict[str, str]
    ) -> UpstreamRequest:
        return self._passed_through(target, "/v1/messages", body, headers)

    def _passed_through(
        self, target: Target, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> UpstreamRequest:
        """The client's Messages request as it sent it, to the deployment's model."""
        return UpstreamRequest(
            url=f"{target.base_url}{path}",
            headers=self._headers(target, headers),
            body=dumps({**body, "model": target.model}),
        )

    def messages_answer(self, target: Target, payload: bytes) -> Completion:
        message = loads_object(payload)
        if not isinstance(message.get("content"), list):
            raise UpstreamProtocolError("the upstream's answer has no content blocks")
        model = found if isinstance(found := message.get("model"), str) else target.model
        counts = found if isinstance(found := message.get("usage"), dict) else None
        usage = usage_from_anthropic(counts) if counts is not None else None
        return Completion(body=payload, usage=usage, model=model)

    def messages_stream_translator(self, target: Target) -> StreamTranslator:
        return MessagesStreamTranslator(target)

    def count_tokens_request(
        self, target: Target, body: dict[str, Any], headers: dict[str, str]
    ) -> UpstreamRequest:
        return self._passed_through(target, "/v1/messages/count_tokens", body, headers)

    def error_message(self, status: int, payload: bytes) -> str:
        # Anthropic: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}.
        try:
            parsed = json.loads(payload)
        except (ValueError, RecursionError):
            parsed = None
        error = parsed.get("error") if isinstance(parsed, dict) else None
        if isinstance(error, dict) and not isinstance(error.get("message"), str) and error.get("type"):
            return f"The upstream answered HTTP {status} ({error['type']})."
        return super().error_message(status, payload)

    def supports_embeddings(self) -> bool:
        return False


def _object(mapping: dict[str, Any], name: str) -> dict[str, Any]:
    """``mapping[name]`` if it is an object, else an empty one."""
    value = mapping.get(name)
    return value if isinstance(value, dict) else {}
