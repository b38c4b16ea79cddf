"""The secondary path: spend and volume aggregates, kept up to date after each audit batch.

Two stores, both may lag or fail without failing a request (reconcile brings them back to the log):
- ``SpendRollup`` rows per organization, hour, team, key, provider and model (the database);
- spend counters per organization, team and key per UTC day, in Redis, as integer nano-dollars
  (decisions.md), for budgets that must be checked without a database read.
"""

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

import redis
from django.db import IntegrityError, transaction
from django.db.models import F

from apps.core.redis import redis_key, sync_client

from .models import SpendRollup

logger = logging.getLogger(__name__)

NANO = Decimal("1e9")
COUNTER_SECONDS = 40 * 24 * 3600  # a month's budget plus a margin


@dataclass(slots=True)
class Totals:
    requests: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal = field(default_factory=Decimal)

    def add(self, other: "Totals") -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_usd += other.cost_usd


# (organization id, hour, team id, key id, provider, model)
RollupKey = tuple[str, datetime, str, str, str, str]


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def deltas_of(entries: Iterable[dict]) -> dict[RollupKey, Totals]:
    """Audit payloads (apps/audit/services.py) summed per rollup row."""
    deltas: dict[RollupKey, Totals] = {}
    for entry in entries:
        created_at = entry["created_at"]
        if isinstance(created_at, str):
            created_at = datetime.fromisoformat(created_at)
        key = (
            str(entry["organization_id"]),
            hour_of(created_at),
            str(entry["team_id"] or ""),
            str(entry["api_key_id"] or ""),
            entry["provider"] or "",
            entry["model"] or "",
        )
        totals = deltas.setdefault(key, Totals())
        totals.add(
            Totals(
                requests=1,
                errors=1 if entry["status"] >= 400 else 0,
                input_tokens=entry["input_tokens"],
                output_tokens=entry["output_tokens"],
                cost_usd=Decimal(str(entry["cost_usd"])),
            )
        )
    return deltas


def rollups_add(deltas: dict[RollupKey, Totals]) -> None:
    """Adds to the rows, creating the missing ones; safe beside other workers doing the same."""
    for key, totals in deltas.items():
        organization_id, hour, team_id, api_key_id, provider, model = key
        row = {
            "organization_id": organization_id,
            "hour": hour,
            "team_id": team_id,
            "api_key_id": api_key_id,
            "provider": provider,
            "model": model,
        }
        increments = {
            "requests": F("requests") + totals.requests,
            "errors": F("errors") + totals.errors,
            "input_tokens": F("input_tokens") + totals.input_tokens,
            "output_tokens": F("output_tokens") + totals.output_tokens,
            "cost_usd": F("cost_usd") + totals.cost_usd,
        }
        with transaction.atomic():
            if SpendRollup.objects.filter(**row).update(**increments):
                continue
            try:
                with transaction.atomic():
                    SpendRollup.objects.create(
                        **row,
                        requests=totals.requests,
                        errors=totals.errors,
                        input_tokens=totals.input_tokens,
                        output_tokens=totals.output_tokens,
                        cost_usd=totals.cost_usd,
                    )
            except IntegrityError:  # another worker created it between the update and the insert
                SpendRollup.objects.filter(**row).update(**increments)


# --- Redis spend counters --------------------------------------------------------------------------


def counter_key(organization_id: str, scope: str, scope_id: str, day: str) -> str:
    """``scope`` is "organization", "team" or "key"; ``day`` is YYYY-MM-DD (UTC)."""
    return redis_key("spend", str(organization_id), scope, str(scope_id), day)


def _counter_increments(deltas: dict[RollupKey, Totals]) -> dict[str, int]:
    increments: dict[str, int] = {}
    for (organization_id, hour, team_id, api_key_id, _, _), totals in deltas.items():
        nanos = int(totals.cost_usd * NANO)
        if not nanos:
            continue
        day = hour.strftime("%Y-%m-%d")
        scopes = [("organization", organization_id)]
        if team_id:
            scopes.append(("team", team_id))
        if api_key_id:
            scopes.append(("key", api_key_id))
        for scope, scope_id in scopes:
            key = counter_key(organization_id, scope, scope_id, day)
            increments[key] = increments.get(key, 0) + nanos
    return increments


def counters_add(deltas: dict[RollupKey, Totals]) -> None:
    client = sync_client()
    if client is None:
        return
    increments = _counter_increments(deltas)
    if not increments:
        return
    pipe = client.pipeline(transaction=False)
    for key, nanos in increments.items():
        pipe.incrby(key, nanos)
        pipe.expire(key, COUNTER_SECONDS)
    pipe.execute()


def counters_set(deltas: dict[RollupKey, Totals], days: Iterable[str], organization_id: str) -> None:
    """Replaces the organization's counters of ``days`` with what ``deltas`` (whole days) add up to."""
    client = sync_client()
    if client is None:
        return
    days = set(days)
    values = _counter_increments(deltas)
    pipe = client.pipeline(transaction=True)
    for day in days:
        for key in client.scan_iter(
            match=redis_key("spend", str(organization_id), "*", "*", day), count=1000
        ):
            pipe.delete(key)
    for key, nanos in values.items():
        pipe.set(key, nanos, ex=COUNTER_SECONDS)
    pipe.execute()


def secondary_update(entries: list[dict]) -> None:
    """Both aggregates for newly written entries; each failure is logged, never raised."""
    if not entries:
        return
    deltas = deltas_of(entries)
    try:
        rollups_add(deltas)
    except Exception:
        logger.warning(
            "Spend rollups could not be updated (%d entries); reconcile will", len(entries), exc_info=True
        )
    try:
        counters_add(deltas)
    except (redis.RedisError, OSError) as error:
        logger.warning("Spend counters in Redis could not be updated: %s; reconcile will", error)
