"""The hot tier of stored turns: where a follow-up made a moment after its turn finds it, before the
outbox's ingest has written the turn to the database (about a second later).

One interface, ``HotTurns``, and two implementations chosen once by ``hot_turns()``
(``apps/core/backends.py``): ``LocalTurns`` in this process for the embedded default (one server
process), ``RedisTurns`` for every process and node. Either keeps a turn for
``GATEWAY_RESPONSES_HOT_SECONDS``; the database keeps it for the organization's retention. A Redis
that fails or is slow is a miss (the database answers), never a failed request.
"""

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

import redis
import redis.asyncio as aioredis
from django.conf import settings

from apps.core.backends import backend
from apps.core.redis import async_client, redis_key

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 0.1
PAUSE_AFTER_FAILURE_SECONDS = 1.0
BATCH = 100  # ids one read asks Redis for
# With Redis, what this process keeps of the turns it put: well past the ingest's write.
RECENT_SECONDS = 60
RECENT_BYTES = 8 * 1024 * 1024
Payload = dict[str, Any]


class HotTurns(Protocol):
    async def get_many(self, organization_id: str, response_ids: list[str]) -> dict[str, Payload]:
        """The sealed turns (``turns.seal``) of those ids this tier holds, by id."""
        ...

    async def put(self, payload: Payload) -> None: ...

    async def delete(self, organization_id: str, response_id: str) -> None:
        """Raises (a Redis or OS error, a timeout) when the tier cannot say the turn is gone."""
        ...


class LocalTurns:
    """This process's turns, the most recent ``limit`` bytes of them (``GATEWAY_RESPONSES_HOT_BYTES``),
    each for ``seconds`` (``GATEWAY_RESPONSES_HOT_SECONDS``)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        seconds: int | None = None,
        limit: int | None = None,
    ) -> None:
        self._turns: OrderedDict[tuple[str, str], tuple[float, Payload, int]] = OrderedDict()
        self._bytes = 0
        self._clock = clock
        self._seconds, self._limit = seconds, limit

    async def get_many(self, organization_id: str, response_ids: list[str]) -> dict[str, Payload]:
        now, found = self._clock(), {}
        for response_id in response_ids:
            held = self._turns.get((organization_id, response_id))
            if held is not None and held[0] > now:
                found[response_id] = held[1]
        return found

    async def put(self, payload: Payload) -> None:
        key = (payload["organization_id"], payload["response_id"])
        size = len(payload.get("content") or "") + 200
        seconds = self._seconds if self._seconds is not None else settings.GATEWAY_RESPONSES_HOT_SECONDS
        limit = self._limit if self._limit is not None else settings.GATEWAY_RESPONSES_HOT_BYTES
        self._drop(key)
        self._turns[key] = (self._clock() + seconds, payload, size)
        self._bytes += size
        while self._bytes > limit and self._turns:
            self._drop(next(iter(self._turns)))

    async def delete(self, organization_id: str, response_id: str) -> None:
        self._drop((organization_id, response_id))

    def _drop(self, key: tuple[str, str]) -> None:
        held = self._turns.pop(key, None)
        if held is not None:
            self._bytes -= held[2]


class RedisTurns:
    """The turns in Redis, shared by every process and node, each under a key of its organization's.

    This process also keeps the turns it put for ``RECENT_SECONDS``: a follow-up that comes back to
    it a moment later (an agent's tool round trip) is answered while Redis fails and before the
    database has the turn (the ingest writes it about a second later)."""

    def __init__(
        self,
        client: Callable[[], aioredis.Redis | None] = async_client,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._clock = clock
        self._paused_until = 0.0
        self._recent = LocalTurns(clock, seconds=RECENT_SECONDS, limit=RECENT_BYTES)

    def _available(self) -> aioredis.Redis | None:
        return None if self._clock() < self._paused_until else self._client()

    def _failed(self, action: str, error: BaseException) -> None:
        self._paused_until = self._clock() + PAUSE_AFTER_FAILURE_SECONDS
        logger.warning("Stored turns: Redis %s failed (%s)", action, type(error).__name__)

    async def get_many(self, organization_id: str, response_ids: list[str]) -> dict[str, Payload]:
        found = await self._recent.get_many(organization_id, response_ids)
        missing = [response_id for response_id in response_ids if response_id not in found]
        client = self._available()
        if client is None:
            return found
        # In batches: a long conversation's history is a few short reads, never one read that could
        # outlast the bound (and pause the tier for every other request).
        for start in range(0, len(missing), BATCH):
            batch = missing[start : start + BATCH]
            keys = [turn_key(organization_id, response_id) for response_id in batch]
            try:
                values = await asyncio.wait_for(client.mget(keys), TIMEOUT_SECONDS)
            except (redis.RedisError, OSError, TimeoutError) as error:
                self._failed("read", error)
                break
            for response_id, value in zip(batch, values, strict=True):
                if value is not None:
                    try:
                        found[response_id] = json.loads(value)
                    except ValueError:
                        continue  # damaged: the database answers
        return found

    async def put(self, payload: Payload) -> None:
        await self._recent.put(payload)
        client = self._available()
        if client is None:
            return
        key = turn_key(payload["organization_id"], payload["response_id"])
        value = json.dumps(payload, separators=(",", ":"))
        try:
            await asyncio.wait_for(
                client.set(key, value, ex=settings.GATEWAY_RESPONSES_HOT_SECONDS), TIMEOUT_SECONDS
            )
        except (redis.RedisError, OSError, TimeoutError) as error:
            self._failed("write", error)

    async def delete(self, organization_id: str, response_id: str) -> None:
        """Raises when Redis cannot say the turn is gone: a delete that did not happen must not
        read as done (the turn would still be found for the rest of its time here)."""
        await self._recent.delete(organization_id, response_id)
        client = self._client()
        if client is None:
            return
        await asyncio.wait_for(client.delete(turn_key(organization_id, response_id)), TIMEOUT_SECONDS)


def turn_key(organization_id: str, response_id: str) -> str:
    return redis_key("turn", str(organization_id), response_id)


local_turns = LocalTurns()
redis_turns = RedisTurns()
# This deployment's: the one function that chooses.
hot_turns: Callable[[], HotTurns] = backend(lambda: local_turns, lambda: redis_turns)
