"""What a team or an API key has spent: the management API's usage answer.

With a budget in force, the figures are the budget window's counters (the ones the proxy admits
requests against): spent and reserved (the most that requests in flight may still cost). Without one
(or outside a fixed budget's window) the spend is the current UTC month's, from the audit log
(``apps.limits.spend``, the audit log's reader: the hourly rollups, which the ingest keeps up to date off the
request, so they may lag by seconds, and the log itself for part-hours), and nothing is reserved.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from .counters import CountersUnavailable, budget_key, counters
from .counters import Usage as CounterUsage
from .models import BudgetPeriod, Limits, Scope
from .selectors import budgets_of, nanos_to_usd
from .spend import spend_since
from .windows import Window, window_at

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Usage:
    period: str  # BudgetPeriod
    period_start: datetime
    spent_usd: Decimal
    reserved_usd: Decimal
    budget_usd: Decimal | None
    remaining_usd: Decimal | None


def usage_of(*, organization, scope: str, scope_id, limits: Limits | None, now: datetime) -> Usage:
    """``scope``: team or api_key (``apps.limits.models.Scope``); ``limits``: the scope's row or None."""
    window = None
    if limits is not None and limits.budget_usd is not None:
        window = window_at(
            limits.budget_period, now, starts_at=limits.budget_starts_at, ends_at=limits.budget_ends_at
        )
    if window is None:
        month = window_at(BudgetPeriod.MONTHLY, now)
        spent = spend_since(organization.id, scope, scope_id, month.start, now)
        return Usage(BudgetPeriod.MONTHLY, month.start, spent, Decimal(0), None, None)
    counters = _counters(str(organization.id), scope, str(scope_id), window)
    # The counters start from nothing until a request in the window loads the spend so far from the
    # audit log (after a restart in the embedded default, or a window nobody has used yet): until
    # then the log's figure is the better one. Once loaded, the counters are ahead of the log.
    logged = spend_since(organization.id, scope, scope_id, window.start, now)
    spent = max(nanos_to_usd(counters.spent_nanos) if counters else Decimal(0), logged)
    reserved = nanos_to_usd(counters.reserved_nanos) if counters else Decimal(0)
    budget = limits.budget_usd
    return Usage(
        period=limits.budget_period,
        period_start=window.start.astimezone(UTC),
        spent_usd=spent,
        reserved_usd=reserved,
        budget_usd=budget,
        remaining_usd=max(Decimal(0), budget - spent - reserved),
    )


def _counters(organization_id: str, scope: str, scope_id: str, window: Window) -> CounterUsage | None:
    # In the embedded default the proxy runs in this process, so its counters are these.
    try:
        return counters().usage(budget_key(organization_id, scope, scope_id, window))
    except CountersUnavailable as error:
        # A read for people: the audit log's figure is answered instead of an error.
        logger.warning("Redis unreachable for a usage read (%s); answering from the audit log", error)
        return None


# Budgets' burn, for people (the console's budgets page and dashboard) ------------------------------


@dataclass(frozen=True)
class BudgetBurn:
    kind: str  # Scope
    name: str
    team_id: object | None
    api_key_id: object | None
    period: str
    period_start: datetime
    spent_usd: Decimal
    reserved_usd: Decimal
    budget_usd: Decimal
    remaining_usd: Decimal
    percent: float


def budgets_burn(organization, *, now: datetime, team_ids: set | None = None) -> tuple[list[BudgetBurn], int]:
    """The organization's budgets with what each has spent in its current window, and how many were
    left out: with ``team_ids``, only the organization's own and those of these teams and of keys
    bound to them (what a member may read), else every one."""
    shown, hidden = [], 0
    for limits in budgets_of(organization.id):
        if team_ids is not None and not _readable(limits, team_ids):
            hidden += 1
            continue
        usage = usage_of(
            organization=organization, scope=limits.scope, scope_id=limits.scope_id, limits=limits, now=now
        )
        shown.append(_burn(limits, usage))
    return shown, hidden


def _readable(limits: Limits, team_ids: set) -> bool:
    """A member reads the organization's budget and those of their teams and of keys bound to them."""
    if limits.scope == Scope.TEAM:
        return limits.team_id in team_ids
    if limits.scope == Scope.API_KEY:
        return limits.api_key.team_id is not None and limits.api_key.team_id in team_ids
    return True


def _burn(limits: Limits, usage: Usage) -> BudgetBurn:
    amount = usage.budget_usd if usage.budget_usd is not None else limits.budget_usd
    spent = usage.spent_usd
    return BudgetBurn(
        kind=limits.scope,
        name=limits.team.name if limits.team else limits.api_key.name if limits.api_key else "Organization",
        team_id=limits.team_id,
        api_key_id=limits.api_key_id,
        period=usage.period,
        period_start=usage.period_start,
        spent_usd=spent,
        reserved_usd=usage.reserved_usd,
        budget_usd=amount,
        remaining_usd=usage.remaining_usd
        if usage.remaining_usd is not None
        else max(Decimal(0), amount - spent),
        percent=float(spent / amount * 100) if amount else 0.0,
    )
