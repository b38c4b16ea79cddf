"""The proxy's endpoints, as definitions: what each accepts, how it asks an upstream, which
upstreams can serve it. ``pipeline.run`` does everything else, the same way for each; app.py maps
paths and permissions to them."""

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from apps.core.errors import InvalidRequest, NotFound

from .adapters import adapter_for
from .adapters.base import Adapter, Completion, Target, UpstreamRequest, dumps
from .answers import Answer, StreamOutcome
from .config import model_object
from .forwarding import Forwarder
from .http import ProxyRequest
from .routing import (
    Candidate,
    ModelNotAllowed,
    allow_lists,
    models_body_for,
    plan_attempts,
    refuse_unallowed_model,
)
from .validation import json_object, validate_chat, validate_embeddings

if TYPE_CHECKING:
    from .pipeline import ProxyContext


class Endpoint(ABC):
    name: str  # what stages filter on (Stage.endpoints)
    validate: Callable[[dict[str, Any]], None]  # the body's checks (validation.py)
    streams = False  # whether `stream: true` is honoured
    templated = False  # whether a body may name a stored prompt (templating.py)
    cacheable = True  # an answer the upstream gives is a cache "miss" (else "bypass")

    def read(self, request: ProxyRequest) -> dict[str, Any]:
        body = json_object(request)
        if not (self.templated and "prompt" in body):  # a templated body is checked once rendered
            self.validate(body)
        return body

    @abstractmethod
    async def answer(self, ctx: "ProxyContext") -> Answer:
        """The answer when no stage gave one."""


class UpstreamEndpoint(Endpoint):
    """An endpoint an upstream answers: routed, then tried candidate after candidate."""

    async def answer(self, ctx: "ProxyContext") -> Answer:
        completion = await Forwarder(ctx.record, self.candidates(ctx), ctx.request.started).complete(
            lambda adapter, target: self.upstream_request(adapter, target, ctx.body),
            self.upstream_answer,
        )
        return Answer(body=completion.body, usage=completion.usage)

    def candidates(self, ctx: "ProxyContext") -> list[Candidate]:
        return plan_attempts(ctx.config, ctx.body["model"], ctx.regions)

    @abstractmethod
    def upstream_request(self, adapter: Adapter, target: Target, body: dict[str, Any]) -> UpstreamRequest: ...

    @abstractmethod
    def upstream_answer(self, adapter: Adapter, target: Target, payload: bytes) -> Completion: ...


class ChatCompletions(UpstreamEndpoint):
    name = "chat.completions"
    validate = staticmethod(validate_chat)
    streams = True
    templated = True

    async def answer(self, ctx: "ProxyContext") -> Answer:
        if not ctx.stream:
            return await super().answer(ctx)
        body = ctx.body
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        stream = await Forwarder(ctx.record, self.candidates(ctx), ctx.request.started).open_stream(
            lambda adapter, target: adapter.chat_request(
                target, body, stream=True, client_wants_usage=wants_usage
            ),
            client_wants_usage=wants_usage,
        )
        outcome = StreamOutcome()
        return Answer.streamed(stream.frames(outcome), outcome)

    def upstream_request(self, adapter: Adapter, target: Target, body: dict[str, Any]) -> UpstreamRequest:
        return adapter.chat_request(target, body, stream=False, client_wants_usage=False)

    def upstream_answer(self, adapter: Adapter, target: Target, payload: bytes) -> Completion:
        return adapter.chat_completion(target, payload)


class Embeddings(UpstreamEndpoint):
    name = "embeddings"
    validate = staticmethod(validate_embeddings)

    def candidates(self, ctx: "ProxyContext") -> list[Candidate]:
        candidates = [c for c in super().candidates(ctx) if adapter_for(c.key.provider).supports_embeddings()]
        if not candidates:
            raise InvalidRequest(
                f"The model '{ctx.body['model']}' is not served by a provider that has embeddings.",
                code="model_not_supported",
                param="model",
            )
        return candidates

    def upstream_request(self, adapter: Adapter, target: Target, body: dict[str, Any]) -> UpstreamRequest:
        return adapter.embeddings_request(target, body)

    def upstream_answer(self, adapter: Adapter, target: Target, payload: bytes) -> Completion:
        return adapter.embeddings_response(target, payload)


class ModelList(Endpoint):
    """The organization's aliases the caller may call, answered from its configuration: no upstream."""

    name = "models"
    cacheable = False

    def read(self, request: ProxyRequest) -> dict[str, Any]:
        return {}  # a GET: there is no body to read

    async def answer(self, ctx: "ProxyContext") -> Answer:
        return Answer(body=models_body_for(ctx.config, ctx.team, ctx.key))


class ModelRetrieve(Endpoint):
    """One alias of the organization's, as the model list shows it to the caller (GET
    /v1/models/{model}); an alias it may not call reads as one that does not exist."""

    name = "models"
    cacheable = False

    def read(self, request: ProxyRequest) -> dict[str, Any]:
        return {}

    async def answer(self, ctx: "ProxyContext") -> Answer:
        model = ctx.request.resource or ""
        alias = ctx.config.aliases.get(model)
        if alias is not None:
            try:
                refuse_unallowed_model(ctx.config, model, allow_lists(ctx.config, ctx.team, ctx.key))
            except ModelNotAllowed:
                alias = None
        if alias is None:
            raise NotFound(
                f"The model '{model}' does not exist or you do not have access to it.",
                code="model_not_found",
                param="model",
            )
        return Answer(body=dumps(model_object(alias)))


chat_completions = ChatCompletions()
embeddings = Embeddings()
models = ModelList()
model = ModelRetrieve()
