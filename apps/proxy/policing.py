"""The organization's policies on the request and its answer (docs/policies.md): the outermost stage,
so a blocked request reaches neither the cache nor an upstream, and a redacted one is cached,
forwarded and logged redacted.

The policies are compiled once per configuration generation (``OrganizationConfig.policies``, an
``apps.policies.engine.PolicyEngine``); a request only scans its text with them.
"""

import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from apps.core.errors import GatewayError
from apps.events.publish import EventType, raise_event
from apps.observability import tracing
from apps.policies.engine import (
    Decision,
    MessagesStreamRedaction,
    ResponseRedactor,
    ResponsesStreamRedaction,
    StreamRedaction,
    UnreadableInput,
)

from .answers import Answer, StreamOutcome
from .pipeline import ProxyContext, Stage, StageState

logger = logging.getLogger(__name__)


class PolicyBlocked(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "policy_blocked"


class PolicyUnreadableInput(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "policy_unreadable_input"


@dataclass(slots=True)
class AnswerRedaction:
    """The policies stage's state: what redacts a chat answer, and a stream's redaction under way."""

    redactor: ResponseRedactor
    stream: StreamRedaction | ResponsesStreamRedaction | MessagesStreamRedaction | None = None


REDACTION: StageState[AnswerRedaction] = StageState("policies")


class ApplyPolicies(Stage):
    slot = "policies"
    endpoints = frozenset(
        {"chat.completions", "embeddings", "responses", "messages", "messages.count_tokens"}
    )

    async def before(self, ctx: ProxyContext) -> Answer | None:
        engine = ctx.config.policies
        if engine is None or engine.is_empty:
            return None
        team_id = ctx.team.id if ctx.team is not None else None
        model = ctx.body["model"]
        try:
            verdict = engine.check_request(
                ctx.body, endpoint=ctx.endpoint.name, model=model, team_id=team_id, api_key_id=ctx.key.id
            )
        except UnreadableInput as unreadable:
            raise PolicyUnreadableInput(str(unreadable), param=unreadable.param) from None
        record = ctx.record
        if verdict.decisions:
            record.policy_decisions = [decision.as_record() for decision in verdict.decisions]
            record.policy_action, record.policy_reason = verdict.action, verdict.reason
        blocked = verdict.blocked
        if blocked is not None:
            _announce(ctx, EventType.POLICY_BLOCKED, verdict.decisions)
            raise PolicyBlocked(
                f"This request was refused by the organization's policy '{blocked.policy}' "
                f"({blocked.category})."
            )
        if verdict.body is not ctx.body:
            ctx.body = verdict.body
            # What the audit log keeps: the redacted body, never the original.
            ctx.request.body = json.dumps(verdict.body, ensure_ascii=False, separators=(",", ":")).encode()
            _announce(ctx, EventType.POLICY_REDACTED, verdict.decisions)
        if ctx.endpoint.name in ANSWER_TEXTS:
            redactor = engine.response_redactor(model=model, team_id=team_id, api_key_id=ctx.key.id)
            if redactor is not None:
                stream = redactor.stream(ctx.endpoint.name) if ctx.stream else None
                ctx.keep(REDACTION, AnswerRedaction(redactor, stream))
        return None

    async def after(self, ctx: ProxyContext, answer: Answer) -> None:
        redaction = ctx.state(REDACTION)
        if redaction is None or answer.status != 200 or not answer.body:
            return
        answer.body = _redacted(ctx, redaction.redactor, ctx.endpoint.name, answer.body)

    def on_chunk(self, ctx: ProxyContext, chunk: bytes) -> bytes:
        redaction = ctx.state(REDACTION)
        stream = redaction.stream if redaction is not None else None
        return chunk if stream is None else stream.on_chunk(chunk)

    async def on_stream_end(self, ctx: ProxyContext, outcome: StreamOutcome) -> None:
        redaction = ctx.state(REDACTION)
        stream = redaction.stream if redaction is not None else None
        if isinstance(stream, ResponsesStreamRedaction):
            outcome.sequence = stream.sequence  # it numbered the events again: an error goes on from it
        if stream is not None and stream.decisions:
            _record_answer_decisions(ctx, list(stream.decisions))


def _chat_texts(body: Any) -> Iterator[tuple[dict, str]]:
    """(object, key) of each text of a chat completion: its choices' message content."""
    for choice in body.get("choices") or () if isinstance(body, dict) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), str) and message["content"]:
            yield message, "content"


def _response_texts(body: Any) -> Iterator[tuple[dict, str]]:
    """(object, key) of each text of a Response: its output messages' ``output_text`` parts."""
    for item in body.get("output") or () if isinstance(body, dict) else ():
        content = item.get("content") if isinstance(item, dict) else None
        for part in content if isinstance(content, list) else ():
            if (
                isinstance(part, dict)
                and part.get("type") == "output_text"
                and isinstance(part.get("text"), str)
            ):
                yield part, "text"


def _message_texts(body: Any) -> Iterator[tuple[dict, str]]:
    """(object, key) of each text of an Anthropic Message: its text blocks."""
    for block in body.get("content") or () if isinstance(body, dict) else ():
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            yield block, "text"


# The endpoints whose answers policies redact, and where each answer's texts are.
ANSWER_TEXTS: dict[str, Callable[[Any], Iterator[tuple[dict, str]]]] = {
    "chat.completions": _chat_texts,
    "responses": _response_texts,
    "messages": _message_texts,
}


def redacted_answer(ctx: ProxyContext, endpoint: str, model: str, body: bytes) -> bytes:
    """``body``, an answer of ``endpoint`` read back later (a stored Response the provider holds),
    redacted by the policies that would redact it were it answered now for ``model``."""
    engine = ctx.config.policies
    if engine is None or engine.is_empty:
        return body
    team_id = ctx.team.id if ctx.team is not None else None
    redactor = engine.response_redactor(model=model, team_id=team_id, api_key_id=ctx.key.id)
    if redactor is None:
        return body
    return _redacted(ctx, redactor, endpoint, body)


def _redacted(ctx: ProxyContext, redactor: ResponseRedactor, endpoint: str, body: bytes) -> bytes:
    """``body``, a whole answer of ``endpoint``, with the texts ``redactor`` matches redacted and its
    decisions recorded; ``body`` itself when nothing matched or it is not JSON. With traces on, a
    stage span of its own, as the request's scan has (pipeline.run); a stream's chunks have none."""
    with tracing.stage("gateway.policies.answer") if tracing.enabled else contextlib.nullcontext():
        try:
            parsed = json.loads(body)
        except ValueError:
            return body
        found: list[Decision] = []
        for holder, field in ANSWER_TEXTS[endpoint](parsed):
            redacted, decisions = redactor.redact_text(holder[field])
            if decisions:
                holder[field] = redacted
                found += decisions
        if not found:
            return body
        _record_answer_decisions(ctx, found)
        return json.dumps(parsed, ensure_ascii=False, separators=(",", ":")).encode()


def _record_answer_decisions(ctx: ProxyContext, decisions: list[Decision]) -> None:
    record = ctx.record
    record.policy_decisions = [*record.policy_decisions, *(decision.as_record() for decision in decisions)]
    if record.policy_action is None:
        first = decisions[0]
        record.policy_action = "redacted"
        record.policy_reason = f"{first.policy}: {first.category}"[:200]
    _announce(ctx, EventType.POLICY_REDACTED, decisions)


def _announce(ctx: ProxyContext, event_type: str, decisions: Iterable[Decision]) -> None:
    """The event names the policies and categories, never the text they matched."""
    try:
        raise_event(
            ctx.config.organization_id,
            event_type,
            {
                "request_id": ctx.request.request_id,
                "api_key_id": ctx.key.id,
                "team_id": ctx.team.id if ctx.team is not None else None,
                "model": ctx.body.get("model"),
                "decisions": [decision.as_record() for decision in decisions],
            },
        )
    except Exception:  # an event never fails a request
        logger.exception("Could not raise the %s event", event_type)
