"""One beat sends the periodic tasks, however many run (gateway_project/beat.py): every node of
``make run`` starts one. Against a real Redis of the test's own, and a real Celery broker on it."""

import time
from datetime import timedelta

import pytest
import redis
from celery import Celery

from gateway_project.beat import LEASE_SECONDS, BeatLease, SingleBeatScheduler
from tests.redis_process import RedisProcess


@pytest.fixture
def redis_server():
    server = RedisProcess().start()
    yield server
    server.stop()


@pytest.fixture
def client(redis_server):
    return redis.Redis.from_url(redis_server.url, socket_timeout=0.5, socket_connect_timeout=0.5)


def test_one_beat_holds_the_lease_and_the_other_waits(client):
    first, second = BeatLease(client, "node-a:1"), BeatLease(client, "node-b:1")
    assert first.renew()
    assert not second.renew()
    assert first.renew(), "the holder renews its own lease"
    assert 0 < client.pttl(first.key) <= LEASE_SECONDS * 1000


def test_the_next_beat_takes_over_when_the_holder_stops_or_its_lease_expires(client):
    first, second, third = (BeatLease(client, f"node-{n}:1") for n in "abc")
    assert first.renew()
    first.release()
    assert second.renew(), "a stopped beat gives the lead away at once"
    client.pexpire(second.key, 1)  # the holder died: nobody renews its lease
    time.sleep(0.05)
    assert third.renew()
    assert not second.renew(), "a beat that lost its lease does not send"


def test_no_beat_sends_while_redis_does_not_answer(redis_server, client):
    lease = BeatLease(client, "node-a:1")
    assert lease.renew()
    redis_server.stop()
    assert not lease.renew()


def two_beats(redis_server, client, tmp_path, every: timedelta) -> tuple[Celery, SingleBeatScheduler, ...]:
    """An app whose one task runs ``every`` so long, on a real broker, and two beats of it (a and b)."""
    app = Celery("beat-test", broker=redis_server.url)
    app.conf.beat_schedule = {"task": {"task": "beat_test.task", "schedule": every}}
    beats = [SingleBeatScheduler(app=app, schedule_filename=str(tmp_path / n), lazy=False) for n in "ab"]
    for name, beat in zip("ab", beats, strict=True):
        beat.lease = BeatLease(client, f"node-{name}:1")
    return app, *beats


def test_only_the_holders_scheduler_sends(redis_server, client, tmp_path):
    _, holder, waiter = two_beats(redis_server, client, tmp_path, every=timedelta(seconds=1))
    try:
        holder.lease.renew()
        deadline = time.monotonic() + 5
        while client.llen("celery") < 2 and time.monotonic() < deadline:
            for scheduler in (waiter, holder, waiter):
                scheduler.tick()
            time.sleep(0.2)
        sent = client.lrange("celery", 0, -1)
        assert len(sent) >= 2
        assert client.get(holder.lease.key) == b"node-a:1"
        assert waiter.lease.held is False
        time.sleep(1.1)  # the task is due again
        for _ in range(3):
            assert waiter.tick() > 0
        assert client.llen("celery") == len(sent), "the waiting beat sent nothing"
    finally:
        holder.close()
        waiter.close()
    assert client.get(holder.lease.key) is None, "the holder gave the lead away as it closed"


def test_a_beat_taking_the_lead_starts_from_the_runs_its_predecessor_recorded(client, redis_server, tmp_path):
    """The new holder's own copy of the schedule is stale (it last led two hours ago): it must not send
    the hourly task again that its predecessor sent a moment ago."""
    app, first, second = two_beats(redis_server, client, tmp_path, every=timedelta(hours=1))
    try:
        first.schedule["task"].last_run_at = app.now() - timedelta(hours=2)
        first._heap = None
        first.tick()
        assert client.llen("celery") == 1, "the first holder sent the overdue task"

        second.schedule["task"].last_run_at = app.now() - timedelta(hours=2)
        second._heap = None
        second.tick()
        first.close()  # gives the lead away
        second._next_look = 0.0  # its next look at the lease is now
        for _ in range(3):
            second.tick()
        assert second.lease.held
        assert client.llen("celery") == 1, "the new holder sent the task its predecessor had just sent"
        assert second.schedule["task"].last_run_at > app.now() - timedelta(minutes=1)
    finally:
        second.close()
