"""One beat for the whole deployment, however many run (``CELERY_BEAT_SCHEDULER``).

Every node of ``make run`` (and an operator who starts a beat twice) runs beat; two beats would send
each periodic task twice. With Redis, a beat sends only while it holds the deployment's lease, a Redis
key naming it (``<prefix>:beat:leader``) that expires ``LEASE_SECONDS`` after its holder last renewed
it: the others wait, and take over within that time when the holder stops or dies. Without Redis (the
embedded default, one node) the lease is always held.

A beat that takes the lead starts from the runs its predecessors recorded (``<prefix>:beat:last-run``,
each task's last run), not from its own stale copy of the schedule: otherwise it would send every
task whose interval had passed since it last led, though the previous holder had just sent them.

A beat looks at its lease every ``RENEW_SECONDS`` (one Redis call, not one a tick): a holder that dies
is replaced within ``LEASE_SECONDS + RENEW_SECONDS``, one that stops cleanly within ``RENEW_SECONDS``.
While Redis does not answer, no beat sends: a periodic task that runs late is harmless (they all
catch up on their next run), one sent twice is not. A holder stalled for longer than the lease (a
stopped VM) may overlap its successor once: the periodic tasks are idempotent.
"""

import logging
import os
import socket
import time
import uuid
from datetime import UTC, datetime

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
        self.runs_key = redis_key("beat", "last-run")
        # The host name and process id say where it runs; the token keeps two beats apart that share
        # both (containers on the host's network, each beat process 1 of its own).
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
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

    def record_run(self, name: str, ran_at: datetime) -> None:
        if self.client is None:
            return
        try:
            self.client.hset(self.runs_key, name, str(ran_at.timestamp()))
        except redis.RedisError:
            pass  # a successor then starts from its own copy: at worst one task is sent again

    def recorded_runs(self) -> dict[str, datetime]:
        if self.client is None:
            return {}
        try:
            stored = self.client.hgetall(self.runs_key)
        except redis.RedisError:
            return {}
        runs = {}
        for name, stamp in stored.items():
            try:
                runs[name.decode()] = datetime.fromtimestamp(float(stamp), UTC)
            except ValueError:
                continue
        return runs

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
        self._next_look = 0.0  # time.monotonic() of the next look at the lease
        super().setup_schedule()

    def tick(self, *args, **kwargs) -> float:
        now = time.monotonic()
        if now >= self._next_look:
            was_held = self.lease.held
            self._next_look = now + RENEW_SECONDS
            if self.lease.renew() and not was_held:
                self._start_from_recorded_runs()
        if not self.lease.held:
            # Celery's thread beat stops only between ticks: never sleep past its max_interval (1 s).
            return min(RENEW_SECONDS, self.max_interval)
        return min(super().tick(*args, **kwargs), max(0.0, self._next_look - time.monotonic()))

    def reserve(self, entry):
        reserved = super().reserve(entry)
        self.lease.record_run(entry.name, reserved.last_run_at)
        return reserved

    def _start_from_recorded_runs(self) -> None:
        for name, ran_at in self.lease.recorded_runs().items():
            entry = self.schedule.get(name)
            if entry is None:
                continue
            if entry.last_run_at is not None and entry.last_run_at.tzinfo is None:
                ran_at = ran_at.replace(tzinfo=None)  # a naive schedule (enable_utc off) is UTC too
            if entry.last_run_at is None or ran_at > entry.last_run_at:
                entry.last_run_at = ran_at
        self._heap = None  # rebuilt from those times at this tick

    def close(self) -> None:
        try:
            super().close()
        finally:
            lease = getattr(self, "lease", None)  # none when setup_schedule failed
            if lease is not None:
                lease.release()  # the next beat takes over at its next look, not when the lease expires
