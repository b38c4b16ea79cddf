"""What answers a proxy request, whoever gives it: the upstream, the endpoint itself (``/v1/models``)
or a stage (a cache hit, a policy's own answer). The pipeline sends them all the same way."""

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from apps.catalog.pricing import Usage


@dataclass(slots=True)
class StreamOutcome:
    """How a streamed answer ended. Its source fills it in as the chunks run out (a replay can fill
    it in up front); the end hooks and the relay read it."""

    usage: Usage | None = None
    # Characters of generated text sent, to estimate usage when none was reported.
    output_chars: int = 0
    # Why the answer is incomplete (the audit log keeps it); None when it came whole.
    failure: str | None = None
    # The source already sent its own error event (an upstream's), so the relay adds none.
    failure_sent: bool = False
    # Set by the relay: every chunk reached the client and nothing failed.
    completed: bool = False
    # Events numbered so far, for formats that number them (OpenAI Responses' sequence_number): an
    # error event the gateway adds goes on from there.
    sequence: int = 0


@dataclass(slots=True)
class Answer:
    """A whole answer (``body``, JSON) or a streamed one (``chunks``: server-sent event frames,
    each ``data: ...\\n\\n``, without the closing ``[DONE]``, which the relay adds)."""

    body: bytes = b""
    usage: Usage | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: AsyncIterator[bytes] | None = None
    outcome: StreamOutcome | None = None

    @classmethod
    def streamed(cls, chunks: AsyncIterator[bytes], outcome: StreamOutcome | None = None) -> "Answer":
        return cls(chunks=chunks, outcome=outcome if outcome is not None else StreamOutcome())
