"""The rate limits and budgets a request is charged against (docs/budgets.md): the key's rate limits
(each of rpm and tpm, else the organization's default) and its team's; the key's, the team's and
the organization's budgets, each reserving the request's maximum cost (``estimates.py``). Admission
(admission.py) checks and charges them in its one round trip."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from apps.limits.counters import BudgetCharge, RateCharge
from apps.limits.models import Scope
from apps.limits.selectors import LimitsSnapshot

from .estimates import estimate, max_cost_nanos

if TYPE_CHECKING:
    from .pipeline import ProxyContext


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
    team_id = team.id if team is not None else ""
    team_limits = limits.teams.get(team_id) if team is not None else None
    charges = Charges()
    if own is None and default is None and team_limits is None:
        return charges  # the usual request: no limit, nothing to estimate

    def rate(scope: str, scope_id: str, kind: str, limit: int | None, cost: int) -> None:
        if limit is not None:
            charges.rates.append(RateCharge.of(organization_id, scope, scope_id, kind, limit, cost))

    team_rates = team_limits.rate_limits if team_limits is not None else None
    rate(Scope.API_KEY, key.id, "requests", _first(own, default, "rpm"), 1)
    if team_rates is not None:
        rate(Scope.TEAM, team_id, "requests", team_rates.rpm, 1)
    if ctx.endpoint.costs:  # the model list, a stored Response's read: nothing but a request
        key_tpm = _first(own, default, "tpm")
        team_tpm = team_rates.tpm if team_rates is not None else None
        in_force = [
            (snapshot.budget, scope_id)
            for snapshot, scope_id in (
                (own, key.id),
                (team_limits, team_id),
                (default, organization_id),
            )
            if snapshot is not None and snapshot.budget is not None
        ]
        if key_tpm is None and team_tpm is None and not in_force:
            return charges
        bound = estimate(ctx.endpoint.name, ctx.body)
        rate(Scope.API_KEY, key.id, "tokens", key_tpm, bound.rate_tokens)
        if team_rates is not None:
            rate(Scope.TEAM, team_id, "tokens", team_tpm, bound.rate_tokens)
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
