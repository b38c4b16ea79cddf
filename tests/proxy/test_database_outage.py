"""PostgreSQL out of reach under a live gateway (issue 20, section 2): keys it has read keep being
served from their last good copy, revocation still reaches them through Redis, and a key it never
read is a quick 503 in OpenAI's shape, never a 401 or a 500.

The gateway runs under Daphne with its database behind a loopback TCP proxy the test severs; the
test itself reaches the database directly (it revokes a key during the outage, as another node or
the Django admin would). GATEWAY_KEY_CACHE_SECONDS=0 makes every request's key copy expire at once:
what a 60 s outage does to a hot key, without waiting a minute."""

import asyncio
import time
from contextlib import contextmanager

import httpx
import pytest
from django.conf import settings
from django.db import connection

from apps.keys import services as key_services
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key, bearer
from tests.servers import daphne_server
from tests.tcp_proxy import TcpProxy

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql" or not settings.REDIS_URL,
        reason="cuts a PostgreSQL connection and revokes through Redis; run with DATABASE_URL and REDIS_URL",
    ),
]

CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}


def database_url_through(proxy: TcpProxy) -> str:
    db = connection.settings_dict
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@127.0.0.1:{proxy.port}/{db['NAME']}"


def assert_database_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert response.json()["error"]["code"] == "database_unavailable"
    assert response.headers["x-should-retry"] == "true"
    assert response.headers["retry-after"] == "1"


@contextmanager
def gateway_behind_a_cut(tmp_path, **extra_env: str):
    """A live gateway whose database connections go through a TCP proxy the test can sever, with
    the production pool and key copies that expire at once: (cut, base_url, client)."""
    db = connection.settings_dict
    with TcpProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)) as cut:
        env = {
            "DATABASE_URL": database_url_through(cut),
            "DATABASE_POOL": "true",  # the production default (the suite's servers run without it)
            "GATEWAY_KEY_CACHE_SECONDS": "0",
            "GATEWAY_OUTBOX_DIR": str(tmp_path / "outbox"),
            **extra_env,
        }
        with (
            daphne_server(tmp_path, **env) as base_url,
            httpx.Client(base_url=base_url, timeout=30) as client,
        ):
            yield cut, base_url, client


def test_keys_outlive_a_database_outage_and_unknown_ones_fail_fast(
    organization, outsider, upstream, tmp_path
):
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, hot = create_api_key(organization)
    doomed, doomed_secret = create_api_key(organization)
    _, never_seen = create_api_key(outsider.organization)

    with gateway_behind_a_cut(tmp_path) as (cut, base_url, client):

        def chat(secret: str) -> httpx.Response:
            return client.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))

        assert chat(hot).status_code == 200
        assert chat(doomed_secret).status_code == 200

        cut.sever()
        # A hot key whose copy expired is served from its last good copy, request after request.
        started = time.monotonic()
        for _ in range(5):
            response = chat(hot)
            assert response.status_code == 200, response.text
        assert time.monotonic() - started < 3  # not one pool timeout (5 s) among them

        # Revoked meanwhile (the database, as another node sees it, and Redis): refused at once.
        key_services.api_key_revoke(api_key=doomed)
        response = chat(doomed_secret)
        assert response.status_code == 401, response.text
        assert response.json()["error"]["code"] == "invalid_api_key"

        # A key this server never read cannot be checked: a 503, for many callers at once, fast.
        async def unknown_key_calls() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=base_url, timeout=30) as concurrent:
                return await asyncio.gather(
                    *(
                        concurrent.post("/v1/chat/completions", json=CHAT, headers=bearer(never_seen))
                        for _ in range(16)
                    )
                )

        started = time.monotonic()
        responses = asyncio.run(unknown_key_calls())
        assert time.monotonic() - started < 2
        for response in responses:
            assert_database_unavailable(response)
        # ... while the hot key still answers.
        assert chat(hot).status_code == 200

        cut.restore()
        # Back within the breaker's retry interval and a probe: the unknown key is read now.
        deadline = time.monotonic() + 5
        while (response := chat(never_seen)).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert response.status_code == 404, response.text  # the outsider has no model "fast"
        assert response.json()["error"]["code"] != "database_unavailable"


def test_no_key_is_served_without_the_database_past_the_outage_bound(organization, upstream, tmp_path):
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, hot = create_api_key(organization)

    # The copy read before the cut is already too old.
    with gateway_behind_a_cut(tmp_path, GATEWAY_KEY_OUTAGE_SECONDS="0") as (cut, _, client):
        assert client.post("/v1/chat/completions", json=CHAT, headers=bearer(hot)).status_code == 200
        cut.sever()
        assert_database_unavailable(client.post("/v1/chat/completions", json=CHAT, headers=bearer(hot)))


def test_a_configuration_change_during_the_outage_does_not_drop_the_keys_held(
    organization, upstream, tmp_path
):
    """A generation that moves while the database is away (a write on another node, Redis restarted
    empty) asks for the organization's configuration and keys again: nothing can be read, so the
    copies held go on serving (found in review: the keys held were dropped, and the hot key got 503)."""
    from apps.core.generations import bump_generation

    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, hot = create_api_key(organization)

    with gateway_behind_a_cut(tmp_path) as (cut, _, client):
        assert client.post("/v1/chat/completions", json=CHAT, headers=bearer(hot)).status_code == 200
        cut.sever()
        assert client.post("/v1/chat/completions", json=CHAT, headers=bearer(hot)).status_code == 200

        bump_generation(organization.id)

        for _ in range(3):
            response = client.post("/v1/chat/completions", json=CHAT, headers=bearer(hot))
            assert response.status_code == 200, response.text
