"""The one way budgets and rate limits are written: the API, the Django admin and the console call
these, and each change bumps the organization's configuration generation, so every proxy process
applies it to its next request."""

from decimal import Decimal
from typing import Any

from django.db import transaction

from apps.core.errors import invalid_field
from apps.core.generations import bump_generation

from .models import DEFAULT_THRESHOLDS, BudgetPeriod, Limits

UNSET: Any = object()
# What the column holds (14 digits, 6 of them decimals): more would fail in PostgreSQL as a 500.
MAX_BUDGET_USD = Decimal("99999999.999999")
MAX_RATE = 1_000_000_000
MAX_THRESHOLDS = 10


def validated_budget(budget: dict | None) -> dict | None:
    """``{"amount_usd": Decimal, "period", "thresholds"?, "starts_at"?, "ends_at"?}`` checked as a
    whole (the serializer checks types): a positive amount, fixed windows with both ends in order,
    thresholds distinct whole percents from 1 to 100."""
    if budget is None:
        return None
    amount = budget["amount_usd"]
    if not isinstance(amount, Decimal) or not amount.is_finite() or amount <= 0 or amount > MAX_BUDGET_USD:
        raise invalid_field(
            "budget.amount_usd", "A budget is a positive amount of US dollars, below 100,000,000."
        )
    exponent = amount.as_tuple().exponent  # an int: the amount is finite
    if isinstance(exponent, int) and exponent < -6:
        raise invalid_field("budget.amount_usd", "At most 6 decimal places.")
    period = budget["period"]
    if period not in BudgetPeriod.values:
        raise invalid_field("budget.period", f"One of {', '.join(BudgetPeriod.values)}.")
    starts_at, ends_at = budget.get("starts_at"), budget.get("ends_at")
    if period == BudgetPeriod.FIXED:
        if starts_at is None or ends_at is None:
            raise invalid_field("budget.starts_at", "A fixed budget needs starts_at and ends_at.")
        if starts_at >= ends_at:
            raise invalid_field("budget.ends_at", "Must be after starts_at.")
    elif starts_at is not None or ends_at is not None:
        raise invalid_field("budget.starts_at", "Only a fixed budget has starts_at and ends_at.")
    thresholds = budget.get("thresholds")
    thresholds = list(DEFAULT_THRESHOLDS) if thresholds is None else list(thresholds)
    if len(thresholds) > MAX_THRESHOLDS:
        raise invalid_field("budget.thresholds", f"At most {MAX_THRESHOLDS} thresholds.")
    if any(isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= 100 for t in thresholds):
        raise invalid_field("budget.thresholds", "Each threshold is a whole percent from 1 to 100.")
    if len(set(thresholds)) != len(thresholds):
        raise invalid_field("budget.thresholds", "A threshold is listed twice.")
    return {
        "amount_usd": amount,
        "period": period,
        "starts_at": starts_at,
        "ends_at": ends_at,
        "thresholds": sorted(thresholds),
    }


def validated_rate_limits(rate_limits: dict | None) -> dict | None:
    if rate_limits is None:
        return None
    checked = {}
    for name in ("rpm", "tpm"):
        value = rate_limits.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RATE
        ):
            raise invalid_field(
                f"rate_limits.{name}", f"A whole number from 0 to {MAX_RATE:,}, or null for none."
            )
        checked[name] = value
    return checked


def limits_set(*, organization, team=None, api_key=None, budget=UNSET, rate_limits=UNSET) -> Limits | None:
    """Sets the budget and/or the rate limits of the organization, or of one of its teams or keys
    (``None`` removes one; ``UNSET`` leaves it as it is). Returns the row (None when nothing is left)."""
    if budget is UNSET and rate_limits is UNSET:
        return Limits.objects.filter(organization=organization, team=team, api_key=api_key).first()
    budget = UNSET if budget is UNSET else validated_budget(budget)
    rate_limits = UNSET if rate_limits is UNSET else validated_rate_limits(rate_limits)
    with transaction.atomic():
        limits = (
            Limits.objects.select_for_update()
            .filter(organization=organization, team=team, api_key=api_key)
            .first()
        )
        if limits is None:
            limits = Limits(organization=organization, team=team, api_key=api_key)
        if budget is not UNSET:
            if budget is None:
                limits.budget_usd, limits.budget_period = None, ""
                limits.budget_starts_at = limits.budget_ends_at = None
                limits.budget_thresholds = list(DEFAULT_THRESHOLDS)
            else:
                limits.budget_usd, limits.budget_period = budget["amount_usd"], budget["period"]
                limits.budget_starts_at, limits.budget_ends_at = budget["starts_at"], budget["ends_at"]
                limits.budget_thresholds = budget["thresholds"]
        if rate_limits is not UNSET:
            limits.rpm = rate_limits["rpm"] if rate_limits else None
            limits.tpm = rate_limits["tpm"] if rate_limits else None
        if limits.budget_usd is None and limits.rpm is None and limits.tpm is None:
            if not limits._state.adding:
                limits.delete()
            limits = None
        else:
            limits.save()
        bump_generation(organization.id)
    return limits
