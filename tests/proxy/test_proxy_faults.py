"""Bad input and upstream faults on /v1/: a clear error in OpenAI's shape, never a 500, nothing lost."""

import asyncio

import openai
import pytest
from channels.db import database_sync_to_async

from apps.providers import services as provider_services
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
CHAT = {"model": "fast", "messages": HELLO}


@pytest.fixture
async def routed(organization, upstream):
    key = await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    return key


def assert_error(response, status: int, code: str, param: str | None = None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    assert response.headers["x-gateway-request-id"]
    assert response.headers["x-gateway-cost-usd"] == "0"
    assert response.headers["x-gateway-cache"]


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"messages": HELLO}, "missing_model", "model"),
        ({"model": 42, "messages": HELLO}, "missing_model", "model"),
        ({"model": "fast", "messages": "hi"}, "invalid_messages", "messages"),
        ({"model": "fast", "messages": []}, "invalid_messages", "messages"),
        ({"model": "fast", "messages": ["hi"]}, "invalid_messages", "messages[0]"),
        ({"model": "fast", "messages": HELLO, "n": "2"}, "invalid_type", "n"),
        ({"model": "fast", "messages": HELLO, "max_tokens": "many"}, "invalid_type", "max_tokens"),
        ({"model": "fast", "messages": HELLO, "max_tokens": True}, "invalid_type", "max_tokens"),
        ({"model": "fast", "messages": HELLO, "stream": "yes"}, "invalid_type", "stream"),
        ({"model": "fast", "messages": HELLO, "temperature": "hot"}, "invalid_type", "temperature"),
    ],
)
async def test_it_refuses_a_malformed_chat_request(proxy, routed, gateway_key, upstream, body, code, param):
    response = await proxy.post("/v1/chat/completions", json=body, headers=bearer(gateway_key[1]))

    assert_error(response, 400, code, param)
    assert response.headers["x-should-retry"] == "false"
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b'{"model": "fast", "messages": [', "invalid_json"),
        (b"\xff\xfe\x00not utf-8", "invalid_json"),
        (b"", "invalid_json"),
        (b'["a", "list"]', "invalid_json"),
    ],
)
async def test_it_refuses_a_body_that_is_not_a_json_object(proxy, routed, gateway_key, content, code):
    response = await proxy.post(
        "/v1/chat/completions",
        content=content,
        headers={**bearer(gateway_key[1]), "content-type": "application/json"},
    )
    assert_error(response, 400, code)


async def test_it_refuses_embeddings_without_a_usable_input(proxy, routed, gateway_key):
    for body in ({"model": "openai/text-embedding-3-small"}, {"model": "x", "input": [1, "a"]}):
        response = await proxy.post("/v1/embeddings", json=body, headers=bearer(gateway_key[1]))
        assert_error(response, 400, "invalid_input", "input")


async def test_an_unknown_model_is_a_404(sdk, routed):
    with pytest.raises(openai.NotFoundError) as raised:
        await sdk.chat.completions.create(model="no-such-model", messages=HELLO)
    assert raised.value.body["code"] == "model_not_found"
    assert raised.value.body["param"] == "model"


async def test_a_provider_with_no_key_is_a_503(proxy, routed, gateway_key):
    response = await proxy.post(
        "/v1/chat/completions",
        json={**CHAT, "model": "anthropic/claude-3-5-haiku"},
        headers=bearer(gateway_key[1]),
    )
    assert_error(response, 503, "no_provider_key")


async def test_a_body_over_the_limit_is_a_413(proxy, routed, gateway_key, settings, upstream):
    settings.GATEWAY_MAX_BODY_BYTES = 1000
    big = {"model": "fast", "messages": [{"role": "user", "content": "x" * 2000}]}

    response = await proxy.post("/v1/chat/completions", json=big, headers=bearer(gateway_key[1]))

    assert_error(response, 413, "request_too_large")
    assert upstream.requests == []


async def test_an_upstream_that_times_out_is_a_504(proxy, routed, gateway_key, settings, upstream, records):
    settings.GATEWAY_REQUEST_DEADLINE_SECONDS = 0.5
    upstream.behave("timeout", seconds=10)

    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    assert_error(response, 504, "upstream_timeout")
    assert response.headers["x-should-retry"] == "false"
    assert [a.outcome for a in records[0].attempts] == ["timeout"]


async def test_an_upstream_answer_that_is_not_json_is_a_502(proxy, routed, gateway_key, upstream, records):
    upstream.behave("invalid_json")

    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    assert_error(response, 502, "upstream_failed")
    assert [a.outcome for a in records[0].attempts] == ["invalid_response"]


async def test_an_answer_cut_in_the_middle_is_a_502(proxy, routed, gateway_key, upstream, records):
    upstream.behave("cut_stream")  # non-streamed: the full Content-Length, half the body

    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    assert_error(response, 502, "upstream_failed")
    # A cut is transient: the only key is tried again, up to GATEWAY_MAX_ATTEMPTS.
    assert [a.outcome for a in records[0].attempts] == ["connection_error"] * 3


async def test_a_stream_cut_by_the_upstream_ends_with_an_error_and_is_billed(sdk, routed, upstream, records):
    upstream.behave("cut_stream", after=2)

    stream = await sdk.chat.completions.create(model="fast", messages=HELLO, stream=True)
    received = []
    with pytest.raises(openai.APIError) as raised:
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")

    assert "ended the stream" in raised.value.message
    assert "".join(received) == "Hello from"
    [record] = records
    assert record.stream_completed is False
    assert record.error_code == "stream_interrupted"
    assert record.usage.estimated
    assert record.usage.output_tokens == 3  # "Hello from" is ten characters: about three tokens
    assert record.cost_usd > 0


async def test_a_stream_that_fails_before_its_first_chunk_fails_over(sdk, organization, routed, upstream):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-two")
    upstream.behave("cut_stream", after=0, for_credential="sk-upstream-one")
    upstream.behave("status", status=529, for_credential="sk-upstream-one", times=1)

    stream = await sdk.chat.completions.create(model="fast", messages=HELLO, stream=True)
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

    assert text == "Hello from upstream: hi"
    assert upstream.requests[-1].credential == "sk-upstream-two"


async def test_a_rotation_under_concurrent_traffic_fails_no_request(proxy, routed, gateway_key, upstream):
    headers = bearer(gateway_key[1])
    statuses: list[int] = []
    stop = asyncio.Event()

    async def client() -> None:
        while not stop.is_set():
            response = await proxy.post("/v1/chat/completions", json=CHAT, headers=headers)
            statuses.append(response.status_code)

    clients = [asyncio.create_task(client()) for _ in range(8)]
    try:
        assert await asyncio.to_thread(upstream.wait_for_requests, 40)
        await database_sync_to_async(provider_services.provider_key_rotate)(
            provider_key=routed, data={"key": "sk-new"}
        )
        rotated_at = len(upstream.requests)
        assert await asyncio.to_thread(upstream.wait_for_requests, rotated_at + 40)
    finally:
        stop.set()
        await asyncio.gather(*clients)

    assert statuses and set(statuses) == {200}
    credentials = [request.credential for request in upstream.requests]
    assert credentials[0] == "sk-upstream-one"
    assert credentials[-1] == "sk-new"
    # At most the requests already in flight (8) used the old secret after the rotation committed.
    assert credentials[rotated_at + 8 :].count("sk-upstream-one") == 0

    # The provider now refuses the old secret; the gateway never sends it again.
    upstream.behave("status", status=401, for_credential="sk-upstream-one")
    upstream.reset()
    upstream.behave("status", status=401, for_credential="sk-upstream-one")
    for _ in range(10):
        assert (await proxy.post("/v1/chat/completions", json=CHAT, headers=headers)).status_code == 200
    assert {request.credential for request in upstream.requests} == {"sk-new"}


async def test_an_upstream_error_never_leaks_the_provider_key(proxy, routed, gateway_key, upstream):
    upstream.behave("status", status=400, message="Incorrect API key provided: sk-upstream-one")

    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    assert response.status_code == 400
    assert "sk-upstream-one" not in response.text


async def test_a_failed_attempts_error_never_keeps_the_provider_key(
    proxy, routed, gateway_key, upstream, records
):
    upstream.behave("status", status=401, message="Incorrect API key provided: sk-upstream-one")

    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    assert response.status_code == 502
    assert "sk-upstream-one" not in response.text
    assert "sk-upstream-one" not in records[0].attempts[0].error


def nested_bodies(depth: int) -> dict[str, str]:
    nested = "[" * depth + "]" * depth
    hello = '{"role": "user", "content": "hi"}'
    return {
        "body": nested,
        "message content": f'{{"model": "fast", "messages": [{{"role": "user", "content": {nested}}}]}}',
        "unknown field": f'{{"model": "fast", "messages": [{hello}], "x": {nested}}}',
    }


@pytest.mark.parametrize("where", ["body", "message content", "unknown field"])
async def test_deeply_nested_json_is_a_400_never_a_500(proxy, routed, gateway_key, upstream, records, where):
    response = await proxy.post(
        "/v1/chat/completions",
        content=nested_bodies(100_000)[where].encode(),
        headers={**bearer(gateway_key[1]), "content-type": "application/json"},
    )

    assert_error(response, 400, "invalid_json")
    assert "nested" in response.json()["error"]["message"]
    assert response.headers["x-should-retry"] == "false"
    assert upstream.requests == []
    assert records[0].status == 400


@pytest.mark.parametrize("where", ["body", "message content", "unknown field"])
async def test_json_nested_about_as_deep_as_python_allows_is_a_400_or_an_answer(
    proxy, routed, gateway_key, upstream, where
):
    """Around the interpreter's recursion limit a body may parse and still fail to be re-encoded
    for the upstream: either way the client gets a 400 or an answer, never a 500."""
    headers = {**bearer(gateway_key[1]), "content-type": "application/json"}
    for depth in range(850, 1010, 4):
        response = await proxy.post(
            "/v1/chat/completions", content=nested_bodies(depth)[where].encode(), headers=headers
        )
        assert response.status_code in (200, 400), (depth, response.text)
        if response.status_code == 400:
            assert response.json()["error"]["code"] in ("invalid_json", "upstream_invalid_request"), depth


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("upstream_model", "header"),
    [
        ("模型", "%E6%A8%A1%E5%9E%8B"),
        ("llama-🦙", "llama-%F0%9F%A6%99"),
        ("café", "caf%C3%A9"),  # Latin-1, but not ASCII: encoded the same way
        ("a\r\nset-cookie: x", "a%0D%0Aset-cookie%3A%20x"),
    ],
)
async def test_a_model_name_outside_ascii_is_answered_and_percent_encoded_in_the_header(
    proxy, routed, gateway_key, upstream, records, upstream_model, header, stream
):
    body = {"model": f"openai/{upstream_model}", "messages": HELLO, "stream": stream}

    response = await proxy.post("/v1/chat/completions", json=body, headers=bearer(gateway_key[1]))

    assert response.status_code == 200, response.text
    assert response.headers["x-gateway-model"] == header
    assert "set-cookie" not in response.headers
    assert upstream.last_request.json["model"] == upstream_model
    [record] = records
    assert (record.status, record.model) == (200, upstream_model)
