"""The one way budgets and rate limits are written: the API, the Django admin and the console call
these, and each change bumps the organization's configuration generation, so every proxy process
applies it to its next request."""

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from apps.core.errors import InvalidRequest, invalid_field, invalid_fields
from apps.core.generations import bump_generation

from .models import DEFAULT_THRESHOLDS, BudgetPeriod, Limits

UNSET: Any = object()


def limits_check(
    *, organization=None, team=None, api_key=None, budget=UNSET, rate_limits=UNSET, adding: bool = False
) -> dict[str, Any]:
    """``budget`` and ``rate_limits`` (the API's body parts, inputs.py ``LimitsInputSerializer``;
    ``None`` removes one, ``UNSET`` leaves it out) as ``limits_set`` stores them: parsed, then what a
    schema cannot say (a fixed window's ends, in order; thresholds each once), the thresholds sorted
    (``[50, 80, 100]`` when none are given) and a missing rate ``None``. The target is a team or a key
    of ``organization`` (not both; none: the organization's own); ``adding`` (the admin's add form)
    must set a budget or a rate limit. Raises ``InvalidRequest`` naming the field (``budget.thresholds``,
    ``team``)."""
    # The input serializer (DRF) loads on the first write of limits, not in a server process that
    # only proxies (it imports apps/keys/services.py, which imports this module).
    from apps.core.api.serializers import validated

    from .inputs import LimitsInputSerializer

    _check_target(organization, team=team, api_key=api_key)
    given = {"budget": budget, "rate_limits": rate_limits}
    values = dict(
        validated(
            LimitsInputSerializer,
            {name: value for name, value in given.items() if value is not UNSET},
            partial=True,
        )
    )
    if values.get("budget") is not None:
        values["budget"] = _budget(values["budget"])
    if values.get("rate_limits") is not None:
        values["rate_limits"] = {name: values["rate_limits"].get(name) for name in ("rpm", "tpm")}
    rates = values.get("rate_limits") or {}
    if adding and values.get("budget") is None and all(rate is None for rate in rates.values()):
        raise InvalidRequest("Set a budget or a rate limit (delete limits to remove them).")
    return values


def _check_target(organization, *, team, api_key) -> None:
    errors: dict[str, list[str]] = {}
    if team is not None and api_key is not None:
        errors["api_key"] = ["Limits apply to a team or an API key, not both."]
    for name, target in (("team", team), ("api_key", api_key)):
        if target is not None and organization is not None and target.organization_id != organization.id:
            errors.setdefault(name, []).append("This belongs to another organization.")
    if errors:
        raise invalid_fields(errors)


def _budget(budget: Mapping) -> dict:
    period = budget["period"]
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
    if len(set(thresholds)) != len(thresholds):
        raise invalid_field("budget.thresholds", "A threshold is listed twice.")
    return {
        "amount_usd": budget["amount_usd"],
        "period": period,
        "starts_at": starts_at,
        "ends_at": ends_at,
        "thresholds": sorted(thresholds),
    }


def limits_set(
    *, organization, team=None, api_key=None, budget=UNSET, rate_limits=UNSET, adding: bool = False
) -> Limits | None:
    """Sets the budget and/or the rate limits of the organization, or of one of its teams or keys
    (``None`` removes one; ``UNSET`` leaves it as it is), as the API's body has them, or as an input
    that embeds them parsed them (``limits_check``, which also says what ``adding`` asks). Returns the
    row (None when nothing is left; never when ``adding``)."""
    if budget is UNSET and rate_limits is UNSET and not adding:
        return Limits.objects.filter(organization=organization, team=team, api_key=api_key).first()
    values = limits_check(
        organization=organization,
        team=team,
        api_key=api_key,
        budget=budget,
        rate_limits=rate_limits,
        adding=adding,
    )
    budget, rate_limits = values.get("budget", UNSET), values.get("rate_limits", UNSET)
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
