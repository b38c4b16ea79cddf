"""The one interface every upstream provider implements.

An adapter only translates: it builds the HTTP request for an upstream from an OpenAI-shaped body,
and turns the upstream's answer (JSON or server-sent events) back into OpenAI's shape with the usage
the upstream reported. It does no I/O; ``apps/proxy/upstream.py`` sends what it builds. Adding a
provider is one module with one ``Adapter`` subclass, registered in ``adapters/__init__.py``.
"""

import json
from dataclasses import dataclass
from typing import Any

import orjson

from apps.catalog.pricing import Usage


@dataclass(frozen=True, slots=True)
class Target:
    """Where one attempt goes: a provider key, as the proxy holds it in memory, and the model."""

    provider: str
    provider_key_id: str
    secret: str
    base_url: str  # in the provider SDK's convention, without a trailing slash
    model: str  # the upstream's model id (for Azure OpenAI, the deployment name)
    api_version: str = ""
    supports_stream_usage: bool = True
    # The upstream serves OpenAI's Responses API itself (else the proxy bridges it over chat).
    speaks_responses: bool = False
    # The upstream serves Anthropic's Messages API itself (else the proxy bridges it over chat).
    speaks_messages: bool = False


@dataclass(slots=True)
class UpstreamRequest:
    url: str
    headers: dict[str, str]
    body: bytes
    method: str = "POST"


@dataclass(slots=True)
class Completion:
    """A whole (non-streamed) answer, ready for the client."""

    body: bytes  # OpenAI-shaped JSON
    usage: Usage | None
    model: str  # the model the upstream says answered


class UpstreamProtocolError(Exception):
    """The upstream answered 2xx with something that is not its documented format."""


class StreamTranslator:
    """Turns one upstream stream into OpenAI ``chat.completion.chunk`` events.

    ``feed`` gets each server-sent event (its ``event:`` name, or "" when it has none, and its
    ``data``) and returns the SSE lines to send to the client, already framed (``data: ...\\n\\n``).
    The proxy itself writes the final cost comment and ``data: [DONE]``; translators never do.
    """

    def __init__(self, target: Target, *, client_wants_usage: bool) -> None:
        self.target = target
        self.client_wants_usage = client_wants_usage
        self.usage: Usage | None = None
        self.model: str = target.model
        # True once the upstream said the answer is complete ([DONE], message_stop).
        self.finished = False
        # Set when the upstream sent an error event mid-stream: its message, for the audit log.
        self.error: str | None = None
        # Characters of generated text seen so far, to estimate usage when the upstream reports none.
        self.output_chars = 0
        # Events numbered so far (OpenAI Responses' sequence_number); 0 for formats without.
        self.sequence = 0

    def feed(self, event: str, data: str) -> list[bytes]:
        raise NotImplementedError


class Adapter:
    """Subclasses implement the requests and answers of one provider's wire format."""

    # Whether a stream can report usage (asked for with stream_options at OpenAI-style upstreams).
    def chat_request(
        self, target: Target, body: dict[str, Any], *, stream: bool, client_wants_usage: bool
    ) -> UpstreamRequest:
        raise NotImplementedError

    def chat_completion(self, target: Target, payload: bytes) -> Completion:
        raise NotImplementedError

    def stream_translator(self, target: Target, *, client_wants_usage: bool) -> StreamTranslator:
        raise NotImplementedError

    def embeddings_request(self, target: Target, body: dict[str, Any]) -> UpstreamRequest:
        raise UpstreamProtocolError(f"{target.provider} does not serve embeddings")

    # OpenAI's Responses API, where the upstream serves it (``Target.speaks_responses``): the body
    # as the client sent it, the answer and its events passed through.
    def responses_request(self, target: Target, body: dict[str, Any]) -> UpstreamRequest:
        raise NotImplementedError

    def responses_answer(self, target: Target, payload: bytes) -> Completion:
        raise NotImplementedError

    def responses_stream_translator(self, target: Target) -> StreamTranslator:
        raise NotImplementedError

    def response_resource_request(self, target: Target, response_id: str, action: str) -> UpstreamRequest:
        """A stored Response at the upstream: ``retrieve`` (GET), ``delete`` or ``cancel``."""
        raise NotImplementedError

    def response_resource_answer(self, target: Target, payload: bytes) -> Completion:
        raise NotImplementedError

    # Anthropic's Messages API, where the upstream serves it (``Target.speaks_messages``): the body
    # as the client sent it, with its ``anthropic-version`` and ``anthropic-beta`` headers.
    def messages_request(
        self, target: Target, body: dict[str, Any], headers: dict[str, str]
    ) -> UpstreamRequest:
        raise NotImplementedError

    def messages_answer(self, target: Target, payload: bytes) -> Completion:
        raise NotImplementedError

    def messages_stream_translator(self, target: Target) -> StreamTranslator:
        raise NotImplementedError

    def count_tokens_request(
        self, target: Target, body: dict[str, Any], headers: dict[str, str]
    ) -> UpstreamRequest:
        raise NotImplementedError

    def embeddings_response(self, target: Target, payload: bytes) -> Completion:
        raise NotImplementedError

    def error_message(self, status: int, payload: bytes) -> str:
        """The upstream's own error message, for the client (4xx it caused) and the audit log."""
        try:
            error = json.loads(payload).get("error")
        except (ValueError, AttributeError, RecursionError):
            error = None
        # Not cut here: the caller scrubs the provider key before it cuts (scrubbing.scrub_error), so a
        # key that straddles the cut is masked whole.
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
        return f"The upstream answered HTTP {status}."

    def supports_embeddings(self) -> bool:
        return True


def dumps(payload: Any) -> bytes:
    """Compact JSON as UTF-8, with orjson: it writes a 20 MiB request body for the upstream in
    about 20 ms of the event loop, where ``json.dumps`` took 60-390 ms (docs/benchmarks.md, big
    bodies). What orjson refuses goes through ``json``, as before: nesting deeper than 254 levels,
    integers past 64 bits, keys that are not strings, and a string with a lone surrogate. Requests
    with one of those are refused when they are read (http.parse_json), but an upstream's answer may
    carry one (Python's parser lets ``"\\ud800"`` through): it is written with ASCII escapes, the
    lone surrogate kept as the ``\\ud800`` escape it came as, never a 500."""
    try:
        return orjson.dumps(payload)
    except TypeError:  # orjson.JSONEncodeError
        pass
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(payload, separators=(",", ":")).encode()


def loads_object(payload: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(payload)
    except (ValueError, RecursionError) as error:
        raise UpstreamProtocolError("the upstream answered with invalid JSON") from error
    if not isinstance(parsed, dict):
        raise UpstreamProtocolError("the upstream answered with JSON that is not an object")
    return parsed


def sse(payload: Any) -> bytes:
    return b"data: " + dumps(payload) + b"\n\n"


def named_sse(name: str, data: bytes) -> bytes:
    """A server-sent event with its name (``event:``), as OpenAI's Responses and Anthropic's
    Messages streams send each."""
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"
