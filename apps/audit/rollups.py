"""The secondary path: spend and volume aggregates, kept up to date after each audit batch.

``SpendRollup`` rows per organization, hour, team, key, provider and model (the database). They may
lag or fail without failing a request; reconcile brings them back to the log. Budgets are not
charged here: the proxy charges its budget counters itself (``apps/limits/counters.py``), and they
read the spend before that from these rollups and the log once per window, so nothing is counted
twice (docs/budgets.md).
"""

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import F

from .models import SpendRollup

logger = logging.getLogger(__name__)


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


def secondary_update(entries: list[dict]) -> None:
    """The rollups of newly written entries; a failure is logged, never raised."""
    if not entries:
        return
    try:
        rollups_add(deltas_of(entries))
    except Exception:
        logger.warning(
            "Spend rollups could not be updated (%d entries); reconcile will", len(entries), exc_info=True
        )
