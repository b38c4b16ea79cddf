"""The response cache in the proxy (docs/cache.md): look-up before routing, L1 (this process), L2
(Redis, every process) then L3 (semantic, opt-in); a miss's answer is stored after it.

Inside the policies stage, so what is looked up and stored is the request as the policies left it
(a redacted prompt is cached redacted; a blocked one never gets here), and a hit's answer still
goes through the answer's redaction on its way out.
"""

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.utils import timezone

from apps.audit.records import RequestRecord, emit
from apps.cache.keys import WHOLE_ONLY, entry_key, is_cacheable, request_fingerprint, semantic_query
from apps.cache.memory import local_cache
from apps.cache.semantic import semantic_index
from apps.cache.settings import CacheSettings
from apps.cache.shared import shared_tier
from apps.cache.stored_answers import CachedAnswer, StreamAssembler, replay_stream
from apps.catalog.pricing import cost_usd
from apps.core.errors import GatewayError

from .adapters import adapter_for
from .answers import Answer, StreamOutcome
from .forwarding import Forwarder
from .pipeline import ProxyContext, Stage, StageState
from .routing import plan_attempts, resolve_model
from .runtime import runtime

logger = logging.getLogger(__name__)

CHAT = "chat.completions"


@dataclass(slots=True)
class Lookup:
    """A cacheable request's place in the cache: where its answer is stored after a miss."""

    key: str
    settings: CacheSettings
    shared: bool  # L2 may be used (the organization's purge epoch is known)
    model: str  # the model as the cache names it: the alias and the deployments it resolves to
    fingerprint: str
    vector: list[float] | None = None  # the prompt's embedding, when L3 looked it up
    partition: str = ""  # its L3 partition (keys.semantic_query), with the vector
    assembler: StreamAssembler | None = None


# The cache stage's state: where a miss's answer is stored (none after a hit).
LOOKUP: StageState[Lookup] = StageState("cache")


class ServeFromCache(Stage):
    slot = "cache"
    endpoints = frozenset({CHAT, "embeddings", "responses", "messages"})

    async def before(self, ctx: ProxyContext) -> Answer | None:
        config = ctx.config
        cache_settings = config.cache_settings_for(ctx.team.id if ctx.team is not None else None)
        endpoint = ctx.endpoint.name
        directives = _directives(ctx.request.headers.get("cache-control", ""))
        if (
            "no-store" in directives
            or (ctx.stream and endpoint in WHOLE_ONLY)
            # Anthropic's betas change the answer and are not in the body the key is made of.
            or "anthropic-beta" in ctx.request.headers
            or not is_cacheable(endpoint, ctx.body, cache_settings)
        ):
            ctx.cache = "bypass"
            return None
        model = _cache_model(config, ctx.body["model"])
        fingerprint = request_fingerprint(endpoint, ctx.body)
        epoch = config.cache_epoch
        lookup = Lookup(
            key=entry_key(
                config.organization_id, epoch if epoch is not None else -1, ctx.regions, model, fingerprint
            ),
            settings=cache_settings,
            shared=epoch is not None,
            model=model,
            fingerprint=fingerprint,
        )
        ctx.keep(LOOKUP, lookup)
        if ctx.stream:
            lookup.assembler = StreamAssembler()
        if "no-cache" in directives:  # not looked up; the answer is stored
            ctx.cache = "bypass"
            return None
        tier, cached = "l1", local_cache.get(lookup.key, config.generation)
        if cached is None and lookup.shared:
            tier, cached = "l2", await shared_tier().get(lookup.key)
            if cached is not None:
                local_cache.put(lookup.key, config.generation, cached, cache_settings.ttl_seconds)
        if cached is None and cache_settings.semantic_enabled and endpoint == CHAT:
            tier, cached = "l3", await _semantic_hit(ctx, lookup)
        if cached is None:
            return None
        ctx.cache = tier
        ctx.drop(LOOKUP)  # a hit stores nothing
        ctx.record.cache_savings_usd = cached.cost_usd
        if not ctx.stream:
            return Answer(body=cached.body)
        wants_usage = bool((ctx.body.get("stream_options") or {}).get("include_usage"))
        return Answer.streamed(_replayed(replay_stream(cached, include_usage=wants_usage)), StreamOutcome())

    async def after(self, ctx: ProxyContext, answer: Answer) -> None:
        lookup = ctx.state(LOOKUP)
        if lookup is not None and answer.status == 200:
            _store(ctx, lookup, answer.body)

    def on_chunk(self, ctx: ProxyContext, chunk: bytes) -> bytes:
        lookup = ctx.state(LOOKUP)
        if lookup is not None and lookup.assembler is not None:
            lookup.assembler.feed(chunk)
        return chunk

    async def on_stream_end(self, ctx: ProxyContext, outcome: StreamOutcome) -> None:
        lookup = ctx.state(LOOKUP)
        if lookup is None or lookup.assembler is None or not outcome.completed:
            return
        body = lookup.assembler.result()
        if body is not None:
            _store(ctx, lookup, body)


def _directives(header: str) -> frozenset[str]:
    return frozenset(part.strip().lower().split("=", 1)[0] for part in header.split(",") if part.strip())


def _cache_model(config, model: str) -> str:
    """The deployments the requested model routes to (docs/cache.md "The key"): two aliases of one
    deployment share entries, an alias pointed elsewhere starts with an empty cache."""
    try:
        deployments, _ = resolve_model(config, model)
    except GatewayError:
        return model
    return ",".join(f"{d.provider}/{d.upstream_model}" for _, d in deployments) or model


async def _replayed(frames: list[bytes]):
    for frame in frames:
        yield frame


# --- Storing ---------------------------------------------------------------------------------------


def _in_background(coroutine) -> None:
    """Off the request: the client never waits for L2 or L3, and a failure there is only logged."""
    task = asyncio.get_running_loop().create_task(coroutine)
    runtime.background.add(task)
    task.add_done_callback(runtime.background.discard)


def _store(ctx: ProxyContext, lookup: Lookup, body: bytes) -> None:
    """L1 at once (an immediate repeat hits), L2 and L3 in the background."""
    record = ctx.record
    if record.provider is None or not body or len(body) > settings.GATEWAY_CACHE_MAX_ENTRY_BYTES:
        return
    usage = record.usage
    answer = CachedAnswer(
        body=body,
        provider=record.provider,
        model=record.model or "",
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        cached_input_tokens=usage.cached_input_tokens if usage else 0,
        cost_usd=record.cost_usd,
        created_at=datetime.now(UTC),
    )
    ttl = lookup.settings.ttl_seconds
    local_cache.put(lookup.key, ctx.config.generation, answer, ttl)
    if lookup.shared:
        _in_background(shared_tier().put(lookup.key, answer, ttl))
    if lookup.vector is not None:
        _in_background(
            semantic_index.add(
                ctx.config.organization_id,
                lookup.model,
                lookup.settings.embedding_model,
                lookup.vector,
                answer,
                ttl,
                lookup.fingerprint,
                partition=lookup.partition,
            )
        )


# --- L3 ------------------------------------------------------------------------------------------


async def _semantic_hit(ctx: ProxyContext, lookup: Lookup) -> CachedAnswer | None:
    """An earlier answer to a prompt close enough to this one; None when there is none or the
    embedding could not be had (L3 is skipped then, never the request)."""
    query = semantic_query(ctx.body, ctx.regions)
    if query is None:  # a part that is not text: L3 is neither searched nor filled
        return None
    embedding_model = lookup.settings.embedding_model
    lookup.partition = query.partition
    try:
        lookup.vector = await _embedding(ctx, embedding_model, query.text)
    except Exception:
        logger.warning("The L3 cache's embedding call failed; L3 skipped", exc_info=True)
        return None
    if lookup.vector is None:
        return None
    found = await semantic_index.search(
        ctx.config.organization_id,
        lookup.model,
        lookup.vector,
        lookup.settings.semantic_threshold,
        partition=query.partition,
        embedding_model=embedding_model,
    )
    if found is None:
        return None
    cached, _similarity = found
    # A lower tier's hit fills the tiers above, under this request's own key.
    local_cache.put(lookup.key, ctx.config.generation, cached, lookup.settings.ttl_seconds)
    if lookup.shared:
        _in_background(shared_tier().put(lookup.key, cached, lookup.settings.ttl_seconds))
    lookup.vector = None  # already in L3
    return cached


async def _embedding(ctx: ProxyContext, model: str, text: str) -> list[float] | None:
    """The prompt's embedding through the organization's own catalog, as a request of its own: its
    own audit entry and cost, so the request being answered is charged for its answer only."""
    if not text:
        return None
    config, key = ctx.config, ctx.key
    record = RequestRecord(
        request_id=str(uuid.uuid4()),
        started_at=timezone.now(),
        endpoint="/v1/embeddings",
        client_ip=ctx.record.client_ip,
        user_agent="gateway semantic cache",
        organization_id=config.organization_id,
        api_key_id=key.id,
        api_key_prefix=key.key_prefix,
        team_id=ctx.record.team_id,
        requested_model=model,
        log_bodies="metadata",  # the prompt is the request's own entry's to keep, not this one's
    )
    started = time.perf_counter()
    try:
        candidates = [
            candidate
            for candidate in plan_attempts(config, model, ctx.regions)
            if adapter_for(candidate.key.provider).supports_embeddings()
        ]
    except GatewayError as error:  # no key in the request's regions, all cooling down: nothing was sent
        logger.warning("The L3 cache's embedding model cannot be called (%s); L3 skipped", error.code)
        return None
    body = {"model": model, "input": text}
    try:
        # No retry: skipping L3 at once beats delaying the request for a cache lookup.
        completion = await Forwarder(record, candidates, started, retry=False).complete(
            lambda adapter, target: adapter.embeddings_request(target, body),
            lambda adapter, target, payload: adapter.embeddings_response(target, payload),
        )
        record.usage = completion.usage
        if completion.usage is not None and record.provider is not None and record.model is not None:
            price = config.price(record.provider, record.model, record.started_at)
            record.cost_usd = cost_usd(price, completion.usage)
        data = json.loads(completion.body).get("data") or []
    except GatewayError as error:
        record.status, record.error_type, record.error_code = error.status, error.type, error.code
        logger.warning("The L3 cache's embedding call failed (%s); L3 skipped", error.code)
        return None
    finally:
        record.latency_ms = round((time.perf_counter() - started) * 1000, 2)
        emit(record)
    vector = data[0].get("embedding") if data and isinstance(data[0], dict) else None
    return vector if isinstance(vector, list) and vector else None
