"""The limits counters' contract (``apps.limits.counters.Counters``): ``LocalCounters`` and
``RedisCounters`` admit, refuse, reserve, settle, seed and report alike. The arithmetic of rate
windows and budgets is pinned in more detail by tests/limits/test_counters.py."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from apps.core.generations import LocalGenerations, RedisGenerations, generation_key
from apps.core.redis import redis_key, sync_client
from apps.core.revocation_marks import marker
from apps.keys.revocation import LocalRevocation, RedisRevocation
from apps.limits import counters as counters_module
from apps.limits.counters import (
    BudgetCharge,
    Counters,
    LocalCounters,
    RateCharge,
    RedisCounters,
    SettleEntry,
    Usage,
)
from apps.limits.windows import window_at

from .conftest import IMPLEMENTATIONS, assert_conforms

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


class Backend:
    """One implementation of the counters, with the revocation and generations of the same home
    (what the counters read the key's mark and the configuration's generation from)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.organization_id = str(uuid.uuid4())
        if kind == "embedded":
            self.counters, self.revocation, self.generations = (
                LocalCounters(),
                LocalRevocation(),
                LocalGenerations(),
            )
        else:
            self.counters, self.revocation, self.generations = (
                RedisCounters(),
                RedisRevocation(),
                RedisGenerations(),
            )

    async def generation(self) -> int:
        """The generation the proxy's copy of the configuration was read with."""
        return (await self.revocation.check(str(uuid.uuid4()), self.organization_id))[1]

    async def admit(
        self, *, rates=(), budgets=(), key_id=None, request_id=None, now=NOW, generation=None, settling=()
    ):
        return await self.counters.admit(
            key_id=key_id or str(uuid.uuid4()),
            organization_id=self.organization_id,
            expected_generation=await self.generation() if generation is None else generation,
            request_id=request_id or str(uuid.uuid4()),
            now=now,
            reservation_seconds=600,
            rates=list(rates),
            budgets=list(budgets),
            settling=settling,
        )

    def rate(self, limit: int, kind: str = "requests", cost: int = 1, scope_id: str = "key-1") -> RateCharge:
        return RateCharge.of(self.organization_id, "api_key", scope_id, kind, limit, cost)

    def budget(
        self, limit: int, reserve: int, thresholds=(50, 80, 100), scope_id: str = "team-1"
    ) -> BudgetCharge:
        window = window_at("daily", NOW)
        return BudgetCharge.of(self.organization_id, "team", scope_id, window, limit, reserve, thresholds)

    async def seeded(self, charge: BudgetCharge, spent: int = 0) -> BudgetCharge:
        await self.counters.seed(now=NOW, spent=[(charge, spent)])
        return charge

    def forget(self) -> None:
        if self.kind == "redis":
            client = sync_client()
            for key in client.scan_iter(match=redis_key("*", self.organization_id, "*")):
                client.delete(key)
            client.delete(generation_key(self.organization_id))


@pytest.fixture(params=IMPLEMENTATIONS)
def backend(request):
    backend = Backend(request.param)
    yield backend
    backend.forget()


@pytest.mark.parametrize("implementation", [LocalCounters, RedisCounters])
def test_each_implementation_has_the_protocols_methods_and_signatures(implementation):
    assert_conforms(implementation, Counters)


async def test_an_argument_the_protocol_does_not_name_is_an_error(backend):
    with pytest.raises(TypeError):
        await backend.counters.admit(
            key_id="k",
            organization_id=backend.organization_id,
            expected_generation=0,
            request_id="r",
            now=NOW,
            reservation_seconds=600,
            rates=[],
            budgets=[],
            revocation_key="not a parameter of the protocol",
        )


async def test_a_revoked_key_is_refused_before_anything_is_charged(backend):
    revoked = str(uuid.uuid4())
    backend.revocation.mark(revoked)
    try:
        refused = await backend.admit(rates=[backend.rate(1)], key_id=revoked)
        assert refused.revoked and not refused.admitted
        assert refused.generation == await backend.generation()
        # The one request the limit allows is still there for a key that is not revoked.
        assert (await backend.admit(rates=[backend.rate(1)])).admitted
    finally:
        if backend.kind == "redis":
            sync_client().delete(marker(revoked))


async def test_a_stale_configuration_is_refused_with_the_current_generation_and_charged_nothing(backend):
    current = await backend.generation()
    stale = await backend.admit(rates=[backend.rate(1)], generation=current - 1)
    assert stale.stale and not stale.admitted and stale.generation == current
    assert (await backend.admit(rates=[backend.rate(1)], generation=current)).admitted


async def test_a_bumped_generation_makes_the_copy_held_before_stale(backend):
    before = await backend.generation()
    backend.generations.bump(backend.organization_id)
    after = await backend.generation()
    assert after != before
    refused = await backend.admit(rates=[backend.rate(5)], generation=before)
    assert refused.stale and refused.generation == after
    assert (await backend.admit(rates=[backend.rate(5)], generation=after)).admitted


async def test_a_rate_limit_admits_its_allowance_then_refuses_until_the_window_refills(backend):
    results = [(await backend.admit(rates=[backend.rate(2)])) for _ in range(3)]
    assert [result.admitted for result in results] == [True, True, False]
    assert [state.remaining for result in results[:2] for state in result.rates] == [1, 0]
    assert 29_000 <= results[2].refused_rate.retry_after_ms <= 30_000  # one request every 30 s
    assert (await backend.admit(rates=[backend.rate(2)], now=NOW + timedelta(seconds=30))).admitted


async def test_a_budget_is_seeded_once_before_anything_is_charged_to_it(backend):
    charge = backend.budget(1_000, 100)
    assert (await backend.admit(budgets=[charge])).unseeded == [charge]
    await backend.counters.seed(now=NOW, spent=[(charge, 950)])
    await backend.counters.seed(now=NOW, spent=[(charge, 0)])  # a second seeding changes nothing
    assert backend.counters.usage(charge.key) == Usage(spent_nanos=950, reserved_nanos=0)
    refused = await backend.admit(budgets=[charge])
    assert refused.refused_budget == charge and refused.first_refusal
    assert not (await backend.admit(budgets=[charge])).first_refusal


async def test_a_reservation_is_replaced_by_the_real_cost_at_settle(backend):
    charge = await backend.seeded(backend.budget(1_000, 700))
    assert (await backend.admit(budgets=[charge], request_id="r1")).reserved == [charge]
    assert backend.counters.usage(charge.key) == Usage(spent_nanos=0, reserved_nanos=700)
    assert (await backend.admit(budgets=[charge])).refused_budget == charge  # 700 + 700 > 1000
    crossings = await backend.counters.settle(request_id="r1", now=NOW, budgets=[(charge, 600)], tokens=[])
    assert [(crossing.threshold, crossing.spent_nanos) for crossing in crossings] == [(50, 600)]
    assert backend.counters.usage(charge.key) == Usage(spent_nanos=600, reserved_nanos=0)
    # Settled twice (a retry), the reservation is not given back twice.
    await backend.counters.settle(request_id="r1", now=NOW, budgets=[(charge, 0)], tokens=[])
    assert backend.counters.usage(charge.key) == Usage(spent_nanos=600, reserved_nanos=0)


async def test_a_reservation_never_settled_is_given_back_when_it_expires(backend):
    charge = await backend.seeded(backend.budget(1_000, 800))
    assert (await backend.admit(budgets=[charge], request_id="lost")).admitted
    assert not (await backend.admit(budgets=[charge], now=NOW + timedelta(seconds=599))).admitted
    assert (await backend.admit(budgets=[charge], now=NOW + timedelta(seconds=601))).admitted


async def test_settle_many_settles_each_request_and_says_what_each_crossed(backend):
    charge = await backend.seeded(backend.budget(1_000, 100, thresholds=(50, 80)))
    tokens = backend.rate(1_000, "tokens", 900, scope_id="team-1")
    for request_id in ("a", "b"):
        assert (await backend.admit(budgets=[charge], request_id=request_id)).admitted
    assert (await backend.admit(rates=[tokens], request_id="c")).admitted
    crossed = await backend.counters.settle_many(
        now=NOW,
        entries=[
            SettleEntry("a", [(charge, 500)], []),
            SettleEntry("b", [(charge, 300)], []),
            SettleEntry("c", [], [(tokens, -800)]),  # used 100 of the 900 counted up front
        ],
    )
    assert [[(c.threshold, c.spent_nanos) for c in found] for found in crossed] == [
        [(50, 500)],
        [(80, 800)],
        [],
    ]
    assert backend.counters.usage(charge.key) == Usage(spent_nanos=800, reserved_nanos=0)
    assert (await backend.admit(rates=[backend.rate(1_000, "tokens", 800, scope_id="team-1")])).admitted


async def test_settles_that_ride_along_are_made_before_the_admission(backend):
    charge = await backend.seeded(backend.budget(1_000, 700))
    assert (await backend.admit(budgets=[charge], request_id="r1")).admitted
    second = await backend.admit(
        budgets=[backend.budget(1_000, 300)],
        request_id="r2",
        settling=[SettleEntry("r1", [(charge, 600)], [])],
    )
    # r1 settled at 600 (crossing 50 %), its 700 given back: 600 + 300 fits.
    assert second.admitted
    assert [[(c.threshold, c.spent_nanos) for c in found] for found in second.settled] == [[(50, 600)]]
    assert backend.counters.usage(charge.key) == Usage(spent_nanos=600, reserved_nanos=300)


async def test_settles_ride_along_even_when_the_admission_is_refused(backend):
    charge = await backend.seeded(backend.budget(1_000, 700))
    assert (await backend.admit(budgets=[charge], request_id="r1")).admitted
    stale = await backend.admit(
        generation=await backend.generation() - 1, settling=[SettleEntry("r1", [(charge, 100)], [])]
    )
    assert stale.stale and stale.settled == [[]]
    assert backend.counters.usage(charge.key) == Usage(spent_nanos=100, reserved_nanos=0)


async def test_settles_ride_along_even_when_the_key_is_revoked(backend):
    charge = await backend.seeded(backend.budget(1_000, 700))
    assert (await backend.admit(budgets=[charge], request_id="r1")).admitted
    revoked = str(uuid.uuid4())
    backend.revocation.mark(revoked)
    try:
        refused = await backend.admit(key_id=revoked, settling=[SettleEntry("r1", [(charge, 100)], [])])
        assert refused.revoked and refused.settled == [[]]
        assert backend.counters.usage(charge.key) == Usage(spent_nanos=100, reserved_nanos=0)
    finally:
        if backend.kind == "redis":
            sync_client().delete(marker(revoked))


async def test_usage_of_a_window_nobody_used_is_zero(backend):
    assert backend.counters.usage(backend.budget(1_000, 0).key) == Usage(spent_nanos=0, reserved_nanos=0)


async def test_set_spent_replaces_the_spend_marks_the_window_loaded_and_keeps_reservations(backend):
    charge = backend.budget(1_000, 200)
    assert backend.counters.set_spent(charge, 300, NOW) is None  # not loaded before
    admitted = await backend.admit(budgets=[charge], request_id="r1")  # no seeding needed now
    assert admitted.admitted and not admitted.unseeded
    assert backend.counters.set_spent(charge, 100, NOW) == 300
    assert backend.counters.usage(charge.key) == Usage(spent_nanos=100, reserved_nanos=200)
    await backend.counters.seed(now=NOW, spent=[(charge, 999)])  # loaded already: ignored
    assert backend.counters.usage(charge.key).spent_nanos == 100


def test_the_deployment_chooses_once_by_redis_url(settings):
    settings.REDIS_URL = ""
    assert counters_module.counters() is counters_module.local_counters
    assert counters_module.counters() is counters_module.local_counters
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    assert counters_module.counters() is counters_module.redis_counters
