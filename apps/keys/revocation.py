"""Revocation that reaches every worker on its next request.

Workers keep looked-up keys in memory for a while (``GATEWAY_KEY_CACHE_SECONDS``), so a revoked
key must be refused without waiting for that copy to expire:

- with Redis, revoking writes a marker that every proxy request checks (one ``EXISTS``, about a
  tenth of a millisecond on loopback), so every worker on every node refuses the key at once;
- in the same process (always, and the only way in the embedded default, which has one server
  process), listeners drop the cached copy directly.

If Redis cannot be reached the check falls back to the in-memory copy, so a key revoked during a
Redis outage stops working within ``GATEWAY_KEY_CACHE_SECONDS`` at the latest.

The marks have one interface, ``Revocation``, and two implementations chosen once by
``revocations()`` (``apps/core/backends.py``): in Redis, and in this process (the embedded default).
"""

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

import redis

from apps.core.backends import backend
from apps.core.generations import SEED, generation_key, local_generation, new_seed
from apps.core.redis import RedisPaused, async_client, proxy_redis_pause, sync_client
from apps.core.redis_pipelined import PipelinedRedis
from apps.core.revocation_marks import MARKER_SECONDS, local_marks, marker

logger = logging.getLogger(__name__)

_listeners: list[Callable[[str], None]] = []
_last_warning = 0.0


def on_revoke(listener: Callable[[str], None]) -> None:
    """Registers a callback run in this process with the id of every key revoked here (once, however
    often the registering app's ``ready`` runs)."""
    if listener not in _listeners:
        _listeners.append(listener)


class Revocation(Protocol):
    def mark(self, key_id: str) -> None:
        """Synchronous, for the management side: the key is refused from now on. Raises
        ``redis.RedisError`` when Redis cannot be reached."""
        ...

    async def check(
        self, key_id: str, organization_id: str, sent: asyncio.Future | None = None
    ) -> tuple[bool, int | None]:
        """For the proxy: whether the key was marked revoked, and the organization's configuration
        generation (``apps/core/generations.py``); None for the generation when it cannot be known
        (Redis unreachable, or skipped after a failure: keep what is in memory). Never raises.
        ``sent``: the reply of ``send_early``'s question, when it sent one."""
        ...

    def send_early(self, key_id: str, organization_id: str) -> asyncio.Future | None:
        """For the proxy: the check's question sent now, to be answered by ``check(..., sent=...)``
        later, so the request does other work while it travels. None when nothing was sent (no
        round trip to save, or no open connection): ``check`` then asks itself."""
        ...


class LocalRevocation:
    """The embedded default's: the marks and the generation this process holds."""

    def mark(self, key_id: str) -> None:
        local_marks.add(key_id)

    async def check(
        self, key_id: str, organization_id: str, sent: asyncio.Future | None = None
    ) -> tuple[bool, int | None]:
        return key_id in local_marks, local_generation(organization_id)

    def send_early(self, key_id: str, organization_id: str) -> asyncio.Future | None:
        return None  # in this process's memory: nothing to wait for


class RedisRevocation:
    """Every process's: one ``MGET`` of the mark and the generation."""

    def mark(self, key_id: str) -> None:
        sync_client().set(marker(key_id), b"1", ex=MARKER_SECONDS)

    def send_early(self, key_id: str, organization_id: str) -> asyncio.Future | None:
        if not proxy_redis_pause.healthy:  # a failure is being handled: check() probes, as usual
            return None
        client = async_client()
        if not isinstance(client, PipelinedRedis):  # redis.asyncio (TLS, a Unix socket): asked in check()
            return None
        sent = client.send_now("MGET", marker(key_id), generation_key(organization_id))
        if sent is not None:
            # A request refused before admission never reads its reply; nor is a failure then
            # reported as never retrieved.
            sent.add_done_callback(_retrieve)
        return sent

    async def check(
        self, key_id: str, organization_id: str, sent: asyncio.Future | None = None
    ) -> tuple[bool, int | None]:
        """In one round trip (two the first time an organization's counter is missing); none of its
        own when ``sent`` is the reply of ``send_early``'s."""
        client = async_client()
        try:
            proxy_redis_pause.check()
            # One command, one round trip: cheaper for the proxy's CPU than a two-command pipeline.
            # A reply sent before a failure began is not the probe a pause waits for: asked afresh.
            if sent is not None and proxy_redis_pause.healthy:
                if not sent.done() and isinstance(client, PipelinedRedis):
                    client.read_arrived()
                revoked, generation = await sent
            else:
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


local_revocation = LocalRevocation()
redis_revocation = RedisRevocation()
# This deployment's: the one function that chooses.
revocations: Callable[[], Revocation] = backend(lambda: local_revocation, lambda: redis_revocation)


def announce_revoked(key_id: str) -> None:
    for listener in _listeners:
        listener(key_id)
    revocations().mark(key_id)


async def check(
    key_id: str, organization_id: str, sent: asyncio.Future | None = None
) -> tuple[bool, int | None]:
    """``Revocation.check`` of this deployment's implementation."""
    return await revocations().check(key_id, organization_id, sent)


def send_early(key_id: str, organization_id: str) -> asyncio.Future | None:
    """``Revocation.send_early`` of this deployment's implementation."""
    return revocations().send_early(key_id, organization_id)


def _retrieve(sent: asyncio.Future) -> None:
    if not sent.cancelled():
        sent.exception()


def _warn_unreachable(error: Exception) -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning > 30:
        _last_warning = now
        logger.warning(
            "Redis unreachable for the revocation check (%s); trusting cached keys", type(error).__name__
        )
