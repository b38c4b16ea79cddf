"""Reading the audit log: the queries behind /api/v1/analytics/.

Every function takes a queryset of entries already scoped to one organization (the viewsets'
``get_queryset``), so tenancy stays in one place and no function here can count another
organization's entries.

Latency percentiles are ``percentile_cont`` on PostgreSQL. SQLite has no such aggregate, so the
embedded default reads the range's latencies in order and interpolates the same way in Python: fine
for the small volumes SQLite is meant for, not for millions of rows (``apps/core/percentiles.py``
chooses by the connection).
"""

from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Aggregate, Count, F, Q, QuerySet, Sum
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from apps.core.percentiles import percentiles_for

from .models import AuditEntry, SpendRollup
from .rollups import hour_of

CACHE_TIERS = ("l1", "l2", "l3")
CACHE_VALUES = (*CACHE_TIERS, "miss", "bypass")
POLICY_ACTIONS = ("redacted", "blocked", "flagged")
GROUP_BY = ("hour", "day", "team", "model", "provider", "key", "prompt")

# What the log list shows; bodies, attempts and policy decisions only on the detail.
SUMMARY_FIELDS = (
    "id",
    "organization_id",
    "created_at",
    "endpoint",
    "team_id",
    "api_key_id",
    "api_key_prefix",
    "requested_model",
    "model",
    "provider",
    "stream",
    "status",
    "error_type",
    "error_code",
    "cache",
    "policy_action",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_ms",
    "ttft_ms",
)


def entries_of(organization_id) -> QuerySet[AuditEntry]:
    """The organization's entries: where every read of one organization's log starts (the API's
    viewsets start from the same filter through ``OrganizationScopedViewSet``; the console here)."""
    return AuditEntry.objects.filter(organization_id=organization_id)


def latest_summaries(organization_id, *, limit: int) -> QuerySet[AuditEntry]:
    """The organization's last ``limit`` entries, newest first, as the log list shows them."""
    return log_summaries(entries_of(organization_id)).order_by("-created_at", "-id")[:limit]


def entries_matching(
    entries: QuerySet[AuditEntry],
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    team_id=None,
    api_key_id=None,
    model: str | None = None,
    provider: str | None = None,
    prompt: str | None = None,
    status: tuple[int, int] | None = None,
    policy_action: str | None = None,
    cache: str | None = None,
    request_id=None,
) -> QuerySet[AuditEntry]:
    """Entries in ``[start, end)`` that match every filter given. ``status`` is a half-open range
    of codes (an exact code is ``(code, code + 1)``); ``model`` matches the alias the client asked
    for or the model that served it."""
    conditions = Q()
    if start is not None:
        conditions &= Q(created_at__gte=start)
    if end is not None:
        conditions &= Q(created_at__lt=end)
    if team_id is not None:
        conditions &= Q(team_id=team_id)
    if api_key_id is not None:
        conditions &= Q(api_key_id=api_key_id)
    if model is not None:
        conditions &= Q(requested_model=model) | Q(model=model)
    if provider is not None:
        conditions &= Q(provider=provider)
    if prompt is not None:
        conditions &= Q(prompt_template=prompt)
    if status is not None:
        conditions &= Q(status__gte=status[0], status__lt=status[1])
    if policy_action is not None:
        conditions &= Q(policy_action=policy_action)
    if cache is not None:
        conditions &= Q(cache=cache)
    if request_id is not None:
        conditions &= Q(id=request_id)
    return entries.filter(conditions)


def log_summaries(entries: QuerySet[AuditEntry]) -> QuerySet[AuditEntry]:
    """The list's columns only: a page never reads bodies or attempts."""
    return entries.only(*SUMMARY_FIELDS)


# Aggregates ---------------------------------------------------------------------------------------


_GROUP_EXPRESSIONS = {
    "hour": lambda: TruncHour("created_at", tzinfo=UTC),
    "day": lambda: TruncDay("created_at", tzinfo=UTC),
    "team": lambda: F("team_id"),
    "model": lambda: F("model"),
    "provider": lambda: F("provider"),
    "key": lambda: F("api_key_id"),
    "prompt": lambda: F("prompt_template"),
}

_PERCENTILES = {"latency_p50_ms": ("latency_ms", 0.5, None), "latency_p95_ms": ("latency_ms", 0.95, None)}


def _usage_aggregates() -> dict[str, Aggregate]:
    return {
        "requests": Count("id"),
        "spend": Sum("cost_usd"),
        "input_tokens": Sum("input_tokens"),
        "output_tokens": Sum("output_tokens"),
        "errors": Count("id", filter=Q(status__gte=400)),
        "cache_hits": Count("id", filter=Q(cache__in=CACHE_TIERS)),
        "cache_lookups": Count("id", filter=~Q(cache="bypass")),
    }


def usage_overview(entries: QuerySet[AuditEntry], *, group_by: str | None = None) -> dict[str, Any]:
    """Spend, requests, tokens, error rate, latency p50/p95 and cache hit rate of ``entries``, in
    total and, with ``group_by``, per group (groups without entries are left out)."""
    entries = entries.order_by()
    percentiles = percentiles_for(entries)
    aggregates = _usage_aggregates() | percentiles.aggregates(_PERCENTILES)

    total = entries.aggregate(**aggregates)
    total |= percentiles.totals(entries, _PERCENTILES)
    result: dict[str, Any] = {"totals": _usage_numbers(total)}
    if group_by is None:
        return result

    grouped = entries.annotate(bucket=_GROUP_EXPRESSIONS[group_by]()).values("bucket")
    rows = list(grouped.annotate(**aggregates).order_by("bucket"))
    by_bucket = percentiles.per_group(grouped, _PERCENTILES)
    for row in rows:
        row |= by_bucket.get(row["bucket"], {})
    result["groups"] = _ordered_groups(
        [{"key": _group_key(row["bucket"]), **_usage_numbers(row)} for row in rows], group_by
    )
    return result


def cache_breakdown(entries: QuerySet[AuditEntry], *, group_by: str | None = None) -> dict[str, Any]:
    """Hits per tier, misses, bypasses and hit rates; ``lookups`` are the entries that were looked
    up in the cache (every one but the bypasses)."""
    entries = entries.order_by()
    aggregates = {"requests": Count("id"), "savings": Sum("cache_savings_usd")} | {
        value: Count("id", filter=Q(cache=value)) for value in CACHE_VALUES
    }
    result: dict[str, Any] = {"totals": _cache_numbers(entries.aggregate(**aggregates))}
    if group_by is None:
        return result
    rows = (
        entries.annotate(bucket=_GROUP_EXPRESSIONS[group_by]())
        .values("bucket")
        .annotate(**aggregates)
        .order_by("bucket")
    )
    result["groups"] = _ordered_groups(
        [{"key": _group_key(row["bucket"]), **_cache_numbers(row)} for row in rows], group_by
    )
    return result


def policy_hits(entries: QuerySet[AuditEntry]) -> dict[str, Any]:
    """How often each policy took each action, and how many requests ended with each action
    (``policy_action``, what the client was told). A hit is a request on which a policy took an
    action (from the entry's ``policy_decisions``), counted once however often the entry repeats it:
    the same rule as the policy export.

    Decisions are JSON; they are counted here rather than in SQL so that SQLite and PostgreSQL
    agree, reading only the entries where a policy acted, a chunk at a time."""
    entries = entries.order_by()
    per_action = dict(
        entries.exclude(policy_action="")
        .values("policy_action")
        .annotate(n=Count("id"))
        .values_list("policy_action", "n")
    )
    hits: Counter[tuple[str, str]] = Counter()
    decided = entries.exclude(policy_decisions=[]).values_list("policy_decisions", flat=True)
    for decisions in decided.iterator(chunk_size=2000):
        hits.update(_policy_actions(decisions))
    return {
        "requests": entries.count(),
        "actions": {action: per_action.get(action, 0) for action in POLICY_ACTIONS},
        "policies": [
            {"policy": policy, "action": action, "hits": count}
            for (policy, action), count in sorted(hits.items(), key=lambda item: (-item[1], item[0]))
        ],
    }


def _policy_actions(decisions: Any) -> set[tuple[str, str]]:
    """(policy, action) of each well-formed decision of one entry; one without a policy is skipped."""
    return {
        (str(decision["policy"]), str(decision.get("action") or ""))
        for decision in (decisions if isinstance(decisions, list) else ())
        if isinstance(decision, dict) and decision.get("policy") is not None
    }


# Shaping ------------------------------------------------------------------------------------------


def _ratio(part: int, whole: int) -> float:
    # An empty denominator reads as 0: nothing was looked up, so nothing was hit.
    return round(part / whole, 6) if whole else 0.0


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _usage_numbers(row: dict[str, Any]) -> dict[str, Any]:
    requests = row["requests"]
    return {
        "requests": requests,
        "spend_usd": row["spend"] or Decimal(0),
        "input_tokens": row["input_tokens"] or 0,
        "output_tokens": row["output_tokens"] or 0,
        "errors": row["errors"],
        "error_rate": _ratio(row["errors"], requests),
        "latency_p50_ms": _ms(row.get("latency_p50_ms")),
        "latency_p95_ms": _ms(row.get("latency_p95_ms")),
        "cache_hit_rate": _ratio(row["cache_hits"], row["cache_lookups"]),
    }


def _cache_numbers(row: dict[str, Any]) -> dict[str, Any]:
    lookups = row["requests"] - row["bypass"]
    hits = sum(row[tier] for tier in CACHE_TIERS)
    return {
        "requests": row["requests"],
        "lookups": lookups,
        "hits": hits,
        "misses": row["miss"],
        "bypasses": row["bypass"],
        "hit_rate": _ratio(hits, lookups),
        "savings_usd": row["savings"] or Decimal(0),
        "tiers": {tier: {"hits": row[tier], "hit_rate": _ratio(row[tier], lookups)} for tier in CACHE_TIERS},
    }


def _group_key(bucket) -> Any:
    # Entries refused before routing have no model or provider: their group is null, not "".
    return None if bucket == "" else bucket


def _ordered_groups(groups: list[dict[str, Any]], group_by: str) -> list[dict[str, Any]]:
    """Time buckets in time order; other groups biggest first (most requests, then spend)."""
    if group_by in ("hour", "day"):
        return groups
    return sorted(
        groups, key=lambda group: (-group["requests"], -group.get("spend_usd", 0), str(group["key"]))
    )


def spend_since(
    organization_id, scope: str, scope_id: str, start: datetime, end: datetime | None = None
) -> Decimal:
    """What the organization, one of its teams or one of its API keys (``scope``: organization,
    team, api_key) spent from ``start`` (to ``end``, default now): the hourly rollups for the whole
    hours, the log itself for the part-hours at either end."""
    end = end or timezone.now()
    first_whole = hour_of(start) if hour_of(start) == start else hour_of(start) + timedelta(hours=1)
    last_whole = hour_of(end)
    rollups = SpendRollup.objects.filter(organization_id=organization_id)
    entries = AuditEntry.objects.filter(organization_id=organization_id)
    if scope == "team":
        rollups, entries = rollups.filter(team_id=str(scope_id)), entries.filter(team_id=scope_id)
    elif scope == "api_key":
        rollups, entries = rollups.filter(api_key_id=str(scope_id)), entries.filter(api_key_id=scope_id)
    if first_whole >= last_whole:  # no whole hour in the range
        return entries.filter(created_at__gte=start, created_at__lt=end).aggregate(s=Sum("cost_usd"))[
            "s"
        ] or Decimal(0)
    whole = rollups.filter(hour__gte=first_whole, hour__lt=last_whole).aggregate(s=Sum("cost_usd"))["s"]
    edges = entries.filter(
        Q(created_at__gte=start, created_at__lt=first_whole)
        | Q(created_at__gte=last_whole, created_at__lt=end)
    ).aggregate(s=Sum("cost_usd"))["s"]
    return (whole or Decimal(0)) + (edges or Decimal(0))
