"""L2: the cache every process shares, in Redis.

The hot path reads and writes it with ``redis.asyncio``, under a short time bound, and never fails
a request for it: a Redis that is down or slow is a miss (and a dropped write), with a warning at
most once a minute. After a failure L2 is skipped for a second, so a Redis that hangs does not add
its timeout to every request.

The purge epoch (in every entry's key, apps/cache/keys.py) lives beside the entries; the proxy reads
it with its configuration (``cache_epoch``) and a purge increments it (``epoch_increment``).
"""

import asyncio
import logging
import time
from collections.abc import Callable

import redis
import redis.asyncio as aioredis
from django.conf import settings

from apps.core.redis import async_client, redis_key, sync_client

from .answers import CachedAnswer

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 0.1
PAUSE_AFTER_FAILURE_SECONDS = 1.0
WARNING_INTERVAL_SECONDS = 60.0


class SharedCache:
    def __init__(
        self,
        client: Callable[[], aioredis.Redis | None] = async_client,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self.timeout = timeout
        self._clock = clock
        self._paused_until = 0.0
        self._last_warning = -WARNING_INTERVAL_SECONDS

    def _available(self) -> aioredis.Redis | None:
        if self._clock() < self._paused_until:
            return None
        return self._client()

    def _failed(self, action: str, error: BaseException) -> None:
        now = self._clock()
        self._paused_until = now + PAUSE_AFTER_FAILURE_SECONDS
        if now - self._last_warning >= WARNING_INTERVAL_SECONDS:
            self._last_warning = now
            # The error's type only: a message could carry the server's address or credentials.
            logger.warning("L2 cache %s failed (%s); skipping L2 for now", action, type(error).__name__)

    async def get(self, key: str) -> CachedAnswer | None:
        client = self._available()
        if client is None:
            return None
        try:
            value = await asyncio.wait_for(client.get(key), self.timeout)
        except (redis.RedisError, OSError, TimeoutError) as error:
            self._failed("read", error)
            return None
        if value is None:
            return None
        try:
            return CachedAnswer.loads(value)
        except ValueError:
            return None  # another version's entry, or damaged: a miss, overwritten by the next put

    async def put(self, key: str, answer: CachedAnswer, ttl_seconds: int) -> bool:
        """False when the entry was not stored (too large, no Redis, Redis failing)."""
        value = answer.dumps()
        if ttl_seconds <= 0 or len(value) > settings.GATEWAY_CACHE_MAX_ENTRY_BYTES:
            return False
        client = self._available()
        if client is None:
            return False
        try:
            await asyncio.wait_for(client.set(key, value, ex=int(ttl_seconds)), self.timeout)
        except (redis.RedisError, OSError, TimeoutError) as error:
            self._failed("write", error)
            return False
        return True


# The proxy's: one per process (the client underneath is one per event loop).
shared_cache = SharedCache()


def epoch_key(organization_id) -> str:
    return redis_key("cache-epoch", str(organization_id))


def cache_epoch(organization_id) -> int | None:
    """The organization's purge epoch, for the proxy's configuration load (synchronous): 0 without
    Redis; None when Redis could not be read, and then L2 must be skipped, or entries written
    before a purge could be served again."""
    client = sync_client()
    if client is None:
        return 0
    try:
        value = client.get(epoch_key(organization_id))
    except redis.RedisError as error:
        logger.warning("Reading the cache epoch failed (%s)", type(error).__name__)
        return None
    return int(value) if value is not None else 0


def epoch_increment(organization_id) -> int:
    """A new epoch: every L2 entry of the organization unreachable at once. 0 without Redis (there
    is no L2 then). Raises ``redis.RedisError`` when Redis cannot be reached."""
    client = sync_client()
    if client is None:
        return 0
    return int(client.incr(epoch_key(organization_id)))
