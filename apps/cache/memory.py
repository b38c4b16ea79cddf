"""L1: this process's own cache, an LRU bounded in entries and in bytes.

An entry remembers the configuration generation of its organization it was stored under; read with
another generation it is a miss (and dropped). A purge or a settings change bumps the generation,
which every proxy process reads on every request, so L1 empties everywhere at once without any
process having to be told.
"""

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from .stored_answers import CachedAnswer

# What an entry costs beyond its body (the key, the answer object, the OrderedDict node): an
# estimate, so a flood of tiny answers is bounded too.
ENTRY_OVERHEAD_BYTES = 400


@dataclass(slots=True)
class _Entry:
    generation: int
    expires_at: float
    answer: CachedAnswer
    size: int


class LocalCache:
    def __init__(
        self,
        *,
        max_entries: int | None = None,
        max_bytes: int | None = None,
        max_entry_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries = settings.GATEWAY_CACHE_L1_MAX_ENTRIES if max_entries is None else max_entries
        self.max_bytes = settings.GATEWAY_CACHE_L1_MAX_BYTES if max_bytes is None else max_bytes
        self.max_entry_bytes = (
            settings.GATEWAY_CACHE_MAX_ENTRY_BYTES if max_entry_bytes is None else max_entry_bytes
        )
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        # The proxy runs on one event loop, but a thread (a sync view, a test) may touch it too.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def get(self, key: str, generation: int) -> CachedAnswer | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry.generation != generation or entry.expires_at <= self._clock():
                self._remove(key)
                return None
            self._entries.move_to_end(key)
            return entry.answer

    def put(self, key: str, generation: int, answer: CachedAnswer, ttl_seconds: float) -> bool:
        """False when the answer is too large to keep (or L1 is sized to nothing)."""
        size = len(answer.body) + len(key) + ENTRY_OVERHEAD_BYTES
        if ttl_seconds <= 0 or size > min(self.max_entry_bytes, self.max_bytes) or self.max_entries < 1:
            return False
        with self._lock:
            if key in self._entries:
                self._remove(key)
            self._entries[key] = _Entry(generation, self._clock() + ttl_seconds, answer, size)
            self._bytes += size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, oldest = self._entries.popitem(last=False)
                self._bytes -= oldest.size
        return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def _remove(self, key: str) -> None:
        self._bytes -= self._entries.pop(key).size


# The proxy's: one per process.
local_cache = LocalCache()
