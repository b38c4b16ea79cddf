"""One beat for the whole deployment, however many run (``CELERY_BEAT_SCHEDULER``).

Every node of ``make run`` (and an operator who starts a beat twice) runs beat; two beats would send
each periodic task twice. With Redis, a beat sends only while it holds the deployment's lease, a Redis
key naming it (``<prefix>:beat:leader``) that expires ``LEASE_SECONDS`` after its holder last renewed
it: the others wait, and take over within that time when the holder stops or dies. Without Redis (the
embedded default, one node) the lease is always held.

While Redis does not answer, no beat sends: a periodic task that runs late is harmless (they all
catch up on their next run), one sent twice is not. A holder stalled for longer than the lease (a
stopped VM) may overlap its successor once: the periodic tasks are idempotent.
"""

import logging
import os
import socket

import redis
from celery.beat import PersistentScheduler

from apps.core.redis import redis_key, sync_client

logger = logging.getLogger(__name__)

LEASE_SECONDS = 60
# A beat looks at its lease at least this often (renewing it, or trying to take it).
RENEW_SECONDS = 15.0

# Renews the lease only if this beat still holds it; takes it only if no one does.
_HOLD = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) and 1 or 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


class BeatLease:
    def __init__(self, client: redis.Redis | None = None, holder: str = "") -> None:
        self.client = client or sync_client()
        self.key = redis_key("beat", "leader")
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self.held: bool | None = True if self.client is None else None  # None: not asked yet

    def renew(self) -> bool:
        """Whether this beat may send now: it holds the lease (renewed) or has just taken it."""
        if self.client is None:
            return True
        try:
            held = bool(self.client.eval(_HOLD, 1, self.key, self.holder, LEASE_SECONDS * 1000))
        except redis.RedisError as error:
            held = False
            logger.warning("Beat: Redis did not answer (%s); sending nothing until it does", error)
        if held and not self.held:
            logger.info("Beat: %s leads; it sends the periodic tasks", self.holder)
        elif not held and self.held is not False:
            logger.info("Beat: %s waits; another beat leads", self.holder)
        self.held = held
        return held

    def release(self) -> None:
        if self.client is None or not self.held:
            return
        try:
            self.client.eval(_RELEASE, 1, self.key, self.holder)
        except redis.RedisError:
            pass  # it expires on its own
        self.held = False


class SingleBeatScheduler(PersistentScheduler):
    """Celery's file-backed scheduler (``--schedule``), sending only while it holds the lease."""

    def setup_schedule(self) -> None:
        self.lease = BeatLease()
        super().setup_schedule()

    def tick(self, *args, **kwargs) -> float:
        if not self.lease.renew():
            return RENEW_SECONDS
        return min(super().tick(*args, **kwargs), RENEW_SECONDS)

    def close(self) -> None:
        super().close()
        self.lease.release()  # the next beat takes over at once rather than when the lease expires
