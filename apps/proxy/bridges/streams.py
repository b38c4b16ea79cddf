"""A client API's stream over an upstream's chat stream: the one translator both bridges use."""

import json
from typing import Any, Protocol

from apps.catalog.pricing import Usage

from ..adapters.base import StreamTranslator, UpstreamProtocolError


class EventWriter(Protocol):
    """Writes one answer's events in a client API's format from chat chunks (parsed)."""

    sequence: int  # events numbered so far (0 for a format that numbers none)

    def chunk(self, chunk: dict[str, Any]) -> list[bytes]: ...

    def error(self, message: str, code: str | None) -> list[bytes]: ...

    def close(self, usage: Usage | None) -> list[bytes]: ...


class OverChat(StreamTranslator):
    """The client API's events of an upstream's chat stream: the upstream's adapter makes chat chunks
    of its events (``inner``), and ``events`` makes the API's events of those."""

    def __init__(self, inner: StreamTranslator, events: EventWriter) -> None:
        super().__init__(inner.target, client_wants_usage=False)
        self.inner = inner
        self.events = events

    def feed(self, event: str, data: str) -> list[bytes]:
        inner, events = self.inner, self.events
        frames: list[bytes] = []
        for frame in inner.feed(event, data):
            try:
                chunk = json.loads(frame[len(b"data: ") :])
            except ValueError as error:
                raise UpstreamProtocolError("the upstream's chunk is not JSON") from error
            if not isinstance(chunk, dict):
                raise UpstreamProtocolError("the upstream's chunk is not a JSON object")
            failure = chunk.get("error") if "choices" not in chunk else None
            if isinstance(failure, dict):
                code = failure.get("code")
                frames += events.error(str(failure.get("message")), code if isinstance(code, str) else None)
            else:
                frames += events.chunk(chunk)
        self.usage, self.model, self.error = inner.usage, inner.model, inner.error
        self.output_chars = inner.output_chars
        if inner.finished and not self.finished:
            self.finished = True
            frames += events.close(inner.usage)
        self.sequence = events.sequence
        return frames
