"""Reads of budgets and rate limits: the proxy's snapshots and the API's representation."""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from .models import Limits, Scope
from .windows import Window, window_at

NANOS_PER_USD = 10**9


def usd_to_nanos(amount: Decimal) -> int:
    return int(amount * NANOS_PER_USD)


def nanos_to_usd(nanos: int) -> Decimal:
    return (Decimal(nanos) / NANOS_PER_USD).quantize(Decimal("0.000000001"))


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    scope: str  # Scope
    scope_id: str
    amount_nanos: int
    period: str
    starts_at: datetime | None
    ends_at: datetime | None
    thresholds: tuple[int, ...]
    # The window last found: every request asks, and a window lasts a day or more.
    _last: list = field(default_factory=lambda: [None], compare=False, repr=False)

    def window(self, now: datetime) -> Window | None:
        last = self._last[0]
        if last is not None and last.start <= now < last.end:
            return last
        window = window_at(self.period, now, starts_at=self.starts_at, ends_at=self.ends_at)
        if window is not None:
            self._last[0] = window
        return window


@dataclass(frozen=True, slots=True)
class RateLimitsSnapshot:
    rpm: int | None
    tpm: int | None


@dataclass(frozen=True, slots=True)
class LimitsSnapshot:
    budget: BudgetSnapshot | None
    rate_limits: RateLimitsSnapshot | None


@dataclass(frozen=True, slots=True)
class OrganizationLimits:
    """What the proxy holds of an organization's limits, by what they apply to."""

    organization: LimitsSnapshot | None = None
    teams: dict[str, LimitsSnapshot] = field(default_factory=dict)
    api_keys: dict[str, LimitsSnapshot] = field(default_factory=dict)


def snapshot_of(limits: Limits) -> LimitsSnapshot | None:
    budget = None
    if limits.budget_usd is not None:
        budget = BudgetSnapshot(
            scope=limits.scope,
            scope_id=limits.scope_id,
            amount_nanos=usd_to_nanos(limits.budget_usd),
            period=limits.budget_period,
            starts_at=limits.budget_starts_at,
            ends_at=limits.budget_ends_at,
            thresholds=tuple(limits.budget_thresholds or ()),
        )
    rate_limits = None
    if limits.rpm is not None or limits.tpm is not None:
        rate_limits = RateLimitsSnapshot(rpm=limits.rpm, tpm=limits.tpm)
    if budget is None and rate_limits is None:
        return None
    return LimitsSnapshot(budget=budget, rate_limits=rate_limits)


def organization_limits(organization_id) -> OrganizationLimits:
    result = OrganizationLimits()
    for limits in Limits.objects.filter(organization_id=organization_id):
        snapshot = snapshot_of(limits)
        if snapshot is None:
            continue
        if limits.scope == Scope.TEAM:
            result.teams[str(limits.team_id)] = snapshot
        elif limits.scope == Scope.API_KEY:
            result.api_keys[str(limits.api_key_id)] = snapshot
        else:
            result = OrganizationLimits(organization=snapshot, teams=result.teams, api_keys=result.api_keys)
    return result


def limits_of(*, organization, team=None, api_key=None) -> Limits | None:
    return Limits.objects.filter(organization=organization, team=team, api_key=api_key).first()


def budgets_of(organization_id) -> list[Limits]:
    """The organization's budgets: its own first, then its teams' by name, then its active keys' by
    name (the console's dashboard shows their burn). A revoked key's budget no longer applies."""
    rows = Limits.objects.filter(organization_id=organization_id, budget_usd__isnull=False).select_related(
        "team", "api_key"
    )
    rows = [row for row in rows if row.api_key is None or row.api_key.is_active]
    order = {Scope.ORGANIZATION: 0, Scope.TEAM: 1, Scope.API_KEY: 2}

    def name(row: Limits) -> str:
        return row.team.name if row.team is not None else row.api_key.name if row.api_key is not None else ""

    return sorted(rows, key=lambda row: (order[row.scope], name(row).lower(), str(row.pk)))


def budget_representation(limits: Limits | None) -> dict | None:
    if limits is None or limits.budget_usd is None:
        return None
    representation = {
        "amount_usd": f"{limits.budget_usd.normalize():f}" if limits.budget_usd else "0",
        "period": limits.budget_period,
        "thresholds": list(limits.budget_thresholds),
    }
    if limits.budget_period == "fixed":
        representation["starts_at"] = limits.budget_starts_at
        representation["ends_at"] = limits.budget_ends_at
    return representation


def rate_limits_representation(limits: Limits | None) -> dict | None:
    if limits is None or (limits.rpm is None and limits.tpm is None):
        return None
    return {"rpm": limits.rpm, "tpm": limits.tpm}
