"""POST /v1/responses where things go wrong (found by a review, each once a defect): a delete the
ingest could undo, a policy bypass through GET, a budget bypass through background runs, bad ids and
item types, Redis failing between two turns, another team's conversation, a provider key echoed by a
failed Response, an upstream chunk that is not an object, and what a bridge must refuse."""

import json

import openai
import pytest
import redis
from aiohttp import web
from channels.db import database_sync_to_async

from apps.policies.services import policy_create
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer, entries

pytestmark = pytest.mark.django_db(transaction=True)


class Loopback:
    """A minimal OpenAI-shaped upstream on 127.0.0.1 with handlers given by the test."""

    name = "loop"

    def __init__(self, routes):
        self.routes = routes

    async def start(self):
        app = web.Application()
        for method, path, handler in self.routes:
            app.router.add_route(method, path, handler)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self.openai_base_url = self.base_url + "/v1"
        return self

    async def stop(self):
        await self.runner.cleanup()


@pytest.fixture
async def bridged(organization, upstream):
    await add_provider_key_async(
        organization, upstream, provider="openai_compatible", secret="sk-compat-1234"
    )
    await add_alias_async(organization, "bridged", ("openai_compatible", "qwen2.5-7b-instruct"))
    return upstream


@pytest.fixture
async def native(organization, upstream):
    await add_provider_key_async(organization, upstream, provider="openai", secret="sk-openai-1234")
    await add_alias_async(organization, "native", ("openai", "gpt-4o-mini"))
    return upstream


# Deleted before the outbox's ingest has written the turn: the late write must not bring it back.
async def test_a_deleted_bridged_response_stays_deleted(sdk, bridged):
    made = await sdk.responses.create(model="bridged", input="secret plans")
    await sdk.responses.delete(made.id)  # answered deleted: true
    await entries()  # the outbox's ingest runs (about a second later in production)
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.create(model="bridged", input="and?", previous_response_id=made.id)


# A native Response read back is the provider's copy: redacted as its answer was.
async def test_get_of_a_native_response_is_redacted_like_its_answer(sdk, native, organization):
    await database_sync_to_async(policy_create)(
        organization=organization,
        data={"name": "house", "action": "redact", "patterns": ["from upstream"], "apply_to_response": True},
    )
    made = await sdk.responses.create(model="native", input="hi")
    assert "from upstream" not in made.output_text
    got = await sdk.responses.retrieve(made.id)
    assert "from upstream" not in got.output_text


# An input item whose type is not a string is the client's 400, never a 500.
@pytest.mark.parametrize(
    "item",
    [
        {"type": ["message"], "role": "user", "content": "hi"},
        {"type": {"a": 1}, "role": "user", "content": "hi"},
    ],
)
async def test_an_item_type_that_is_not_a_string_is_a_400(proxy, bridged, gateway_key, item):
    response = await proxy.post(
        "/v1/responses", json={"model": "bridged", "input": [item]}, headers=bearer(gateway_key[1])
    )
    assert response.status_code == 400


# An id no store can hold (a NUL PostgreSQL refuses) reads as unknown.
async def test_a_previous_response_id_with_nul_is_a_4xx(proxy, bridged, gateway_key):
    response = await proxy.post(
        "/v1/responses",
        json={"model": "bridged", "input": "hi", "previous_response_id": "resp_\u0000x"},
        headers=bearer(gateway_key[1]),
    )
    assert response.status_code in (400, 404)


async def test_get_of_a_response_id_with_nul_is_a_404(proxy, bridged, gateway_key):
    response = await proxy.get("/v1/responses/resp_%00x", headers=bearer(gateway_key[1]))
    assert response.status_code in (400, 404)


# A background Response would be answered (and used) later, where no budget can price it: refused.
async def test_a_background_response_is_refused_before_any_upstream(sdk, native, records):
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.responses.create(model="native", input="write a novel", background=True)

    assert raised.value.body["param"] == "background"
    assert native.requests == []


# Redis down, and the database not written yet: an immediate follow-up (an agent's tool round
# trip) is still answered, from what this process put.
async def test_a_follow_up_right_after_its_turn_works_while_redis_fails(sdk, bridged, monkeypatch):
    from apps.conversations import hot, services

    class Down:
        def __getattr__(self, name):
            async def fail(*args, **kwargs):
                raise redis.ConnectionError("down")

            return fail

    failing = hot.RedisTurns(client=lambda: Down())
    monkeypatch.setattr(services, "hot_turns", lambda: failing)
    first = await sdk.responses.create(model="bridged", input="My name is Ada.")
    second = await sdk.responses.create(model="bridged", input="Name?", previous_response_id=first.id)
    assert second.previous_response_id == first.id


# Another team's key of the same organization neither reads nor continues the conversation.
async def test_a_key_of_another_team_cannot_read_a_teams_response(bridged, organization):
    from apps.teams.models import Team
    from tests.factories import create_api_key
    from tests.proxy.test_responses import sdk_of

    a = await Team.objects.acreate(organization=organization, name="A", slug="a")
    b = await Team.objects.acreate(organization=organization, name="B", slug="b")
    _, key_a = await database_sync_to_async(create_api_key)(organization, team=a)
    _, key_b = await database_sync_to_async(create_api_key)(organization, team=b)
    async with await sdk_of(key_a) as ours, await sdk_of(key_b) as theirs:
        made = await ours.responses.create(model="bridged", input="team A's secret plans")
        with pytest.raises(openai.NotFoundError):
            await theirs.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError):
            await theirs.responses.create(model="bridged", input="and?", previous_response_id=made.id)
        assert (await ours.responses.retrieve(made.id)).id == made.id


# A bridged conversation continued on a native provider: the history is replayed to it, and the
# Response still says which one it continues.
async def test_a_bridged_conversation_continues_on_a_native_model(sdk, bridged, organization, upstream):
    await add_provider_key_async(organization, upstream, provider="openai", secret="sk-openai-1234")
    await add_alias_async(organization, "native", ("openai", "gpt-4o-mini"))
    first = await sdk.responses.create(model="bridged", input="My name is Ada.")
    second = await sdk.responses.create(model="native", input="Name?", previous_response_id=first.id)
    sent = upstream.last_request.json
    assert "previous_response_id" not in sent
    assert second.previous_response_id == first.id


# An OpenAI-compatible upstream whose chunk is JSON but no object: an upstream failure (502).
async def test_a_bridged_stream_chunk_that_is_not_an_object_is_an_upstream_error(
    sdk, proxy, organization, gateway_key
):
    async def chat(request):
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: ["not", "an", "object"]\n\n')
        await response.write(b"data: [DONE]\n\n")
        return response

    server = await Loopback([("POST", "/v1/chat/completions", chat)]).start()
    try:
        await add_provider_key_async(organization, server, provider="openai_compatible", secret="sk-x-123456")
        await add_alias_async(organization, "odd", ("openai_compatible", "m"))
        response = await proxy.post(
            "/v1/responses",
            json={"model": "odd", "input": "hi", "stream": True},
            headers=bearer(gateway_key[1]),
        )
        assert response.status_code == 502
    finally:
        await server.stop()


# A native follow-up once the hot tier has forgotten the turn (read from the database).
async def test_a_native_follow_up_from_the_database_is_pinned(sdk, organization, upstream):
    from apps.conversations.hot import hot_turns

    for secret in ("sk-openai-one", "sk-openai-two"):
        await add_provider_key_async(organization, upstream, provider="openai", secret=secret)
    await add_alias_async(organization, "native", ("openai", "gpt-4o-mini"))
    first = await sdk.responses.create(model="native", input="My name is Ada.")
    await entries()
    await hot_turns().delete(str(organization.id), first.id)
    maker = upstream.last_request.credential
    for _ in range(4):
        sent_before = len(upstream.requests)
        await sdk.responses.create(model="native", input="Name?", previous_response_id=first.id)
        [sent] = upstream.requests[sent_before:]
        assert sent.credential == maker


# A native Response that failed, its error echoing the provider key: the key is scrubbed.
async def test_a_native_failed_response_does_not_echo_the_provider_key(sdk, organization):
    secret = "sk-leaky-0123456789abcdef"

    async def create(request):
        return web.json_response(
            {
                "id": "resp_f",
                "object": "response",
                "created_at": 1,
                "status": "failed",
                "model": "gpt-4o-mini",
                "output": [],
                "usage": None,
                "error": {"code": "server_error", "message": f"Incorrect API key provided: {secret}"},
            }
        )

    server = await Loopback([("POST", "/v1/responses", create)]).start()
    try:
        await add_provider_key_async(organization, server, provider="openai", secret=secret)
        await add_alias_async(organization, "native", ("openai", "gpt-4o-mini"))
        made = await sdk.responses.create(model="native", input="hi")
        assert secret not in made.error.message
    finally:
        await server.stop()


# Structured output reaches an Anthropic model (a forced tool whose input is the answer), never dropped.
async def test_a_json_schema_format_reaches_an_anthropic_model(proxy, organization, upstream, gateway_key):
    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-123456")
    await add_alias_async(organization, "claude", ("anthropic", "claude-3-5-haiku-latest"))
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    response = await proxy.post(
        "/v1/responses",
        json={
            "model": "claude",
            "input": "hi",
            "text": {"format": {"type": "json_schema", "name": "City", "schema": schema, "strict": True}},
        },
        headers=bearer(gateway_key[1]),
    )
    assert response.status_code == 200
    assert upstream.last_request.json["tools"][0]["input_schema"] == schema
    assert set(json.loads(response.json()["output"][0]["content"][0]["text"])) == {"city"}
