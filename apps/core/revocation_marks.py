"""Revocation marks: "this API key was revoked", read by the proxy on every request.

With Redis the mark is a key of its own (``marker``), read in the same round trip as the
organization's configuration generation (``apps/keys/revocation.py``, and the limits counters'
admission script). In the embedded default it is kept here, in the one server process's memory
(``local_marks``). Both are kept ``MARKER_SECONDS``: longer than any in-memory copy of a key
(``GATEWAY_KEY_CACHE_SECONDS``), after which the database alone says "revoked".
"""

import time
from collections.abc import Callable

from apps.core.redis import redis_key

MARKER_SECONDS = 24 * 3600
_SWEEP_SECONDS = 60.0


def marker(key_id: str) -> str:
    """The mark's name in Redis."""
    return redis_key("revoked-key", str(key_id))


class LocalMarks:
    """The marks in this process. Written from management threads, read on the proxy's event loop:
    single dictionary operations only, atomic under the GIL."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}
        self._next_sweep = 0.0

    def add(self, key_id: str) -> None:
        now = self._clock()
        if now >= self._next_sweep:  # at most once a minute: revoking many keys stays linear
            self._next_sweep = now + _SWEEP_SECONDS
            for stale in [key for key, until in list(self._until.items()) if until <= now]:
                self._until.pop(stale, None)
        self._until[str(key_id)] = now + MARKER_SECONDS

    def __contains__(self, key_id: str) -> bool:
        until = self._until.get(str(key_id))
        return until is not None and self._clock() < until

    def clear(self) -> None:
        self._until.clear()


local_marks = LocalMarks()
