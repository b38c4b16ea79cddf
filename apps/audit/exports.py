"""Compliance and policy exports of the audit log, as CSV or JSON Lines, streamed in constant memory.

Each export is an async generator of byte chunks: a header block (organization, range, filters,
generation time), then the rows read a database chunk at a time and sent a few hundred at a time,
then an end marker with the row count, so a download that was cut short can be told from a complete
one. Nothing here holds more than one database chunk and one output chunk; bodies are never read.

The response's headers are gone before the first row is read, so an error cannot become an error
status any more: it is logged here, and the export ends with an error marker instead of the end
marker (and is never left hanging). However an export ends, its database cursor is closed and its
connection given back (to psycopg's pool on PostgreSQL) before the generator returns.
"""

import contextlib
import csv
import itertools
import json
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections
from django.db.models import QuerySet

from apps.organizations.models import Organization
from apps.teams.models import Team

from . import selectors
from .models import AuditEntry
from .time_ranges import TimeRange, format_instant

EXPORT_FORMATS = ("csv", "jsonl")
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}
# Rows per database round trip (a server-side cursor on PostgreSQL) and rows per chunk sent.
FETCH_ROWS = 2000
SEND_ROWS = 500

logger = logging.getLogger(__name__)


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
POLICY_MAX_LENGTH = 200

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
    # The log list's other filters (the console exports what its log page shows): keyword arguments
    # of ``selectors.entries_matching``, and the parameters as given, named in the header.
    matching: dict[str, Any] = field(default_factory=dict)
    matching_parameters: dict[str, str] = field(default_factory=dict)

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
    if query.matching:
        entries = selectors.entries_matching(entries, **query.matching)
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


async def _rows(entries: QuerySet) -> AsyncIterator[dict[str, Any]]:
    """``entries`` a database chunk at a time (a server-side cursor on PostgreSQL), each chunk read
    on the request's database thread. However the export ends (done, failed, the client gone), the
    cursor is closed on that thread too: left to the garbage collector, it would be closed from any
    thread, on a connection by then lent to another request."""
    rows = entries.iterator(chunk_size=FETCH_ROWS)  # a generator: nothing runs until the first read
    try:
        while True:
            chunk = await sync_to_async(_next_chunk)(rows)
            for row in chunk:
                yield row
            if len(chunk) < FETCH_ROWS:
                break
    finally:
        await sync_to_async(_close_rows)(rows)


def _next_chunk(rows: Iterator[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(itertools.islice(rows, FETCH_ROWS))


def _close_rows(rows) -> None:
    with contextlib.suppress(DatabaseError):  # a broken connection: closing it is all that is left
        rows.close()


def _release_connection(alias: str) -> None:
    """Give the export's connection back now rather than only when Django finishes the request: a
    path that skips that (an error escaping the response) must not keep it from the pool. Inside
    a transaction (a test's) the connection is not the export's to close."""
    connection = connections[alias]
    if not connection.in_atomic_block:
        with contextlib.suppress(DatabaseError):
            connection.close()


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
                "filters": {"team": team, "policy": query.policy, **query.matching_parameters},
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
    filters += [f"{name}={value}" for name, value in query.matching_parameters.items()]
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


INCOMPLETE_MESSAGE = "A server error stopped the export; it is incomplete."


def _failed(query: ExportQuery, rows: int) -> str:
    """In place of the end marker when the export could not finish: ``rows`` were sent before."""
    if query.export_format == "jsonl":
        return _json_line({"type": "export_error", "rows": rows, "message": INCOMPLETE_MESSAGE})
    return _comment(f"export incomplete: a server error stopped it after {rows} rows")


def _encode(chunk: list[str]) -> bytes:
    return "".join(chunk).encode()


# --- The exports --------------------------------------------------------------------------------


async def _export(
    query: ExportQuery, kind: str, columns: tuple[str, ...], lines: AsyncIterator[str]
) -> AsyncIterator[bytes]:
    """The header, ``lines`` (one per row) a few hundred to a chunk, then the end marker, or the
    error marker when reading or encoding failed part-way."""
    rows, chunk = 0, []
    try:
        yield _header(query, kind, columns).encode()
        async with contextlib.aclosing(lines):
            async for line in lines:
                chunk.append(line)
                rows += 1
                if len(chunk) >= SEND_ROWS:
                    yield _encode(chunk)
                    chunk = []
        chunk.append(_end(query, rows))
    except Exception:
        # For the operator, with the traceback: an export reads no secret (no key, no body).
        logger.exception(
            "The %s export of organization %s failed after %d rows", kind, query.organization.pk, rows
        )
        chunk.append(_failed(query, rows))
    finally:
        await sync_to_async(_release_connection)(AuditEntry.objects.db)
    yield _encode(chunk)


def _compliance_row(
    entry: dict[str, Any], columns: tuple[tuple[str, str, Callable[[Any], Any]], ...]
) -> dict[str, Any]:
    return {column: convert(entry[field]) for column, field, convert in columns}


def compliance_export(query: ExportQuery) -> AsyncIterator[bytes]:
    """One row per audit entry of the range, oldest first: who called what, how it was routed,
    what policies decided, what it cost. No request or response bodies."""
    return _export(query, "compliance", COMPLIANCE_COLUMN_NAMES, _compliance_lines(query))


async def _compliance_lines(query: ExportQuery) -> AsyncIterator[str]:
    team_names = await _team_names(query.organization)
    columns = tuple(
        (column, field, (lambda team_id: team_names.get(team_id)) if column == "team_name" else convert)
        for column, field, convert in COMPLIANCE_COLUMNS
    )
    # .values(), not .values_list(): Django 5.2's tuple iterable runs its query as soon as the
    # iterator is made, which would be on the event loop (SynchronousOnlyOperation).
    entries = entries_in_range(query).values(*COMPLIANCE_FIELDS)
    async with contextlib.aclosing(_rows(entries)) as rows:
        async for entry in rows:
            if _has_policy(entry["policy_decisions"], query.policy):
                yield _row(query, "audit_entry", _compliance_row(entry, columns))


def policy_export(query: ExportQuery) -> AsyncIterator[bytes]:
    """Hits per policy and action over the range (``scope`` ``range``), then per UTC day (``day``).
    A hit is a request on which the policy took the action; days without hits are left out."""
    return _export(query, "policy", POLICY_COLUMNS, _policy_lines(query))


async def _policy_lines(query: ExportQuery) -> AsyncIterator[str]:
    per_day: Counter[tuple[date, str, str]] = Counter()
    entries = entries_in_range(query).exclude(policy_decisions=[]).values("created_at", "policy_decisions")
    async with contextlib.aclosing(_rows(entries)) as rows:
        async for entry in rows:
            day = entry["created_at"].astimezone(UTC).date()
            for policy, action in set(_decisions(entry["policy_decisions"], query.policy)):
                per_day[(day, policy, action)] += 1
    totals: Counter[tuple[str, str]] = Counter()
    for (_, policy, action), hits in per_day.items():
        totals[(policy, action)] += hits

    for (policy, action), hits in sorted(totals.items()):
        yield _row(
            query,
            "policy_hits",
            {"scope": "range", "day": None, "policy": policy, "action": action, "hits": hits},
        )
    for (day, policy, action), hits in sorted(per_day.items()):
        yield _row(
            query,
            "policy_hits",
            {"scope": "day", "day": day.isoformat(), "policy": policy, "action": action, "hits": hits},
        )
