"""OpenAI, and every server that speaks its API (``openai_compatible``: vLLM, Ollama, Groq ...).

The request body goes upstream as the client sent it, unknown fields included; only ``model`` is
replaced by the deployment's upstream model, and a stream asks for its usage. Answers are passed
through byte for byte; they are parsed only for the usage that prices them.
"""

import json
import re
from typing import Any
from urllib.parse import quote

from apps.catalog.pricing import Usage

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

# The text of a chunk's delta, read without parsing the chunk (escapes count as their characters).
_CONTENT = re.compile(r'"delta":\{[^{}]*?"content":"((?:[^"\\]|\\.)*)"')


def usage_from_openai(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return Usage(
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        cached_input_tokens=_count(prompt_details.get("cached_tokens")),
        reasoning_tokens=_count(completion_details.get("reasoning_tokens")),
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


class OpenAIStreamTranslator(StreamTranslator):
    """OpenAI's chunks are already what the client wants: forward them, keep the usage."""

    def feed(self, event: str, data: str) -> list[bytes]:
        if data == "[DONE]":
            self.finished = True
            return []
        # Parse only what must be read: the usage chunk, an error, or content to count when the
        # upstream cannot report usage. Every other chunk is forwarded untouched.
        needs_parsing = '"usage":{' in data or '"error"' in data or not self.target.supports_stream_usage
        if not needs_parsing:
            self._count_content(data)
            return [b"data: " + data.encode() + b"\n\n"]
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError) as error:
            raise UpstreamProtocolError("the upstream sent an event that is not JSON") from error
        if not isinstance(chunk, dict):
            raise UpstreamProtocolError("the upstream sent an event that is not a JSON object")
        if "error" in chunk and "choices" not in chunk:
            return [sse({"error": self._error(chunk["error"])})]
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        usage = usage_from_openai(chunk.get("usage"))
        if usage is not None:
            self.usage = usage
            if not self.client_wants_usage:
                if not chunk.get("choices"):
                    return []  # the usage-only chunk the gateway asked for, not the client
                chunk.pop("usage", None)
                return [b"data: " + dumps(chunk) + b"\n\n"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                self.output_chars += len(delta["content"])
        return [b"data: " + data.encode() + b"\n\n"]

    def _error(self, error: Any) -> dict[str, Any]:
        """The upstream's error event, rebuilt in OpenAI's shape from its own fields, each cut short
        and scrubbed once (the event may be megabytes long; nothing else of it is forwarded)."""
        if not isinstance(error, dict):
            error = {"message": error}
        message = error.get("message")
        message = message if isinstance(message, str) else "The upstream failed."
        self.error = scrub_error(message, self.target.secret)
        rebuilt: dict[str, Any] = {"message": self.error}
        for name in ("type", "param", "code"):
            value = error.get(name)
            if isinstance(value, str):
                value = scrub_error(value, self.target.secret, ERROR_FIELD_LIMIT)
            rebuilt[name] = value if isinstance(value, str | int) and not isinstance(value, bool) else None
        return rebuilt

    def _count_content(self, data: str) -> None:
        """Text delivered so far, without parsing the chunk: if the stream is cut before its usage
        chunk, what was delivered is billed from this estimate."""
        match = _CONTENT.search(data)
        if match is not None:
            self.output_chars += len(match.group(1))


def usage_from_responses(usage: Any) -> Usage | None:
    """The usage of a Response (OpenAI's Responses API counts input and output tokens)."""
    if not isinstance(usage, dict):
        return None
    input_details = usage.get("input_tokens_details") or {}
    output_details = usage.get("output_tokens_details") or {}
    return Usage(
        input_tokens=_count(usage.get("input_tokens")),
        output_tokens=_count(usage.get("output_tokens")),
        cached_input_tokens=_count(input_details.get("cached_tokens")),
        reasoning_tokens=_count(output_details.get("reasoning_tokens")),
    )


# The events that end a Response stream, each carrying the whole Response (its usage included).
RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_SEQUENCE = re.compile(r'"sequence_number":(\d+)')
_TEXT_DELTA = re.compile(r'"delta":"((?:[^"\\]|\\.)*)"')


class ResponsesStreamTranslator(StreamTranslator):
    """OpenAI's Responses events are what the client wants: forwarded with their names, read only
    for the Response that ends them (usage, model) and for errors, which are rebuilt scrubbed."""

    def feed(self, event: str, data: str) -> list[bytes]:
        if data == "[DONE]":
            self.finished = True
            return []
        if event and event not in RESPONSE_ENDS and event != "error":
            if event == "response.output_text.delta" and (match := _TEXT_DELTA.search(data)):
                self.output_chars += len(match.group(1))
            if match := _SEQUENCE.search(data):
                self.sequence = int(match.group(1)) + 1
            return [named_sse(event, data.encode())]
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError) as error:
            raise UpstreamProtocolError("the upstream sent an event that is not JSON") from error
        if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
            raise UpstreamProtocolError("the upstream sent an event without its type")
        kind = payload["type"]
        if isinstance(sequence := payload.get("sequence_number"), int):
            self.sequence = sequence + 1
        if kind == "error":
            self.error = scrub_error(
                str(payload.get("message") or "The upstream failed."), self.target.secret
            )
            code = payload.get("code")
            payload = {
                "type": "error",
                "sequence_number": payload.get("sequence_number"),
                "code": scrub_error(code, self.target.secret, ERROR_FIELD_LIMIT)
                if isinstance(code, str)
                else None,
                "message": self.error,
                "param": None,
            }
            return [named_sse(kind, dumps(payload))]
        if kind in RESPONSE_ENDS:
            return [named_sse(kind, dumps(self._ended(kind, payload)))]
        return [named_sse(kind, data.encode())]

    def _ended(self, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        self.finished = True
        response = payload.get("response")
        if not isinstance(response, dict):
            raise UpstreamProtocolError(f"the upstream's {kind} event has no response")
        self.usage = usage_from_responses(response.get("usage"))
        if isinstance(response.get("model"), str):
            self.model = response["model"]
        error = response.get("error")
        if kind == "response.failed" and isinstance(error, dict):
            message = error.get("message")
            self.error = scrub_error(
                message if isinstance(message, str) else "The upstream failed.", self.target.secret
            )
            response["error"] = {**error, "message": self.error}
        return payload


def scrubbed_response(parsed: dict[str, Any], payload: bytes, secret: str) -> bytes:
    """A Response as the client may see it: one that failed (``status: failed`` with its ``error``)
    has its message scrubbed of the provider key, as every upstream error is; others pass as sent."""
    error = parsed.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return payload
    error["message"] = scrub_error(error["message"], secret)
    return dumps(parsed)


class OpenAIAdapter(Adapter):
    def headers(self, target: Target) -> dict[str, str]:
        return {"authorization": f"Bearer {target.secret}", "content-type": "application/json"}

    def url(self, target: Target, endpoint: str) -> str:
        return f"{target.base_url}/{endpoint}"

    def chat_request(
        self, target: Target, body: dict[str, Any], *, stream: bool, client_wants_usage: bool
    ) -> UpstreamRequest:
        upstream_body = {**body, "model": target.model}
        if stream:
            if target.supports_stream_usage:
                options = body.get("stream_options")
                options = dict(options) if isinstance(options, dict) else {}
                upstream_body["stream_options"] = {**options, "include_usage": True}
            else:
                upstream_body.pop("stream_options", None)
        return UpstreamRequest(
            url=self.url(target, "chat/completions"), headers=self.headers(target), body=dumps(upstream_body)
        )

    def chat_completion(self, target: Target, payload: bytes) -> Completion:
        parsed = loads_object(payload)
        if not isinstance(parsed.get("choices"), list):
            raise UpstreamProtocolError("the upstream's answer has no choices")
        model = found if isinstance(found := parsed.get("model"), str) else target.model
        return Completion(body=payload, usage=usage_from_openai(parsed.get("usage")), model=model)

    def stream_translator(self, target: Target, *, client_wants_usage: bool) -> StreamTranslator:
        return OpenAIStreamTranslator(target, client_wants_usage=client_wants_usage)

    def responses_request(self, target: Target, body: dict[str, Any]) -> UpstreamRequest:
        return UpstreamRequest(
            url=self.responses_url(target),
            headers=self.headers(target),
            body=dumps({**body, "model": target.model}),
        )

    def responses_url(self, target: Target) -> str:
        return self.url(target, "responses")

    def responses_answer(self, target: Target, payload: bytes) -> Completion:
        parsed = loads_object(payload)
        if not isinstance(parsed.get("output"), list):
            raise UpstreamProtocolError("the upstream's response has no output")
        model = found if isinstance(found := parsed.get("model"), str) else target.model
        body = scrubbed_response(parsed, payload, target.secret)
        return Completion(body=body, usage=usage_from_responses(parsed.get("usage")), model=model)

    def responses_stream_translator(self, target: Target) -> StreamTranslator:
        return ResponsesStreamTranslator(target, client_wants_usage=True)

    def response_resource_answer(self, target: Target, payload: bytes) -> Completion:
        parsed = loads_object(payload)
        return Completion(
            body=scrubbed_response(parsed, payload, target.secret), usage=None, model=target.model
        )

    def response_resource_request(self, target: Target, response_id: str, action: str) -> UpstreamRequest:
        base, _, query = self.responses_url(target).partition("?")
        url = f"{base}/{quote(response_id, safe='')}" + ("/cancel" if action == "cancel" else "")
        method = {"retrieve": "GET", "delete": "DELETE", "cancel": "POST"}[action]
        headers = self.headers(target)
        if method != "POST":
            headers.pop("content-type", None)
        return UpstreamRequest(
            url=url + (f"?{query}" if query else ""), headers=headers, body=b"", method=method
        )

    def embeddings_request(self, target: Target, body: dict[str, Any]) -> UpstreamRequest:
        return UpstreamRequest(
            url=self.url(target, "embeddings"),
            headers=self.headers(target),
            body=dumps({**body, "model": target.model}),
        )

    def embeddings_response(self, target: Target, payload: bytes) -> Completion:
        parsed = loads_object(payload)
        if not isinstance(parsed.get("data"), list):
            raise UpstreamProtocolError("the upstream's embeddings answer has no data")
        usage = found if isinstance(found := parsed.get("usage"), dict) else {}
        model = found if isinstance(found := parsed.get("model"), str) else target.model
        return Completion(
            body=payload, usage=Usage(input_tokens=_count(usage.get("prompt_tokens"))), model=model
        )


class AzureOpenAIAdapter(OpenAIAdapter):
    """Azure OpenAI: OpenAI's format, with the deployment in the path, ``api-version`` in the
    query and the key in an ``api-key`` header."""

    def headers(self, target: Target) -> dict[str, str]:
        return {"api-key": target.secret, "content-type": "application/json"}

    def url(self, target: Target, endpoint: str) -> str:
        return (
            f"{target.base_url}/openai/deployments/{quote(target.model, safe='')}/{endpoint}"
            f"?api-version={quote(target.api_version)}"
        )

    def responses_url(self, target: Target) -> str:
        # Azure serves the Responses API on its v1 path, the deployment named as the model.
        return f"{target.base_url}/openai/v1/responses"
