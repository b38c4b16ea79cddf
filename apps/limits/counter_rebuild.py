"""Reconcile for the budget counters: each budget's current window set to the audit log's spend.

The proxy alone writes the counters (reserve, settle). When they went wrong (Redis emptied or
restored from an old snapshot, requests served unchecked while Redis was down and the organization
fails open), reconcile with ``apply`` sets each budget window's ``spent`` to what the log says was
spent in it so far, and marks the window loaded. What requests in flight have reserved (``reserved``,
the reservation set) and the thresholds already announced stay as they are: a request
settling later replaces its own reservation, and no threshold is announced twice in a window.

Only current windows are rebuilt: a past window admits nothing any more, and a future one starts
from the log when its first request loads it.

The log lags the proxy by the outbox: a request settled in the last seconds whose audit entry is
still on its way is counted by the counters but not yet by the log, so rebuilding the current window
can undercount by about ``GATEWAY_OUTBOX_INGEST_SECONDS`` worth of spend (docs/budgets.md).
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from .counters import BudgetCharge, counters
from .models import Limits
from .selectors import nanos_to_usd, usd_to_nanos
from .spend import spend_since
from .windows import window_at


@dataclass(frozen=True, slots=True)
class BudgetCounterChange:
    """One budget window whose spend reconcile changed."""

    scope: str  # organization, team, api_key
    scope_id: str
    period_start: datetime
    period_end: datetime
    spent_before_usd: Decimal | None  # None: the window's spend had not been loaded (or was lost)
    spent_usd: Decimal


def budget_counters_rebuild(
    organization_id, start: datetime, end: datetime, *, now: datetime | None = None
) -> list[BudgetCounterChange]:
    """Every budget of the organization whose current window overlaps ``[start, end)`` gets the log's
    spend of that window; returns the windows whose spend (or loaded state) changed. Raises
    ``CountersUnavailable`` when Redis cannot be reached (windows set before that stay set)."""
    now = now or timezone.now()
    budget_counters = counters()  # in the embedded default, the proxy's in this process
    changes = []
    budgets = Limits.objects.filter(organization_id=organization_id, budget_usd__isnull=False).order_by("id")
    for limits in budgets:
        window = window_at(
            limits.budget_period, now, starts_at=limits.budget_starts_at, ends_at=limits.budget_ends_at
        )
        if window is None or not (window.start < end and start < window.end):
            continue
        scope = str(limits.scope)
        nanos = usd_to_nanos(spend_since(organization_id, scope, limits.scope_id, window.start, now))
        charge = BudgetCharge.of(
            str(organization_id),
            scope,
            limits.scope_id,
            window,
            usd_to_nanos(limits.budget_usd),
            0,
            limits.budget_thresholds or (),
        )
        before = budget_counters.set_spent(charge, nanos, now)
        if before != nanos:
            changes.append(
                BudgetCounterChange(
                    scope=scope,
                    scope_id=limits.scope_id,
                    period_start=window.start,
                    period_end=window.end,
                    spent_before_usd=None if before is None else nanos_to_usd(before),
                    spent_usd=nanos_to_usd(nanos),
                )
            )
    return changes
