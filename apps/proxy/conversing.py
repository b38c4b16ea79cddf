"""The Responses API's conversation state (docs/proxy.md, "Conversation state"): the outermost stage
of ``/v1/responses``, so that policies, the upstream and the log all see the conversation as it is
sent.

Before the answer, a ``previous_response_id`` is looked up among the organization's stored turns
(apps/conversations): a turn the gateway bridged is replayed (its earlier turns' items, then its own,
before this request's input, the id no longer sent); a turn an upstream made natively pins the
request to the provider key that holds it (the endpoint's candidates), the body going as it is.
After the answer, a request with ``store`` (the API's default) is kept: the turn's input and output
items when bridged, which key holds it when native; ``store: false`` keeps nothing.
"""

import json
import re
from dataclasses import dataclass
from typing import Any

from apps.conversations import services as conversations
from apps.conversations.turns import StoredTurn
from apps.core.errors import NotFound

from .adapters.base import Target
from .answers import Answer, StreamOutcome
from .pipeline import ProxyContext, Stage, StageState

_STREAM_ENDS = (b'"response.completed"', b'"response.incomplete"')


@dataclass(slots=True)
class Conversation:
    """The stage's state: what this request continues, and what of it to keep."""

    store: bool
    previous: StoredTurn | None = None
    # Bridged: the turns before this one (oldest first), and how many items of ``ctx.body["input"]``
    # are theirs (replayed) rather than this request's own.
    history: tuple[str, ...] = ()
    replayed: int = 0
    # The one upstream that may answer: the provider key holding a native previous response.
    pinned_key_id: str | None = None
    # Set by the endpoint, attempt by attempt: the upstream that answered.
    answered_by: Target | None = None
    # A stream's final Response (its last event), kept once the stream has passed it.
    final: dict[str, Any] | None = None


CONVERSATION: StageState[Conversation] = StageState("conversation")


class ContinueConversation(Stage):
    slot = "conversation"
    endpoints = frozenset({"responses"})

    async def before(self, ctx: ProxyContext) -> Answer | None:
        body = ctx.body
        previous_id = body.get("previous_response_id")
        state = Conversation(store=body.get("store") is not False)
        if previous_id is None and not state.store:
            return None
        ctx.keep(CONVERSATION, state)
        if previous_id is not None:
            await _continue(ctx, state, previous_id)
        return None

    async def after(self, ctx: ProxyContext, answer: Answer) -> None:
        state = ctx.state(CONVERSATION)
        if state is None or answer.status != 200:
            return
        if _continues_natively(state):
            answer.body = _with_previous(state, answer.body)
        if not state.store:
            return
        try:
            response = json.loads(answer.body)
        except ValueError:
            return
        await _remember(ctx, state, response)

    def on_chunk(self, ctx: ProxyContext, chunk: bytes) -> bytes:
        state = ctx.state(CONVERSATION)
        if state is None:
            return chunk
        if _continues_natively(state):
            chunk = _with_previous(state, chunk)
        if state.store and any(end in chunk for end in _STREAM_ENDS):
            state.final = _final_response(chunk)
        return chunk

    async def on_stream_end(self, ctx: ProxyContext, outcome: StreamOutcome) -> None:
        state = ctx.state(CONVERSATION)
        if state is not None and state.final is not None and outcome.completed:
            await _remember(ctx, state, state.final)


async def _continue(ctx: ProxyContext, state: Conversation, previous_id: Any) -> None:
    organization_id, team_id = ctx.config.organization_id, team_id_of(ctx)
    found = await conversations.recall(organization_id, [str(previous_id)], team_id=team_id)
    previous = found.get(str(previous_id))
    if previous is None:
        raise _not_found(f"Previous response with id '{previous_id}' not found.")
    state.previous = previous
    if previous.native:
        state.pinned_key_id = previous.provider_key_id
        return
    earlier = await conversations.recall(organization_id, list(previous.history), team_id=team_id)
    missing = [turn_id for turn_id in previous.history if turn_id not in earlier]
    if missing:
        raise _not_found(
            f"An earlier response of this conversation ('{missing[0]}') is no longer stored, so "
            f"'{previous_id}' cannot be continued."
        )
    replay = [item for turn_id in previous.history for item in earlier[turn_id].items()]
    replay += previous.items()
    body = {name: value for name, value in ctx.body.items() if name != "previous_response_id"}
    body["input"] = [*replay, *input_items(ctx.body.get("input"))]
    ctx.body = body
    state.history, state.replayed = (*previous.history, previous.response_id), len(replay)


_NO_PREVIOUS = re.compile(rb'"previous_response_id":\s*null')


def _continues_natively(state: Conversation) -> bool:
    """A conversation the gateway replayed to an upstream that speaks Responses: the upstream was
    sent the history, not the id, so its Response says it continues none."""
    target = state.answered_by
    return (
        state.replayed > 0 and target is not None and target.speaks_responses and state.previous is not None
    )


def _with_previous(state: Conversation, text: bytes) -> bytes:
    """``text`` (a Response, or stream events carrying one) saying which Response it continues."""
    assert state.previous is not None
    named = b'"previous_response_id":' + json.dumps(state.previous.response_id).encode()
    return _NO_PREVIOUS.sub(lambda _: named, text)


def team_id_of(ctx: ProxyContext) -> str | None:
    """The team the request is made for: a stored turn is found by requests for the same team only."""
    team_id = ctx.record.team_id
    return str(team_id) if team_id is not None else None


def _not_found(message: str) -> NotFound:
    return NotFound(message, code="previous_response_not_found", param="previous_response_id")


def input_items(source: Any) -> list[Any]:
    """A request's ``input`` as items: a string is one user message."""
    if isinstance(source, str):
        return [{"role": "user", "content": source}]
    return list(source) if isinstance(source, list) else []


def _final_response(chunk: bytes) -> dict[str, Any] | None:
    for frame in chunk.split(b"\n\n"):
        if not any(end in frame for end in _STREAM_ENDS):
            continue
        for line in frame.split(b"\n"):
            if line.startswith(b"data:"):
                try:
                    event = json.loads(line[5:])
                except ValueError:
                    return None
                response = event.get("response") if isinstance(event, dict) else None
                return response if isinstance(response, dict) else None
    return None


async def _remember(ctx: ProxyContext, state: Conversation, response: dict[str, Any]) -> None:
    target = state.answered_by
    response_id = response.get("id")
    if target is None or not isinstance(response_id, str) or not response_id:
        return
    record = ctx.record
    bridged = not target.speaks_responses
    output = response.get("output")
    turn = StoredTurn(
        response_id=response_id,
        organization_id=ctx.config.organization_id,
        native=not bridged,
        model=record.requested_model or "",
        created_at=record.started_at,
        provider_key_id=target.provider_key_id,
        api_key_id=ctx.key.id,
        team_id=team_id_of(ctx),
        # A native turn's content is the provider's to keep; a bridged one's is the gateway's.
        history=state.history if bridged else (),
        input=input_items(ctx.body.get("input"))[state.replayed :] if bridged else [],
        output=output if bridged and isinstance(output, list) else [],
        response=response if bridged else None,
    )
    await conversations.remember(turn)
