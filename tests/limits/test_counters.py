"""The counters engine on its own, in both of its homes: Redis (when the suite has one) and this
process. The proxy's own tests show it through HTTP; these pin down the arithmetic."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings

from apps.core import generations
from apps.core.generations import generation_key
from apps.core.redis import redis_key, sync_client
from apps.core.revocation_marks import marker
from apps.limits.counters import BudgetCharge, LocalCounters, RateCharge, RedisCounters, SettleEntry, Usage
from apps.limits.windows import window_at

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
ORGANIZATION = str(uuid.uuid4())
KINDS = ["local", pytest.param("redis", marks=pytest.mark.skipif(not settings.REDIS_URL, reason="no Redis"))]


@pytest.fixture(params=KINDS)
def counters(request, monkeypatch):
    if request.param == "local":
        monkeypatch.setitem(generations._local, ORGANIZATION, 7)
        yield LocalCounters()
        return
    client = sync_client()
    client.set(generation_key(ORGANIZATION), 7)
    yield RedisCounters()
    for key in client.scan_iter(match=redis_key("*", ORGANIZATION, "*")):
        client.delete(key)
    client.delete(generation_key(ORGANIZATION))


def admit(counters, *, rates=(), budgets=(), now=NOW, request_id=None, generation=7, revoked_key=None):
    return counters.admit(
        key_id=revoked_key or str(uuid.uuid4()),
        organization_id=ORGANIZATION,
        expected_generation=generation,
        request_id=request_id or str(uuid.uuid4()),
        now=now,
        reservation_seconds=600,
        rates=list(rates),
        budgets=list(budgets),
    )


def requests_limit(limit, scope_id="key-1"):
    return RateCharge.of(ORGANIZATION, "api_key", scope_id, "requests", limit, 1)


def budget(limit_usd_nanos, reserve, thresholds=(50, 80, 100), scope_id="team-1", now=NOW):
    window = window_at("daily", now)
    return BudgetCharge.of(ORGANIZATION, "team", scope_id, window, limit_usd_nanos, reserve, thresholds)


async def seeded(counters, charge, spent=0):
    await counters.seed(now=NOW, spent=[(charge, spent)])
    return charge


async def test_a_rate_limit_admits_exactly_its_allowance_at_once_then_refills(counters):
    admitted = [(await admit(counters, rates=[requests_limit(5)])).admitted for _ in range(8)]
    assert admitted == [True] * 5 + [False] * 3
    refused = await admit(counters, rates=[requests_limit(5)])
    assert 11_000 <= refused.refused_rate.retry_after_ms <= 12_000  # one request refills every 12 s
    later = await admit(counters, rates=[requests_limit(5)], now=NOW + timedelta(seconds=12))
    assert later.admitted and later.rates[0].remaining == 0


async def test_remaining_and_reset_describe_the_bucket(counters):
    first = await admit(counters, rates=[requests_limit(60)])
    assert (first.rates[0].remaining, first.rates[0].reset_ms) == (59, 1000)


async def test_a_limit_of_zero_refuses_everything_and_a_request_bigger_than_the_limit_never_fits(counters):
    assert (await admit(counters, rates=[requests_limit(0)])).refused_rate.retry_after_ms == 60_000
    too_big = RateCharge.of(ORGANIZATION, "api_key", "key-1", "tokens", 100, 101)
    assert (await admit(counters, rates=[too_big])).refused_rate.retry_after_ms == -1


async def test_a_refused_request_charges_nothing(counters):
    charge = await seeded(counters, budget(1_000, 600))
    assert (await admit(counters, rates=[requests_limit(1)], budgets=[charge])).admitted
    refused = await admit(counters, rates=[requests_limit(1)], budgets=[charge])
    assert refused.refused_rate is not None
    # The budget still has room for what the refused request would have reserved... minus the first.
    assert (await admit(counters, budgets=[budget(1_000, 400)])).admitted
    assert not (await admit(counters, budgets=[budget(1_000, 1)])).admitted


async def test_a_budget_reserves_then_settles_to_the_real_cost(counters):
    charge = await seeded(counters, budget(1_000, 700))
    first = await admit(counters, budgets=[charge], request_id="r1")
    assert first.admitted
    assert (await admit(counters, budgets=[charge])).refused_budget == charge  # 700 + 700 > 1000
    assert await counters.settle(request_id="r1", now=NOW, budgets=[(charge, 200)], tokens=[]) == []
    assert (await admit(counters, budgets=[charge], request_id="r2")).admitted  # 200 spent + 700 fits


async def test_thresholds_are_announced_once_each(counters):
    charge = await seeded(counters, budget(1_000, 10))
    crossings = []
    for index, cost in enumerate([400, 200, 300, 50, 100]):
        assert (await admit(counters, budgets=[charge], request_id=f"r{index}")).admitted
        crossings += await counters.settle(
            request_id=f"r{index}", now=NOW, budgets=[(charge, cost)], tokens=[]
        )
    assert [(c.threshold, c.spent_nanos) for c in crossings] == [(50, 600), (80, 900), (100, 1050)]


async def test_the_first_refusal_in_a_window_is_marked(counters):
    charge = await seeded(counters, budget(100, 200))
    assert [(await admit(counters, budgets=[charge])).first_refusal for _ in range(3)] == [True, False, False]


async def test_a_window_is_seeded_once_before_anything_is_charged_to_it(counters):
    charge = budget(1_000, 100)
    assert (await admit(counters, budgets=[charge])).unseeded == [charge]
    await counters.seed(now=NOW, spent=[(charge, 950)])
    await counters.seed(now=NOW, spent=[(charge, 0)])  # a second seeding changes nothing
    assert (await admit(counters, budgets=[charge])).refused_budget == charge


async def test_the_reservation_of_a_request_that_never_settles_is_given_back_when_it_expires(counters):
    charge = await seeded(counters, budget(1_000, 800))
    assert (await admit(counters, budgets=[charge], request_id="lost")).admitted
    assert not (await admit(counters, budgets=[charge], now=NOW + timedelta(seconds=599))).admitted
    assert (await admit(counters, budgets=[charge], now=NOW + timedelta(seconds=601))).admitted
    # The lost request settles after all: its spend counts, its reservation is not given back twice.
    later = NOW + timedelta(seconds=602)
    await counters.settle(request_id="lost", now=later, budgets=[(charge, 100)], tokens=[])
    assert _usage(counters, charge) == Usage(spent_nanos=100, reserved_nanos=800)


async def test_a_reservation_kept_in_the_earlier_layout_is_given_back_when_it_expires():
    """Before 2026-11-25 the amount of each reservation was a field of the budget's hash: a
    reservation left in flight by that version is still given back."""
    if not settings.REDIS_URL:
        pytest.skip("no Redis")
    counters, client = RedisCounters(), sync_client()
    client.set(generation_key(ORGANIZATION), 7)
    charge = await seeded(counters, budget(1_000, 800))
    try:
        client.hset(charge.key, mapping={"reserved": 800, "r:old-request": 800})
        client.zadd(charge.key + ":reservations", {"old-request": int(NOW.timestamp() * 1000) - 1})
        assert (await admit(counters, budgets=[charge], request_id="new")).admitted
        assert counters.usage(charge.key) == Usage(spent_nanos=0, reserved_nanos=800)
        assert not client.hexists(charge.key, "r:old-request")
    finally:
        for key in client.scan_iter(match=redis_key("*", ORGANIZATION, "*")):
            client.delete(key)
        client.delete(generation_key(ORGANIZATION))


def _usage(counters, charge) -> Usage:
    return counters.usage(charge.key)


async def test_a_tokens_limit_is_corrected_by_the_real_count_at_settle(counters):
    tokens = RateCharge.of(ORGANIZATION, "team", "team-1", "tokens", 1_000, 900)
    assert (await admit(counters, rates=[tokens], request_id="r1")).admitted
    await counters.settle(request_id="r1", now=NOW, budgets=[], tokens=[(tokens, -800)])  # used 100
    assert (await admit(counters, rates=[tokens])).admitted


async def test_large_amounts_stay_exact(counters):
    limit = 300_000 * 10**9  # $300,000 in nano-dollars: more digits than Lua prints by default
    charge = await seeded(counters, budget(limit, 123_456_789_012_345, thresholds=(50,)))
    assert (await admit(counters, budgets=[charge], request_id="r1")).admitted
    crossings = await counters.settle(
        request_id="r1", now=NOW, budgets=[(charge, 150_000 * 10**9 + 1)], tokens=[]
    )
    assert crossings[0].spent_nanos == 150_000 * 10**9 + 1


async def test_redis_refuses_a_revoked_key_and_a_stale_configuration_before_charging():
    if not settings.REDIS_URL:
        pytest.skip("no Redis")
    client = sync_client()
    counters = RedisCounters()
    client.set(generation_key(ORGANIZATION), 3)
    revoked = str(uuid.uuid4())
    client.set(marker(revoked), 1)
    try:
        assert (await admit(counters, rates=[requests_limit(1)], generation=3, revoked_key=revoked)).revoked
        stale = await admit(counters, rates=[requests_limit(1)], generation=2)
        assert stale.stale and stale.generation == 3
        assert (await admit(counters, rates=[requests_limit(1)], generation=3)).admitted
    finally:
        client.delete(marker(revoked), generation_key(ORGANIZATION), requests_limit(1).key)


async def test_settles_ride_along_with_the_next_admission_in_its_round_trip():
    """What the proxy does under steady traffic: the settles a process has waiting go in the next
    admission's script, before it, so the reservation they give back is already free for it."""
    if not settings.REDIS_URL:
        pytest.skip("no Redis")
    counters = RedisCounters()
    sync_client().set(generation_key(ORGANIZATION), 7)
    charge = await seeded(counters, budget(1_000, 700))
    tokens = RateCharge.of(ORGANIZATION, "team", "team-1", "tokens", 1_000, 900)
    try:
        assert (await admit(counters, rates=[tokens], budgets=[charge], request_id="r1")).admitted
        waiting = [SettleEntry("r1", budgets=[(charge, 600)], tokens=[(tokens, -800)])]
        second = await counters.admit(
            key_id=str(uuid.uuid4()),
            organization_id=ORGANIZATION,
            expected_generation=7,
            request_id="r2",
            now=NOW,
            reservation_seconds=600,
            rates=[RateCharge.of(ORGANIZATION, "team", "team-1", "tokens", 1_000, 100)],
            budgets=[budget(1_000, 300)],
            settling=waiting,
        )
        # r1 settled at 600 (crossing 50%), its 700 given back: 600 + 300 fits; the tokens too.
        assert second.admitted
        assert [[(c.threshold, c.spent_nanos) for c in found] for found in second.settled] == [[(50, 600)]]
        assert counters.usage(charge.key) == Usage(spent_nanos=600, reserved_nanos=300)
    finally:
        for key in sync_client().scan_iter(match=redis_key("*", ORGANIZATION, "*")):
            sync_client().delete(key)
        sync_client().delete(generation_key(ORGANIZATION))
