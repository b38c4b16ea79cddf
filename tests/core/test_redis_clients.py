"""The Redis clients give up at once when Redis refuses connections: every caller (admission on the
proxy's path, the cache, the purge) then takes its documented fallback without waiting."""

import time

import pytest
import redis

from apps.core import redis as core_redis

CLOSED = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.fixture
def unreachable(settings):
    settings.REDIS_URL = CLOSED
    core_redis.sync_client.cache_clear()
    core_redis._async_clients.clear()
    yield
    core_redis.sync_client.cache_clear()
    core_redis._async_clients.clear()


def test_the_synchronous_client_fails_at_once(unreachable):
    began = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        core_redis.sync_client().get("anything")
    assert time.monotonic() - began < 0.5  # redis-py's default retries took about 4 s


async def test_the_asynchronous_client_fails_at_once(unreachable):
    began = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        await core_redis.async_client().get("anything")
    assert time.monotonic() - began < 0.5
