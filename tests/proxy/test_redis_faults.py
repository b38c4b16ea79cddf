"""Redis restarted empty, or hanging, under the proxy (issue 20, section 1), with a redis-server of
the test's own: the configuration generation survives a restart as a change, and admission does not
wait on a Redis that hangs for every request."""

import asyncio
import time

import pytest
import redis
from channels.db import database_sync_to_async

from apps.core import redis as core_redis
from apps.core.redis import proxy_redis_pause
from apps.core.revocation_marks import marker
from apps.keys import revocation
from apps.limits import services as limits_services
from apps.organizations import services as organization_services
from apps.proxy.runtime import runtime
from tests.factories import create_api_key
from tests.proxy.conftest import FakeClock, add_alias_async, add_provider_key_async, bearer
from tests.redis_process import RedisProcess

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
set_limits = database_sync_to_async(limits_services.limits_set)


async def update_organization(*, organization, **changes) -> None:
    update = database_sync_to_async(organization_services.organization_update)
    await update(organization=organization, data=changes)


@pytest.fixture
def own_redis(settings):
    """The gateway's Redis is a server of this test's own (started before the organization is made,
    so its writes bump the generation there)."""
    server = RedisProcess().start()
    settings.REDIS_URL = server.url
    core_redis.sync_client.cache_clear()
    core_redis._async_clients.clear()
    proxy_redis_pause.succeeded()
    yield server
    server.close()
    core_redis.sync_client.cache_clear()
    core_redis._async_clients.clear()
    proxy_redis_pause.succeeded()
    proxy_redis_pause.clock = time.monotonic


@pytest.fixture
async def routed(own_redis, organization, upstream):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await add_alias_async(organization, "other", ("openai", "gpt-4o"))  # lifts the counter a little more
    return upstream


@pytest.fixture
def loads(monkeypatch):
    """Every configuration read the store starts (the real read, counted)."""
    seen: list[tuple[str, int]] = []
    read = runtime.configs.load

    async def counted(organization_id: str, generation: int):
        seen.append((organization_id, generation))
        return await read(organization_id, generation)

    monkeypatch.setattr(runtime.configs, "load", counted)
    return seen


async def chat(proxy, secret: str):
    return await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))


async def test_after_redis_restarts_empty_requests_stop_reloading_the_configuration(
    proxy, own_redis, routed, organization, loads
):
    _, secret = await database_sync_to_async(create_api_key)(organization)
    for _ in range(2):
        assert (await chat(proxy, secret)).status_code == 200
    assert len(loads) == 1

    own_redis.restart_empty()
    for _ in range(20):
        assert (await chat(proxy, secret)).status_code == 200

    # Issue 20 measured one reload per request and two MGETs each: one reload in all (the restart is
    # a change), then one MGET per request (and one more for the reload's own check).
    assert len(loads) == 2
    assert own_redis.calls("mget") <= 21


async def test_a_change_made_after_redis_restarts_is_the_copy_held_in_the_next_outage(
    proxy, own_redis, routed, organization
):
    api_key, secret = await database_sync_to_async(create_api_key)(organization)
    await set_limits(organization=organization, api_key=api_key, rate_limits={"rpm": 1000, "tpm": None})
    assert (await chat(proxy, secret)).status_code == 200

    own_redis.restart_empty()
    assert (await chat(proxy, secret)).status_code == 200
    await update_organization(organization=organization, limits_fail_mode="closed")
    assert (await chat(proxy, secret)).status_code == 200

    own_redis.stop()  # the outage: the copy held decides
    response = await chat(proxy, secret)

    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "limits_unavailable"


async def test_a_change_back_to_open_after_redis_restarts_is_served_in_the_next_outage(
    proxy, own_redis, routed, organization
):
    await update_organization(organization=organization, limits_fail_mode="closed")
    api_key, secret = await database_sync_to_async(create_api_key)(organization)
    await set_limits(organization=organization, api_key=api_key, rate_limits={"rpm": 1000, "tpm": None})
    assert (await chat(proxy, secret)).status_code == 200

    own_redis.restart_empty()
    await update_organization(organization=organization, limits_fail_mode="open")
    assert (await chat(proxy, secret)).status_code == 200
    own_redis.stop()

    assert (await chat(proxy, secret)).status_code == 200


async def timed(call) -> tuple[float, object]:
    began = time.perf_counter()
    result = await call
    return time.perf_counter() - began, result


async def test_after_one_timeout_a_hanging_redis_costs_the_next_requests_nothing(
    proxy, own_redis, routed, organization, outsider
):
    limited, limited_secret = await database_sync_to_async(create_api_key)(organization)
    await set_limits(organization=organization, api_key=limited, rate_limits={"rpm": 1000, "tpm": None})
    _, free_secret = await database_sync_to_async(create_api_key)(organization)  # no limit: the MGET only
    closed = outsider.organization
    await update_organization(organization=closed, limits_fail_mode="closed")
    await add_provider_key_async(closed, routed, secret="sk-upstream-two")
    await add_alias_async(closed, "fast", ("openai", "gpt-4o-mini"))
    closed_key, closed_secret = await database_sync_to_async(create_api_key)(closed)
    await set_limits(organization=closed, api_key=closed_key, rate_limits={"rpm": 1000, "tpm": None})
    for secret in (limited_secret, free_secret, closed_secret):
        assert (await chat(proxy, secret)).status_code == 200

    own_redis.freeze()
    first, response = await timed(chat(proxy, limited_secret))
    assert response.status_code == 200  # open: served unchecked, after the client's timeout
    assert first >= 0.4

    for secret, status in [(limited_secret, 200), (free_secret, 200), (closed_secret, 503)] * 3:
        elapsed, response = await timed(chat(proxy, secret))
        assert response.status_code == status, response.text
        assert elapsed < 0.3, f"waited {elapsed:.2f} s on a Redis that hangs"
        assert "x-ratelimit-limit-requests" not in response.headers  # unchecked
    assert response.json()["error"]["code"] == "limits_unavailable"
    assert response.headers["retry-after"] == "5"


async def test_when_the_pause_ends_one_request_probes_and_a_redis_back_is_used_again(
    proxy, own_redis, routed, organization
):
    clock = proxy_redis_pause.clock = FakeClock()
    limited, secret = await database_sync_to_async(create_api_key)(organization)
    await set_limits(organization=organization, api_key=limited, rate_limits={"rpm": 1000, "tpm": None})
    assert "x-ratelimit-limit-requests" in (await chat(proxy, secret)).headers

    own_redis.freeze()
    assert (await chat(proxy, secret)).status_code == 200  # the timeout: the pause starts
    own_redis.thaw()
    response = await chat(proxy, secret)
    assert "x-ratelimit-limit-requests" not in response.headers  # still paused: not asked

    clock.now += proxy_redis_pause.seconds
    response = await chat(proxy, secret)

    assert response.status_code == 200
    assert response.headers["x-ratelimit-limit-requests"] == "1000"  # checked again


# --- Admission's one round trip, sent early --------------------------------------------------------


def commands_run(client: redis.Redis) -> dict[str, int]:
    """How often Redis ran each command so far (INFO commandstats), INFO itself left out."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): s["calls"] for name, s in stats.items() if name != "cmdstat_info"}


async def test_a_request_without_limits_costs_redis_one_mget_and_a_revocation_from_elsewhere_is_seen(
    proxy, own_redis, routed, organization
):
    key, secret = await database_sync_to_async(create_api_key)(organization)
    assert (await chat(proxy, secret)).status_code == 200  # the configuration read, the connection open
    observer = redis.Redis.from_url(own_redis.url)  # one connection: its greeting counted before
    before = commands_run(observer)

    for _ in range(5):
        assert (await chat(proxy, secret)).status_code == 200
    refused_body = await proxy.post("/v1/chat/completions", json={"model": "fast"}, headers=bearer(secret))
    assert refused_body.status_code == 400  # refused after its check was sent: its reply is never read
    assert (await chat(proxy, secret)).status_code == 200  # and the next request reads its own

    after = commands_run(observer)
    ran = {name: calls - before.get(name, 0) for name, calls in after.items() if calls != before.get(name, 0)}
    assert ran == {"mget": 7}

    # Another node revokes the key: it writes the mark, which this process learns from Redis only.
    observer.set(marker(str(key.id)), b"1")
    observer.close()
    response = await chat(proxy, secret)
    assert response.status_code == 401, response.text


async def test_a_check_sent_before_a_failure_is_not_taken_as_the_probe_that_ends_the_pause(
    own_redis, organization
):
    clock = proxy_redis_pause.clock = FakeClock()
    sent = asyncio.get_running_loop().create_future()
    sent.set_result([None, b"7"])  # a reply in hand from before Redis failed
    proxy_redis_pause.failed()
    clock.now += proxy_redis_pause.seconds  # the pause is over: the next call is the probe
    observer = redis.Redis.from_url(own_redis.url)
    before = commands_run(observer).get("mget", 0)

    revoked, generation = await revocation.redis_revocation.check("some-key", str(organization.id), sent)

    assert commands_run(observer).get("mget", 0) - before == 1  # Redis itself was asked
    observer.close()
    assert (revoked, proxy_redis_pause.healthy) == (False, True)
    assert generation is not None and generation != 7
