"""A cached answer, its storage format, and the conversions between a stored answer and a stream.

``CachedAnswer.body`` is the JSON the client got (a ``chat.completion`` or an embeddings ``list``),
byte for byte. A streamed request is served from it by ``replay_stream``; a streamed miss is stored
by assembling its frames back into that body with ``StreamAssembler``.
"""

import json
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

FORMAT_VERSION = 1
_HEADER_LENGTH = struct.Struct(">BI")  # version, length of the JSON header; the body follows it


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    body: bytes
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    # What the request that filled the entry cost: each hit saves that much.
    cost_usd: Decimal
    created_at: datetime

    def dumps(self) -> bytes:
        """Versioned bytes: a JSON header with the metadata, then the body as it is (no pickle, so
        a value read back from Redis or the database can never run code)."""
        header = json.dumps(
            {
                "provider": self.provider,
                "model": self.model,
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "cached_input_tokens": self.cached_input_tokens,
                "cost_usd": str(self.cost_usd),
                "created_at": self.created_at.astimezone(UTC).isoformat(),
            },
            separators=(",", ":"),
        ).encode()
        return _HEADER_LENGTH.pack(FORMAT_VERSION, len(header)) + header + self.body

    @classmethod
    def loads(cls, data: bytes) -> "CachedAnswer":
        """Raises ``ValueError`` for anything that is not a complete answer of this version."""
        if len(data) < _HEADER_LENGTH.size:
            raise ValueError("Truncated cache entry.")
        version, length = _HEADER_LENGTH.unpack_from(data)
        if version != FORMAT_VERSION:
            raise ValueError(f"Unknown cache entry version {version}.")
        start = _HEADER_LENGTH.size
        if start + length > len(data):
            raise ValueError("Truncated cache entry.")
        try:
            header = json.loads(data[start : start + length])
            answer = cls(
                body=bytes(data[start + length :]),
                provider=str(header["provider"]),
                model=str(header["model"]),
                input_tokens=int(header["input_tokens"]),
                output_tokens=int(header["output_tokens"]),
                cached_input_tokens=int(header["cached_input_tokens"]),
                cost_usd=Decimal(header["cost_usd"]),
                created_at=datetime.fromisoformat(header["created_at"]).astimezone(UTC),
            )
        except (KeyError, TypeError, InvalidOperation, UnicodeDecodeError) as error:
            raise ValueError(f"Malformed cache entry: {type(error).__name__}.") from None
        return answer


# --- Replay ------------------------------------------------------------------------------------

_PIECES = 4  # content deltas per message: a stream, without a frame per token


def _pieces(text: str) -> list[str]:
    if not text:
        return []
    size = -(-len(text) // _PIECES)
    return [text[start : start + size] for start in range(0, len(text), size)]


def _frame(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def replay_stream(answer: CachedAnswer, *, include_usage: bool) -> list[bytes]:
    """The SSE frames of a ``chat.completion.chunk`` stream that assembles into ``answer``'s
    message, choice by choice; without the closing ``data: [DONE]`` (the caller adds it)."""
    completion = json.loads(answer.body)
    common = {
        "id": completion.get("id", ""),
        "object": "chat.completion.chunk",
        "created": completion.get("created", 0),
        "model": completion.get("model", answer.model),
    }
    if "system_fingerprint" in completion:
        common["system_fingerprint"] = completion["system_fingerprint"]
    if "service_tier" in completion:
        common["service_tier"] = completion["service_tier"]

    def chunk(index: int, delta: dict, finish_reason=None, logprobs=None) -> bytes:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        return _frame({**common, "choices": [choice]})

    frames: list[bytes] = []
    for choice in completion.get("choices") or ():
        index = choice.get("index", 0)
        message = choice.get("message") or {}
        logprobs = choice.get("logprobs")
        # As OpenAI streams it: an answer without text (only tool calls) opens with content null.
        opening_content = "" if isinstance(message.get("content"), str) else None
        frames.append(chunk(index, {"role": message.get("role") or "assistant", "content": opening_content}))
        for position, piece in enumerate(_pieces(message.get("content") or "")):
            # Log probabilities travel whole with the first piece: the SDK appends each chunk's list.
            frames.append(chunk(index, {"content": piece}, logprobs=logprobs if position == 0 else None))
            if position == 0:
                logprobs = None
        for piece in _pieces(message.get("refusal") or ""):
            frames.append(chunk(index, {"refusal": piece}))
        for position, call in enumerate(message.get("tool_calls") or ()):
            function = call.get("function") or {}
            opening = {"index": position, "id": call.get("id"), "type": call.get("type", "function")}
            opening["function"] = {"name": function.get("name", ""), "arguments": ""}
            frames.append(chunk(index, {"tool_calls": [opening]}))
            for piece in _pieces(function.get("arguments") or ""):
                frames.append(
                    chunk(index, {"tool_calls": [{"index": position, "function": {"arguments": piece}}]})
                )
        if message.get("function_call"):
            frames.append(chunk(index, {"function_call": message["function_call"]}))
        frames.append(
            chunk(index, {}, finish_reason=choice.get("finish_reason") or "stop", logprobs=logprobs)
        )
    if include_usage and completion.get("usage") is not None:
        frames.append(_frame({**common, "choices": [], "usage": completion["usage"]}))
    return frames


# --- Assembly ----------------------------------------------------------------------------------


class _Choice:
    __slots__ = ("content", "finish_reason", "function_call", "logprobs", "refusal", "role", "tool_calls")

    def __init__(self) -> None:
        self.role = "assistant"
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.tool_calls: dict[int, dict] = {}
        self.function_call: dict | None = None
        self.logprobs: dict | None = None
        self.finish_reason: str | None = None

    def add(self, choice: dict) -> None:
        delta = choice.get("delta") or {}
        if delta.get("role"):
            self.role = delta["role"]
        if delta.get("content"):
            self.content.append(delta["content"])
        if delta.get("refusal"):
            self.refusal.append(delta["refusal"])
        for call in delta.get("tool_calls") or ():
            held = self.tool_calls.setdefault(
                call.get("index", 0), {"id": None, "type": "function", "name": "", "arguments": []}
            )
            if call.get("id"):
                held["id"] = call["id"]
            if call.get("type"):
                held["type"] = call["type"]
            function = call.get("function") or {}
            if function.get("name"):
                held["name"] += function["name"]
            if function.get("arguments"):
                held["arguments"].append(function["arguments"])
        if delta.get("function_call"):
            held = self.function_call = self.function_call or {"name": "", "arguments": ""}
            held["name"] += delta["function_call"].get("name") or ""
            held["arguments"] += delta["function_call"].get("arguments") or ""
        if choice.get("logprobs"):
            if self.logprobs is None:
                self.logprobs = {}
            for field, items in choice["logprobs"].items():
                if isinstance(items, list):
                    self.logprobs.setdefault(field, []).extend(items)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def message(self) -> dict:
        message: dict = {
            "role": self.role,
            "content": "".join(self.content)
            if self.content or not (self.tool_calls or self.refusal or self.function_call)
            else None,
            "refusal": "".join(self.refusal) if self.refusal else None,
        }
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": call["type"],
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self.tool_calls.items())
            ]
        if self.function_call:
            message["function_call"] = self.function_call
        return message


class StreamAssembler:
    """Fed the bytes of a live ``chat.completion.chunk`` stream, split anywhere, gives back the
    equivalent ``chat.completion`` body, or None when the stream was cut short (a choice without
    its finish_reason), carried an error, was not a chunk stream or grew past ``max_bytes``."""

    def __init__(self, *, max_bytes: int | None = None) -> None:
        if max_bytes is None:
            from django.conf import settings

            max_bytes = settings.GATEWAY_CACHE_MAX_ENTRY_BYTES
        self._max_bytes = max_bytes
        self._fed = 0
        self._buffer = b""
        self._failed = False
        self._done = False
        self._head: dict = {}
        self._choices: dict[int, _Choice] = {}
        self._usage: dict | None = None

    def feed(self, data: bytes) -> None:
        if self._failed:
            return
        self._fed += len(data)
        if self._fed > self._max_bytes * 2:  # the frames carry about twice the body's bytes
            self._fail()
            return
        buffer = self._buffer + data
        if b"\r" in buffer:  # servers may end lines with \r\n; a \r at the very end waits for its \n
            held = b"\r" if buffer.endswith(b"\r") else b""
            buffer = buffer[: len(buffer) - len(held)].replace(b"\r\n", b"\n") + held
        start = 0
        while (end := buffer.find(b"\n\n", start)) >= 0:  # an event ends with a blank line
            self._event(buffer[start:end])
            if self._failed:
                return
            start = end + 2
        self._buffer = buffer[start:]

    def _fail(self) -> None:
        self._failed = True
        self._buffer = b""
        self._choices.clear()

    def _event(self, event: bytes) -> None:
        data_lines = []
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                data_lines.append(line[5:].removeprefix(b" "))
            elif line.startswith(b"event:") and line[6:].strip() == b"error":
                self._fail()
                return
        if not data_lines:
            return  # a comment (": x-gateway-cost-usd=...") or a keep-alive
        data = b"\n".join(data_lines)
        if data.strip() == b"[DONE]":
            self._done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            self._fail()
            return
        if not isinstance(chunk, dict) or "error" in chunk:
            self._fail()
            return
        for field in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if chunk.get(field) is not None:
                self._head.setdefault(field, chunk[field])
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        try:
            for choice in chunk.get("choices") or ():
                self._choices.setdefault(int(choice.get("index", 0)), _Choice()).add(choice)
        except (AttributeError, TypeError, ValueError):
            self._fail()

    def result(self) -> bytes | None:
        if self._failed or not self._choices or self._buffer.strip():
            return None
        if any(choice.finish_reason is None for choice in self._choices.values()):
            return None
        completion = {
            "id": self._head.get("id", ""),
            "object": "chat.completion",
            "created": self._head.get("created", 0),
            "model": self._head.get("model", ""),
            "choices": [
                {
                    "index": index,
                    "message": choice.message(),
                    "logprobs": choice.logprobs,
                    "finish_reason": choice.finish_reason,
                }
                for index, choice in sorted(self._choices.items())
            ],
        }
        if self._usage is not None:
            completion["usage"] = self._usage
        for field in ("system_fingerprint", "service_tier"):
            if field in self._head:
                completion[field] = self._head[field]
        return json.dumps(completion, separators=(",", ":"), ensure_ascii=False).encode()
