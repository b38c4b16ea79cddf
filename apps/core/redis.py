"""Redis clients: a synchronous one for services and tasks, and ``redis.asyncio`` for the hot path.

Both are None in the embedded default (no REDIS_URL). The backends' Redis implementations use them;
``apps/core/backends.py`` chooses, once, between those and the embedded ones.
"""

import asyncio
import time
from collections.abc import Callable
from functools import cache

import hiredis  # a dependency of the project (pyproject.toml): replies and commands in C
import redis
import redis.asyncio as aioredis
from django.conf import settings
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

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


class _HiredisPackingConnection(aioredis.Connection):
    """redis.asyncio packs each command in Python, where the synchronous client packs it with hiredis
    when it is installed (redis.connection.HiredisRespSerializer): a third of the client's CPU for a
    budget's admission script. The same packing, on the asynchronous client."""

    def pack_command(self, *args) -> list[bytes]:
        if isinstance(args[0], str):  # "SCRIPT LOAD": the words go as arguments of their own
            args = (*args[0].encode().split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError as error:
            raise redis.DataError(str(error)) from error


def _async_options(url: str) -> dict:
    options = {**_TIMEOUTS, "retry": _retry(AsyncRetry)}
    if url.startswith("redis://"):  # TLS and Unix sockets keep their own connection classes
        options["connection_class"] = _HiredisPackingConnection
    return options


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
        options = _async_options(settings.REDIS_URL)
        client = _async_clients[loop] = aioredis.Redis.from_url(settings.REDIS_URL, **options)
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


# One per process: the revocation check (its MGET) and the budget and rate-limit scripts share it.
proxy_redis_pause = ProxyRedisPause()
