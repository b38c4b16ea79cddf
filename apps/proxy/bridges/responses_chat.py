"""OpenAI's Responses API over chat completions, for upstreams that do not speak it (docs/proxy.md).

``chat_request`` rebuilds a Responses request as a chat request: ``instructions`` and ``input`` (a
string, or items: messages with text, image, audio and file parts, function calls and their outputs)
become messages; function tools, ``tool_choice``, ``max_output_tokens``, ``temperature``, ``top_p``
and ``text.format`` map across. What a chat upstream cannot do (built-in tools, stored prompts,
background runs, items that only OpenAI holds) is a 400 naming the field, never a silent drop.

``response_from_chat`` turns the chat answer into a Response (output items and usage), and
``ResponseEvents`` turns a chat stream, chunk by chunk, into the Responses events the OpenAI SDK's
stream helpers read (``response.created`` ... ``response.completed``, numbered by
``sequence_number``).
"""

import time
from typing import Any

from apps.catalog.pricing import Usage

from ..adapters.base import StreamTranslator, dumps
from .common import array, new_id, refuse, unanswered_call
from .streams import OverChat

# Fields that ask nothing of the upstream's answer, or that the gateway itself honours: never sent.
GATEWAY_FIELDS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "stream",
        "store",  # the gateway keeps the turns (apps/proxy/conversations.py)
        "previous_response_id",  # replayed by the gateway before the bridge
        "metadata",  # echoed in the answer
        "include",  # extra output the bridge has none of (encrypted reasoning, logprobs)
        "truncation",  # "disabled" is what a chat upstream does; "auto" is taken as the same
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "stream_options",
    }
)
# Fields that map onto a chat request's.
MAPPED_FIELDS = frozenset(
    {
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_output_tokens",
        "temperature",
        "top_p",
        "text",
        "reasoning",
        "user",
        "safety_identifier",
    }
)
# Input items that exist only at OpenAI (its tools' calls, its reasoning, its stored items).
_OPENAI_ONLY_ITEMS = {
    "reasoning": "reasoning items",
    "item_reference": "references to items stored at OpenAI",
    "file_search_call": "file search calls",
    "web_search_call": "web search calls",
    "computer_call": "computer use calls",
    "computer_call_output": "computer use outputs",
    "code_interpreter_call": "code interpreter calls",
    "image_generation_call": "image generation calls",
    "local_shell_call": "local shell calls",
    "local_shell_call_output": "local shell outputs",
    "mcp_call": "MCP calls",
    "mcp_list_tools": "MCP tool lists",
    "mcp_approval_request": "MCP approval requests",
    "mcp_approval_response": "MCP approval responses",
    "custom_tool_call": "custom tool calls",
    "custom_tool_call_output": "custom tool outputs",
}
MESSAGE_ROLES = ("user", "assistant", "system", "developer")


# --- Requests: a Responses request, as chat completions' ----------------------------------------


def chat_request(body: dict[str, Any], *, provider: str) -> dict[str, Any]:
    """The chat request that asks ``provider``'s upstream what ``body`` (a Responses request, with any
    earlier turns already in its ``input``) asks. Raises ``InvalidRequest`` naming the field for
    anything a chat upstream cannot do."""
    for name in body:
        if name not in GATEWAY_FIELDS and name not in MAPPED_FIELDS:
            raise refuse(
                name,
                f"'{name}' cannot be sent to {provider} models: the gateway serves the Responses API "
                "for them through chat completions, which have no such field.",
            )
    _refuse_what_the_provider_drops(body, provider)
    chat: dict[str, Any] = {"model": body["model"], "messages": messages_of(body)}
    if body.get("stream") is True:
        chat["stream"] = True
    tools = body.get("tools")
    if tools:
        chat["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(array(tools, "tools"))]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if body.get("parallel_tool_calls") is not None:
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if body.get("max_output_tokens") is not None:
        # max_tokens, not max_completion_tokens: every OpenAI-compatible server knows this one.
        chat["max_tokens"] = body["max_output_tokens"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if (response_format := _response_format(body.get("text"))) is not None:
        chat["response_format"] = response_format
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    user = body.get("safety_identifier") or body.get("user")
    if isinstance(user, str) and user:
        chat["user"] = user
    return chat


def _refuse_what_the_provider_drops(body: dict[str, Any], provider: str) -> None:
    """What maps onto a chat request but would not reach the model: Anthropic's adapter has no
    reasoning effort, and no chat upstream has OpenAI's verbosity or reasoning summaries. Refused
    rather than answered as if they had been honoured."""
    text = _of(body, "text", dict, {})
    reasoning = _of(body, "reasoning", dict, {})
    if text.get("verbosity") is not None:
        raise refuse("text.verbosity", f"'text.verbosity' cannot be sent to {provider} models.")
    if reasoning.get("summary") is not None:
        raise refuse(
            "reasoning.summary", f"{provider} models give no reasoning summaries through the gateway."
        )
    if provider != "anthropic":
        return
    if reasoning.get("effort") is not None:
        raise refuse(
            "reasoning.effort", "'reasoning.effort' is not served for Anthropic models through the gateway."
        )


def messages_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages of a Responses request's ``instructions`` and ``input``."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise refuse("instructions", "'instructions' must be a string.", "invalid_type")
        if instructions:
            messages.append({"role": "system", "content": instructions})
    source = body.get("input")
    if isinstance(source, str):
        messages.append({"role": "user", "content": source})
        return messages
    for i, item in enumerate(array(source, "input")):
        _add_item(messages, item, f"input[{i}]")
    _require_outputs(messages)
    return messages


def _require_outputs(messages: list[dict[str, Any]]) -> None:
    """Every function call answered by its output before the conversation goes on, as OpenAI
    requires."""
    if (call_id := unanswered_call(messages)) is not None:
        raise refuse("input", f"No tool output found for function call {call_id}.", "invalid_value")


def _add_item(messages: list[dict[str, Any]], item: Any, param: str) -> None:
    if not isinstance(item, dict):
        raise refuse(param, f"'{param}' must be an object.", "invalid_type")
    kind = item.get("type", "message")  # a message may leave its type out (EasyInputMessage)
    if not isinstance(kind, str):
        raise refuse(f"{param}.type", f"'{param}.type' must be a string.", "invalid_type")
    if kind == "message":
        messages.append(_message(item, param))
    elif kind == "function_call":
        _add_function_call(messages, item, param)
    elif kind == "function_call_output":
        messages.append(_function_output(item, param))
    elif kind in _OPENAI_ONLY_ITEMS:
        raise refuse(
            f"{param}.type",
            f"'{param}' is one of the {_OPENAI_ONLY_ITEMS[kind]} only OpenAI holds; "
            "this model's provider cannot read it.",
        )
    else:
        raise refuse(f"{param}.type", f"Unknown input item type {kind!r} in '{param}'.", "invalid_value")


def _message(item: dict[str, Any], param: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in MESSAGE_ROLES:
        raise refuse(
            f"{param}.role", f"'{param}.role' must be one of {', '.join(MESSAGE_ROLES)}.", "invalid_value"
        )
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    parts = [
        _part(part, role, f"{param}.content[{j}]")
        for j, part in enumerate(array(content, f"{param}.content"))
    ]
    if role == "assistant" or role in ("system", "developer"):
        # Earlier answers and instructions are text in chat completions (a refusal stays its text).
        return {
            "role": role,
            "content": "".join(part.get("text") or part.get("refusal") or "" for part in parts),
        }
    return {"role": role, "content": parts}


def _part(part: Any, role: str, param: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if not isinstance(kind, str):
        raise refuse(
            f"{param}.type", f"'{param}' must be a content part with a string 'type'.", "invalid_type"
        )
    if kind in ("input_text", "output_text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise refuse(f"{param}.text", f"'{param}.text' must be a string.", "invalid_type")
        return {"type": "text", "text": text}
    if kind == "refusal":
        refusal = part.get("refusal")
        return {"type": "refusal", "refusal": refusal if isinstance(refusal, str) else ""}
    if kind in ("input_image", "input_file", "input_audio") and role != "user":
        raise refuse(param, f"'{param}': only user messages may carry {kind} parts.", "invalid_value")
    if kind == "input_image":
        return _image(part, param)
    if kind == "input_file":
        return _file(part, param)
    if kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict) or not isinstance(audio.get("data"), str):
            raise refuse(
                f"{param}.input_audio", f"'{param}.input_audio' must have its base64 data.", "invalid_type"
            )
        return {"type": "input_audio", "input_audio": {"data": audio["data"], "format": audio.get("format")}}
    raise refuse(f"{param}.type", f"Unknown content part type {kind!r} in '{param}'.", "invalid_value")


def _image(part: dict[str, Any], param: str) -> dict[str, Any]:
    url = part.get("image_url")
    if part.get("file_id") is not None or not isinstance(url, str):
        raise refuse(
            f"{param}.image_url",
            f"'{param}' must give its image as 'image_url' (an http(s) or base64 data: URL): a file_id "
            "names a file stored at OpenAI, which this model's provider cannot read.",
        )
    image: dict[str, Any] = {"url": url}
    if part.get("detail") is not None:
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _file(part: dict[str, Any], param: str) -> dict[str, Any]:
    data = part.get("file_data")
    if not isinstance(data, str):
        raise refuse(
            f"{param}.file_data",
            f"'{param}' must give its file inline as 'file_data' (a base64 data: URL): a file_id or "
            "file_url names a file this model's provider cannot fetch.",
        )
    file: dict[str, Any] = {"file_data": data}
    if isinstance(part.get("filename"), str):
        file["filename"] = part["filename"]
    return {"type": "file", "file": file}


def _add_function_call(messages: list[dict[str, Any]], item: dict[str, Any], param: str) -> None:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    for field, value in (("call_id", call_id), ("name", name), ("arguments", arguments)):
        if not isinstance(value, str) or (field != "arguments" and not value):
            raise refuse(f"{param}.{field}", f"'{param}.{field}' must be a string.", "invalid_type")
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    last = messages[-1] if messages else None
    # Calls the model made in one turn are one assistant message in chat completions.
    if last is not None and last["role"] == "assistant" and "tool_call_id" not in last:
        last.setdefault("tool_calls", []).append(call)
        if last.get("content") == "":
            last["content"] = None
        return
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _function_output(item: dict[str, Any], param: str) -> dict[str, Any]:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise refuse(f"{param}.call_id", f"'{param}.call_id' must be a string.", "invalid_type")
    if isinstance(output, list):
        # A tool may answer with content parts; chat completions' tool message takes their text.
        texts = [part.get("text") if isinstance(part, dict) else None for part in output]
        if not all(isinstance(text, str) for text in texts):
            raise refuse(
                f"{param}.output",
                f"'{param}.output' may hold text parts only for this model's provider.",
            )
        output = "".join(texts)  # type: ignore[arg-type]
    if not isinstance(output, str):
        raise refuse(f"{param}.output", f"'{param}.output' must be a string.", "invalid_type")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _tool(tool: Any, param: str) -> dict[str, Any]:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise refuse(
            f"{param}.type",
            f"'{param}' is a {kind!r} tool, which only OpenAI runs: this model's provider takes "
            "function tools only.",
        )
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise refuse(f"{param}.name", f"'{param}.name' must be a string.", "invalid_type")
    function: dict[str, Any] = {"name": name}
    for field in ("description", "parameters", "strict"):
        if tool.get(field) is not None:
            function[field] = tool[field]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise refuse(
        "tool_choice",
        '\'tool_choice\' must be auto, none, required or a function ({"type": "function", "name": ...}) '
        "for this model's provider.",
    )


def _response_format(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema: dict[str, Any] = {"name": fmt.get("name") or "response", "schema": fmt.get("schema")}
        for field in ("description", "strict"):
            if fmt.get(field) is not None:
                schema[field] = fmt[field]
        return {"type": "json_schema", "json_schema": schema}
    raise refuse(
        "text.format.type", "'text.format.type' must be text, json_object or json_schema.", "invalid_value"
    )


def _of(mapping: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    """``mapping[name]`` if it is a ``kind`` (a bool is no int), else ``default``."""
    value = mapping.get(name)
    return value if isinstance(value, kind) and not isinstance(value, bool) else default


# --- Answers: chat completions' answer, as a Response --------------------------------------------


def response_usage(usage: Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_input_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def response_shell(
    request: dict[str, Any], *, response_id: str, model: str, created_at: int
) -> dict[str, Any]:
    """A Response without its output: what the request asked, echoed as OpenAI echoes it."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "metadata": request.get("metadata") or {},
        "model": model,
        "output": [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
        "store": request.get("store", True),
        "temperature": request.get("temperature", 1.0),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p", 1.0),
        "truncation": request.get("truncation", "disabled"),
        "usage": None,
        "user": request.get("user"),
    }


_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def finish(response: dict[str, Any], finish_reason: Any, usage: Usage | None) -> dict[str, Any]:
    """``response`` as done: its status from chat's finish reason, its usage."""
    reason = _INCOMPLETE.get(finish_reason) if isinstance(finish_reason, str) else None
    response["status"] = "incomplete" if reason else "completed"
    response["incomplete_details"] = {"reason": reason} if reason else None
    response["usage"] = response_usage(usage)
    return response


def message_item(
    item_id: str, text: str, *, refusal: str | None = None, status: str = "completed"
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    if refusal:
        content.append({"type": "refusal", "refusal": refusal})
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, *, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response_from_chat(
    chat: dict[str, Any], request: dict[str, Any], *, response_id: str, usage: Usage | None
) -> dict[str, Any]:
    """The Response for ``request`` whose answer is ``chat`` (a ``chat.completion``)."""
    choices = _of(chat, "choices", list, [{}]) or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = _of(choice, "message", dict, {})
    response = response_shell(
        request,
        response_id=response_id,
        model=_of(chat, "model", str, request["model"]),
        created_at=_of(chat, "created", int, int(time.time())),
    )
    output = response["output"]
    text = _of(message, "content", str, "")
    refusal = _of(message, "refusal", str, None)
    if text or refusal:
        output.append(message_item(new_id("msg"), text, refusal=refusal))
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            output.append(
                function_call_item(
                    new_id("fc"),
                    str(call.get("id") or new_id("call")),
                    str(function.get("name") or ""),
                    str(function.get("arguments") or ""),
                )
            )
    return finish(response, choice.get("finish_reason"), usage)


# --- Streams: chat completions' chunks, as Responses events --------------------------------------


def event(payload: dict[str, Any]) -> bytes:
    return b"event: " + payload["type"].encode() + b"\ndata: " + dumps(payload) + b"\n\n"


class ResponseEvents:
    """Writes the Responses events of one streamed answer from its chat chunks (parsed): ``chunk``
    per chunk, ``close`` when the upstream has finished, ``error`` if it failed. Items are opened as
    their first delta arrives and closed in order at the end (a text item when a tool call begins)."""

    def __init__(self, request: dict[str, Any], *, response_id: str, model: str) -> None:
        self.response = response_shell(
            request, response_id=response_id, model=model, created_at=int(time.time())
        )
        self.sequence = 0
        self.started = False
        self.finish_reason: Any = None
        self._text: dict[str, Any] | None = None  # the open message item: id, index, text
        self._calls: dict[int, dict[str, Any]] = {}  # chat's tool call index -> its open item
        self._order: list[dict[str, Any]] = []  # every item opened, in output order

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event(payload)

    def _start(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        snapshot = dict(self.response)
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        frames = self._start()
        if isinstance(chunk.get("model"), str):
            self.response["model"] = chunk["model"]
        for choice in _of(chunk, "choices", list, []):
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = _of(choice, "delta", dict, {})
            content = delta.get("content")
            if isinstance(content, str) and content:
                frames += self._text_delta(content)
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:  # the model declined: a message of a refusal part
                frames += self._text_delta(refusal, part="refusal")
            for call in _of(delta, "tool_calls", list, []):
                if isinstance(call, dict) and isinstance(call.get("index", 0), int):
                    frames += self._call_delta(call)
            if choice.get("finish_reason") is not None:
                self.finish_reason = choice["finish_reason"]
        return frames

    def _text_delta(self, content: str, *, part: str = "output_text") -> list[bytes]:
        frames: list[bytes] = []
        item = self._text
        if item is not None and item["part"] != part:
            frames += self._close_text(item)
            item = None
        if item is None:
            item = self._text = {
                "id": new_id("msg"),
                "index": len(self._order),
                "text": "",
                "kind": "message",
                "part": part,
            }
            self._order.append(item)
            frames.append(
                self._event(
                    "response.output_item.added",
                    output_index=item["index"],
                    item=message_item(item["id"], "", status="in_progress"),
                )
            )
            frames.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=item["index"],
                    content_index=0,
                    part=_part_of(part, ""),
                )
            )
        item["text"] += content
        ids = {"item_id": item["id"], "output_index": item["index"], "content_index": 0}
        if part == "refusal":
            frames.append(self._event("response.refusal.delta", **ids, delta=content))
        else:
            frames.append(self._event("response.output_text.delta", **ids, delta=content, logprobs=[]))
        return frames

    def _call_delta(self, call: dict[str, Any]) -> list[bytes]:
        frames: list[bytes] = []
        index = call.get("index", 0)
        function = _of(call, "function", dict, {})
        item = self._calls.get(index)
        if item is None:
            if self._text is not None:
                frames += self._close_text(self._text)  # the text is over: its tool calls follow
            item = {
                "id": new_id("fc"),
                "index": len(self._order),
                "call_id": str(call.get("id") or new_id("call")),
                "name": str(function.get("name") or ""),
                "arguments": "",
                "kind": "function_call",
            }
            self._calls[index] = item
            self._order.append(item)
            added = function_call_item(item["id"], item["call_id"], item["name"], "", status="in_progress")
            frames.append(self._event("response.output_item.added", output_index=item["index"], item=added))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item["arguments"] += arguments
            frames.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=item["index"],
                    delta=arguments,
                )
            )
        return frames

    def _close_text(self, item: dict[str, Any]) -> list[bytes]:
        if self._text is item:
            self._text = None
        if item.get("closed"):
            return []
        item["closed"] = True
        ids = {"item_id": item["id"], "output_index": item["index"], "content_index": 0}
        if item["part"] == "refusal":
            done = self._event("response.refusal.done", **ids, refusal=item["text"])
        else:
            done = self._event("response.output_text.done", **ids, text=item["text"], logprobs=[])
        return [
            done,
            self._event("response.content_part.done", **ids, part=_part_of(item["part"], item["text"])),
            self._event("response.output_item.done", output_index=item["index"], item=_message_of(item)),
        ]

    def _close_call(self, item: dict[str, Any]) -> list[bytes]:
        if item.get("closed"):
            return []
        item["closed"] = True
        done = function_call_item(item["id"], item["call_id"], item["name"], item["arguments"])
        return [
            self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=item["index"],
                name=item["name"],
                arguments=item["arguments"],
            ),
            self._event("response.output_item.done", output_index=item["index"], item=done),
        ]

    def output(self) -> list[dict[str, Any]]:
        """The items so far, as the finished Response lists them."""
        items = []
        for item in self._order:
            if item["kind"] == "message":
                items.append(_message_of(item))
            else:
                items.append(function_call_item(item["id"], item["call_id"], item["name"], item["arguments"]))
        return items

    def close(self, usage: Usage | None) -> list[bytes]:
        """The closing events once the upstream has finished: each open item done, then
        ``response.completed`` (``response.incomplete`` when the answer was cut by its token limit)."""
        frames = self._start()
        for item in self._order:
            frames += self._close_text(item) if item["kind"] == "message" else self._close_call(item)
        response = finish(self.response, self.finish_reason, usage)
        response["output"] = self.output()
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        frames.append(self._event(kind, response=response))
        return frames

    def error(self, message: str, code: str | None) -> list[bytes]:
        """The upstream failed mid-answer: OpenAI's ``error`` event, then ``response.failed``."""
        frames = self._start()
        frames.append(self._event("error", code=code, message=message, param=None))
        response = self.response
        response["status"] = "failed"
        # The Response's error code is one of OpenAI's few; the error event above has the gateway's.
        response["error"] = {"code": "server_error", "message": message}
        response["output"] = self.output()
        frames.append(self._event("response.failed", response=response))
        return frames


def _part_of(part: str, text: str) -> dict[str, Any]:
    if part == "refusal":
        return {"type": "refusal", "refusal": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_of(item: dict[str, Any]) -> dict[str, Any]:
    if item["part"] == "refusal":
        return message_item(item["id"], "", refusal=item["text"])
    return message_item(item["id"], item["text"])


def over_chat(inner: StreamTranslator, request: dict[str, Any], *, response_id: str) -> StreamTranslator:
    """The Responses events of an upstream's chat stream (``inner``: its adapter's chat chunks)."""
    return OverChat(inner, ResponseEvents(request, response_id=response_id, model=request["model"]))
