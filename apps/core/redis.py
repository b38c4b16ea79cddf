"""Redis clients: a synchronous one for services and tasks, and ``redis.asyncio`` for the hot path.

Both are None in the embedded default (no REDIS_URL); callers fall back to process-local state.
"""

import asyncio
from functools import cache

import redis
import redis.asyncio as aioredis
from django.conf import settings

# A Redis that has stopped answering must not hold a proxy request for long.
_TIMEOUTS = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5}


def redis_key(*parts: str) -> str:
    return ":".join((settings.REDIS_KEY_PREFIX, *parts))


@cache
def sync_client() -> redis.Redis | None:
    if not settings.REDIS_URL:
        return None
    return redis.Redis.from_url(settings.REDIS_URL, **_TIMEOUTS)


_async_clients: dict[asyncio.AbstractEventLoop, aioredis.Redis] = {}


def async_client() -> aioredis.Redis | None:
    """One client per event loop: redis.asyncio's pool belongs to the loop that first used it."""
    if not settings.REDIS_URL:
        return None
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        for stale_loop in [known for known in _async_clients if known.is_closed()]:
            del _async_clients[stale_loop]
        client = _async_clients[loop] = aioredis.Redis.from_url(settings.REDIS_URL, **_TIMEOUTS)
    return client
