"""L2: the cache every process shares, in Redis.

The hot path reads and writes it with ``redis.asyncio``, under a short time bound, and never fails
a request for it: a Redis that is down or slow is a miss (and a dropped write), with a warning at
most once a minute. After a failure L2 is skipped for a second, so a Redis that hangs does not add
its timeout to every request.

The purge epoch (in every entry's key, apps/cache/keys.py) lives beside the entries; the proxy reads
it with its configuration (``cache_epoch``) and a purge increments it (``epoch_increment``).

One interface, ``SharedTier``, and two implementations chosen once by ``shared_tier()``
(``apps/core/backends.py``): ``SharedCache`` in Redis, and ``NoSharedTier`` for the embedded default,
whose one server process shares its L1 already.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

import redis
import redis.asyncio as aioredis
from django.conf import settings

from apps.core.backends import backend
from apps.core.redis import async_client, redis_key, sync_client

from .stored_answers import CachedAnswer

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 0.1
PAUSE_AFTER_FAILURE_SECONDS = 1.0
WARNING_INTERVAL_SECONDS = 60.0


class SharedTier(Protocol):
    async def get(self, key: str) -> CachedAnswer | None:
        """The entry, or None: a miss, also when the tier cannot be read (never raises)."""
        ...

    async def put(self, key: str, answer: CachedAnswer, ttl_seconds: int) -> bool:
        """False when the entry was not stored (too large, no tier, the tier failing); never raises."""
        ...

    def epoch(self, organization_id) -> int | None:
        """The organization's purge epoch, for the proxy's configuration load (synchronous); None
        when it could not be read, and then the tier must be skipped, or entries written before a
        purge could be served again."""
        ...

    def epoch_increment(self, organization_id) -> int:
        """A new epoch: every entry of the organization unreachable at once; returns it. Raises
        ``redis.RedisError`` when the tier cannot be reached."""
        ...


class NoSharedTier:
    """The embedded default's: no tier shared between processes (there is one), so every read is a
    miss, every write is dropped, and the epoch is always 0."""

    async def get(self, key: str) -> CachedAnswer | None:
        return None

    async def put(self, key: str, answer: CachedAnswer, ttl_seconds: int) -> bool:
        return False

    def epoch(self, organization_id) -> int | None:
        return 0

    def epoch_increment(self, organization_id) -> int:
        return 0


class SharedCache:
    """The tier in Redis. ``client``: where the asynchronous client comes from (a seam for the
    tests); the epochs use the synchronous one."""

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

    def epoch(self, organization_id) -> int | None:
        try:
            value = sync_client().get(epoch_key(organization_id))
        except redis.RedisError as error:
            logger.warning("Reading the cache epoch failed (%s)", type(error).__name__)
            return None
        return int(value) if value is not None else 0

    def epoch_increment(self, organization_id) -> int:
        return int(sync_client().incr(epoch_key(organization_id)))


def epoch_key(organization_id) -> str:
    return redis_key("cache-epoch", str(organization_id))


# The proxy's: one per process (the client underneath is one per event loop).
shared_cache = SharedCache()
no_shared_tier = NoSharedTier()
# This deployment's: the one function that chooses.
shared_tier: Callable[[], SharedTier] = backend(lambda: no_shared_tier, lambda: shared_cache)


def cache_epoch(organization_id) -> int | None:
    """``SharedTier.epoch`` of this deployment's tier."""
    return shared_tier().epoch(organization_id)


def epoch_increment(organization_id) -> int:
    """``SharedTier.epoch_increment`` of this deployment's tier."""
    return shared_tier().epoch_increment(organization_id)
