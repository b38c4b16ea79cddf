"""Budgets: every budget the caller may read (the organization's, its teams', its keys'), with what
each has spent in its current window and how much of it is burnt, and where each is set.

The figures are the usage endpoints' (``apps.limits.usage``): the counters the proxy admits requests
against, reserved included. A member sees the organization's budget and those of the teams they
belong to (and of keys bound to those teams), as the usage endpoints allow; the rest are counted.
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.shortcuts import render
from django.urls import path
from django.utils import timezone

from apps.console.access import Console, console_view
from apps.limits.models import Limits, Scope
from apps.limits.selectors import budgets_of
from apps.limits.usage import usage_of
from apps.teams.selectors import team_ids_of


@dataclass(frozen=True)
class Budget:
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


def readable_budgets(console: Console, now: datetime) -> tuple[list[Budget], int]:
    """The budgets the caller may read, with their burn, and how many others there are."""
    organization = console.organization
    mine = None if console.can_change else team_ids_of(user=console.user, organization_id=organization.id)
    shown, hidden = [], 0
    for limits in budgets_of(organization.id):
        if mine is not None and not _readable(limits, mine):
            hidden += 1
            continue
        usage = usage_of(
            organization=organization, scope=limits.scope, scope_id=limits.scope_id, limits=limits, now=now
        )
        shown.append(_budget(limits, usage))
    return shown, hidden


def _readable(limits: Limits, team_ids: set) -> bool:
    """A member reads the organization's budget and those of their teams and of keys bound to them."""
    if limits.scope == Scope.TEAM:
        return limits.team_id in team_ids
    if limits.scope == Scope.API_KEY:
        return limits.api_key.team_id is not None and limits.api_key.team_id in team_ids
    return True


def _budget(limits: Limits, usage) -> Budget:
    amount = usage.budget_usd if usage.budget_usd is not None else limits.budget_usd
    spent = usage.spent_usd
    return Budget(
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


@console_view()
def budget_list(request, console: Console):
    budgets, hidden = readable_budgets(console, timezone.now())
    return render(
        request,
        "console/budgets/list.html",
        {"console": console, "budgets": budgets, "hidden_budgets": hidden},
    )


urlpatterns = [path("budgets/", budget_list, name="budgets")]
