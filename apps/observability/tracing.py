"""OpenTelemetry traces, configured by the standard ``OTEL_*`` variables and off without them.

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (and
``OTEL_SDK_DISABLED`` is not ``true``): ``setup`` installs the SDK's tracer provider with a batching
OTLP/HTTP exporter (spans leave from the SDK's own thread, never on the request), the sampler of
``OTEL_TRACES_SAMPLER``/``OTEL_TRACES_SAMPLER_ARG`` (default: parent-based, always on) and the
service name of ``OTEL_SERVICE_NAME`` (default ``gateway``). Off, nothing of the SDK is imported and
each hook below is one test of ``enabled``.

Content (the request's and the answer's bodies) goes on a span only with
``GATEWAY_TRACE_CONTENT=true`` and for an organization whose audit log keeps bodies, as it keeps
them (redacted or with secrets masked).

A proxied request is one SERVER span, ``{operation} {model}`` (``chat gpt-4o-mini``), with the GenAI
semantic conventions' attributes and the gateway's own; it continues an incoming W3C ``traceparent``.
Each upstream attempt is a CLIENT span under it, whose context the upstream request carries
(``traceparent``), and admission, the policy scan (of the request, and of a whole answer) and the
cache look-up are spans of their own. The spans hold no key and no header.
"""

import contextlib
import logging
import os
from typing import Any

logger = logging.getLogger(__name__)

enabled = False
_tracer: Any = None

# The GenAI conventions' operation of each proxy endpoint (others are named by their route).
OPERATIONS = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "chat",
    "/v1/messages": "chat",
    "/v1/completions": "text_completion",
    "/v1/embeddings": "embeddings",
}
_PROTOCOLS = ("http/protobuf", "")


def configured() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def setup(*, instrument_django: bool = False, instrument_celery: bool = False) -> None:
    """Installs the tracer provider when the variables ask for traces; once per process."""
    global enabled, _tracer
    if enabled or not configured():
        return
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or ""
    )
    if protocol.strip() not in _PROTOCOLS:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: the gateway exports traces over OTLP/HTTP "
            "(http/protobuf); point it at the collector's HTTP port (4318)."
        )
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = os.environ.get("OTEL_SERVICE_NAME") or "gateway"
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer("gateway")
    enabled = True
    if instrument_django:
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        DjangoInstrumentor().instrument(request_hook=_without_secrets_in_urls)
    if instrument_celery:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        CeleryInstrumentor().instrument()


# Where the standard instrumentation puts a request's address (older and newer conventions).
_URL_ATTRIBUTES = ("http.target", "http.url", "url.path", "url.query", "url.full")


def _without_secrets_in_urls(span: Any, request: Any) -> None:
    """The management API's and the console's spans: their paths and query strings as the access
    log writes them, without an invitation's token or a sign-in callback's code."""
    from .logs import loggable_path

    held = getattr(span, "attributes", None) or {}
    for name in _URL_ATTRIBUTES:
        value = held.get(name)
        if isinstance(value, str):
            span.set_attribute(name, loggable_path(value))
    if held.get("url.query") and "?" not in str(held.get("url.query")):
        span.set_attribute("url.query", loggable_path("?" + held["url.query"])[1:])


def guarded(hook, *args) -> Any:
    """Runs one of the hooks below; a broken SDK or exporter costs the span, never the request."""
    try:
        return hook(*args)
    except Exception:
        logger.exception("Tracing: a span could not be recorded")
        return None


def shutdown() -> None:
    """Sends what is batched (a stopping server's last spans)."""
    if enabled:
        from opentelemetry import trace

        with contextlib.suppress(Exception):
            trace.get_tracer_provider().shutdown()


# --- The proxy's spans -------------------------------------------------------------------------


def start_request(headers: dict[str, str], method: str, path: str) -> Any:
    """The request's SERVER span, continuing the caller's ``traceparent``, made current in the
    request's task (and the tasks it starts) so that the spans below are its children."""
    from opentelemetry import context, propagate, trace

    parent = propagate.extract(headers)
    span = _tracer.start_span(f"{method} {path}", context=parent, kind=trace.SpanKind.SERVER)
    context.attach(trace.set_span_in_context(span, parent))
    return span


def end_request(
    span: Any, record: Any, finish_reasons: tuple[str, ...] = (), content: tuple[str, str] | None = None
) -> None:
    """Names and describes the request's span from its record, and ends it. ``content``: the
    request's and the answer's bodies, when the settings allow them on spans (apps/proxy/app.py)."""
    from opentelemetry.trace import Status, StatusCode

    operation = OPERATIONS.get(record.endpoint)
    model = record.requested_model or ""
    if operation:
        span.update_name(f"{operation} {model}".strip())
        attributes: dict[str, Any] = {"gen_ai.operation.name": operation}
        if model:
            attributes["gen_ai.request.model"] = model
        if record.provider:
            attributes["gen_ai.provider.name"] = record.provider
        if record.model:
            attributes["gen_ai.response.model"] = record.model
        if record.usage is not None:
            attributes["gen_ai.usage.input_tokens"] = record.usage.input_tokens
            attributes["gen_ai.usage.output_tokens"] = record.usage.output_tokens
        if finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = finish_reasons
    else:
        attributes = {}
    attributes.update(
        {
            "http.request.method": record.method,
            "http.route": record.endpoint,
            "http.response.status_code": record.status,
            "gateway.request_id": record.request_id,
            "gateway.cache": record.cache,
            "gateway.cost_usd": float(record.cost_usd),
        }
    )
    if record.team_id:
        attributes["gateway.team_id"] = str(record.team_id)
    if record.organization_id:
        attributes["gateway.organization_id"] = str(record.organization_id)
    if record.error_code:
        attributes["error.type"] = record.error_code
    if content is not None:
        attributes["gen_ai.input.messages"], attributes["gen_ai.output.messages"] = content
    span.set_attributes(attributes)
    if record.status >= 500:
        span.set_status(Status(StatusCode.ERROR, record.error_code or None))
    span.end()


def start_attempt(record: Any, provider: str, model: str, headers: dict[str, str]) -> Any:
    """An upstream attempt's CLIENT span, named by the request's operation and the upstream's model
    (``embeddings text-embedding-3-small``), or by its route where the conventions name no operation
    (``POST /v1/messages/count_tokens``); ``headers`` (the upstream request's) get its
    ``traceparent``, so the upstream's own spans join the trace."""
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    operation = OPERATIONS.get(record.endpoint)
    attributes = {"gen_ai.provider.name": provider, "gen_ai.request.model": model}
    if operation:
        attributes["gen_ai.operation.name"] = operation
    name = f"{operation} {model}" if operation else f"{record.method} {record.endpoint}"
    span = _tracer.start_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes)
    # The span's traceparent (and tracestate) alone: never the caller's baggage or other headers.
    TraceContextTextMapPropagator().inject(headers, context=trace.set_span_in_context(span, Context()))
    return span


def end_attempt(span: Any, attempt: Any) -> None:
    """Ends an attempt's span with its outcome (``apps.audit.records.Attempt``), if it has one."""
    from opentelemetry.trace import Status, StatusCode

    if attempt is not None:
        if attempt.status is not None:
            span.set_attribute("http.response.status_code", attempt.status)
        span.set_attribute("gateway.attempt.outcome", attempt.outcome)
        if attempt.outcome != "ok":
            span.set_attribute("error.type", attempt.outcome)
            span.set_status(Status(StatusCode.ERROR))
    span.end()


def stage(name: str) -> Any:
    """A span for one stage of the request (admission, the policy scans, the cache look-up); the
    caller tests ``enabled`` first."""
    return _tracer.start_as_current_span(name)
