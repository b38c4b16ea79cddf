"""A per-organization counter that says "this organization's routing configuration changed".

Proxy workers hold each organization's provider keys, catalog and teams in memory. Every change
(a rotation, a new deployment, a team's regions ...) bumps the counter after its transaction
commits; a worker compares the counter with the one its copy was built from on every request
(read together with the revocation marker, in the same Redis round trip) and rebuilds the copy
when they differ. So a rotated provider key is never used for a request that starts after the
rotation committed, on any worker.

A Redis that restarts empty (or evicts the key) must not turn the counter back to a value a worker
already holds a copy for: a counter that starts again at 0 was, in the outside reliability run of
issue 20, "older" than every copy held, so every request reloaded its configuration and nothing
changed after the restart was ever kept. So the counter starts, whoever creates it (a bump or the
first reader), from a seed made of the time in milliseconds and three random digits
(``new_seed``): a value no copy of an earlier life of that Redis holds (an earlier life's counter
would have to have been bumped about a million times a second to reach it), so a restart is
always a change; the workers compare generations for equality only (``ConfigStore``).

Without Redis the counter lives in this process, which is the only server process of the
embedded default. The bump has one interface, ``Generations``, and two implementations chosen once by
``generations()`` (``apps/core/backends.py``); the readers are ``apps/keys/revocation.py`` and the
limits counters' admission.
"""

import random
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Protocol

from django.db import transaction

from apps.core.backends import backend
from apps.core.redis import redis_key, sync_client

_local: defaultdict[str, int] = defaultdict(int)

# KEYS[1]: the counter. ARGV[1]: its seed, when it does not exist.
BUMP = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('INCR', KEYS[1])
"""
# The reader's side (``apps/keys/revocation.py``), run only when its MGET found no counter.
SEED = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"""


def generation_key(organization_id: str) -> str:
    return redis_key("config-generation", str(organization_id))


def new_seed() -> int:
    """Milliseconds since 1970 times a thousand, plus random digits (two workers seeding in the same
    millisecond, or a clock held still, still differ): about 1.8e15, exact in Lua's doubles."""
    return int(time.time() * 1000) * 1000 + random.randrange(1000)


def local_generation(organization_id: str) -> int:
    return _local[str(organization_id)]


class Generations(Protocol):
    def bump(self, organization_id: str) -> None:
        """The organization's generation changes, now (``bump_generation`` waits for the commit).
        Raises ``redis.RedisError`` when Redis cannot be reached."""
        ...


class LocalGenerations:
    def bump(self, organization_id: str) -> None:
        _local[str(organization_id)] += 1


class RedisGenerations:
    def bump(self, organization_id: str) -> None:
        # This process's own count moves too, as it always has: ``local_generation`` is what the
        # embedded implementations read, and it must not depend on which one ran before.
        _local[str(organization_id)] += 1
        sync_client().eval(BUMP, 1, generation_key(organization_id), new_seed())


local_generations = LocalGenerations()
redis_generations = RedisGenerations()
# This deployment's: the one function that chooses.
generations: Callable[[], Generations] = backend(lambda: local_generations, lambda: redis_generations)


def bump_generation(organization_id) -> None:
    """Schedules the bump for when the surrounding transaction commits (at once outside one)."""
    organization_id = str(organization_id)
    transaction.on_commit(lambda: generations().bump(organization_id))
