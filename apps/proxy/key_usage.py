"""``last_used_at`` without a write on the request: uses are noted in memory and a background task
of this worker writes them in one batch, at most about once a minute per key."""

import asyncio
import contextvars
import logging
import time
from datetime import datetime

from channels.db import database_sync_to_async
from django.utils import timezone

from apps.keys.services import api_keys_mark_used

logger = logging.getLogger(__name__)

WRITE_EVERY_SECONDS = 60.0
FLUSH_INTERVAL_SECONDS = 5.0


class KeyUsageRecorder:
    def __init__(self) -> None:
        self._pending: dict[str, datetime] = {}
        self._written_at: dict[str, float] = {}
        self._task: asyncio.Task | None = None

    def note(self, key_id: str) -> None:
        now = time.monotonic()
        if now - self._written_at.get(key_id, -WRITE_EVERY_SECONDS) < WRITE_EVERY_SECONDS:
            return
        self._written_at[key_id] = now
        self._pending[key_id] = timezone.now()
        self._ensure_flusher()

    def _ensure_flusher(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run(), context=contextvars.Context())

    async def _run(self) -> None:
        while self._pending:
            await asyncio.sleep(FLUSH_INTERVAL_SECONDS)
            await self.flush()

    async def flush(self) -> None:
        batch, self._pending = self._pending, {}
        if not batch:
            return
        try:
            await database_sync_to_async(api_keys_mark_used)(last_used=batch)
        except Exception:
            # Losing a last-used time is harmless; it is written again on the key's next use.
            logger.warning("Could not record last use of %d API key(s)", len(batch), exc_info=True)
            for key_id in batch:
                self._written_at.pop(key_id, None)
