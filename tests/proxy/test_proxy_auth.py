"""API-key authentication and the response headers on /v1/, through the gateway's ASGI app."""

import asyncio
import uuid
from datetime import timedelta

import pytest
import time_machine
from channels.db import database_sync_to_async as sync_to_async
from django.utils import timezone

from apps.keys import services as key_services
from tests.conftest import login
from tests.factories import create_api_key
from tests.proxy.conftest import bearer

pytestmark = pytest.mark.django_db(transaction=True)

create_key = sync_to_async(create_api_key)
revoke_key = sync_to_async(key_services.api_key_revoke)


def assert_openai_error(response, status: int, code: str, error_type: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert error["type"] == error_type
    assert error["message"]


async def test_a_valid_key_lists_models_in_openai_shape(proxy, organization):
    _, secret = await create_key(organization)
    response = await proxy.get("/v1/models", headers=bearer(secret))
    assert response.status_code == 200
    assert response.json() == {"object": "list", "data": []}


async def test_every_response_carries_the_gateway_headers(proxy, organization):
    _, secret = await create_key(organization)
    ok = await proxy.get("/v1/models", headers=bearer(secret))
    refused = await proxy.get("/v1/models")
    for response in (ok, refused):
        request_id = response.headers["x-gateway-request-id"]
        assert uuid.UUID(request_id)
        assert response.headers["x-request-id"] == request_id
        assert float(response.headers["x-gateway-latency-ms"]) >= 0
        assert float(response.headers["x-gateway-overhead-ms"]) >= 0
        assert response.headers["x-gateway-cache"] == "bypass"
        assert response.headers["x-gateway-cost-usd"] == "0"
    assert ok.headers["x-gateway-request-id"] != refused.headers["x-gateway-request-id"]


async def test_the_brand_word_in_headers_is_a_setting(proxy, organization, settings):
    settings.GATEWAY_BRAND = "acme"  # the header names are built again when the setting changes
    try:
        _, secret = await create_key(organization)
        response = await proxy.get("/v1/models", headers=bearer(secret))
        assert "x-acme-request-id" in response.headers
        assert "x-gateway-request-id" not in response.headers
    finally:
        settings.GATEWAY_BRAND = "gateway"


async def test_it_rejects_a_request_without_an_authorization_header(proxy, db):
    response = await proxy.get("/v1/models")
    assert_openai_error(response, 401, "missing_api_key", "authentication_error")
    assert response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("header", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer two parts", "sk_live_abc"])
async def test_it_rejects_a_garbled_authorization_header(proxy, db, header):
    response = await proxy.get("/v1/models", headers={"Authorization": header})
    assert_openai_error(response, 401, "invalid_authorization_header", "authentication_error")


async def test_it_rejects_an_unknown_key(proxy, db):
    response = await proxy.get("/v1/models", headers=bearer("sk_live_" + "x" * 43))
    assert_openai_error(response, 401, "invalid_api_key", "authentication_error")


async def test_it_rejects_a_session_token_with_a_clear_message(proxy, owner, api_client):
    access = (await sync_to_async(login)(api_client, owner.user.email))["access"]
    response = await proxy.get("/v1/models", headers=bearer(access))
    assert_openai_error(response, 401, "session_token_not_accepted", "authentication_error")
    assert "management API" in response.json()["error"]["message"]


async def test_it_rejects_a_revoked_key_on_the_next_request(proxy, organization):
    api_key, secret = await create_key(organization)
    assert (await proxy.get("/v1/models", headers=bearer(secret))).status_code == 200  # now cached
    await revoke_key(api_key=api_key)
    response = await proxy.get("/v1/models", headers=bearer(secret))
    assert_openai_error(response, 401, "invalid_api_key", "authentication_error")


async def test_it_rejects_an_expired_key_even_while_cached(proxy, organization):
    _, secret = await create_key(organization, expires_at=timezone.now() + timedelta(hours=1))
    assert (await proxy.get("/v1/models", headers=bearer(secret))).status_code == 200
    with time_machine.travel(timezone.now() + timedelta(hours=1, seconds=1)):
        response = await proxy.get("/v1/models", headers=bearer(secret))
    assert_openai_error(response, 401, "api_key_expired", "authentication_error")


@pytest.mark.parametrize(
    ("permissions", "status"),
    [(["proxy:llm"], 200), (["proxy:models"], 200), (["proxy:chat"], 403), (["proxy:embeddings"], 403)],
)
async def test_listing_models_needs_the_llm_or_models_permission(proxy, organization, permissions, status):
    _, secret = await create_key(organization, permissions=permissions)
    response = await proxy.get("/v1/models", headers=bearer(secret))
    assert response.status_code == status
    if status == 403:
        assert_openai_error(response, 403, "permission_denied", "permission_error")


async def test_an_unknown_proxy_path_is_a_404_in_openai_shape(proxy, db):
    response = await proxy.get("/v1/nothing-here")
    assert_openai_error(response, 404, "unknown_url", "not_found_error")


async def test_a_wrong_method_is_a_405_in_openai_shape(proxy, organization):
    _, secret = await create_key(organization)
    response = await proxy.delete("/v1/models", headers=bearer(secret))
    assert_openai_error(response, 405, "method_not_allowed", "invalid_request_error")
    assert response.headers["allow"] == "GET"


async def test_a_body_over_the_limit_is_a_413(proxy, organization, settings):
    settings.GATEWAY_MAX_BODY_BYTES = 1024
    _, secret = await create_key(organization)
    response = await proxy.request("GET", "/v1/models", headers=bearer(secret), content=b"x" * 2048)
    assert_openai_error(response, 413, "request_too_large", "invalid_request_error")


async def test_last_used_at_is_recorded_off_the_request(proxy, organization):
    from apps.proxy.runtime import runtime

    api_key, secret = await create_key(organization)
    await proxy.get("/v1/models", headers=bearer(secret))
    await sync_to_async(api_key.refresh_from_db)()
    assert api_key.last_used_at is None  # the request did not write it
    await runtime.key_usage.flush()
    await sync_to_async(api_key.refresh_from_db)()
    assert api_key.last_used_at is not None


class KeyReads:
    """Counts the database reads of API keys (auth's ``_load_key_async`` seam), each still the real
    read, its answer held until ``release()`` so the requests pile up behind the first."""

    def __init__(self, load) -> None:
        self.load = load
        self.count = 0
        self.gate = asyncio.Event()

    async def __call__(self, digest: str):
        self.count += 1
        key = await self.load(digest)
        await self.gate.wait()
        return key

    def release(self) -> None:
        self.gate.set()


@pytest.fixture
def key_reads(monkeypatch):
    from apps.proxy import auth

    counting = KeyReads(auth._load_key_async)
    monkeypatch.setattr(auth, "_load_key_async", counting)
    return counting


async def test_requests_with_a_key_this_worker_does_not_hold_share_one_read(proxy, organization, key_reads):
    """Every connection of a busy client finds the key's cache entry expired at the same moment:
    one database read serves them all (32 reads in a row were the worst stalls under load)."""
    _, secret = await create_key(organization)
    requests = [asyncio.create_task(proxy.get("/v1/models", headers=bearer(secret))) for _ in range(20)]
    await asyncio.sleep(0.2)  # every request is waiting for the key by now
    left = requests.pop()
    left.cancel()  # a client that leaves: the read the others wait for goes on
    key_reads.release()

    responses = await asyncio.gather(*requests)
    assert [response.status_code for response in responses] == [200] * 19
    assert key_reads.count == 1
    assert (await proxy.get("/v1/models", headers=bearer(secret))).status_code == 200
    assert key_reads.count == 1  # held now


async def test_requests_with_an_unknown_key_share_one_read_and_are_all_refused(proxy, db, key_reads):
    requests = [proxy.get("/v1/models", headers=bearer("sk_live_" + "x" * 43)) for _ in range(10)]
    key_reads.release()

    responses = await asyncio.gather(*requests)
    assert {response.status_code for response in responses} == {401}
    assert key_reads.count == 1


async def test_a_key_changed_while_a_read_of_it_is_in_flight_is_read_again_and_the_old_read_not_kept(
    proxy, organization, key_reads
):
    """A configuration change forgets the organization's keys and reads them again: that read must
    not join one that began before the change (it would answer, and keep for a minute, the key as it
    was: a model or permission just taken away)."""
    from apps.keys.secrets import api_key_digest
    from apps.proxy.runtime import runtime

    api_key, secret = await create_key(organization)
    before = asyncio.create_task(proxy.get("/v1/models", headers=bearer(secret)))
    await asyncio.sleep(0.1)  # its read is in flight, held
    await sync_to_async(key_services.api_key_update)(api_key=api_key, data={"allowed_models": ["gpt-4o"]})
    runtime.keys.forget_organization(str(organization.id))  # what a newer generation makes the proxy do
    after = asyncio.create_task(proxy.get("/v1/models", headers=bearer(secret)))
    await asyncio.sleep(0.1)
    key_reads.release()
    await asyncio.gather(before, after)

    assert key_reads.count == 2  # the request after the change read the key again
    cached, key = runtime.keys.get(api_key_digest(secret))
    assert cached and key.allowed_models.patterns == ("gpt-4o",)
