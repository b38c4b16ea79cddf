"""Dashboard: the organization's spend, requests, cache, errors and latency over a chosen period, as
cards and server-drawn charts (by day, team, model and provider), and its budgets' burn.

The numbers are the analytics API's (``apps.audit.selectors``: ``usage_overview`` and
``cache_breakdown`` over the organization's entries, as ``/api/v1/analytics/overview`` and
``/cache`` compute them); the budgets' figures are the usage endpoints' (``apps.limits.usage``).
Every role reads it; a member sees the budgets of the teams they belong to (and of their keys), as
the usage endpoints allow, and the organization's own.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.shortcuts import render
from django.urls import path
from django.utils import timezone

from apps.audit import selectors
from apps.audit.time_ranges import format_instant
from apps.console import charts
from apps.console.access import Console, console_view
from apps.console.areas import Navigation
from apps.console.templatetags.console_dash import dollars
from apps.limits.models import Limits, Scope
from apps.limits.selectors import budgets_of
from apps.limits.usage import usage_of
from apps.teams.selectors import team_ids_of, teams_of

PERIODS = {
    "24h": ("Last 24 hours", timedelta(hours=24)),
    "7d": ("Last 7 days", timedelta(days=7)),
    "30d": ("Last 30 days", timedelta(days=30)),
    "90d": ("Last 90 days", timedelta(days=90)),
}
DEFAULT_PERIOD = "7d"
CHART_ROWS = 12  # categories drawn; the table beside a chart lists them all


@dataclass(frozen=True)
class Budget:
    kind: str  # Scope
    name: str
    api_key_id: object | None
    period: str
    period_start: datetime
    spent_usd: Decimal
    reserved_usd: Decimal
    budget_usd: Decimal
    remaining_usd: Decimal
    percent: float


def _buckets(start: datetime, end: datetime, unit: str) -> list[datetime]:
    """Every hour or day bucket that ``[start, end)`` touches, in UTC: the chart's time axis, with the
    buckets that had no requests too (the API leaves those out)."""
    start = start.astimezone(UTC)
    if unit == "hour":
        first, step = start.replace(minute=0, second=0, microsecond=0), timedelta(hours=1)
    else:
        first, step = start.replace(hour=0, minute=0, second=0, microsecond=0), timedelta(days=1)
    buckets, moment = [], first
    while moment < end:
        buckets.append(moment)
        moment += step
    return buckets


def _time_series(entries, start: datetime, end: datetime, unit: str) -> dict:
    groups = {group["key"]: group for group in selectors.usage_overview(entries, group_by=unit)["groups"]}
    buckets = _buckets(start, end, unit)
    labels = [bucket.strftime("%H:%M" if unit == "hour" else "%m-%d") for bucket in buckets]
    rows = [(bucket, groups.get(bucket)) for bucket in buckets]
    noun = "hour" if unit == "hour" else "day"
    return {
        "unit": noun,
        "rows": rows,
        "spend": charts.bar_chart(
            chart_id="spend-by-time",
            title=f"Spend per {noun}",
            description=f"Spend in USD per {noun} (UTC), {labels[0]} to {labels[-1]}.",
            bars=[
                (label, row["spend_usd"] if row else 0) for label, (_, row) in zip(labels, rows, strict=True)
            ],
            value_label=dollars,
        ),
        "requests": charts.line_chart(
            chart_id="requests-by-time",
            title=f"Requests and errors per {noun}",
            description=f"Requests, and those answered with an error (status 400 or more), per {noun} (UTC).",
            labels=labels,
            series=[
                charts.Series("Requests", [row["requests"] if row else 0 for _, row in rows]),
                charts.Series("Errors", [row["errors"] if row else 0 for _, row in rows]),
            ],
            value_label=_count,
        ),
        "latency": charts.line_chart(
            chart_id="latency-by-time",
            title=f"Latency per {noun}",
            description=f"Median (p50) and 95th percentile latency in milliseconds per {noun} (UTC); "
            "gaps where there were no requests.",
            labels=labels,
            series=[
                charts.Series("p50", [row["latency_p50_ms"] if row else None for _, row in rows]),
                charts.Series("p95", [row["latency_p95_ms"] if row else None for _, row in rows]),
            ],
            value_label=lambda value: f"{float(value):g} ms",
        ),
    }


def _count(value) -> str:
    return f"{float(value):,.0f}" if float(value) == int(value) else f"{float(value):,.1f}"


def _by(entries, dimension: str, names: dict, missing: str) -> dict:
    """Usage per team, model or provider: the groups (every one, for the table) and a chart of the
    biggest spenders."""
    groups = selectors.usage_overview(entries, group_by=dimension)["groups"]
    rows = [(_name(group["key"], names, missing), group) for group in groups]
    biggest = sorted(rows, key=lambda row: row[1]["spend_usd"], reverse=True)[:CHART_ROWS]
    return {
        "rows": rows,
        "chart": charts.horizontal_bar_chart(
            chart_id=f"spend-by-{dimension}",
            title=f"Spend by {dimension}",
            description=f"Spend in USD per {dimension} over the period, the biggest first.",
            bars=[(name, group["spend_usd"]) for name, group in biggest],
            value_label=dollars,
        ),
    }


def _name(key, names: dict, missing: str) -> str:
    if key is None:
        return missing
    return names.get(key, str(key)) if names else str(key)


def _budgets(console: Console, now: datetime) -> tuple[list[Budget], int]:
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
def dashboard(request, console: Console):
    period = request.GET.get("period") or DEFAULT_PERIOD
    context = {"console": console, "periods": PERIODS, "period": period}
    if period not in PERIODS:
        message = f"Expected one of {', '.join(PERIODS)}."
        context["errors"] = {"period": [message]}
        context["error_message"] = f"Invalid value for 'period': {message}"
        return render(request, "console/dashboard/dashboard.html", context, status=400)

    now = timezone.now()
    start = now - PERIODS[period][1]
    organization = console.organization
    entries = selectors.entries_matching(selectors.entries_of(organization.id), start=start, end=now)
    team_names = {team.id: team.name for team in teams_of(organization.id)}
    budgets, hidden_budgets = _budgets(console, now)
    context |= {
        "start": format_instant(start, timespec="seconds"),
        "end": format_instant(now, timespec="seconds"),
        "totals": selectors.usage_overview(entries)["totals"],
        "cache": selectors.cache_breakdown(entries)["totals"],
        "series": _time_series(entries, start, now, "hour" if period == "24h" else "day"),
        "by_team": _by(entries, "team", team_names, "No team"),
        "by_model": _by(entries, "model", {}, "Not routed"),
        "by_provider": _by(entries, "provider", {}, "Not routed"),
        "budgets": budgets,
        "hidden_budgets": hidden_budgets,
    }
    return render(request, "console/dashboard/dashboard.html", context)


NAVIGATION = Navigation("Dashboard", "console:dashboard", "dashboard")

urlpatterns = [path("dashboard/", dashboard, name="dashboard")]
