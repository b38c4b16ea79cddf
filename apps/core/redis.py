"""Redis clients: a synchronous one for services and tasks, and for the hot path the pipelined client
(redis_pipelined.py; ``redis.asyncio`` for a TLS or Unix-socket URL).

Both are None in the embedded default (no REDIS_URL). The backends' Redis implementations use them;
``apps/core/backends.py`` chooses, once, between those and the embedded ones.
"""

import asyncio
import time
from collections.abc import Callable
from functools import cache

import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from .redis_pipelined import PipelinedRedis

# A Redis that has stopped answering must not hold a proxy request for long.
_TIMEOUTS = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5}


def _retry(kind):
    """One immediate retry (a pooled connection Redis closed is replaced at once), no back-off:
    redis-py 8's default (three retries, exponential back-off) held every call about 4 s when Redis
    refused connections, and the proxy would have waited that long before failing open."""
    return kind(NoBackoff(), 1)


def redis_key(*parts: str) -> str:
    return ":".join((settings.REDIS_KEY_PREFIX, *parts))


@cache
def sync_client() -> redis.Redis | None:
    if not settings.REDIS_URL:
        return None
    return redis.Redis.from_url(settings.REDIS_URL, retry=_retry(Retry), **_TIMEOUTS)


def _new_async_client(url: str) -> "PipelinedRedis | aioredis.Redis":
    if url.startswith("redis://"):
        return PipelinedRedis.from_url(url, **_TIMEOUTS)
    # TLS and Unix sockets: redis-py's own connection classes.
    return aioredis.Redis.from_url(url, retry=_retry(AsyncRetry), **_TIMEOUTS)


_async_clients: dict[asyncio.AbstractEventLoop, "PipelinedRedis | aioredis.Redis"] = {}


def async_client() -> "PipelinedRedis | aioredis.Redis | None":
    """One client per event loop: a connection belongs to the loop that opened it."""
    if not settings.REDIS_URL:
        return None
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        for stale_loop in [known for known in _async_clients if known.is_closed()]:
            del _async_clients[stale_loop]
        client = _async_clients[loop] = _new_async_client(settings.REDIS_URL)
    return client


class RedisPaused(redis.ConnectionError):
    """Not sent: a call of the proxy's path failed a moment ago (``ProxyRedisPause``)."""


class ProxyRedisPause:
    """After a call on the proxy's path fails, the next ones skip Redis for ``seconds``: a Redis
    that hangs (SIGSTOP, a full network buffer) cost every request its client timeout (0.5 s and
    one retry: 1.0 s, measured by issue 20's outside run), and now costs that to one request a
    ``seconds``. When the pause ends, the first call goes through as a probe and the pause is
    stretched for everyone else meanwhile, so a Redis still hanging holds up that one call only;
    its success ends the pause. Callers take their own fallback on ``RedisPaused`` as on any
    connection error (admission: the organization's fail mode; revocation: the keys in memory).
    The cache's L2 has its own pause (apps/cache/shared.py), with its own shorter timeout."""

    def __init__(self, seconds: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock  # a seam for the tests
        self._until = 0.0

    def check(self) -> None:
        """Raises ``RedisPaused`` while paused; lets one probe through when the pause ends."""
        if not self._until:
            return
        now = self.clock()
        if now < self._until:
            raise RedisPaused("Redis failed a moment ago; skipped")
        self._until = now + self.seconds  # this call probes; the others wait for its answer

    def failed(self) -> None:
        self._until = self.clock() + self.seconds

    def succeeded(self) -> None:
        self._until = 0.0

    @property
    def paused(self) -> bool:
        return bool(self._until) and self.clock() < self._until

    @property
    def healthy(self) -> bool:
        """No call has failed since the last one that succeeded."""
        return not self._until


# One per process: the revocation check (its MGET) and the budget and rate-limit scripts share it.
proxy_redis_pause = ProxyRedisPause()
