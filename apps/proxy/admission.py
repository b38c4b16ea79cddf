"""Admission: is this request let through, by its key, its rate limits and its budgets?

One Redis round trip before the upstream (``apps/limits/counters.py``): the key's revocation
marker, the organization's configuration generation, and, when limits apply, every rate limit and
budget checked and charged together. A request no limit applies to reads only the first two (the
``MGET`` of ``apps/keys/revocation.py``). The budgets reserve the request's maximum cost
(``estimates.py``); ``settle`` replaces the reservation by the real cost after the answer was
sent, and announces the thresholds crossed.

Which limits apply: the key's rate limits (each of rpm and tpm, else the organization's default)
and its team's; the key's, the team's and the organization's budgets. docs/budgets.md.
"""

import asyncio
import logging
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from apps.audit.selectors import spend_since
from apps.core.errors import GatewayError, RateLimited
from apps.core.generations import generation_key, local_generation
from apps.core.redis import async_client
from apps.events.publish import EventType, raise_event
from apps.keys import revocation
from apps.limits.counters import (
    Admission,
    BudgetCharge,
    CountersUnavailable,
    RateCharge,
    RateState,
    SettleEntry,
    local_counters,
    redis_counters,
)
from apps.limits.models import Scope
from apps.limits.selectors import LimitsSnapshot, nanos_to_usd
from apps.organizations.models import FailMode

from .auth import AuthenticatedKey, KeyRefused, key_cache
from .config import OrganizationConfig
from .estimates import estimate, max_cost_nanos
from .http import ProxyRequest

if TYPE_CHECKING:
    from .pipeline import ProxyContext

logger = logging.getLogger(__name__)

# Refused keys and organizations, and limit checks a Redis outage skipped, are logged this often.
_WARNING_SECONDS = 30.0


class BudgetExceeded(GatewayError):
    status = 402
    type = "insufficient_quota"
    code = "budget_exceeded"


class LimitsUnavailable(GatewayError):
    status = 503
    type = "service_unavailable_error"
    code = "limits_unavailable"


@dataclass(slots=True)
class Settlement:
    """What a let-through request must settle after its answer."""

    budgets: list[BudgetCharge]
    tokens: list[RateCharge]
    organization_id: str
    request_id: str


@dataclass(slots=True)
class Charges:
    rates: list[RateCharge] = field(default_factory=list)
    budgets: list[BudgetCharge] = field(default_factory=list)


def charges_for(ctx: "ProxyContext", now: datetime) -> Charges:
    """The rate limits and budgets that apply to the request (none for the model list, which costs
    nothing, except its requests-per-minute)."""
    config, key, team = ctx.config, ctx.key, ctx.team
    limits = config.limits
    organization_id = config.organization_id
    own = limits.api_keys.get(key.id)
    default = limits.organization
    team_limits = limits.teams.get(team.id) if team is not None else None
    charges = Charges()
    if own is None and default is None and team_limits is None:
        return charges  # the usual request: no limit, nothing to estimate

    def rate(scope: str, scope_id: str, kind: str, limit: int | None, cost: int) -> None:
        if limit is not None:
            charges.rates.append(RateCharge.of(organization_id, scope, scope_id, kind, limit, cost))

    team_rates = team_limits.rate_limits if team_limits is not None else None
    rate(Scope.API_KEY, key.id, "requests", _first(own, default, "rpm"), 1)
    if team_rates is not None:
        rate(Scope.TEAM, team.id, "requests", team_rates.rpm, 1)
    if ctx.endpoint.name != "models":  # the model list costs nothing but a request
        key_tpm = _first(own, default, "tpm")
        team_tpm = team_rates.tpm if team_rates is not None else None
        in_force = [
            (snapshot.budget, scope_id)
            for snapshot, scope_id in (
                (own, key.id),
                (team_limits, team.id if team else ""),
                (default, organization_id),
            )
            if snapshot is not None and snapshot.budget is not None
        ]
        if key_tpm is None and team_tpm is None and not in_force:
            return charges
        bound = estimate(ctx.endpoint.name, ctx.body)
        rate(Scope.API_KEY, key.id, "tokens", key_tpm, bound.rate_tokens)
        if team_rates is not None:
            rate(Scope.TEAM, team.id, "tokens", team_tpm, bound.rate_tokens)
        reserve = None
        for budget, scope_id in in_force:
            window = budget.window(now)
            if window is None:  # a fixed budget outside its window
                continue
            if reserve is None:
                reserve = max_cost_nanos(config, ctx.body["model"], bound, ctx.record.started_at)
            charges.budgets.append(
                BudgetCharge.of(
                    organization_id,
                    budget.scope,
                    scope_id,
                    window,
                    budget.amount_nanos,
                    reserve,
                    budget.thresholds,
                )
            )
    return charges


def _first(own: LimitsSnapshot | None, default: LimitsSnapshot | None, name: str) -> int | None:
    for snapshot in (own, default):
        if snapshot is not None and snapshot.rate_limits is not None:
            value = getattr(snapshot.rate_limits, name)
            if value is not None:
                return value
    return None


async def current_generation(key: AuthenticatedKey) -> int | None:
    """The key's organization's configuration generation (None when it cannot be known); refuses a
    key revoked since it was cached."""
    revoked, generation = await revocation.check(key.id, key.organization_id)
    if revoked:
        raise _revoked(key.id)
    return generation


async def newer_generation(key: AuthenticatedKey, config: OrganizationConfig) -> int | None:
    """The generation when it is newer than the request's copy of the configuration, else None."""
    generation = await current_generation(key)
    return generation if generation is not None and generation != config.generation else None


async def admit(ctx: "ProxyContext", charges: Charges, now: datetime) -> int | None:
    """Lets the request through, or raises why not. Returns the organization's configuration
    generation when the configuration the request was checked with is older (nothing was charged:
    load that one and admit again), else None."""
    request = ctx.request
    config = ctx.config
    if not charges.rates and not charges.budgets:
        return await newer_generation(ctx.key, config)
    counters = redis_counters if async_client() is not None else local_counters
    if counters is local_counters:
        # The embedded default: revocation reaches this process's key cache directly.
        generation = local_generation(config.organization_id)
        if generation != config.generation:
            return generation
    # Settles waiting in this process ride along: under steady traffic no settle costs a round trip
    # of its own.
    settling = _take_pending() if counters is redis_counters else []
    for _ in range(3):
        try:
            admission = await counters.admit(
                revocation_key=revocation.marker(ctx.key.id),
                generation_key=generation_key(config.organization_id),
                expected_generation=config.generation,
                request_id=request.request_id,
                now=now,
                reservation_seconds=settings.GATEWAY_BUDGET_RESERVATION_SECONDS,
                rates=charges.rates,
                budgets=charges.budgets,
                **({"settling": settlement_entries(settling)} if settling else {}),
            )
        except CountersUnavailable as error:
            if settling:
                _settle_failed(settling, error)
            return _unavailable(ctx, error)
        if settling:
            _announce_crossings(settling, admission.settled)
            settling = []
        if not admission.unseeded:
            break
        await _seed(counters, config.organization_id, admission.unseeded, now)
    if admission.revoked:
        raise _revoked(ctx.key.id)
    if admission.stale:
        return admission.generation
    if admission.refused_rate is not None:
        raise _rate_limited(ctx, admission.refused_rate)
    if admission.refused_budget is not None:
        raise _budget_exceeded(ctx, admission, now)
    if admission.unseeded:  # seeded three times over by others and still not: give up on this one
        raise LimitsUnavailable("The budget counters could not be prepared; retry shortly.")
    request.limit_headers = rate_limit_headers(admission.rates)
    tokens = [state.charge for state in admission.rates if state.charge.kind == "tokens"]
    if admission.reserved or tokens:
        request.settlement = Settlement(
            admission.reserved, tokens, config.organization_id, request.request_id
        )
    return None


async def _seed(counters, organization_id: str, unseeded: list[BudgetCharge], now: datetime) -> None:
    """The spend of each window so far, from the audit log: once per window (the first request
    that finds it missing; in Redis, for every process at once)."""
    spent = []
    for charge in unseeded:
        amount = await _spend_since(organization_id, charge.scope, charge.scope_id, charge.window.start)
        spent.append((charge, int(amount * 10**9)))
    await counters.seed(now=now, spent=spent)


_spend_since = database_sync_to_async(spend_since)


def _revoked(key_id: str) -> GatewayError:
    key_cache.forget(key_id)
    return KeyRefused("Invalid API key, or the key has been revoked.", code="invalid_api_key")


_last_warning = 0.0


def _unavailable(ctx: "ProxyContext", error: CountersUnavailable) -> None:
    """Redis cannot be reached: the organization's choice, serve unchecked or refuse."""
    global _last_warning
    now = asyncio.get_running_loop().time()
    if now - _last_warning > _WARNING_SECONDS:
        _last_warning = now
        logger.warning("Budget and rate-limit counters unreachable (%s)", type(error.__cause__).__name__)
    if ctx.config.limits_fail_mode == FailMode.CLOSED:
        raise LimitsUnavailable(
            "Budgets and rate limits cannot be checked right now, and this organization refuses "
            "requests then; retry shortly.",
            headers={"retry-after": "5"},
        )
    return None


_SCOPE_NAMES = {Scope.API_KEY: "API key", Scope.TEAM: "team", Scope.ORGANIZATION: "organization"}


def _rate_limited(ctx: "ProxyContext", state: RateState) -> GatewayError:
    charge = state.charge
    unit = "requests" if charge.kind == "requests" else "tokens"
    owner = _SCOPE_NAMES[charge.scope]
    headers = rate_limit_headers([state])
    if charge.limit == 0:
        message = f"The {owner}'s rate limit is 0 {unit} per minute: every request is refused."
        headers.update({"retry-after": "60", "x-should-retry": "false"})
    elif state.retry_after_ms < 0:
        message = (
            f"Request too large for the {owner}'s limit of {charge.limit} {unit} per minute "
            f"(this request counts {charge.cost})."
        )
        headers["x-should-retry"] = "false"
    else:
        seconds = max(1, math.ceil(state.retry_after_ms / 1000))
        message = (
            f"Rate limit of the {owner} reached: {charge.limit} {unit} per minute. Retry in {seconds} s."
        )
        headers["retry-after"] = str(seconds)
    return RateLimited(message, headers=headers)


def _budget_exceeded(ctx: "ProxyContext", admission: Admission, now: datetime) -> GatewayError:
    charge = admission.refused_budget
    owner = _SCOPE_NAMES[charge.scope]
    if admission.first_refusal:
        _announce(
            ctx.config.organization_id,
            EventType.BUDGET_EXCEEDED,
            charge,
            {"refused_request_id": ctx.request.request_id},
        )
    return BudgetExceeded(
        f"The {owner}'s budget of {nanos_to_usd(charge.limit_nanos).normalize():f} USD for "
        f"{charge.window.start:%Y-%m-%dT%H:%M:%SZ} to {charge.window.end:%Y-%m-%dT%H:%M:%SZ} has no room "
        f"for this request, which could cost up to {nanos_to_usd(charge.reserve_nanos).normalize():f} USD."
    )


def _announce(organization_id: str, event_type: str, charge: BudgetCharge, extra: dict) -> None:
    try:
        raise_event(
            organization_id,
            event_type,
            {
                "scope": charge.scope,
                "scope_id": charge.scope_id,
                "period_start": charge.window.start.isoformat().replace("+00:00", "Z"),
                "period_end": charge.window.end.isoformat().replace("+00:00", "Z"),
                "budget_usd": f"{nanos_to_usd(charge.limit_nanos):f}",
                **extra,
            },
        )
    except Exception:  # an event never fails a request
        logger.exception("Could not raise the %s event", event_type)


# --- Headers -------------------------------------------------------------------------------------------


def rate_limit_headers(states: list[RateState]) -> dict[str, str]:
    """OpenAI's x-ratelimit-* headers for the most restrictive limit of each kind (the one with the
    least left)."""
    headers: dict[str, str] = {}
    for kind in ("requests", "tokens"):
        of_kind = [state for state in states if state.charge.kind == kind]
        if not of_kind:
            continue
        tightest = min(of_kind, key=lambda state: (state.remaining, -state.reset_ms))
        headers[f"x-ratelimit-limit-{kind}"] = str(tightest.charge.limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, tightest.remaining))
        headers[f"x-ratelimit-reset-{kind}"] = duration(tightest.reset_ms)
    return headers


def duration(milliseconds: int) -> str:
    """OpenAI's format: 20ms, 1s, 1.5s, 6m0s."""
    if milliseconds < 1000:
        return f"{max(0, milliseconds)}ms"
    seconds = milliseconds / 1000
    if seconds < 60:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3f}".rstrip("0").rstrip(".") + "s"


# --- Settle --------------------------------------------------------------------------------------------

# Settles wait this long to go together, in one round trip: off the path of the next request, and
# one call for many under load. A reservation held a few milliseconds longer only makes the budget
# stricter, never looser.
SETTLE_BATCH_SECONDS = 0.005
SETTLE_BATCH_MAX = 200


@dataclass(slots=True)
class _Pending:
    settlements: list[tuple[Settlement, object]] = field(default_factory=list)
    flush: asyncio.TimerHandle | None = None


_pending: dict[asyncio.AbstractEventLoop, _Pending] = {}
_settling: set[asyncio.Task] = set()


def settle_soon(request: ProxyRequest) -> None:
    """Queues the request's settlement, to go with the others of the next few milliseconds; a task
    of its own, so a client that leaves cannot cancel it."""
    settlement = request.settlement
    if settlement is None:
        return
    request.settlement = None
    loop = asyncio.get_running_loop()
    pending = _pending.setdefault(loop, _Pending())
    pending.settlements.append((settlement, request.record))
    if pending.flush is None:
        pending.flush = loop.call_later(SETTLE_BATCH_SECONDS, _flush, loop)


def _take_pending() -> list[tuple[Settlement, object]]:
    """The settles this event loop has waiting (at most a batch), taken for an admission's round trip."""
    loop = asyncio.get_running_loop()
    pending = _pending.get(loop)
    if pending is None or not pending.settlements:
        return []
    taken = pending.settlements[:SETTLE_BATCH_MAX]
    del pending.settlements[:SETTLE_BATCH_MAX]
    if not pending.settlements and pending.flush is not None:
        # Nothing left to flush: the next settle queued starts its own wait, so under steady
        # traffic the next admission takes it rather than a round trip of its own.
        pending.flush.cancel()
        pending.flush = None
    return taken


def _flush(loop: asyncio.AbstractEventLoop) -> None:
    pending = _pending.pop(loop, None)
    if pending is None:
        return
    if pending.flush is not None:  # flushed early (wait_for_settlements)
        pending.flush.cancel()
    if not pending.settlements:
        return
    batch = pending.settlements
    for start in range(0, len(batch), SETTLE_BATCH_MAX):
        task = loop.create_task(settle(batch[start : start + SETTLE_BATCH_MAX]))
        _settling.add(task)
        task.add_done_callback(_settling.discard)


def settlement_entries(batch: list[tuple[Settlement, object]]) -> list[SettleEntry]:
    """Each request's real cost and tokens against what it reserved and counted."""
    entries = []
    for settlement, record in batch:
        actual = int(record.cost_usd * 10**9)
        usage = record.usage
        used = (usage.input_tokens + usage.output_tokens) if usage is not None else 0
        entries.append(
            SettleEntry(
                settlement.request_id,
                [(charge, actual) for charge in settlement.budgets],
                [(charge, used - charge.cost) for charge in settlement.tokens],
            )
        )
    return entries


async def settle(batch: list[tuple[Settlement, object]]) -> None:
    counters = redis_counters if async_client() is not None else local_counters
    try:
        crossings = await counters.settle_many(now=timezone.now(), entries=settlement_entries(batch))
    except CountersUnavailable as error:
        _settle_failed(batch, error)
        return
    except Exception:
        logger.exception("Could not settle %d requests", len(batch))
        return
    _announce_crossings(batch, crossings)


def _settle_failed(batch: list[tuple[Settlement, object]], error: CountersUnavailable) -> None:
    # The reservations expire by themselves; reconcile brings the spend back from the audit log.
    logger.warning("Could not settle %d requests: %s", len(batch), type(error.__cause__).__name__)


def _announce_crossings(batch: list[tuple[Settlement, object]], crossings: list[list]) -> None:
    for (settlement, _), crossed in zip(batch, crossings, strict=True):
        for crossing in crossed:
            _announce(
                settlement.organization_id,
                EventType.BUDGET_THRESHOLD_REACHED,
                crossing.charge,
                {"threshold": crossing.threshold, "spent_usd": f"{nanos_to_usd(crossing.spent_nanos):f}"},
            )


async def wait_for_settlements() -> None:
    """For tests and shutdown: the settles queued and under way."""
    loop = asyncio.get_running_loop()
    _flush(loop)
    while mine := [task for task in _settling if task.get_loop() is loop]:
        await asyncio.gather(*mine, return_exceptions=True)
