"""Dashboard: the organization's spend, requests, cache, errors and latency over a chosen period, as
cards and server-drawn charts (by day, team, model and provider), and its budgets' burn.

The numbers are the analytics API's (``apps.audit.selectors``: ``usage_overview`` and
``cache_breakdown`` over the organization's entries, as ``/api/v1/analytics/overview`` and
``/cache`` compute them); the budgets' figures are the usage endpoints' (``apps.limits.usage``).
Every role reads it; a member sees the budgets of the teams they belong to (and of their keys), as
the usage endpoints allow, and the organization's own.
"""

from datetime import UTC, datetime, timedelta

from django.shortcuts import render
from django.urls import path
from django.utils import timezone

from apps.audit import selectors
from apps.audit.time_ranges import format_instant
from apps.console import charts
from apps.console.access import Console, console_view
from apps.console.templatetags.console_dash import dollars
from apps.console.templatetags.console_dash import ms as duration
from apps.console.views.budgets import readable_budgets
from apps.teams.selectors import teams_of

PERIODS = {
    "24h": ("Last 24 hours", timedelta(hours=24)),
    "7d": ("Last 7 days", timedelta(days=7)),
    "30d": ("Last 30 days", timedelta(days=30)),
    "90d": ("Last 90 days", timedelta(days=90)),
}
DEFAULT_PERIOD = "7d"
CHART_ROWS = 12  # categories drawn; the table beside a chart lists them all


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
    labels = [bucket.strftime("%H:%M" if unit == "hour" else "%b %d") for bucket in buckets]
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
            value_label=duration,
        ),
    }


def _time_axis(period: str, entries, start: datetime, now: datetime) -> tuple[str, datetime]:
    """Hours for a day. For a longer period, hours as well while all its requests are from the last two
    days, from the first one's hour: a new installation's first day draws as a day's curve, not as one
    point per day."""
    if period == "24h":
        return "hour", start
    first = entries.order_by("created_at").values_list("created_at", flat=True).first()
    if first is not None and now - first <= timedelta(hours=48):
        return "hour", first
    return "day", start


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
    budgets, hidden_budgets = readable_budgets(console, now)
    unit, axis_start = _time_axis(period, entries, start, now)
    context |= {
        "start": format_instant(start, timespec="seconds"),
        "end": format_instant(now, timespec="seconds"),
        "start_at": start,
        "end_at": now,
        "totals": selectors.usage_overview(entries)["totals"],
        "cache": selectors.cache_breakdown(entries)["totals"],
        "series": _time_series(entries, axis_start, now, unit),
        "by_team": _by(entries, "team", team_names, "No team"),
        "by_model": _by(entries, "model", {}, "Not routed"),
        "by_provider": _by(entries, "provider", {}, "Not routed"),
        "budgets": budgets,
        "hidden_budgets": hidden_budgets,
    }
    return render(request, "console/dashboard/dashboard.html", context)


urlpatterns = [path("dashboard/", dashboard, name="dashboard")]
