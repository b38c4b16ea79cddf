"""POST /v1/messages where things go wrong (found by a review, each once a defect): count_tokens
under the policies, a text document read, fields the gateway does not read reaching its estimate, an
overloaded error right after message_start failed over, betas kept out of the cache, a block that is
no object, a stream cut after its text billed for it, and header values sent upstream."""

import asyncio
import json
import socket
import threading

import pytest
from aiohttp import web
from channels.db import database_sync_to_async

from apps.limits import services as limits_services
from apps.policies.services import policy_create
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias_async, add_provider_key_async

pytestmark = pytest.mark.django_db(transaction=True)
create_policy = database_sync_to_async(policy_create)
set_limits = database_sync_to_async(limits_services.limits_set)
BODY = {"model": "claude", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}


class Scripted:
    """A loopback Anthropic stand-in answering each POST with the next scripted raw SSE body."""

    def __init__(self, scripts):
        self.scripts, self.requests, self.name = list(scripts), [], "scripted"

    def start(self):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

        async def handle(request):
            self.requests.append((request.path, dict(request.headers), await request.json()))
            raw = self.scripts.pop(0) if len(self.scripts) > 1 else self.scripts[0]
            if isinstance(raw, dict):
                return web.json_response(raw)
            resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(raw.encode())
            return resp

        async def serve():
            app = web.Application()
            app.router.add_post("/{tail:.*}", handle)
            self.runner = web.AppRunner(app)
            await self.runner.setup()
            await web.SockSite(self.runner, sock).start()

        asyncio.run_coroutine_threadsafe(serve(), self.loop).result(5)
        self.anthropic_base_url = self.openai_base_url = self.base_url = f"http://127.0.0.1:{self.port}"
        return self

    def stop(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def scripted():
    """Starts Scripted stand-ins for a test and stops them after it."""
    servers = []

    def start(scripts):
        servers.append(Scripted(scripts).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def ev(kind, data):
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n"


START = ev(
    "message_start",
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 1},
        },
    },
)
OVERLOADED = ev("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})


def whole_stream(text):
    return (
        START
        + ev(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
        + ev(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        )
        + ev("content_block_stop", {"type": "content_block_stop", "index": 0})
        + ev(
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
        )
        + ev("message_stop", {"type": "message_stop"})
    )


# count_tokens is read by the policies before the prompt goes to Anthropic.
async def test_count_tokens_is_policed_like_messages(proxy, organization, upstream, gateway_key):
    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "claude", ("anthropic", "claude-sonnet-4-5"))
    await create_policy(
        organization=organization, data={"name": "no secret", "action": "block", "patterns": ["TOPSECRET"]}
    )
    body = {"model": "claude", "messages": [{"role": "user", "content": "the code is TOPSECRET"}]}
    blocked = await proxy.post(
        "/v1/messages", json={**body, "max_tokens": 5}, headers={"x-api-key": gateway_key[1]}
    )
    counted = await proxy.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": gateway_key[1]})
    assert blocked.status_code == 400
    assert "TOPSECRET" not in json.dumps([r.json for r in upstream.requests]), counted.status_code


# A text document is read by the policies, even one whose lines look like base64.
async def test_a_plain_text_document_is_read_by_the_policies(proxy, organization, upstream, gateway_key):
    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "claude", ("anthropic", "claude-sonnet-4-5"))
    await create_policy(
        organization=organization, data={"name": "no secret", "action": "block", "patterns": ["TOPSECRET"]}
    )
    text = "\n".join(["AKIAIOSFODNN7EXAMPLE"] * 12 + ["TOPSECRETXYZ", "ABCD"])  # one key per line
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
    body = {
        **BODY,
        "messages": [{"role": "user", "content": [document, {"type": "text", "text": "list them"}]}],
    }
    response = await proxy.post("/v1/messages", json=body, headers={"x-api-key": gateway_key[1]})
    assert response.status_code == 400, (
        response.status_code,
        "upstream got:",
        "TOPSECRET" in json.dumps(upstream.last_request.json),
    )


# Fields the gateway does not read (n) never reach its budget estimate: the upstream's 400.
async def test_a_messages_body_with_a_string_n_is_a_400_not_a_500(proxy, organization, upstream):
    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "claude", ("anthropic", "claude-sonnet-4-5"))
    api_key, secret = await database_sync_to_async(create_api_key)(organization)
    await set_limits(organization=organization, api_key=api_key, rate_limits={"rpm": 1000, "tpm": 1_000_000})
    response = await proxy.post("/v1/messages", json={**BODY, "n": "abc"}, headers={"x-api-key": secret})
    assert response.status_code == 400, (response.status_code, response.text)


# An overloaded error right after message_start fails over to the next key (native stream).
async def test_an_overloaded_stream_start_fails_over_to_the_next_key(
    proxy, organization, gateway_key, scripted
):
    server = scripted([START + OVERLOADED, whole_stream("fine")])
    await add_provider_key_async(organization, server, provider="anthropic", secret="sk-ant-one")
    await add_provider_key_async(organization, server, provider="anthropic", secret="sk-ant-two")
    await add_alias_async(organization, "claude", ("anthropic", "claude-x"))
    response = await proxy.post(
        "/v1/messages", json={**BODY, "stream": True}, headers={"x-api-key": gateway_key[1]}
    )
    assert "event: error" not in response.text and "fine" in response.text, (
        len(server.requests),
        response.text[-300:],
    )


# A Message asked with Anthropic's betas is not served from the cache (they change the answer).
async def test_the_cache_keys_the_anthropic_beta_header(proxy, organization, upstream, gateway_key):
    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "claude", ("anthropic", "claude-sonnet-4-5"))
    body = {**BODY, "temperature": 0}
    await proxy.post(
        "/v1/messages",
        json=body,
        headers={"x-api-key": gateway_key[1], "anthropic-beta": "context-1m-2025-08-07"},
    )
    second = await proxy.post(
        "/v1/messages",
        json=body,
        headers={"x-api-key": gateway_key[1], "anthropic-beta": "output-128k-2025-02-19"},
    )
    assert second.headers["x-gateway-cache"] != "l1", "served another beta's answer"


# A content block that is no object, under any policy: the client's 400, never a 500.
async def test_a_block_that_is_a_list_is_a_400_under_policies(proxy, organization, upstream, gateway_key):
    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "claude", ("anthropic", "claude-sonnet-4-5"))
    await create_policy(
        organization=organization, data={"name": "no secret", "action": "block", "patterns": ["TOPSECRET"]}
    )
    body = {**BODY, "messages": [{"role": "user", "content": [["hi"]]}]}
    response = await proxy.post("/v1/messages", json=body, headers={"x-api-key": gateway_key[1]})
    assert response.status_code == 400, (response.status_code, response.text)


# A native stream cut after its text is billed for the text it delivered.
async def test_a_cut_stream_bills_the_text_it_delivered(proxy, organization, gateway_key, records, scripted):
    text = "word " * 2000
    cut = (
        START
        + ev(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
        + ev(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        )
        + ev("content_block_stop", {"type": "content_block_stop", "index": 0})
    )  # then the connection ends
    server = scripted([cut])
    await add_provider_key_async(organization, server, provider="anthropic", secret="sk-ant-one")
    await add_alias_async(organization, "claude", ("anthropic", "claude-x"))
    response = await proxy.post(
        "/v1/messages", json={**BODY, "stream": True}, headers={"x-api-key": gateway_key[1]}
    )
    assert text in response.text
    [record] = records
    assert record.usage.output_tokens >= 2000, record.usage


# An anthropic-beta value with a control character (Daphne passes it) is a 400.
async def test_a_control_character_in_anthropic_beta_is_a_400(proxy, organization, upstream, gateway_key):
    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "claude", ("anthropic", "claude-sonnet-4-5"))
    response = await proxy.post(
        "/v1/messages", json=BODY, headers={"x-api-key": gateway_key[1], "anthropic-beta": "a\x01b"}
    )
    assert response.status_code == 400, (response.status_code, response.text)
