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
from .models import BudgetPeriod, Limits
from .selectors import nanos_to_usd
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
