"""The proxy's pipeline: one ``run`` for every endpoint, with stages before and after the answer.

    read the body, validate it            (the endpoint: endpoints.py)
    context: team, data regions
    admission                             revocation, configuration generation, rate limits and
                                          budgets in one round trip (admission.py)
    before stages, in slot order          a stage may change ctx.body, refuse (raise a GatewayError)
                                          or answer; the first answer skips the rest and the upstream
    the endpoint's answer                 route + call the upstream (/v1/models: its own list)
    after stages, in reverse slot order   only the stages outside the one that answered; a whole answer
                                          goes through ``after``, a stream through ``on_chunk`` per
                                          chunk and ``on_stream_end``
    the response                          app.py sends it with the gateway headers, then the record
                                          goes to the audit log

Stages are registered at named slots (``SLOTS``), so each feature has one obvious place and their
order never depends on who registered first. A stage implements only the hooks it needs; the hooks
of each endpoint are gathered once (``_Plan``), so a stage without a stream hook costs nothing per
chunk. docs/proxy.md shows how to add one.
"""

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.utils import timezone

from apps.audit.records import RequestRecord
from apps.core.brand import header_names
from apps.core.errors import GatewayError, PermissionDenied
from apps.observability import tracing
from apps.teams.selectors import TeamSnapshot

from . import admission
from .answers import Answer, StreamOutcome
from .auth import AuthenticatedKey
from .caller import Caller, reconfigured
from .charges import charges_for
from .config import OrganizationConfig
from .errors import StreamInterrupted
from .experimenting import assigned_body
from .http import ProxyRequest, ProxyResponse, ProxyStream
from .limit_refusals import LimitsUnavailable
from .routing import allow_lists, allowed_regions, refuse_unallowed_model
from .runtime import runtime
from .templating import rendered_body

if TYPE_CHECKING:
    from .endpoints import Endpoint


# The stages' places, outermost first; a stage is registered at one. Rate limits and budgets are
# not stages: admission (admission.py) checks them before any stage runs, in the one Redis round trip
# that also checks the key's revocation, and settles after the response has been sent. Nor are
# prompt templates: a templated body is rendered in ``begin`` (templating.py), before admission,
# so budgets, policies and the cache all see the body that goes upstream.
SLOTS = (
    "conversation",  # replay or pin a stored Responses conversation; keep the turn after it
    "policies",  # block or redact the request; redact the answer
    "cache",  # answer from the cache (l1, l2, l3); store the answer after it
    "cost",  # prices the answer; innermost, so an answer no upstream gave costs nothing
)


S = TypeVar("S")


class StageState(Generic[S]):
    """The name of one stage's own state on a request's context: the stage that owns it keeps its
    state there in ``before`` (``ctx.keep``) and reads it in its later hooks (``ctx.state``), so a
    new stage adds a module-level ``StageState`` of its own, never a field of ``ProxyContext``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StageState({self.name!r})"


@dataclass(slots=True)
class ProxyContext:
    """One request as the stages see it: what every stage may read (and ``body``, which a before
    stage may change); a stage's own state is kept apart, under its ``StageState``."""

    request: ProxyRequest
    record: RequestRecord  # what the audit log will keep
    endpoint: "Endpoint"
    body: dict[str, Any]  # validated; a before stage may change it
    key: AuthenticatedKey
    config: OrganizationConfig
    stream: bool = False
    team: TeamSnapshot | None = None
    regions: frozenset[str] | None = None  # None: unrestricted
    # A stage's cache verdict (l1, l2, l3, bypass). None: a miss when the upstream answers, a
    # bypass when a stage does.
    cache: str | None = None
    _states: dict[StageState[Any], Any] = field(default_factory=dict, init=False, repr=False)

    def keep(self, name: StageState[S], state: S) -> S:
        """Keeps a stage's state for this request's later hooks."""
        self._states[name] = state
        return state

    def state(self, name: StageState[S]) -> S | None:
        """The state kept under ``name``; None when its stage kept none for this request."""
        return self._states.get(name)

    def drop(self, name: StageState[Any]) -> None:
        self._states.pop(name, None)


class Stage:
    """A step of the pipeline. Subclasses set ``slot`` (one of SLOTS) and override only the hooks
    they need; hooks left as they are here are never called."""

    slot: str = ""
    # The endpoints it runs on (Endpoint.name); None: every endpoint.
    endpoints: frozenset[str] | None = None

    async def before(self, ctx: ProxyContext) -> Answer | None:
        """Before the upstream: return an answer to give it instead, or None to go on."""
        return None

    async def after(self, ctx: ProxyContext, answer: Answer) -> None:
        """A whole answer before it is sent: may read it, change ``answer.body``, or raise."""

    def on_chunk(self, ctx: ProxyContext, chunk: bytes) -> bytes:
        """A stream's chunk (one or more SSE frames) on its way out: what to send instead (b"": nothing)."""
        return chunk

    async def on_stream_end(self, ctx: ProxyContext, outcome: StreamOutcome) -> None:
        """A stream ended (whole, cut short or abandoned by the client); before its closing event."""


def _implements(stage: Stage, hook: str) -> bool:
    return getattr(type(stage), hook) is not getattr(Stage, hook)


AfterHook = Callable[[ProxyContext, Answer], Awaitable[None]]
ChunkHook = Callable[[ProxyContext, bytes], bytes]
EndHook = Callable[[ProxyContext, StreamOutcome], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class _Plan:
    """One endpoint's hooks, gathered once. The after, chunk and end hooks are indexed by where the
    answer came from (a stage's position, or the last index for the endpoint's own answer): each
    entry holds the hooks of the stages outside that point, innermost first."""

    befores: tuple[tuple[int, Callable[[ProxyContext], Awaitable[Answer | None]]], ...]
    afters: tuple[tuple[AfterHook, ...], ...]
    chunk_hooks: tuple[tuple[ChunkHook, ...], ...]
    end_hooks: tuple[tuple[EndHook, ...], ...]


class StageRegistry:
    """The registered stages, in slot order, and each endpoint's hooks gathered from them."""

    def __init__(self) -> None:
        self._stages: list[Stage] = []
        self._plans: dict[str, _Plan] = {}

    @property
    def registered(self) -> tuple[Stage, ...]:
        """The stages, outermost first."""
        return tuple(self._stages)

    def register(self, stage: Stage) -> Stage:
        """Adds a stage at its slot, after those already there."""
        if stage.slot not in SLOTS:
            raise ValueError(f"Unknown slot {stage.slot!r}; the slots are {', '.join(SLOTS)}.")
        rank = SLOTS.index(stage.slot)
        stages = self._stages
        index = next((i for i, held in enumerate(stages) if SLOTS.index(held.slot) > rank), len(stages))
        stages.insert(index, stage)
        self._plans.clear()
        return stage

    def unregister(self, stage: Stage) -> None:
        if stage in self._stages:
            self._stages.remove(stage)
        self._plans.clear()

    def plan(self, endpoint: "Endpoint") -> _Plan:
        plan = self._plans.get(endpoint.name)
        if plan is not None:
            return plan
        stages = [s for s in self._stages if s.endpoints is None or endpoint.name in s.endpoints]

        def outside(hook: str, position: int) -> tuple[Any, ...]:
            return tuple(getattr(s, hook) for s in reversed(stages[:position]) if _implements(s, hook))

        positions = range(len(stages) + 1)
        plan = self._plans[endpoint.name] = _Plan(
            befores=tuple((i, s.before) for i, s in enumerate(stages) if _implements(s, "before")),
            afters=tuple(outside("after", p) for p in positions),
            chunk_hooks=tuple(outside("on_chunk", p) for p in positions),
            end_hooks=tuple(outside("on_stream_end", p) for p in positions),
        )
        return plan


def register(stage: Stage) -> Stage:
    """Adds a stage at its slot (``StageRegistry.register``), in this process's runtime."""
    return runtime.stages.register(stage)


def unregister(stage: Stage) -> None:
    runtime.stages.unregister(stage)


async def run(endpoint: "Endpoint", request: ProxyRequest, caller: Caller) -> ProxyResponse | ProxyStream:
    """One request from its validated body to the response app.py sends."""
    ctx = await admitted(endpoint, request, caller, endpoint.read(request))
    plan = runtime.stages.plan(endpoint)
    answered_at = len(plan.afters) - 1  # the endpoint's own answer, unless a stage gives one
    answer: Answer | None = None
    for position, before in plan.befores:
        if tracing.enabled:  # a span per stage: the policy scan, the cache look-up
            with tracing.stage(f"gateway.{before.__self__.slot}"):  # type: ignore[attr-defined]
                answer = await before(ctx)
        else:
            answer = await before(ctx)
        if answer is not None:
            answered_at = position
            break
    record = ctx.record
    if answer is None:
        record.cache = ctx.cache or ("miss" if endpoint.cacheable else "bypass")
        answer = await endpoint.answer(ctx)
    else:
        record.cache = ctx.cache or "bypass"
    if answer.chunks is not None:
        outcome = answer.outcome if answer.outcome is not None else StreamOutcome()
        hooks = plan.chunk_hooks[answered_at], plan.end_hooks[answered_at]
        chunks = relay(ctx, answer.chunks, outcome, *hooks)
        return ProxyStream(
            chunks=chunks,
            status=answer.status,
            headers=answer.headers,
            error_frame=lambda error: endpoint.stream_error(error, outcome),
        )
    for after in plan.afters[answered_at]:
        await after(ctx, answer)
    return ProxyResponse(status=answer.status, body=answer.body, headers=answer.headers)


async def admitted(
    endpoint: "Endpoint", request: ProxyRequest, caller: Caller, body: dict[str, Any]
) -> ProxyContext:
    """The request's context, once admission (admission.py) lets it through. It starts from the
    configuration this worker holds; when admission finds a newer one (nothing is charged then), or
    the held one refused something a newer one may allow (a team or model just created), the caller
    is read again with the newer one (caller.py) and the request starts again with it."""
    for _ in range(3):
        now = timezone.now()
        try:
            ctx = begin(endpoint, request, caller, body)
            charges = charges_for(ctx, now)
        except GatewayError:
            generation = await admission.newer_generation(caller.key, caller.config, request)
            if generation is None:
                raise
        else:
            if tracing.enabled:
                with tracing.stage("gateway.admission"):
                    generation = await admission.admit(ctx, charges, now)
            else:
                generation = await admission.admit(ctx, charges, now)
            if generation is None:
                return ctx
        caller = await reconfigured(request, caller, generation)
    raise LimitsUnavailable("This organization's configuration is changing; retry shortly.")


def begin(endpoint: "Endpoint", request: ProxyRequest, caller: Caller, body: dict[str, Any]) -> ProxyContext:
    record = request.record
    body = rendered_body(endpoint, request, caller.config, assigned_body(endpoint, request, caller, body))
    model = body.get("model")
    if isinstance(model, str) and (named := endpoint.model_name(caller.config, model)) != model:
        body = {**body, "model": named}
    ctx = ProxyContext(
        request=request,
        record=record,
        endpoint=endpoint,
        body=body,
        key=caller.key,
        config=caller.config,
        stream=endpoint.streams and body.get("stream") is True,
    )
    record.requested_model = body.get("model")
    record.stream = ctx.stream
    resolve_team(ctx)
    resolve_regions(ctx)
    model = body.get("model")
    if isinstance(model, str):  # the model list has none: it is filtered instead (endpoints.py)
        refuse_unallowed_model(ctx.config, model, allow_lists(ctx.config, ctx.team, ctx.key))
    return ctx


def resolve_team(ctx: ProxyContext) -> None:
    """The key's team, else the one the team header names (id or slug). A key bound to a team
    cannot charge another; an unknown team and another organization's read the same."""
    named = ctx.request.headers.get(header_names().team, "").strip()
    config = ctx.config
    team = None
    if named:
        team = config.teams_by_id.get(named) or config.teams_by_slug.get(named)
        if team is None:
            raise PermissionDenied(f"No team '{named}' in this organization.", code="team_not_found")
    if ctx.key.team_id is not None:
        if team is not None and team.id != ctx.key.team_id:
            raise PermissionDenied(
                "This API key is bound to another team than the team header names.", code="team_mismatch"
            )
        team = config.teams_by_id.get(ctx.key.team_id)
    ctx.team = team
    ctx.record.team_id = team.id if team else ctx.key.team_id


def resolve_regions(ctx: ProxyContext) -> None:
    requested = ctx.request.headers.get(header_names().data_region, "")
    narrowed = frozenset(label.strip().lower() for label in requested.split(",") if label.strip())
    ctx.regions = allowed_regions(
        ctx.config.allowed_data_regions,
        ctx.team.allowed_data_regions if ctx.team else frozenset(),
        ctx.key.allowed_data_regions,
        narrowed,
    )


async def relay(
    ctx: ProxyContext,
    chunks: AsyncIterator[bytes],
    outcome: StreamOutcome,
    chunk_hooks: tuple[ChunkHook, ...],
    end_hooks: tuple[EndHook, ...],
) -> AsyncGenerator[bytes, None]:
    """The client's stream, live or replayed alike: the answer's chunks through the chunk hooks,
    the end hooks once they run out (or the client leaves), then the cost comment and [DONE]; a
    stream that failed ends with an error event instead."""
    record = ctx.record
    exhausted = False
    try:
        if chunk_hooks:
            async for chunk in chunks:
                for hook in chunk_hooks:
                    chunk = hook(ctx, chunk)
                if chunk:
                    yield chunk
        else:
            async for chunk in chunks:
                yield chunk
        exhausted = True
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()  # the source's own clean-up (the upstream connection) comes first
        outcome.completed = record.stream_completed = exhausted and outcome.failure is None
        for end in end_hooks:
            await end(ctx, outcome)
    if outcome.failure is None:
        yield f": {header_names().cost}={record.cost_usd:f}\n\n".encode() + ctx.endpoint.stream_end()
        return
    error = StreamInterrupted(outcome.failure)
    record.error_type, record.error_code = error.type, error.code
    if not outcome.failure_sent:
        yield ctx.endpoint.stream_error(error, outcome)
