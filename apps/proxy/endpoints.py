"""The proxy's endpoints, as definitions: what each accepts, how it asks an upstream, which
upstreams can serve it. ``pipeline.run`` does everything else, the same way for each; app.py maps
paths and permissions to them."""

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from apps.catalog.pricing import Usage
from apps.catalog.selectors import DeploymentSnapshot
from apps.conversations import services as conversations
from apps.conversations.turns import StoredTurn
from apps.core.errors import GatewayError, InvalidRequest, NotFound

from .adapters import SPEAK_MESSAGES, adapter_for
from .adapters.base import (
    Adapter,
    Completion,
    StreamTranslator,
    Target,
    UpstreamRequest,
    dumps,
    loads_object,
    named_sse,
)
from .answers import Answer, StreamOutcome
from .bridges import messages_chat, responses_chat
from .config import model_object
from .conversing import CONVERSATION, team_id_of
from .errors import anthropic_error_body, error_event
from .errors import error_body as openai_error_body
from .estimates import text_chars
from .forwarding import CLIENT_CAUSED, Forwarder
from .http import ProxyRequest
from .policing import redacted_answer
from .routing import (
    Candidate,
    ModelNotAllowed,
    allow_lists,
    models_body_for,
    plan_attempts,
    refuse_unallowed_model,
)
from .validation import (
    json_object,
    validate_chat,
    validate_count_tokens,
    validate_embeddings,
    validate_messages,
    validate_responses,
)

if TYPE_CHECKING:
    from .config import OrganizationConfig
    from .pipeline import ProxyContext


class Endpoint(ABC):
    name: str  # what stages filter on (Stage.endpoints)
    validate: Callable[[dict[str, Any]], None]  # the body's checks (validation.py)
    streams = False  # whether `stream: true` is honoured
    templated = False  # whether a body may name a stored prompt (templating.py)
    cacheable = True  # an answer the upstream gives is a cache "miss" (else "bypass")
    costs = True  # counted against budgets and tokens-per-minute limits (else only as a request)

    def read(self, request: ProxyRequest) -> dict[str, Any]:
        body = json_object(request)
        if not (self.templated and "prompt" in body):  # a templated body is checked once rendered
            self.validate(body)
        return body

    @abstractmethod
    async def answer(self, ctx: "ProxyContext") -> Answer:
        """The answer when no stage gave one."""

    def stream_end(self) -> bytes:
        """What a whole stream ends with, after the cost comment (chat completions' ``[DONE]``)."""
        return b"data: [DONE]\n\n"

    def stream_error(self, error: GatewayError, outcome: StreamOutcome) -> bytes:
        """The event a stream that failed ends with, in the endpoint's format."""
        return error_event(error)

    def error_body(self, error: GatewayError) -> bytes:
        """An error answer's body, in the endpoint's API's shape (OpenAI's unless it says)."""
        return openai_error_body(error)

    def model_name(self, config: "OrganizationConfig", model: str) -> str:
        """The name the request's model is routed by (the client's, unless the API reads it otherwise)."""
        return model


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
            lambda adapter, target: adapter.stream_translator(target, client_wants_usage=wants_usage),
        )
        outcome = StreamOutcome()
        return Answer.streamed(stream.frames(outcome), outcome)

    def upstream_request(self, adapter: Adapter, target: Target, body: dict[str, Any]) -> UpstreamRequest:
        return adapter.chat_request(target, body, stream=False, client_wants_usage=False)

    def upstream_answer(self, adapter: Adapter, target: Target, payload: bytes) -> Completion:
        return adapter.chat_completion(target, payload)


class TranslatedEndpoint(Endpoint):
    """An endpoint of a client API that some upstreams speak and the others reach through chat
    completions (a bridge, ``apps/proxy/bridges``): each attempt is native or bridged by its target,
    and the answer leaves in the client API's shapes either way. Subclasses say how."""

    streams = True

    @abstractmethod
    def native(self, target: Target) -> bool: ...

    @abstractmethod
    def native_request(self, ctx: "ProxyContext", adapter: Adapter, target: Target) -> UpstreamRequest: ...

    @abstractmethod
    def native_answer(self, adapter: Adapter, target: Target, payload: bytes) -> Completion: ...

    @abstractmethod
    def native_translator(self, adapter: Adapter, target: Target) -> StreamTranslator: ...

    @abstractmethod
    def chat_body(self, ctx: "ProxyContext", target: Target) -> dict[str, Any]:
        """The chat request the bridge makes of the client's (raises InvalidRequest naming a field
        it cannot bridge)."""

    @abstractmethod
    def from_chat(
        self, ctx: "ProxyContext", answer_id: str, chat: dict[str, Any], usage: Usage | None
    ) -> dict[str, Any]:
        """The client API's answer of a chat completion."""

    @abstractmethod
    def translator_over_chat(
        self, ctx: "ProxyContext", answer_id: str, chat: StreamTranslator
    ) -> StreamTranslator: ...

    @abstractmethod
    def new_answer_id(self) -> str: ...

    def forwarder(self, ctx: "ProxyContext") -> Forwarder:
        return Forwarder(ctx.record, self.candidates(ctx), ctx.request.started)

    def candidates(self, ctx: "ProxyContext") -> list[Candidate]:
        return plan_attempts(ctx.config, ctx.body["model"], ctx.regions)

    def attempting(self, ctx: "ProxyContext", target: Target) -> None:
        """Each attempt's target, as its request is built (the last is the one that answered)."""

    async def answer(self, ctx: "ProxyContext") -> Answer:
        answer_id, stream = self.new_answer_id(), ctx.stream
        forwarder = self.forwarder(ctx)

        def request(adapter: Adapter, target: Target) -> UpstreamRequest:
            self.attempting(ctx, target)
            if self.native(target):
                return self.native_request(ctx, adapter, target)
            chat = self.chat_body(ctx, target)
            return adapter.chat_request(target, chat, stream=stream, client_wants_usage=False)

        if not stream:

            def whole(adapter: Adapter, target: Target, payload: bytes) -> Completion:
                if self.native(target):
                    return self.native_answer(adapter, target, payload)
                completion = adapter.chat_completion(target, payload)
                answer = self.from_chat(ctx, answer_id, loads_object(completion.body), completion.usage)
                return Completion(body=dumps(answer), usage=completion.usage, model=completion.model)

            completion = await forwarder.complete(request, whole)
            return Answer(body=completion.body, usage=completion.usage)

        def translator(adapter: Adapter, target: Target) -> StreamTranslator:
            if self.native(target):
                return self.native_translator(adapter, target)
            chat = adapter.stream_translator(target, client_wants_usage=False)
            return self.translator_over_chat(ctx, answer_id, chat)

        opened = await forwarder.open_stream(request, translator)
        outcome = StreamOutcome()
        return Answer.streamed(opened.frames(outcome), outcome)

    def stream_end(self) -> bytes:
        return b""  # the API's own last event ends the stream: no [DONE]


class Responses(TranslatedEndpoint):
    """OpenAI's Responses API: passed through to upstreams that serve it, bridged over chat
    completions for the others (bridges/responses_chat.py), the answer in OpenAI's shapes either way.
    A stored conversation (conversing.py) may pin the request to one provider key."""

    name = "responses"
    validate = staticmethod(validate_responses)

    def native(self, target: Target) -> bool:
        return target.speaks_responses

    def native_request(self, ctx: "ProxyContext", adapter: Adapter, target: Target) -> UpstreamRequest:
        return adapter.responses_request(target, ctx.body)

    def native_answer(self, adapter: Adapter, target: Target, payload: bytes) -> Completion:
        return adapter.responses_answer(target, payload)

    def native_translator(self, adapter: Adapter, target: Target) -> StreamTranslator:
        return adapter.responses_stream_translator(target)

    def chat_body(self, ctx: "ProxyContext", target: Target) -> dict[str, Any]:
        return responses_chat.chat_request(ctx.body, provider=target.provider)

    def from_chat(
        self, ctx: "ProxyContext", answer_id: str, chat: dict[str, Any], usage: Usage | None
    ) -> dict[str, Any]:
        return responses_chat.response_from_chat(chat, self._echoed(ctx), response_id=answer_id, usage=usage)

    def translator_over_chat(
        self, ctx: "ProxyContext", answer_id: str, chat: StreamTranslator
    ) -> StreamTranslator:
        return responses_chat.over_chat(chat, self._echoed(ctx), response_id=answer_id)

    def new_answer_id(self) -> str:
        return responses_chat.new_id("resp")

    def _echoed(self, ctx: "ProxyContext") -> dict[str, Any]:
        """The request as the Response echoes it: one the gateway replayed still says which Response
        it continues."""
        conversation = ctx.state(CONVERSATION)
        if conversation is not None and conversation.previous is not None and conversation.replayed:
            return {**ctx.body, "previous_response_id": conversation.previous.response_id}
        return ctx.body

    def attempting(self, ctx: "ProxyContext", target: Target) -> None:
        conversation = ctx.state(CONVERSATION)
        if conversation is not None:
            conversation.answered_by = target

    def forwarder(self, ctx: "ProxyContext") -> Forwarder:
        conversation = ctx.state(CONVERSATION)
        pinned = conversation is not None and conversation.pinned_key_id is not None
        # Only the pinned upstream knows the previous response: its 404 is the client's answer.
        client_caused = CLIENT_CAUSED | {404} if pinned else CLIENT_CAUSED
        return Forwarder(ctx.record, self.candidates(ctx), ctx.request.started, client_caused=client_caused)

    def candidates(self, ctx: "ProxyContext") -> list[Candidate]:
        candidates = plan_attempts(ctx.config, ctx.body["model"], ctx.regions)
        conversation = ctx.state(CONVERSATION)
        pinned = conversation.pinned_key_id if conversation is not None else None
        if pinned is None:
            return candidates
        # A response the upstream made is known to that upstream only: the key that made it answers.
        held = [candidate for candidate in candidates if candidate.key.id == pinned]
        if not held:
            raise InvalidRequest(
                f"The previous response was made through provider key {pinned}, which holds it and "
                f"does not serve '{ctx.body['model']}' for this request: continue with a model that "
                "key serves, or send the conversation's items as input.",
                code="previous_response_unavailable",
                param="previous_response_id",
            )
        return held

    def stream_error(self, error: GatewayError, outcome: StreamOutcome) -> bytes:
        payload = {
            "type": "error",
            "sequence_number": outcome.sequence,
            "code": error.code,
            "message": error.message,
            "param": error.param,
        }
        return named_sse("error", dumps(payload))


class Messages(TranslatedEndpoint):
    """Anthropic's Messages API: passed through to Anthropic, bridged over chat completions to
    OpenAI-style upstreams (bridges/messages_chat.py); errors in Anthropic's shape."""

    name = "messages"
    validate = staticmethod(validate_messages)

    def native(self, target: Target) -> bool:
        return target.speaks_messages

    def native_request(self, ctx: "ProxyContext", adapter: Adapter, target: Target) -> UpstreamRequest:
        return adapter.messages_request(target, ctx.body, ctx.request.headers)

    def native_answer(self, adapter: Adapter, target: Target, payload: bytes) -> Completion:
        return adapter.messages_answer(target, payload)

    def native_translator(self, adapter: Adapter, target: Target) -> StreamTranslator:
        return adapter.messages_stream_translator(target)

    def chat_body(self, ctx: "ProxyContext", target: Target) -> dict[str, Any]:
        return messages_chat.chat_request(ctx.body, provider=target.provider)

    def from_chat(
        self, ctx: "ProxyContext", answer_id: str, chat: dict[str, Any], usage: Usage | None
    ) -> dict[str, Any]:
        return messages_chat.message_from_chat(
            chat, message_id=answer_id, model=ctx.body["model"], usage=usage
        )

    def translator_over_chat(
        self, ctx: "ProxyContext", answer_id: str, chat: StreamTranslator
    ) -> StreamTranslator:
        return messages_chat.over_chat(chat, message_id=answer_id, model=ctx.body["model"])

    def new_answer_id(self) -> str:
        return messages_chat.new_id("msg")

    def model_name(self, config: "OrganizationConfig", model: str) -> str:
        return anthropic_model_name(config, model)

    def read(self, request: ProxyRequest) -> dict[str, Any]:
        check_anthropic_headers(request.headers)
        return super().read(request)

    def error_body(self, error: GatewayError) -> bytes:
        return anthropic_error_body(error)

    def stream_error(self, error: GatewayError, outcome: StreamOutcome) -> bytes:
        return named_sse("error", anthropic_error_body(error))


class CountTokens(Endpoint):
    """``POST /v1/messages/count_tokens``: Anthropic's count where the model is served by Anthropic,
    else an estimate (about four characters a token, as the gateway estimates everywhere)."""

    name = "messages.count_tokens"
    validate = staticmethod(validate_count_tokens)
    cacheable = False
    costs = False

    async def answer(self, ctx: "ProxyContext") -> Answer:
        candidates = plan_attempts(ctx.config, ctx.body["model"], ctx.regions)
        native = [candidate for candidate in candidates if candidate.key.provider in SPEAK_MESSAGES]
        if not native:
            counted = {
                "input_tokens": -(
                    -text_chars([ctx.body.get("system"), ctx.body.get("messages"), ctx.body.get("tools")])
                    // 4
                )
            }
            return Answer(body=dumps(counted), headers={"x-gateway-estimated": "true"})
        completion = await Forwarder(ctx.record, native, ctx.request.started).complete(
            lambda adapter, target: adapter.count_tokens_request(target, ctx.body, ctx.request.headers),
            lambda adapter, target, payload: Completion(body=payload, usage=None, model=target.model),
        )
        return Answer(body=completion.body)

    def model_name(self, config: "OrganizationConfig", model: str) -> str:
        return anthropic_model_name(config, model)

    def read(self, request: ProxyRequest) -> dict[str, Any]:
        check_anthropic_headers(request.headers)
        return super().read(request)

    def error_body(self, error: GatewayError) -> bytes:
        return anthropic_error_body(error)


# anthropic-version and anthropic-beta are sent on to Anthropic: printable ASCII, of a sane length.
_ANTHROPIC_HEADER = re.compile(r"[\x20-\x7e]{1,1000}")


def check_anthropic_headers(headers: dict[str, str]) -> None:
    for name in ("anthropic-version", "anthropic-beta"):
        value = headers.get(name)
        if value is not None and not _ANTHROPIC_HEADER.fullmatch(value):
            raise InvalidRequest(
                f"The {name} header must be printable ASCII of at most 1,000 characters.",
                code="invalid_header",
                param=name,
            )


def anthropic_model_name(config: "OrganizationConfig", model: str) -> str:
    """A name the catalog does not know and that names no provider is read as Anthropic's own (Claude
    Code sends dated model names): ``anthropic/<model>``, which the allow-lists then judge."""
    if model in config.aliases or "/" in model:
        return model
    return f"anthropic/{model}"


class StoredResponseEndpoint(Endpoint):
    """``GET``, ``DELETE`` or ``POST .../cancel`` of one Response the organization stored
    (``/v1/responses/{id}``): answered from the gateway's store for a bridged one, by the upstream
    that holds it for a native one. Another organization's reads as one that does not exist."""

    cacheable = False
    costs = False

    def __init__(self, name: str, action: str) -> None:
        self.name, self.action = name, action

    def read(self, request: ProxyRequest) -> dict[str, Any]:
        return {}  # what to do is in the path and the method

    async def answer(self, ctx: "ProxyContext") -> Answer:
        response_id = ctx.request.resource or ""
        organization_id = ctx.config.organization_id
        found = await conversations.recall(organization_id, [response_id], team_id=team_id_of(ctx))
        turn = found.get(response_id)
        if turn is None:
            raise NotFound(f"Response with id '{response_id}' not found.", code="response_not_found")
        if turn.native:
            return await self._at_upstream(ctx, turn)
        if self.action == "retrieve":
            return Answer(body=dumps(turn.response))
        if self.action == "delete":
            await conversations.forget(turn)
            return Answer(body=dumps({"id": response_id, "object": "response", "deleted": True}))
        raise InvalidRequest(
            "Only background responses can be cancelled.", code="invalid_request", param=None
        )

    async def _at_upstream(self, ctx: "ProxyContext", turn: StoredTurn) -> Answer:
        key = next(
            (
                key
                for keys in ctx.config.keys_by_provider.values()
                for key in keys
                if key.id == turn.provider_key_id
            ),
            None,
        )
        if key is None:
            raise NotFound(
                f"Response with id '{turn.response_id}' is held by a provider key this organization no "
                "longer has.",
                code="response_not_found",
            )
        candidate = Candidate(alias=None, deployment=DeploymentSnapshot(key.provider, turn.model), key=key)
        completion = await Forwarder(
            ctx.record, [candidate], ctx.request.started, retry=False, client_caused=CLIENT_CAUSED | {404}
        ).complete(
            lambda adapter, target: adapter.response_resource_request(target, turn.response_id, self.action),
            lambda adapter, target, payload: adapter.response_resource_answer(target, payload),
        )
        if self.action == "delete":
            await conversations.forget(turn)
            return Answer(body=completion.body)
        # The provider kept the answer as it made it: redacted here as it was when it was made.
        return Answer(body=redacted_answer(ctx, "responses", turn.model, completion.body))


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
    costs = False

    def read(self, request: ProxyRequest) -> dict[str, Any]:
        return {}  # a GET: there is no body to read

    async def answer(self, ctx: "ProxyContext") -> Answer:
        return Answer(body=models_body_for(ctx.config, ctx.team, ctx.key))


class ModelRetrieve(Endpoint):
    """One alias of the organization's, as the model list shows it to the caller (GET
    /v1/models/{model}); an alias it may not call reads as one that does not exist."""

    name = "models"
    cacheable = False
    costs = False

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
responses = Responses()
messages = Messages()
count_tokens = CountTokens()
response_retrieve = StoredResponseEndpoint("responses.retrieve", "retrieve")
response_delete = StoredResponseEndpoint("responses.delete", "delete")
response_cancel = StoredResponseEndpoint("responses.cancel", "cancel")
embeddings = Embeddings()
models = ModelList()
model = ModelRetrieve()
