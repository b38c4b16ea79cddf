"""Budgets: every budget the caller may read (the organization's, its teams', its keys'), with what
each has spent in its current window and how much of it is burnt, and where each is set.

The figures are the usage endpoints' (``apps.limits.usage``): the counters the proxy admits requests
against, reserved included. A member sees the organization's budget and those of the teams they
belong to (and of keys bound to those teams), as the usage endpoints allow; the rest are counted.
"""

from datetime import datetime

from django.shortcuts import render
from django.urls import path
from django.utils import timezone

from apps.console.access import Console, console_view
from apps.limits.usage import BudgetBurn, budgets_burn
from apps.teams.selectors import team_ids_of


def readable_budgets(console: Console, now: datetime) -> tuple[list[BudgetBurn], int]:
    """The budgets the caller may read, with their burn, and how many others there are: a member
    reads the organization's and those of their teams (and of keys bound to them)."""
    organization = console.organization
    if console.can_change:
        return budgets_burn(organization, now=now)
    return budgets_burn(
        organization, now=now, team_ids=team_ids_of(user=console.user, organization_id=organization.id)
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
