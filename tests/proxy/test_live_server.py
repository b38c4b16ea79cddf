"""The gateway under Daphne, as a user runs it, driven with the official OpenAI SDK."""

import httpx
import openai
import pytest
from django.conf import settings
from django.contrib.auth.hashers import make_password

from tests.factories import PASSWORD
from tests.servers import daphne_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def owner(owner):
    """The owner, with a password the live server's real settings can check."""
    owner.user.password = make_password(PASSWORD, hasher="pbkdf2_sha256")
    owner.user.save(update_fields=["password"])
    return owner


@pytest.fixture
def gateway_url(tmp_path):
    with daphne_server(tmp_path) as base_url:
        yield base_url


def sign_in(base_url: str, email: str) -> dict[str, str]:
    response = httpx.post(f"{base_url}/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['access']}"}


def create_key(base_url: str, session: dict[str, str]) -> dict:
    response = httpx.post(f"{base_url}/api/v1/api-keys", json={"name": "sdk"}, headers=session)
    assert response.status_code == 201, response.text
    return response.json()


def test_the_openai_sdk_lists_models_until_the_key_is_revoked(gateway_url, owner):
    session = sign_in(gateway_url, owner.user.email)
    created = create_key(gateway_url, session)
    client = openai.OpenAI(api_key=created["key"], base_url=f"{gateway_url}/v1", max_retries=0)

    page = client.models.list()
    assert page.data == []

    revoked = httpx.delete(f"{gateway_url}/api/v1/api-keys/{created['id']}", headers=session)
    assert revoked.status_code == 204
    with pytest.raises(openai.AuthenticationError) as raised:
        client.models.list()
    assert raised.value.status_code == 401
    assert raised.value.request_id  # the SDK reads x-request-id


async def test_the_async_openai_sdk_authenticates_against_the_gateway(gateway_url, owner):
    session = sign_in(gateway_url, owner.user.email)
    created = create_key(gateway_url, session)
    async with openai.AsyncOpenAI(
        api_key=created["key"], base_url=f"{gateway_url}/v1", max_retries=0
    ) as client:
        page = await client.models.list()
        assert page.data == []
    async with openai.AsyncOpenAI(
        api_key="sk_live_wrong", base_url=f"{gateway_url}/v1", max_retries=0
    ) as client:
        with pytest.raises(openai.AuthenticationError):
            await client.models.list()


@pytest.fixture
def two_gateway_workers(tmp_path):
    if not settings.REDIS_URL:
        pytest.skip("revocation across separate processes goes through Redis; set REDIS_URL")
    with daphne_server(tmp_path) as first, daphne_server(tmp_path) as second:
        yield first, second


def test_a_key_revoked_on_one_worker_is_refused_by_every_other_at_once(two_gateway_workers, owner):
    first, second = two_gateway_workers
    session = sign_in(first, owner.user.email)
    created = create_key(first, session)
    bearer = {"Authorization": f"Bearer {created['key']}"}
    # Both workers now hold the key in memory.
    assert httpx.get(f"{first}/v1/models", headers=bearer).status_code == 200
    assert httpx.get(f"{second}/v1/models", headers=bearer).status_code == 200

    assert httpx.delete(f"{first}/api/v1/api-keys/{created['id']}", headers=session).status_code == 204

    refused = httpx.get(f"{second}/v1/models", headers=bearer)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"


# --- The whole path, as a user sets it up: management API, then the proxy with the OpenAI SDK ---------

from tests import upstreams  # noqa: E402

upstream = upstreams.upstream


@pytest.fixture
def routed_gateway(gateway_url, owner, upstream):
    """A live gateway configured through its management API to route "fast" to the upstream."""
    session = sign_in(gateway_url, owner.user.email)
    provider_key = httpx.post(
        f"{gateway_url}/api/v1/provider-keys",
        json={
            "provider": "openai",
            "key": "sk-upstream-live",
            "data_region": "us",
            "base_url": upstream.openai_base_url,
        },
        headers=session,
    )
    assert provider_key.status_code == 201, provider_key.text
    alias = httpx.post(
        f"{gateway_url}/api/v1/models",
        json={"alias": "fast", "deployments": [{"provider": "openai", "upstream_model": "gpt-4o-mini"}]},
        headers=session,
    )
    assert alias.status_code == 201, alias.text
    return gateway_url, create_key(gateway_url, session)["key"]


def test_the_sync_openai_sdk_chats_streams_and_embeds_through_the_gateway(routed_gateway, upstream):
    gateway_url, key = routed_gateway
    client = openai.OpenAI(api_key=key, base_url=f"{gateway_url}/v1", max_retries=0)

    completion = client.chat.completions.create(model="fast", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "Hello from upstream: hi"

    stream = client.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Hello from upstream: hi"

    embedding = client.embeddings.create(model="openai/text-embedding-3-small", input="hi")
    assert len(embedding.data[0].embedding) == 8

    assert [model.id for model in client.models.list().data] == ["fast"]
    assert upstream.last_request.credential == "sk-upstream-live"


def test_a_stream_is_relayed_as_it_comes_and_a_client_that_leaves_cancels_the_upstream(
    routed_gateway, upstream
):
    gateway_url, key = routed_gateway
    upstream.behave("slow", delay=1.0)  # one event a second: the whole answer would take seconds

    with httpx.stream(
        "POST",
        f"{gateway_url}/v1/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert float(response.headers["x-gateway-ttft-ms"]) >= 0
        first = next(response.iter_lines())
        assert first.startswith("data: ")  # the first chunk arrived while the upstream was still sending

    # The client went away mid-stream; the gateway drops its upstream request too.
    assert upstream.wait_for_disconnects(1, timeout=3)  # well before Daphne would give up on its own (10 s)


def test_daphne_answers_a_model_name_outside_latin_1_with_its_completion(routed_gateway, upstream):
    gateway_url, key = routed_gateway
    body = {"model": "openai/模型-🦙", "messages": [{"role": "user", "content": "hi"}]}

    response = httpx.post(
        f"{gateway_url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    )

    assert response.status_code == 200, response.text
    assert response.json()["model"] == "模型-🦙"
    assert response.headers["x-gateway-model"] == "%E6%A8%A1%E5%9E%8B-%F0%9F%A6%99"
    assert upstream.last_request.json["model"] == "模型-🦙"


def test_a_whole_answer_and_an_error_carry_their_length_and_a_stream_is_chunked(routed_gateway):
    gateway_url, key = routed_gateway
    authorization = {"Authorization": f"Bearer {key}"}
    chat = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}

    for response in (
        httpx.post(f"{gateway_url}/v1/chat/completions", json=chat, headers=authorization),
        httpx.post(f"{gateway_url}/v1/chat/completions", json={"model": "fast"}, headers=authorization),
    ):
        assert response.status_code in (200, 400), response.text
        assert response.headers["content-length"] == str(len(response.content))
        assert "transfer-encoding" not in response.headers

    streamed = httpx.post(
        f"{gateway_url}/v1/chat/completions", json={**chat, "stream": True}, headers=authorization
    )
    assert streamed.headers["transfer-encoding"] == "chunked"
    assert streamed.text.rstrip().endswith("data: [DONE]")
