"""Admission: is this request let through, by its key, its rate limits and its budgets?

One Redis round trip before the upstream (``apps/limits/counters.py``): the key's revocation
marker, the organization's configuration generation, and, when limits apply, every rate limit and
budget checked and charged together (what applies: charges.py). A request no limit applies to reads
only the first two (the ``MGET`` of ``apps/keys/revocation.py``). A refusal's error, text and
headers are limit_refusals.py's; the settle after the answer, settling.py's.
"""

import asyncio
import logging
from datetime import datetime
from typing import TYPE_CHECKING

from channels.db import database_sync_to_async
from django.conf import settings

from apps.audit.selectors import spend_since
from apps.core.errors import GatewayError
from apps.keys import revocation
from apps.limits.counters import (
    BudgetCharge,
    Counters,
    CountersUnavailable,
    counters,
)
from apps.organizations.models import FailMode

from .auth import AuthenticatedKey, KeyRefused
from .charges import Charges
from .config import OrganizationConfig
from .http import ProxyRequest
from .limit_refusals import (
    LimitsUnavailable,
    budget_exceeded,
    rate_limit_headers,
    rate_limited,
)
from .runtime import runtime
from .settling import (
    Settlement,
    announce_crossings,
    settle_failed,
    settlement_entries,
    take_pending,
)

if TYPE_CHECKING:
    from .caller import Caller
    from .pipeline import ProxyContext

logger = logging.getLogger(__name__)

# Refused keys and organizations, and limit checks a Redis outage skipped, are logged this often.
_WARNING_SECONDS = 30.0


def send_early(request: ProxyRequest, caller: "Caller") -> None:
    """Sends admission's revocation check now, when it will be admission's whole round trip (no rate
    limit or budget can apply to the caller: those are checked with the revocation in one script),
    so that the body is read and checked while Redis answers. Nothing with the embedded counters."""
    limits = caller.config.limits
    if limits.organization is not None or limits.teams or caller.key.id in limits.api_keys:
        return
    request.early_check = revocation.send_early(caller.key.id, caller.key.organization_id)


def _take_early_check(request: ProxyRequest | None) -> asyncio.Future | None:
    if request is None:
        return None
    sent, request.early_check = request.early_check, None
    return sent


async def current_generation(key: AuthenticatedKey, request: ProxyRequest | None = None) -> int | None:
    """The key's organization's configuration generation (None when it cannot be known); refuses a
    key revoked since it was cached. The check ``send_early`` sent for ``request`` is its answer."""
    revoked, generation = await revocation.check(key.id, key.organization_id, _take_early_check(request))
    if revoked:
        raise _revoked(key.id)
    return generation


async def newer_generation(
    key: AuthenticatedKey, config: OrganizationConfig, request: ProxyRequest | None = None
) -> int | None:
    """The generation when it is newer than the request's copy of the configuration, else None."""
    generation = await current_generation(key, request)
    return generation if generation is not None and generation != config.generation else None


async def admit(ctx: "ProxyContext", charges: Charges, now: datetime) -> int | None:
    """Lets the request through, or raises why not. Returns the organization's configuration
    generation when the configuration the request was checked with is older (nothing was charged:
    load that one and admit again), else None."""
    request = ctx.request
    config = ctx.config
    if not charges.rates and not charges.budgets:
        return await newer_generation(ctx.key, config, request)
    limits = counters()
    # Settles waiting in this process ride along: under steady traffic no settle costs a round trip
    # of its own.
    settling = take_pending()
    for _ in range(3):
        try:
            admission = await limits.admit(
                key_id=ctx.key.id,
                organization_id=config.organization_id,
                expected_generation=config.generation,
                request_id=request.request_id,
                now=now,
                reservation_seconds=settings.GATEWAY_BUDGET_RESERVATION_SECONDS,
                rates=charges.rates,
                budgets=charges.budgets,
                settling=settlement_entries(settling) if settling else (),
            )
        except CountersUnavailable as error:
            if settling:
                settle_failed(settling, error)
            _unavailable(ctx, error)
            return None
        if settling:
            announce_crossings(settling, admission.settled)
            settling = []
        if not admission.unseeded:
            break
        await _seed(limits, config.organization_id, admission.unseeded, now)
    if admission.revoked:
        raise _revoked(ctx.key.id)
    if admission.stale:
        return admission.generation
    if admission.refused_rate is not None:
        raise rate_limited(admission.refused_rate)
    if admission.refused_budget is not None:
        raise budget_exceeded(
            config.organization_id,
            request.request_id,
            admission.refused_budget,
            first_refusal=admission.first_refusal,
        )
    if admission.unseeded:  # seeded three times over by others and still not: give up on this one
        raise LimitsUnavailable("The budget counters could not be prepared; retry shortly.")
    request.limit_headers = rate_limit_headers(admission.rates)
    tokens = [state.charge for state in admission.rates if state.charge.kind == "tokens"]
    if admission.reserved or tokens:
        request.settlement = Settlement(
            admission.reserved, tokens, config.organization_id, request.request_id
        )
    return None


async def _seed(limits: Counters, organization_id: str, unseeded: list[BudgetCharge], now: datetime) -> None:
    """The spend of each window so far, from the audit log: once per window (the first request
    that finds it missing; in Redis, for every process at once)."""
    spent = []
    for charge in unseeded:
        amount = await _spend_since(organization_id, charge.scope, charge.scope_id, charge.window.start)
        spent.append((charge, int(amount * 10**9)))
    await limits.seed(now=now, spent=spent)


_spend_since = database_sync_to_async(spend_since)


def _revoked(key_id: str) -> GatewayError:
    runtime.keys.forget(key_id)
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
