"""Compliance and policy exports of the audit log, as CSV or JSON Lines, streamed in constant memory.

Each export is an async generator of byte chunks: a header block (organization, range, filters,
generation time), then the rows read with ``aiterator()`` and sent a few hundred at a time, then an
end marker with the row count, so a download that was cut short can be told from a complete one.
Nothing here holds more than one database chunk and one output chunk; bodies are never read.
"""

import csv
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from django.db import connections
from django.db.models import QuerySet

from apps.organizations.models import Organization
from apps.teams.models import Team

from .models import AuditEntry
from .periods import TimeRange, format_instant

EXPORT_FORMATS = ("csv", "jsonl")
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}
# Rows per database round trip (a server-side cursor on PostgreSQL) and rows per chunk sent.
FETCH_ROWS = 2000
SEND_ROWS = 500


def _same(value: Any) -> Any:
    return value


def _text_or_none(value: Any) -> str | None:  # ids, Decimal money
    return None if value is None else str(value)


def _time(value: datetime) -> str:
    return format_instant(value, timespec="microseconds")  # fixed width: sorts as text too


def _count(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


# (column, AuditEntry field, conversion to a JSON value) in export order. ``team_name`` is looked up
# from ``team_id`` per export (a team may have been renamed or deleted since).
COMPLIANCE_COLUMNS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("time", "created_at", _time),
    ("request_id", "id", _text_or_none),
    ("team_id", "team_id", _text_or_none),
    ("team_name", "team_id", _same),
    ("api_key_id", "api_key_id", _text_or_none),
    ("api_key_prefix", "api_key_prefix", _same),
    ("endpoint", "endpoint", _same),
    ("requested_model", "requested_model", _same),
    ("provider", "provider", _same),
    ("provider_key_id", "provider_key_id", _text_or_none),
    ("model", "model", _same),
    ("stream", "stream", _same),
    ("status", "status", _same),
    ("error_type", "error_type", _same),
    ("error_code", "error_code", _same),
    ("policy_action", "policy_action", _same),
    ("policy_reason", "policy_reason", _same),
    ("policy_decisions", "policy_decisions", _same),
    ("cache", "cache", _same),
    ("input_tokens", "input_tokens", _same),
    ("output_tokens", "output_tokens", _same),
    ("cached_input_tokens", "cached_input_tokens", _same),
    ("reasoning_tokens", "reasoning_tokens", _same),
    ("usage_estimated", "usage_estimated", _same),
    ("cost_usd", "cost_usd", _text_or_none),
    ("latency_ms", "latency_ms", _same),
    ("ttft_ms", "ttft_ms", _same),
    ("attempts", "attempts", _count),
    ("client_ip", "client_ip", _same),
    ("user_agent", "user_agent", _same),
)
COMPLIANCE_COLUMN_NAMES = tuple(column for column, _, _ in COMPLIANCE_COLUMNS)
COMPLIANCE_FIELDS = tuple(dict.fromkeys(field for _, field, _ in COMPLIANCE_COLUMNS))
POLICY_COLUMNS = ("scope", "day", "policy", "action", "hits")

# A spreadsheet runs a cell that starts with one of these as a formula; several columns hold what
# a client sent (model, user agent), so CSV cells that start so are prefixed with "'" (OWASP's
# advice for CSV injection). JSON Lines keeps every value exactly.
_FORMULA_STARTS = frozenset("=+-@\t\r")


@dataclass(frozen=True)
class ExportQuery:
    organization: Organization
    range: TimeRange
    export_format: str
    generated_at: datetime
    team_id: uuid.UUID | None = None
    team_name: str | None = None  # None when the team no longer exists (its entries remain)
    policy: str | None = None

    def filename(self, kind: str) -> str:
        def stamp(value: datetime) -> str:
            return format_instant(value, timespec="seconds").replace("-", "").replace(":", "")

        span = f"{stamp(self.range.start)}-{stamp(self.range.end)}"
        return f"{kind}-export-{self.organization.slug}-{span}.{self.export_format}"


# --- Reading ------------------------------------------------------------------------------------


def entries_in_range(query: ExportQuery) -> QuerySet[AuditEntry]:
    """The organization's entries of the range (and team), oldest first. A policy filter is applied
    in the database where it can match inside JSON (PostgreSQL); ``_has_policy`` confirms it."""
    entries = AuditEntry.objects.filter(
        organization_id=query.organization.pk,
        created_at__gte=query.range.start,
        created_at__lt=query.range.end,
    )
    if query.team_id is not None:
        entries = entries.filter(team_id=query.team_id)
    if query.policy is not None:
        if connections[entries.db].features.supports_json_field_contains:
            entries = entries.filter(policy_decisions__contains=[{"policy": query.policy}])
        else:
            entries = entries.exclude(policy_decisions=[])
    return entries.order_by("created_at", "id")


def _decisions(decisions: Any, policy: str | None) -> Iterable[tuple[str, str]]:
    """(policy, action) of each well-formed decision, optionally only one policy's."""
    for decision in decisions if isinstance(decisions, list) else ():
        if isinstance(decision, dict) and decision.get("policy") is not None:
            name = str(decision["policy"])
            if policy is None or name == policy:
                yield name, str(decision.get("action") or "")


def _has_policy(decisions: Any, policy: str | None) -> bool:
    return policy is None or any(True for _ in _decisions(decisions, policy))


async def _team_names(organization: Organization) -> dict[uuid.UUID, str]:
    return {
        team_id: name
        async for team_id, name in Team.objects.filter(organization=organization).values_list("id", "name")
    }


# --- Encoding -----------------------------------------------------------------------------------


class _Line:
    """A file-like object that hands back what ``csv.writer`` writes, one row at a time."""

    def write(self, text: str) -> str:
        return text


_csv = csv.writer(_Line(), lineterminator="\r\n")


def _json_cell(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _text_cell(text: str) -> str:
    return "'" + text if text[:1] in _FORMULA_STARTS else text


# By exact type (a bool is not an int here); anything else is str() of it (numbers).
_CSV_CELLS: dict[type, Callable[[Any], str]] = {
    str: _text_cell,
    type(None): lambda _: "",
    bool: lambda value: "true" if value else "false",
    list: _json_cell,
    dict: _json_cell,
}


def _csv_row(values: Iterable[Any]) -> str:
    cells = _CSV_CELLS
    return _csv.writerow([cells.get(type(value), str)(value) for value in values])


def _comment(text: str) -> str:
    return "# " + " ".join(text.splitlines()) + "\r\n"


def _json_line(document: dict[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"


def _header(query: ExportQuery, kind: str, columns: tuple[str, ...]) -> str:
    organization = query.organization
    start, end = format_instant(query.range.start), format_instant(query.range.end)
    team = None
    if query.team_id is not None:
        team = {"id": str(query.team_id), "name": query.team_name}
    if query.export_format == "jsonl":
        return _json_line(
            {
                "type": "export_header",
                "export": kind,
                "organization": {"id": str(organization.pk), "name": organization.name},
                "range": {"from": start, "to": end, "period": query.range.period, "half_open": True},
                "filters": {"team": team, "policy": query.policy},
                "generated_at": format_instant(query.generated_at),
                "columns": list(columns),
            }
        )
    filters = []
    if team is not None:
        filters.append(
            f"team={team['id']}" + (f" ({team['name']})" if team["name"] else " (no such team now)")
        )
    if query.policy is not None:
        filters.append(f"policy={query.policy}")
    period = f" (period {query.range.period})" if query.range.period else ""
    lines = [
        f"LLM gateway {kind} export",
        f"organization: {organization.name} ({organization.pk})",
        f"range: from {start} (inclusive) to {end} (exclusive){period}",
        f"filters: {'; '.join(filters) if filters else 'none'}",
        f"generated_at: {format_instant(query.generated_at)}",
    ]
    return "".join(_comment(line) for line in lines) + _csv_row(columns)


def _row(query: ExportQuery, row_type: str, row: dict[str, Any]) -> str:
    if query.export_format == "jsonl":
        return _json_line({"type": row_type, **row})
    return _csv_row(row.values())


def _end(query: ExportQuery, rows: int) -> str:
    if query.export_format == "jsonl":
        return _json_line({"type": "export_end", "rows": rows})
    return _comment(f"end of export: {rows} rows")


def _encode(chunk: list[str]) -> bytes:
    return "".join(chunk).encode()


# --- The exports --------------------------------------------------------------------------------


def _compliance_row(
    entry: dict[str, Any], columns: tuple[tuple[str, str, Callable[[Any], Any]], ...]
) -> dict[str, Any]:
    return {column: convert(entry[field]) for column, field, convert in columns}


async def compliance_export(query: ExportQuery) -> AsyncIterator[bytes]:
    """One row per audit entry of the range, oldest first: who called what, how it was routed,
    what policies decided, what it cost. No request or response bodies."""
    yield _header(query, "compliance", COMPLIANCE_COLUMN_NAMES).encode()
    team_names = await _team_names(query.organization)
    columns = tuple(
        (column, field, (lambda team_id: team_names.get(team_id)) if column == "team_name" else convert)
        for column, field, convert in COMPLIANCE_COLUMNS
    )
    # .values(), not .values_list(): Django 5.2's tuple iterable runs its query as soon as the
    # iterator is made, which aiterator() does on the event loop (SynchronousOnlyOperation).
    entries = entries_in_range(query).values(*COMPLIANCE_FIELDS)
    rows, chunk = 0, []
    async for entry in entries.aiterator(chunk_size=FETCH_ROWS):
        if not _has_policy(entry["policy_decisions"], query.policy):
            continue
        chunk.append(_row(query, "audit_entry", _compliance_row(entry, columns)))
        rows += 1
        if len(chunk) >= SEND_ROWS:
            yield _encode(chunk)
            chunk = []
    chunk.append(_end(query, rows))
    yield _encode(chunk)


async def policy_export(query: ExportQuery) -> AsyncIterator[bytes]:
    """Hits per policy and action over the range (``scope`` ``range``), then per UTC day (``day``).
    A hit is a request on which the policy took the action; days without hits are left out."""
    yield _header(query, "policy", POLICY_COLUMNS).encode()
    per_day: Counter[tuple[date, str, str]] = Counter()
    entries = entries_in_range(query).exclude(policy_decisions=[]).values("created_at", "policy_decisions")
    async for entry in entries.aiterator(chunk_size=FETCH_ROWS):
        day = entry["created_at"].astimezone(UTC).date()
        for policy, action in set(_decisions(entry["policy_decisions"], query.policy)):
            per_day[(day, policy, action)] += 1
    totals: Counter[tuple[str, str]] = Counter()
    for (_, policy, action), hits in per_day.items():
        totals[(policy, action)] += hits

    rows, chunk = 0, []
    for (policy, action), hits in sorted(totals.items()):
        row = {"scope": "range", "day": None, "policy": policy, "action": action, "hits": hits}
        chunk.append(_row(query, "policy_hits", row))
        rows += 1
    for (day, policy, action), hits in sorted(per_day.items()):
        row = {"scope": "day", "day": day.isoformat(), "policy": policy, "action": action, "hits": hits}
        chunk.append(_row(query, "policy_hits", row))
        rows += 1
        if len(chunk) >= SEND_ROWS:
            yield _encode(chunk)
            chunk = []
    chunk.append(_end(query, rows))
    yield _encode(chunk)
