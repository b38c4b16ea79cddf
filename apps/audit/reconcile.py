"""Reconcile: are the aggregates (the spend rollups) what the audit log says?

The truth is the log: the usage each upstream reported for each request, priced at the price in
force at the request's time. ``reconcile`` recomputes spend from it for a period, compares it with the
rollups per team, API key and provider, reports every difference, and with ``apply`` rebuilds the
rollups of the period from the log, then sets the budget counters of every budget whose current
window overlaps the period to the log's spend (``apps/limits/counter_rebuild.py``). Running it twice
changes nothing the second time.

The log is read by ``AuditLogSource`` and the aggregates by ``RollupSource``; both total a period
per group, so another source (a provider's own usage API) would be one more such class.
"""

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from apps.catalog.pricing import COST_QUANTUM, Usage, cost_usd
from apps.catalog.selectors import price_at, price_versions
from apps.limits.counter_rebuild import BudgetCounterChange, budget_counters_rebuild
from apps.limits.counters import CountersUnavailable

from .models import AuditEntry, SpendRollup
from .rollups import RollupKey, Totals, hour_of

logger = logging.getLogger(__name__)

# (team id, API key id, provider): the level at which differences are reported.
GroupKey = tuple[str, str, str]


def _group(rows: dict[RollupKey, Totals]) -> dict[GroupKey, Totals]:
    grouped: dict[GroupKey, Totals] = {}
    for (_, _, team_id, api_key_id, provider, _), totals in rows.items():
        grouped.setdefault((team_id, api_key_id, provider), Totals()).add(totals)
    return grouped


class AuditLogSource:
    """Spend recomputed from the logged usage at the price in force, per rollup row."""

    name = "audit_log"

    def rows(self, organization_id: str, start: datetime, end: datetime) -> dict[RollupKey, Totals]:
        versions = price_versions(organization_id)
        grouped = (
            AuditEntry.objects.filter(
                organization_id=organization_id, created_at__gte=start, created_at__lt=end
            )
            .annotate(bucket=TruncHour("created_at"))
            .values("bucket", "team_id", "api_key_id", "provider", "model")
            .annotate(
                requests=Count("id"),
                errors=Count("id", filter=Q(status__gte=400)),
                input_tokens=Sum("input_tokens"),
                output_tokens=Sum("output_tokens"),
                cached_input_tokens=Sum("cached_input_tokens"),
                reasoning_tokens=Sum("reasoning_tokens"),
                cache_write_tokens=Sum("cache_write_tokens"),
            )
        )
        rows: dict[RollupKey, Totals] = {}
        for group in grouped:
            key = (
                str(organization_id),
                group["bucket"],
                str(group["team_id"] or ""),
                str(group["api_key_id"] or ""),
                group["provider"],
                group["model"],
            )
            own = versions.get((group["provider"], group["model"]), ())
            hour_end = group["bucket"] + timedelta(hours=1)
            if any(group["bucket"] < version.effective_from < hour_end for version in own):
                # A price changed within this hour: price its requests one by one.
                rows[key] = self._priced_one_by_one(organization_id, key, versions)
                continue
            usage = Usage(
                input_tokens=group["input_tokens"] or 0,
                output_tokens=group["output_tokens"] or 0,
                cached_input_tokens=group["cached_input_tokens"] or 0,
                reasoning_tokens=group["reasoning_tokens"] or 0,
                cache_write_tokens=group["cache_write_tokens"] or 0,
            )
            price = (
                price_at(versions, group["provider"], group["model"], group["bucket"])
                if group["provider"]
                else None
            )
            rows[key] = Totals(
                requests=group["requests"],
                errors=group["errors"],
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cost_usd=cost_usd(price, usage),
            )
        return rows

    @staticmethod
    def _priced_one_by_one(organization_id: str, key: RollupKey, versions) -> Totals:
        _, hour, team_id, api_key_id, provider, model = key
        entries = AuditEntry.objects.filter(
            organization_id=organization_id,
            created_at__gte=hour,
            created_at__lt=hour + timedelta(hours=1),
            team_id=team_id or None,
            api_key_id=api_key_id or None,
            provider=provider,
            model=model,
        )
        totals = Totals()
        for entry in entries:
            usage = Usage(
                entry.input_tokens,
                entry.output_tokens,
                entry.cached_input_tokens,
                entry.reasoning_tokens,
                cache_write_tokens=entry.cache_write_tokens,
            )
            price = price_at(versions, provider, model, entry.created_at)
            totals.add(
                Totals(
                    1,
                    int(entry.status >= 400),
                    entry.input_tokens,
                    entry.output_tokens,
                    cost_usd(price, usage),
                )
            )
        return totals

    def totals(self, organization_id: str, start: datetime, end: datetime) -> dict[GroupKey, Totals]:
        return _group(self.rows(organization_id, start, end))


class RollupSource:
    name = "rollups"

    def totals(self, organization_id: str, start: datetime, end: datetime) -> dict[GroupKey, Totals]:
        grouped: dict[GroupKey, Totals] = {}
        rows = SpendRollup.objects.filter(organization_id=organization_id, hour__gte=start, hour__lt=end)
        for row in rows:
            grouped.setdefault((row.team_id, row.api_key_id, row.provider), Totals()).add(
                Totals(row.requests, row.errors, row.input_tokens, row.output_tokens, row.cost_usd)
            )
        return grouped


@dataclass(frozen=True, slots=True)
class Difference:
    team_id: str
    api_key_id: str
    provider: str
    expected: Totals  # the log's
    found: Totals  # the aggregates'


def _tolerance(requests: int) -> Decimal:
    # Each request's cost is rounded to 1e-8 USD when it is logged; a group's recomputed cost is
    # rounded once. Sums may differ by up to half a quantum per request without anything wrong.
    return COST_QUANTUM * max(requests, 1)


def compare(expected: dict[GroupKey, Totals], found: dict[GroupKey, Totals]) -> list[Difference]:
    differences = []
    for group in sorted(set(expected) | set(found)):
        want, have = expected.get(group, Totals()), found.get(group, Totals())
        if (want.requests, want.errors, want.input_tokens, want.output_tokens) != (
            have.requests,
            have.errors,
            have.input_tokens,
            have.output_tokens,
        ) or abs(want.cost_usd - have.cost_usd) > _tolerance(want.requests):
            differences.append(Difference(*group, expected=want, found=have))
    return differences


def retained_since(organization) -> datetime:
    """The earliest time whose audit entries retention has certainly kept (it runs hourly)."""
    return hour_of(timezone.now() - timedelta(days=organization.log_retention_days)) + timedelta(hours=2)


def aligned(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """Rollups are hourly: a period is widened to whole hours."""
    aligned_end = hour_of(end)
    if aligned_end < end:
        aligned_end += timedelta(hours=1)
    return hour_of(start), aligned_end


@dataclass(frozen=True, slots=True)
class BudgetCountersReport:
    """What ``apply`` did to the budget counters: the windows whose spend it changed, or why it could
    not (Redis unreachable: the rollups are rebuilt all the same; run it again later)."""

    rebuilt: list[BudgetCounterChange]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    start: datetime
    end: datetime
    source: str
    compared_with: str
    expected: Totals
    found: Totals
    differences: list[Difference]
    applied: bool  # the rollups were rebuilt (apply, and they differed from the log)
    # With apply: the budget counters' rebuild; None on a dry run, or while it waits for an
    # enclosing transaction to commit.
    budget_counters: BudgetCountersReport | None = None


def reconcile(
    *,
    organization_id: str,
    start: datetime,
    end: datetime,
    apply: bool = False,
) -> ReconcileReport:
    start, end = aligned(start, end)
    source, aggregates = AuditLogSource(), RollupSource()
    # The log's rows are read once: they give the comparison's totals and, with apply, the rebuild.
    log_rows = source.rows(organization_id, start, end)
    expected = _group(log_rows)
    found = aggregates.totals(organization_id, start, end)
    differences = compare(expected, found)
    applied = bool(apply and differences)
    if applied:
        rebuild_aggregates(organization_id=organization_id, start=start, end=end, rows=log_rows)
    budget_counters = None
    if apply:
        # Even when the rollups were right: the counters may be wrong on their own (Redis emptied, a
        # fail-open outage). On commit, so that they are read from rollups that were kept; with no
        # enclosing transaction (the API's case) that is now.
        outcome: list[BudgetCountersReport] = []
        transaction.on_commit(
            lambda: outcome.append(budget_counters_reconciled(str(organization_id), start, end))
        )
        budget_counters = outcome[0] if outcome else None
    return ReconcileReport(
        start=start,
        end=end,
        source=source.name,
        compared_with=aggregates.name,
        expected=_sum(expected.values()),
        found=_sum(found.values()),
        differences=differences,
        applied=applied,
        budget_counters=budget_counters,
    )


def budget_counters_reconciled(organization_id: str, start: datetime, end: datetime) -> BudgetCountersReport:
    """The budget counters rebuilt from the log; Redis being unreachable is logged and reported."""
    try:
        return BudgetCountersReport(rebuilt=budget_counters_rebuild(organization_id, start, end))
    except CountersUnavailable as error:
        logger.warning("Reconcile could not rebuild the budget counters: Redis unreachable (%s)", error)
        return BudgetCountersReport(
            rebuilt=[],
            error=f"Redis could not be reached ({error}); the budget counters could not be rebuilt.",
        )


def _sum(totals: Iterable[Totals]) -> Totals:
    total = Totals()
    for item in totals:
        total.add(item)
    return total


@transaction.atomic
def rebuild_aggregates(
    *, organization_id: str, start: datetime, end: datetime, rows: dict[RollupKey, Totals]
) -> None:
    """The period's rollup rows become exactly the log's."""
    SpendRollup.objects.filter(organization_id=organization_id, hour__gte=start, hour__lt=end).delete()
    SpendRollup.objects.bulk_create(
        SpendRollup(
            organization_id=organization_id,
            hour=hour,
            team_id=team_id,
            api_key_id=api_key_id,
            provider=provider,
            model=model,
            requests=totals.requests,
            errors=totals.errors,
            input_tokens=totals.input_tokens,
            output_tokens=totals.output_tokens,
            cost_usd=totals.cost_usd,
        )
        for (_, hour, team_id, api_key_id, provider, model), totals in rows.items()
    )
