"""Stages plug into the pipeline at their slot: a before stage can answer in the upstream's place
(whole or streamed, the stream replayed through the same relay as a live one), change the body or
refuse; after stages see whatever answered. Test-only stages are added through ``register``."""

import asyncio
import json
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async

from apps.catalog.pricing import Usage
from apps.core.errors import RateLimited
from apps.proxy import pipeline
from apps.proxy.answers import Answer, StreamOutcome
from apps.proxy.runtime import runtime
from gateway_project.asgi import application
from tests.factories import TeamFactory
from tests.proxy.conftest import bearer, entries

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
CHAT = {"model": "fast", "messages": HELLO}
CANNED_TEXT = "Hello from the stage"
CANNED = json.dumps(
    {
        "id": "chatcmpl-canned",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": CANNED_TEXT},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 4, "total_tokens": 5},
    }
).encode()


def chunk_frame(delta: dict, finish_reason: str | None = None) -> bytes:
    chunk = {
        "id": "chatcmpl-canned",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


CANNED_FRAMES = [
    chunk_frame({"role": "assistant", "content": ""}),
    *(chunk_frame({"content": piece}) for piece in ("Hello ", "from ", "the ", "stage")),
    chunk_frame({}, "stop"),
]


async def replay(frames: list[bytes]):
    for frame in frames:
        yield frame


class CannedAnswer(pipeline.Stage):
    """Answers every chat completion itself, as a cache hit would."""

    slot = "cache"
    endpoints = frozenset({"chat.completions"})

    async def before(self, ctx):
        ctx.cache = "l1"
        if ctx.stream:
            return Answer.streamed(replay(CANNED_FRAMES), StreamOutcome(usage=Usage(1, 4)))
        return Answer(body=CANNED, usage=Usage(1, 4))


class Watcher(pipeline.Stage):
    """Sees everything after the answer and marks the chunks it passes on."""

    def __init__(self, slot: str = "policies", endpoints=None) -> None:
        self.slot = slot
        self.endpoints = endpoints
        self.befores = 0
        self.answers: list[bytes] = []
        self.costs: list[Decimal] = []
        self.chunks: list[bytes] = []
        self.outcomes: list[StreamOutcome] = []

    async def before(self, ctx):
        self.befores += 1
        return None

    async def after(self, ctx, answer):
        self.answers.append(answer.body)
        self.costs.append(ctx.record.cost_usd)
        answer.body = answer.body.replace(b"Hello", b"HELLO")

    def on_chunk(self, ctx, chunk):
        self.chunks.append(chunk)
        return chunk.replace(b"Hello", b"HELLO")

    async def on_stream_end(self, ctx, outcome):
        self.outcomes.append(outcome)
        self.costs.append(ctx.record.cost_usd)


@pytest.fixture
def add_stage():
    """Registers test-only stages for one test, and takes them out again."""
    added: list[pipeline.Stage] = []

    def add(stage: pipeline.Stage) -> pipeline.Stage:
        added.append(pipeline.register(stage))
        return stage

    yield add
    for stage in added:
        pipeline.unregister(stage)


async def test_a_stage_answers_a_completion_without_calling_the_upstream(
    proxy, routed, gateway_key, records, add_stage
):
    watcher = add_stage(Watcher("policies"))
    add_stage(CannedAnswer())
    inner = add_stage(Watcher("cache"))

    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "HELLO from the stage"
    assert routed.requests == []
    # The stage outside the answering one saw its answer and changed it; the one inside never ran.
    assert watcher.answers == [CANNED]
    assert (inner.befores, inner.answers) == (0, [])
    assert response.headers["x-gateway-cache"] == "l1"
    assert response.headers["x-gateway-cost-usd"] == "0"
    assert "x-gateway-provider" not in response.headers
    [record] = records
    assert (record.cache, record.cost_usd, record.status, record.attempts) == ("l1", Decimal(0), 200, [])
    [entry] = await entries()
    assert str(entry.id) == response.headers["x-gateway-request-id"]
    assert (entry.cache, entry.cost_usd, entry.status, entry.requested_model) == ("l1", 0, 200, "fast")
    assert entry.attempts == []


async def test_a_stage_answers_a_stream_through_the_same_relay_as_an_upstream(
    sdk, proxy, routed, gateway_key, records, add_stage
):
    watcher = add_stage(Watcher("policies"))
    add_stage(CannedAnswer())

    stream = await sdk.chat.completions.create(model="fast", messages=HELLO, stream=True)
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])

    assert text == "HELLO from the stage"
    async with proxy.stream(
        "POST", "/v1/chat/completions", headers=bearer(gateway_key[1]), json={**CHAT, "stream": True}
    ) as response:
        body = (await response.aread()).decode()
    assert routed.requests == []
    lines = [line for line in body.split("\n") if line]
    assert lines[-2:] == [": x-gateway-cost-usd=0", "data: [DONE]"]
    assert response.headers["x-gateway-cache"] == "l1"
    # The after hooks saw every replayed chunk, and the stream's end.
    assert watcher.chunks == CANNED_FRAMES * 2
    assert [(o.completed, o.failure, o.usage) for o in watcher.outcomes] == [(True, None, Usage(1, 4))] * 2
    assert watcher.costs == [0, 0]
    assert [(r.cache, r.cost_usd, r.stream, r.stream_completed) for r in records] == [
        ("l1", Decimal(0), True, True)
    ] * 2


async def test_a_client_that_leaves_a_replayed_stream_ends_it_for_the_stages(
    routed, gateway_key, records, add_stage
):
    never = asyncio.Event()

    async def first_frame_then_wait():
        yield CANNED_FRAMES[0]
        await never.wait()  # the rest never comes: only the client's leaving ends this stream
        yield CANNED_FRAMES[1]

    class EndlessReplay(pipeline.Stage):
        slot = "cache"

        async def before(self, ctx):
            return Answer.streamed(first_frame_then_wait())

    watcher = add_stage(Watcher("policies"))
    add_stage(EndlessReplay())
    body = json.dumps({**CHAT, "stream": True}).encode()
    delivered = asyncio.Event()
    received: list[bytes] = []

    async def receive():
        if not received:
            received.append(body)
            return {"type": "http.request", "body": body, "more_body": False}
        await delivered.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body" and message.get("body"):
            delivered.set()

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(b"authorization", f"Bearer {gateway_key[1]}".encode())],
        "client": ("203.0.113.7", 5000),
        "query_string": b"",
    }
    await asyncio.wait_for(application(scope, receive, send), timeout=10)

    [outcome] = watcher.outcomes
    assert outcome.completed is False
    [record] = records
    assert (record.client_disconnected, record.stream_completed) == (True, False)
    assert routed.requests == []


async def test_after_stages_see_the_upstreams_answer_once_it_is_priced(
    proxy, sdk, routed, gateway_key, records, add_stage
):
    watcher = add_stage(Watcher("policies"))

    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))
    stream = await sdk.chat.completions.create(model="fast", messages=HELLO, stream=True)
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])

    assert response.json()["choices"][0]["message"]["content"] == "HELLO from upstream: hi"
    assert text == "HELLO from upstream: hi"
    assert len(routed.requests) == 2
    assert response.headers["x-gateway-cache"] == "bypass"  # no temperature: not cacheable (docs/cache.md)
    # The cost stage is innermost: the budget's slot sees the answer already priced.
    assert watcher.costs[0] == Decimal(response.headers["x-gateway-cost-usd"]) > 0
    assert watcher.costs[1] == records[1].cost_usd > 0
    [outcome] = watcher.outcomes
    assert outcome.completed and outcome.usage.output_tokens > 0


async def test_a_before_stage_can_change_the_body_the_upstream_gets(proxy, routed, gateway_key, add_stage):
    class Template(pipeline.Stage):
        slot = "cache"

        async def before(self, ctx):
            ctx.body = {
                **ctx.body,
                "messages": [{"role": "system", "content": "Be brief."}, *ctx.body["messages"]],
            }

    add_stage(Template())

    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    assert response.status_code == 200
    assert routed.last_request.json["messages"][0] == {"role": "system", "content": "Be brief."}


async def test_a_stage_can_refuse_the_models_list_too(proxy, routed, gateway_key, records, add_stage):
    class Limit(pipeline.Stage):
        slot = "policies"

        async def before(self, ctx):
            raise RateLimited("Too many requests for this key.", headers={"retry-after": "7"})

    limit = add_stage(Limit())
    refused = await proxy.get("/v1/models", headers=bearer(gateway_key[1]))
    pipeline.unregister(limit)
    listed = await proxy.get("/v1/models", headers=bearer(gateway_key[1]))

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.headers["retry-after"] == "7"
    assert [m["id"] for m in listed.json()["data"]] == ["fast"]
    assert listed.headers["x-gateway-cache"] == "bypass"
    assert [r.status for r in records] == [429, 200]
    assert routed.requests == []


async def test_the_models_list_resolves_the_team_like_any_request(proxy, organization, gateway_key, records):
    team = await database_sync_to_async(TeamFactory)(organization=organization)

    response = await proxy.get("/v1/models", headers={**bearer(gateway_key[1]), "x-gateway-team": team.slug})
    unknown = await proxy.get("/v1/models", headers={**bearer(gateway_key[1]), "x-gateway-team": "nobody"})

    assert response.status_code == 200
    assert records[0].team_id == str(team.id)
    assert unknown.status_code == 403
    assert unknown.json()["error"]["code"] == "team_not_found"


async def test_a_stage_that_breaks_is_an_internal_error_in_openais_shape(
    proxy, routed, gateway_key, records, add_stage
):
    class Broken(pipeline.Stage):
        slot = "policies"

        async def after(self, ctx, answer):
            raise RuntimeError("a bug in a stage")

    add_stage(Broken())

    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    assert response.status_code == 500
    assert response.json() == {
        "error": {
            "message": "The gateway failed to handle this request; it has been logged.",
            "type": "server_error",
            "param": None,
            "code": "internal_error",
        }
    }
    assert response.headers["x-should-retry"] == "true"
    assert (records[0].status, records[0].error_type, records[0].error_code) == (
        500,
        "server_error",
        "internal_error",
    )


def test_a_stage_needs_a_known_slot():
    class Nowhere(pipeline.Stage):
        slot = "somewhere"

    with pytest.raises(ValueError, match="Unknown slot 'somewhere'"):
        pipeline.register(Nowhere())


def test_stages_run_in_slot_order_whatever_the_order_they_were_registered_in(add_stage):
    late, early = add_stage(Watcher("cache")), add_stage(Watcher("policies"))

    registered = runtime.stages.registered
    slots = [stage.slot for stage in registered]

    assert slots.index("policies") < slots.index("cache") < slots.index("cost")
    assert registered.index(early) < registered.index(late)
