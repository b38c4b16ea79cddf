"""The lean ASGI app that serves /v1/.

It skips Django's middleware and URL resolver (about 3.5 ms a request here, see
docs/benchmarks.md) and runs a short pipeline of its own: read the request, authenticate the API
key, check the route's permission, load the organization's configuration from memory, run the
endpoint through the pipeline (pipeline.py), send the answer with the gateway headers, then hand
the request's record to the audit log. Errors of any kind leave in OpenAI's shape (errors.py).
"""

import asyncio
import contextlib
import logging
import re
import time
import uuid
from dataclasses import dataclass
from urllib.parse import quote

import orjson
from django.conf import settings
from django.utils import timezone

from apps.audit.records import RequestRecord, emit
from apps.audit.redaction import kept_body
from apps.core import shutdown
from apps.core.brand import header_names
from apps.core.database import UNREACHABLE_ERRORS, DatabaseUnavailable
from apps.core.errors import GatewayError, MethodNotAllowed, NotFound
from apps.events.publish import EventType, raise_event
from apps.observability import logs, tracing

from . import admission, endpoints, pipeline, settling
from .auth import require_permission
from .caller import configured, identified
from .endpoints import Endpoint
from .errors import InternalError, anthropic_error_body, error_response_parts
from .http import (
    ProxyRequest,
    ProxyResponse,
    ProxyStream,
    Receive,
    Scope,
    Send,
    decode_headers,
    read_body,
)
from .runtime import runtime

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Route:
    endpoint: Endpoint
    permissions: frozenset[str]


RESPONSES = frozenset({"proxy:llm", "proxy:responses"})
MESSAGES = frozenset({"proxy:llm", "proxy:messages"})
ROUTES: dict[str, dict[str, Route]] = {
    "/v1/models": {"GET": Route(endpoints.models, frozenset({"proxy:llm", "proxy:models"}))},
    "/v1/chat/completions": {
        "POST": Route(endpoints.chat_completions, frozenset({"proxy:llm", "proxy:chat"}))
    },
    "/v1/embeddings": {"POST": Route(endpoints.embeddings, frozenset({"proxy:llm", "proxy:embeddings"}))},
    "/v1/responses": {"POST": Route(endpoints.responses, RESPONSES)},
    "/v1/messages": {"POST": Route(endpoints.messages, MESSAGES)},
    "/v1/messages/count_tokens": {"POST": Route(endpoints.count_tokens, MESSAGES)},
}


@dataclass(frozen=True, slots=True)
class ResourceRoute:
    """Paths that name one resource between a prefix and a suffix (``/v1/models/{model}``,
    ``/v1/responses/{id}/cancel``); the audit log keeps the ``template``, so its endpoints stay a
    short list. ``slashes``: whether the name may hold a slash."""

    prefix: str
    suffix: str
    template: str
    methods: dict[str, Route]
    slashes: bool = False

    def resource(self, path: str) -> str | None:
        if not (path.startswith(self.prefix) and path.endswith(self.suffix)):
            return None
        name = path[len(self.prefix) : len(path) - len(self.suffix)]
        return name if name and (self.slashes or "/" not in name) else None


RESOURCE_ROUTES: tuple[ResourceRoute, ...] = (
    # A model id may hold a slash (provider/model names do), so the rest of the path is the id.
    ResourceRoute(
        "/v1/models/",
        "",
        "/v1/models/{model}",
        {"GET": Route(endpoints.model, frozenset({"proxy:llm", "proxy:models"}))},
        slashes=True,
    ),
    ResourceRoute(
        "/v1/responses/",
        "/cancel",
        "/v1/responses/{response_id}/cancel",
        {"POST": Route(endpoints.response_cancel, RESPONSES)},
    ),
    ResourceRoute(
        "/v1/responses/",
        "",
        "/v1/responses/{response_id}",
        {
            "GET": Route(endpoints.response_retrieve, RESPONSES),
            "DELETE": Route(endpoints.response_delete, RESPONSES),
        },
    ),
)

# Paths of OpenAI's API the gateway does not serve, each with what to call instead.
NOT_SERVED = {
    "/v1/completions": (
        "The legacy completions API (POST /v1/completions) is not served: send the prompt as a user "
        "message to POST /v1/chat/completions."
    ),
}


def find_route(method: str, path: str) -> tuple[dict[str, Route], str, str | None]:
    """The methods served at ``path``, the endpoint's name for the audit log, and the resource the
    path names (None for a path without one). An unknown path is a 404 that says what is served."""
    methods = ROUTES.get(path)
    if methods is not None:
        return methods, path, None
    for route in RESOURCE_ROUTES:
        resource = route.resource(path)
        if resource is not None:
            return route.methods, route.template, resource
    message = NOT_SERVED.get(path, f"Unknown endpoint {method} {path}.")
    raise NotFound(message, code="unknown_url")


class ProxyApp:
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        headers = decode_headers(scope["headers"])
        request_id = str(uuid.uuid4())
        logs.request_id.set(request_id)  # this request's task's own context: its log lines carry it
        path = scope["path"].rstrip("/") or "/"
        client_ip = client[0] if client else ""
        record = RequestRecord(
            request_id=request_id,
            started_at=timezone.now(),
            endpoint=path,
            client_ip=client_ip,
            user_agent=headers.get("user-agent", "")[:500],
            method=scope["method"],
        )
        request = ProxyRequest(
            method=scope["method"],
            path=path,
            headers=headers,
            client_ip=client_ip,
            request_id=request_id,
            record=record,
        )
        if tracing.enabled:
            request.span = tracing.guarded(tracing.start_request, headers, scope["method"], path)
        try:
            response = await self.handle(request, receive)
        except GatewayError as error:
            response = self.error_response(request, error)
        except UNREACHABLE_ERRORS:  # a database read this request could not do without: retry soon
            response = self.error_response(request, DatabaseUnavailable())
        except asyncio.CancelledError:
            if not shutdown.state.cut:  # the client went away: nobody to answer
                if request.span is not None:
                    tracing.guarded(tracing.end_request, request.span, record)
                raise
            # The server's grace period is over: this request gets its answer (and its audit entry).
            response = self.error_response(request, shutdown.ServerStopping())
        except Exception:
            logger.exception("Unhandled error in the proxy (request %s)", request.request_id)
            response = self.error_response(request, InternalError())
        try:
            if isinstance(response, ProxyStream):
                await self.send_stream(send, receive, request, response)
            else:
                await self.send_response(send, request, response)
        finally:
            hand_over(request)
            settling.settle_soon(request)  # after the answer: the client never waits for it

    async def handle(self, request: ProxyRequest, receive: Receive) -> ProxyResponse | ProxyStream:
        if request.path.startswith("/v1/messages/"):  # an unknown path of the Messages API
            request.error_body = anthropic_error_body
        methods, request.record.endpoint, request.resource = find_route(request.method, request.path)
        # Errors from here on leave in the endpoint's API's shape (Anthropic's for the Messages API).
        request.error_body = next(iter(methods.values())).endpoint.error_body
        route = methods.get(request.method)
        if route is None:
            raise MethodNotAllowed(
                f"{request.method} is not allowed on {request.path}; use {', '.join(methods)}.",
                headers={"allow": ", ".join(methods)},
            )
        key = await identified(request)
        logs.organization_id.set(key.organization_id)
        require_permission(key, route.permissions)
        if shutdown.state.draining:  # arrived on a kept-alive connection after SIGTERM: refused, audited
            raise shutdown.ServerStopping(closing=True)
        caller = await configured(request, key)
        admission.send_early(request, caller)  # Redis answers while the body is read and checked
        # Read only after the key is known, so anonymous clients cannot make the gateway buffer bodies.
        request.body = await read_body(receive, request.headers, settings.GATEWAY_MAX_BODY_BYTES)
        runtime.key_usage.note(key.id)
        return await pipeline.run(route.endpoint, request, caller)

    def error_response(self, request: ProxyRequest, error: GatewayError) -> ProxyResponse:
        record = request.record
        record.status, record.error_type, record.error_code = error.status, error.type, error.code
        status, body, headers = error_response_parts(error, request.error_body)
        return ProxyResponse(status=status, body=body, headers=headers)

    def gateway_headers(self, request: ProxyRequest, *, stream: bool) -> dict[str, str]:
        names, record = header_names(), request.record
        elapsed_ms = (time.perf_counter() - request.started) * 1000
        headers = {
            names.request_id: request.request_id,
            "x-request-id": request.request_id,
            names.latency: f"{elapsed_ms:.2f}",
            names.overhead: f"{max(0.0, elapsed_ms - record.upstream_ms):.2f}",
            names.cache: record.cache,
            "cache-status": names.cache_status.get(record.cache, names.cache_status["bypass"]),
        }
        if record.provider is not None:
            headers[names.provider] = record.provider
            headers[names.model] = record.model or ""
        if stream:
            headers[names.ttft] = f"{elapsed_ms:.2f}"
            record.ttft_ms = round(elapsed_ms, 2)
        else:
            headers[names.cost] = f"{record.cost_usd:f}"
        if record.policy_action:
            headers[names.policy_action] = record.policy_action
            headers[names.policy_reason] = record.policy_reason or ""
        if record.experiment_id is not None:
            headers[names.experiment] = record.experiment_id
            headers[names.variant] = record.experiment_variant or ""
        headers.update(request.limit_headers)
        return headers

    async def send_response(self, send: Send, request: ProxyRequest, response: ProxyResponse) -> None:
        record = request.record
        record.status = response.status
        if record.log_bodies != "metadata":
            record.request_body, record.response_body = request.body, response.body
        headers = {"content-type": "application/json", **self.gateway_headers(request, stream=False)}
        headers.update(response.headers)
        # A whole answer's length is known: sent as it is, not in chunks, as the providers send it.
        headers["content-length"] = str(len(response.body))
        if request.span is not None and tracing.OPERATIONS.get(record.endpoint) == "chat":
            request.finish_reasons = finish_reasons_of(response.body)
        await send({"type": "http.response.start", "status": response.status, "headers": _encode(headers)})
        await send({"type": "http.response.body", "body": response.body})

    async def send_stream(
        self, send: Send, receive: Receive, request: ProxyRequest, response: ProxyStream
    ) -> None:
        """Sends the stream chunk by chunk; a client that goes away cancels it (and with it the
        upstream request)."""
        record = request.record
        record.status = response.status
        keep_body = record.log_bodies != "metadata"
        if keep_body:
            record.request_body = request.body
        headers = {
            "content-type": "text/event-stream; charset=utf-8",
            "cache-control": "no-cache",
            "x-accel-buffering": "no",
            **self.gateway_headers(request, stream=True),
            **response.headers,
        }
        await send({"type": "http.response.start", "status": response.status, "headers": _encode(headers)})
        pump = asyncio.ensure_future(_pump(send, response, request, keep_body))
        watch = asyncio.ensure_future(_until_disconnect(receive))
        stopping = False
        try:
            await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if not shutdown.state.cut:
                raise
            stopping = True
        finally:
            watch.cancel()
            if not pump.done():
                request.record.client_disconnected = not stopping
                pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            await response.chunks.aclose()
        if stopping and not request.record_handed_over:
            # Cut by the end of the server's grace period: the stream ends with the error event the
            # client's SDK raises, never a silent end that reads like a whole answer.
            error = shutdown.ServerStopping("The gateway is restarting; the stream was cut short.")
            record.error_type, record.error_code = error.type, error.code
            await send({"type": "http.response.body", "body": response.error_frame(error), "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            hand_over(request)


def hand_over(request: ProxyRequest) -> None:
    """Gives the request's record to the audit log, once. Called in the same step as the answer's
    last send (no await between them), so the entry is on the spool before the event loop can put
    the end of the answer on the wire: a server killed after a client got its answer loses no entry."""
    if request.record_handed_over:
        return
    request.record_handed_over = True
    record = request.record
    record.latency_ms = round((time.perf_counter() - request.started) * 1000, 2)
    emit(record)
    if len(record.attempts) > 1:
        announce_failover(record)
    if request.span is not None:
        tracing.guarded(_end_span, request)


def announce_failover(record: RequestRecord) -> None:
    """``provider.failover``: the request left its first upstream for another (one event per request:
    from the first attempt, which failed, to the last, which answered or was the last tried)."""
    first, last = record.attempts[0], record.attempts[-1]
    try:
        raise_event(
            record.organization_id,
            EventType.PROVIDER_FAILOVER,
            {
                "request_id": record.request_id,
                "model": record.requested_model,
                "attempts": len(record.attempts),
                "succeeded": last.outcome == "ok",
                "from": {
                    "provider": first.provider,
                    "provider_key_id": first.provider_key_id,
                    "model": first.model,
                    "status": first.status,
                    "outcome": first.outcome,
                },
                "to": {
                    "provider": last.provider,
                    "provider_key_id": last.provider_key_id,
                    "model": last.model,
                },
            },
        )
    except Exception:  # an event never fails a request
        logger.exception("Could not raise the provider.failover event (request %s)", record.request_id)


async def _pump(send: Send, response: ProxyStream, request: ProxyRequest, keep_body: bool) -> None:
    """Sends the chunks; keeps what the audit log may store of them when ``keep_body``, and with
    traces on, the finish reasons they carry for the request's span."""
    record = request.record
    kept: list[bytes] = []
    reasons: list[str] | None = [] if request.span is not None else None
    size, limit = 0, settings.GATEWAY_AUDIT_MAX_BODY_BYTES
    try:
        async for chunk in response.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if keep_body and size < limit:
                kept.append(chunk)
                size += len(chunk)
            if reasons is not None:
                reasons += stream_finish_reasons(chunk)
    finally:
        if keep_body:
            record.response_body = b"".join(kept)
        if reasons:
            request.finish_reasons = tuple(reasons)
    await send({"type": "http.response.body", "body": b""})
    hand_over(request)  # the stream's pump task, not send_stream: that one resumes a loop turn later


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _encode(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("ascii"), _header_value(value)) for name, value in headers.items()]


def _header_value(value: str) -> bytes:
    """A header value can never fail to encode, nor split into two headers: a value with anything
    but printable ASCII (a model name in Chinese, an emoji, a CR or LF) is percent-encoded as UTF-8."""
    if value.isascii() and value.isprintable():
        return value.encode("ascii")
    return quote(value, safe="/").encode("ascii")


proxy_app = ProxyApp()


def _end_span(request: ProxyRequest) -> None:
    record = request.record
    tracing.end_request(request.span, record, request.finish_reasons, traced_content(record))


def finish_reasons_of(body: bytes) -> tuple[str, ...]:
    """Why the model stopped, for the request's span: a chat completion's choices', a message's
    ``stop_reason``, a response's ``status``. Only with traces on, after the answer is sent."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ()
    if not isinstance(answer, dict):
        return ()
    choices = answer.get("choices")
    if isinstance(choices, list):
        return tuple(
            str(choice["finish_reason"])
            for choice in choices
            if isinstance(choice, dict) and choice.get("finish_reason")
        )
    reason = answer.get("stop_reason") or (
        answer.get("status") if answer.get("object") == "response" else None
    )
    return (str(reason),) if reason else ()


# A streamed answer's finish reasons, as its frames carry them: a chat chunk's ``finish_reason``, a
# Message's ``stop_reason`` (message_delta), and the event that ends a Response (its status, as a
# whole Response's ``status`` is). Escaped quotes in generated text never match.
_STREAM_FINISH = re.compile(
    rb'"(?:finish_reason|stop_reason)":\s*"([^"\\]+)"|^event: response\.(completed|incomplete|failed)$',
    re.MULTILINE,
)


def stream_finish_reasons(chunk: bytes) -> list[str]:
    """Why the model stopped, from a stream's chunk (SSE frames), for the request's span; only with
    traces on, as the chunk is sent."""
    return [(reason or status).decode(errors="replace") for reason, status in _STREAM_FINISH.findall(chunk)]


def traced_content(record: RequestRecord) -> tuple[str, str] | None:
    """The request's and the answer's bodies for its span, as its organization's audit log keeps
    them (redacted, secrets masked), and only with ``GATEWAY_TRACE_CONTENT=true``: else None."""
    if not settings.GATEWAY_TRACE_CONTENT or record.log_bodies == "metadata":
        return None
    limit = settings.GATEWAY_AUDIT_MAX_BODY_BYTES
    return (
        kept_body(record.request_body, record.log_bodies, limit),
        kept_body(record.response_body, record.log_bodies, limit),
    )
