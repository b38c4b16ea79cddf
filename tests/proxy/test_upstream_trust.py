"""What an upstream is never trusted with: where the gateway connects next, the provider key it was
sent (even in part), and what the client learns about the gateway's network when it fails."""

import json
import logging
import time

import pytest
from channels.db import database_sync_to_async

from apps.organizations import services as organization_services
from apps.providers import services as provider_services
from apps.proxy.scrubbing import ERROR_TEXT_LIMIT, scrub
from tests.proxy.conftest import add_provider_key_async, bearer, entries
from tests.servers import free_port

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
# An Azure-style key: no sk- prefix, so only the gateway's own scrubbing can catch it.
SECRET = "3f9c1e7a5b2d4c6e8f0a1b3c5d7e9f21"
MODELS = {
    "openai": "openai/gpt-4o-mini",
    "azure_openai": "azure_openai/gpt-4o-mini",
    "anthropic": "anthropic/claude-3-5-haiku",
}


async def chat(proxy, gateway_key, model: str, *, stream: bool = False):
    body = {"model": model, "messages": HELLO, "stream": stream}
    return await proxy.post("/v1/chat/completions", json=body, headers=bearer(gateway_key[1]))


# --- Redirects ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("provider", list(MODELS))
async def test_it_never_follows_an_upstream_redirect(
    proxy, organization, gateway_key, make_upstream, records, provider, stream
):
    hijacked, elsewhere = make_upstream("hijacked"), make_upstream("elsewhere")
    await add_provider_key_async(organization, hijacked, provider=provider, secret=SECRET)
    hijacked.behave("redirect", to=elsewhere.base_url)

    response = await chat(proxy, gateway_key, MODELS[provider], stream=stream)

    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "upstream_failed"
    assert "redirect_refused" in error["message"]
    assert [request.credential for request in hijacked.requests] == [SECRET]
    assert elsewhere.requests == []  # neither the body nor the key header went there
    [attempt] = records[0].attempts
    assert (attempt.status, attempt.outcome) == (307, "upstream_error")
    assert "redirect" in attempt.error


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_of_any_kind_fails_over_to_the_next_key(
    proxy, organization, gateway_key, make_upstream, records, status
):
    hijacked, elsewhere, healthy = make_upstream("hijacked"), make_upstream("elsewhere"), make_upstream()
    await add_provider_key_async(organization, hijacked, secret="sk-upstream-hijacked", weight=10)
    await add_provider_key_async(organization, healthy, secret="sk-upstream-healthy", weight=1)
    hijacked.behave("redirect", to=elsewhere.base_url, status=status)

    response = await chat(proxy, gateway_key, "openai/gpt-4o-mini")

    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Hello from upstream: hi"
    assert elsewhere.requests == []
    assert [(a.status, a.outcome) for a in records[0].attempts] == [(status, "upstream_error"), (200, "ok")]


# --- Provider keys echoed by an upstream ----------------------------------------------------------

ECHOES = {
    "truncated like OpenAI": f"Incorrect API key provided: {SECRET[:6]}{'*' * 24}{SECRET[-4:]}.",
    "shortened with dots": f"Incorrect API key provided: {SECRET[:6]}...{SECRET[-3:]}.",
    "a run from the middle": f"The key {SECRET[4:20]} has been disabled.",
    "inside a longer word": f"credential=xx{SECRET}yy is not valid",
    "one character short": f"Unknown key {SECRET[:-1]}",
}


def echoed_part(message: str) -> str:
    """The part of ``message`` that came from the key: the word that carries it."""
    return next(word.strip(".") for word in message.split() if SECRET[-3:] in word or SECRET[4:12] in word)


@pytest.mark.parametrize("status", [400, 401], ids=["refused-request", "failed-attempt"])
@pytest.mark.parametrize("message", list(ECHOES.values()), ids=list(ECHOES))
async def test_no_part_of_the_provider_key_reaches_the_client_or_the_audit_log(
    proxy, organization, gateway_key, upstream, status, message
):
    await database_sync_to_async(organization_services.organization_update)(
        organization=organization, data={"log_bodies": "full"}
    )
    await add_provider_key_async(organization, upstream, secret=SECRET)
    upstream.behave("status", status=status, message=message)
    leaked = echoed_part(message)

    response = await chat(proxy, gateway_key, "openai/gpt-4o-mini")

    assert response.status_code == (400 if status == 400 else 502)
    assert leaked not in response.text
    assert "[provider key]" in response.text or status == 401  # a failed attempt's message stays out
    [entry] = await entries()
    stored = json.dumps(entry.attempts) + entry.response_body
    assert "[provider key]" in stored
    assert leaked not in stored
    for start in range(len(SECRET) - 8):
        assert SECRET[start : start + 8] not in response.text + stored


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_error_event_in_a_started_stream_never_carries_the_provider_key(
    proxy, organization, gateway_key, upstream, provider
):
    await database_sync_to_async(organization_services.organization_update)(
        organization=organization, data={"log_bodies": "full"}
    )
    await add_provider_key_async(organization, upstream, provider=provider, secret=SECRET)
    message = ECHOES["truncated like OpenAI"]
    upstream.behave("error_event", after=1, message=message)

    body = {"model": MODELS[provider], "messages": HELLO, "stream": True}
    async with proxy.stream(
        "POST", "/v1/chat/completions", json=body, headers=bearer(gateway_key[1])
    ) as response:
        text = (await response.aread()).decode()

    assert response.status_code == 200
    assert "Hello" in text and "[provider key]" in text
    assert echoed_part(message) not in text
    [entry] = await entries()
    assert "[provider key]" in entry.response_body
    assert echoed_part(message) not in entry.response_body


# --- What a 502 tells the client -----------------------------------------------------------------


async def test_a_502_names_the_failure_without_the_upstreams_address(
    proxy, organization, gateway_key, records, caplog
):
    port = free_port()  # nothing listens there
    await database_sync_to_async(provider_services.provider_key_create)(
        organization=organization,
        data={
            "provider": "openai",
            "key": SECRET,
            "base_url": f"http://127.0.0.1:{port}/v1",
            "data_region": "us",
        },
    )

    with caplog.at_level(logging.WARNING, logger="apps.proxy"):
        response = await chat(proxy, gateway_key, "openai/gpt-4o-mini")

    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "openai" in message
    assert "3 attempt" in message  # the only key, retried after a refused connection
    assert "connection_error" in message
    assert "127.0.0.1" not in response.text
    assert str(port) not in response.text
    attempt = records[0].attempts[-1]
    assert f"127.0.0.1:{port}" in attempt.error  # the detail stays with the operator
    assert f"127.0.0.1:{port}" in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    ("behaviour", "category"),
    [
        ({"mode": "status", "status": 503, "message": "overloaded at 10.1.2.3:8000"}, "upstream_status_503"),
        ({"mode": "invalid_json"}, "invalid_response"),
        ({"mode": "drop_connection"}, "connection_error"),
    ],
)
async def test_a_502_gives_the_category_of_the_last_failure(
    proxy, organization, gateway_key, upstream, behaviour, category
):
    await add_provider_key_async(organization, upstream, secret=SECRET)
    upstream.behave(**behaviour)

    response = await chat(proxy, gateway_key, "openai/gpt-4o-mini")

    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert category in message
    assert "10.1.2.3" not in message
    assert upstream.base_url.split(":")[-1] not in message


async def test_other_credentials_an_upstream_quotes_are_masked_in_the_answer_the_log_and_the_audit_log(
    proxy, organization, gateway_key, upstream, caplog
):
    """An upstream may quote any credential it saw or holds (here the gateway key of the request,
    as a misconfigured self-hosted server echoing headers might): none of it leaves the gateway."""
    await add_provider_key_async(organization, upstream, secret=SECRET)
    quoted = f"Bad header Authorization: Bearer {gateway_key[1]}; user key {gateway_key[1]}"
    upstream.behave("status", status=400, message=quoted)

    with caplog.at_level(logging.DEBUG):
        refused = await chat(proxy, gateway_key, "openai/gpt-4o-mini")
        upstream.behave("status", status=500, message=quoted)
        failed = await chat(proxy, gateway_key, "openai/gpt-4o-mini")

    assert (refused.status_code, failed.status_code) == (400, 502)
    stored = "".join(json.dumps(entry.attempts) + entry.response_body for entry in await entries())
    for text in (refused.text, failed.text, caplog.text, stored):
        assert gateway_key[1] not in text
    assert "[REDACTED:secret]" in refused.text


# --- Error text of any length ---------------------------------------------------------------------

# A key shown the way OpenAI shows it, then a long run of letters with no marker in it: the input on
# which a backtracking pattern goes quadratic (16 KB took 14 s, blocking the worker's event loop).
ELIDED_KEY = f"{SECRET[:6]}{'*' * 24}{SECRET[-4:]}"
SIZES = {"16 KB": 16 * 1024, "1 MiB": 2**20}
# Not a performance target: a bound that a quadratic scan of these sizes cannot meet.
BOUND_SECONDS = 5.0


def long_error(size: int) -> str:
    return f"Incorrect API key provided: {ELIDED_KEY} for {SECRET[4:20]}. " + "a" * size


@pytest.mark.parametrize("size", [*SIZES.values(), 64 * 1024], ids=[*SIZES, "64 KB"])
def test_scrubbing_takes_time_in_proportion_to_the_text(size):
    began = time.perf_counter()
    scrubbed = scrub(long_error(size), SECRET)
    elapsed = time.perf_counter() - began

    assert elapsed < BOUND_SECONDS
    assert scrubbed.startswith("Incorrect API key provided: [provider key] for [provider key].")
    assert SECRET[-4:] not in scrubbed[:100]


@pytest.mark.parametrize("shape", ["refused-request", "failed-attempt", "stream-error-event"])
@pytest.mark.parametrize("size", list(SIZES.values()), ids=list(SIZES))
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_long_upstream_error_is_answered_at_once_cut_short_and_without_the_key(
    proxy, organization, gateway_key, upstream, provider, size, shape
):
    await database_sync_to_async(organization_services.organization_update)(
        organization=organization, data={"log_bodies": "full"}
    )
    await add_provider_key_async(organization, upstream, provider=provider, secret=SECRET)
    message = long_error(size)
    if shape == "stream-error-event":
        upstream.behave("error_event", after=1, message=message)
    else:
        upstream.behave("status", status=400 if shape == "refused-request" else 500, message=message)

    began = time.perf_counter()
    body = {"model": MODELS[provider], "messages": HELLO, "stream": shape == "stream-error-event"}
    async with proxy.stream(
        "POST", "/v1/chat/completions", json=body, headers=bearer(gateway_key[1])
    ) as response:
        text = (await response.aread()).decode()
    elapsed = time.perf_counter() - began

    assert elapsed < BOUND_SECONDS
    assert response.status_code == {"refused-request": 400, "failed-attempt": 502}.get(shape, 200)
    assert len(text) < ERROR_TEXT_LIMIT + 2048  # the answer carries at most a few KB of the upstream's text
    [entry] = await entries()
    stored = text + json.dumps(entry.attempts) + entry.response_body
    assert "[provider key]" in stored
    for start in range(len(SECRET) - 8):
        assert SECRET[start : start + 8] not in stored
    assert ELIDED_KEY not in stored and SECRET[-4:] + " for" not in stored


@pytest.mark.parametrize("status", [400, 500], ids=["refused-request", "failed-attempt"])
async def test_a_key_that_straddles_the_cut_of_a_long_error_message_is_masked_whole(
    proxy, organization, gateway_key, upstream, status
):
    """Cut first and scrubbed second, the key's first characters were left at the end of the message."""
    await add_provider_key_async(organization, upstream, secret=SECRET)
    upstream.behave("status", status=status, message="x" * 1995 + " " + SECRET)

    response = await chat(proxy, gateway_key, "openai/gpt-4o-mini")

    [entry] = await entries()
    for text in (response.text, json.dumps(entry.attempts)):
        assert SECRET[:4] not in text


# --- Cookies --------------------------------------------------------------------------------------


async def test_a_cookie_an_upstream_sets_is_never_sent_back_on_any_request(
    proxy, organization, gateway_key, make_upstream
):
    """The upstream client is shared by every organization and provider key: a cookie one answer set
    (a CDN's, as the stand-in sets on every answer) would ride along with everyone's next requests.
    The provider key names the upstream by host name, as real ones do (cookies of a bare IP address
    are not kept by any client)."""
    cdn = make_upstream("cdn")
    port = cdn.base_url.rsplit(":", 1)[1]
    await add_provider_key_async(organization, cdn, base_url=f"http://localhost:{port}/v1")

    for _ in range(3):
        response = await chat(proxy, gateway_key, "openai/gpt-4o-mini")
        assert response.status_code == 200, response.text

    assert len(cdn.requests) == 3
    assert [request.headers.get("cookie") for request in cdn.requests] == [None, None, None]
