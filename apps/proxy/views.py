"""The proxy's endpoints. Each is an async function of a ProxyRequest whose key is already
authenticated and whose organization's configuration is loaded (app.py); the routes there say
which permission each needs. The stages themselves live in pipeline.py."""

import json

import aiohttp
from django.conf import settings

from apps.core.errors import InvalidRequest

from . import pipeline
from .adapters import adapter_for
from .adapters.base import UpstreamProtocolError
from .forwarding import Forwarder, OpenStream
from .http import ProxyRequest, ProxyResponse, ProxyStream


async def list_models(request: ProxyRequest) -> ProxyResponse:
    return ProxyResponse(status=200, body=request.config.models_body)


async def chat_completions(request: ProxyRequest) -> ProxyResponse | ProxyStream:
    body = pipeline.json_object(request)
    pipeline.validate_chat(body)
    context = pipeline.begin(request, body)
    record = request.record
    record.requested_model = body["model"]
    record.stream = bool(body.get("stream"))
    await pipeline.run_stages(context)
    forwarder = Forwarder(record, pipeline.route(context), request.started)
    if record.stream:
        wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        stream = await forwarder.open_stream(
            lambda adapter, target: adapter.chat_request(
                target, body, stream=True, client_wants_usage=wants_usage
            ),
            client_wants_usage=wants_usage,
        )
        return ProxyStream(chunks=_relay(context, stream))
    completion = await forwarder.complete(
        lambda adapter, target: adapter.chat_request(target, body, stream=False, client_wants_usage=False),
        lambda adapter, target, payload: adapter.chat_completion(target, payload),
    )
    pipeline.settle_cost(context, completion.usage)
    return ProxyResponse(status=200, body=completion.body)


async def embeddings(request: ProxyRequest) -> ProxyResponse:
    body = pipeline.json_object(request)
    pipeline.validate_embeddings(body)
    context = pipeline.begin(request, body)
    request.record.requested_model = body["model"]
    await pipeline.run_stages(context)
    candidates = [c for c in pipeline.route(context) if adapter_for(c.key.provider).supports_embeddings()]
    if not candidates:
        raise InvalidRequest(
            f"The model '{body['model']}' is not served by a provider that has embeddings.",
            code="model_not_supported",
            param="model",
        )
    completion = await Forwarder(request.record, candidates, request.started).complete(
        lambda adapter, target: adapter.embeddings_request(target, body),
        lambda adapter, target, payload: adapter.embeddings_response(target, payload),
    )
    pipeline.settle_cost(context, completion.usage)
    return ProxyResponse(status=200, body=completion.body)


STREAM_CUT = "The upstream ended the stream before the answer was complete."


async def _relay(context: pipeline.ProxyContext, stream: OpenStream):
    """The client's stream: the upstream's chunks as they come, then the cost comment and
    [DONE]; a stream the upstream cuts short ends with an error event instead."""
    record = context.request.record
    translator = stream.translator
    failure: str | None = None
    try:
        for frame in stream.first:
            yield frame
        async for event, data in stream.events:
            for frame in translator.feed(event, data):
                yield frame
            if translator.finished:
                break
        if translator.error is not None:
            failure = translator.error  # the upstream's own error event has reached the client
        elif not translator.finished:
            failure = STREAM_CUT
    except (aiohttp.ClientError, OSError, TimeoutError, UpstreamProtocolError) as error:
        failure = f"{STREAM_CUT} ({type(error).__name__})"
    finally:
        stream.close()
        usage = translator.usage
        if usage is None:
            usage = pipeline.estimate_usage(context.body, translator.output_chars)
        pipeline.settle_cost(context, usage)
        record.stream_completed = failure is None and translator.finished
    if failure is None:
        yield f": x-{settings.GATEWAY_BRAND}-cost-usd={record.cost_usd:f}\n\n".encode() + b"data: [DONE]\n\n"
        return
    record.error_type, record.error_code = "upstream_error", "stream_interrupted"
    if translator.error is None:
        error = {"message": failure, "type": "upstream_error", "param": None, "code": "stream_interrupted"}
        yield b"data: " + json.dumps({"error": error}).encode() + b"\n\n"
