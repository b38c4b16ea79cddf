"""Revocation that reaches every worker on its next request.

Workers keep looked-up keys in memory for a while (``GATEWAY_KEY_CACHE_SECONDS``), so a revoked
key must be refused without waiting for that copy to expire:

- with Redis, revoking writes a marker that every proxy request checks (one ``EXISTS``, about a
  tenth of a millisecond on loopback), so every worker on every node refuses the key at once;
- in the same process (always, and the only way in the embedded default, which has one server
  process), listeners drop the cached copy directly.

If Redis cannot be reached the check falls back to the in-memory copy, so a key revoked during a
Redis outage stops working within ``GATEWAY_KEY_CACHE_SECONDS`` at the latest.
"""

import logging
import time
from collections.abc import Callable

import redis

from apps.core.generations import SEED, generation_key, local_generation, new_seed
from apps.core.redis import RedisPaused, async_client, proxy_redis_pause, redis_key, sync_client

logger = logging.getLogger(__name__)

# The marker must outlive every in-memory copy of the key; after that the database says "revoked".
MARKER_SECONDS = 24 * 3600

_listeners: list[Callable[[str], None]] = []
_last_warning = 0.0


def on_revoke(listener: Callable[[str], None]) -> None:
    """Registers a callback run in this process with the id of every key revoked here."""
    _listeners.append(listener)


def marker(key_id: str) -> str:
    return redis_key("revoked-key", key_id)


def announce_revoked(key_id: str) -> None:
    for listener in _listeners:
        listener(key_id)
    client = sync_client()
    if client is not None:
        client.set(marker(key_id), b"1", ex=MARKER_SECONDS)


async def check(key_id: str, organization_id: str) -> tuple[bool, int | None]:
    """Whether the key was revoked, and the organization's configuration generation
    (``apps/core/generations.py``), in one round trip (two the first time an organization's counter
    is missing). Without Redis the generation is this process's own; with Redis unreachable, or
    skipped after a failure (``proxy_redis_pause``), it is None (keep what is in memory)."""
    client = async_client()
    if client is None:
        return False, local_generation(organization_id)
    try:
        proxy_redis_pause.check()
        # One command, one round trip: cheaper for the proxy's CPU than a two-command pipeline.
        revoked, generation = await client.mget(marker(key_id), generation_key(organization_id))
        if generation is None:  # never bumped, or a Redis that restarted empty: seeded, never 0
            generation = await client.eval(SEED, 1, generation_key(organization_id), new_seed())
    except (redis.RedisError, OSError) as error:
        if not isinstance(error, RedisPaused):
            proxy_redis_pause.failed()
        _warn_unreachable(error)
        return False, None
    proxy_redis_pause.succeeded()
    return revoked is not None, int(generation)


def _warn_unreachable(error: Exception) -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning > 30:
        _last_warning = now
        logger.warning(
            "Redis unreachable for the revocation check (%s); trusting cached keys", type(error).__name__
        )
