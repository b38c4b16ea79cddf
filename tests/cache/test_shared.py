"""L2 in Redis: shared by every process, and never a failed request when Redis is down or slow."""

import asyncio
import logging
import time
import uuid

import pytest
import redis.asyncio as aioredis
from django.conf import settings

from apps.cache.shared import SharedCache, cache_epoch, epoch_increment, epoch_key
from apps.core.redis import redis_key, sync_client
from tests.cache.conftest import cached

needs_redis = pytest.mark.skipif(not settings.REDIS_URL, reason="no Redis")


def key() -> str:
    return redis_key("cache-test", uuid.uuid4().hex)


@needs_redis
async def test_an_answer_put_is_read_back_by_another_client(answer):
    entry = key()
    assert await SharedCache().put(entry, answer, 60)

    # Another process: its own client and connection.
    other = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        assert await SharedCache(lambda: other).get(entry) == answer
    finally:
        await other.aclose()


@needs_redis
async def test_an_entry_carries_its_ttl_and_a_missing_one_is_a_miss(answer):
    entry = key()
    await SharedCache().put(entry, answer, 120)

    assert 0 < sync_client().ttl(entry) <= 120
    assert await SharedCache().get(key()) is None


@needs_redis
async def test_a_damaged_or_foreign_value_is_a_miss():
    entry = key()
    sync_client().set(entry, b"\x07not an answer", ex=60)

    assert await SharedCache().get(entry) is None


@needs_redis
async def test_an_answer_larger_than_an_entry_may_be_is_not_stored(settings):
    settings.GATEWAY_CACHE_MAX_ENTRY_BYTES = 2048
    entry = key()

    assert not await SharedCache().put(entry, cached(b"x" * 4096), 60)
    assert await SharedCache().get(entry) is None


async def test_without_redis_it_is_a_miss_and_a_dropped_write(answer):
    cache = SharedCache(lambda: None)

    assert await cache.get("k") is None
    assert not await cache.put("k", answer, 60)


async def test_a_stopped_redis_is_a_quick_miss_with_one_warning(answer, caplog):
    # Nothing listens on port 1: connections are refused, as with a stopped Redis.
    client = aioredis.Redis.from_url("redis://:a-redis-password@127.0.0.1:1/0", socket_connect_timeout=0.5)
    now = [100.0]
    cache = SharedCache(lambda: client, clock=lambda: now[0])

    started = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="apps.cache.shared"):
        assert await cache.get("k") is None
        now[0] += 2  # past the pause after a failure
        assert not await cache.put("k", answer, 60)
        now[0] += 2
        assert await cache.get("k") is None
    elapsed = time.perf_counter() - started
    await client.aclose()

    assert elapsed < 0.5
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1  # at most one a minute
    assert "a-redis-password" not in caplog.text
    assert "127.0.0.1" not in caplog.text


async def test_a_redis_that_stops_answering_costs_one_timeout_then_is_skipped(answer):
    accepted = []

    async def hold(reader, writer):  # accepts and never answers
        accepted.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = aioredis.Redis.from_url(f"redis://127.0.0.1:{port}/0")
    cache = SharedCache(lambda: client, timeout=0.05)
    try:
        started = time.perf_counter()
        assert await cache.get("k") is None
        first = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(20):  # within the pause: not even tried
            assert await cache.get("k") is None
            assert not await cache.put("k", answer, 60)
        rest = time.perf_counter() - started
    finally:
        server.close()
        for writer in accepted:
            writer.close()
        await client.aclose()

    assert first < 0.3
    assert rest < 0.05


@needs_redis
def test_the_epoch_starts_at_0_and_a_purge_increments_it():
    organization_id = uuid.uuid4()

    assert cache_epoch(organization_id) == 0
    assert epoch_increment(organization_id) == 1
    assert cache_epoch(organization_id) == 1
    assert cache_epoch(uuid.uuid4()) == 0
    sync_client().delete(epoch_key(organization_id))


@pytest.mark.skipif(bool(settings.REDIS_URL), reason="the embedded default has no Redis")
def test_without_redis_the_epoch_is_always_0():
    organization_id = uuid.uuid4()

    assert epoch_increment(organization_id) == 0
    assert cache_epoch(organization_id) == 0
