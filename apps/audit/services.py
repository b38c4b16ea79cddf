"""Writing the audit log: every proxied request's record becomes one entry, off the request.

The proxy hands each finished request's record over with ``records.emit``; the listener here puts it
in the outbox (apps/outbox), which appends it to this node's spool as a plain payload
(``records.record_payload``) before the answer reaches the client. The ingest hands batches of those
payloads to ``audit_entries_write``: each becomes a row (``entry_payload``, bodies redacted there)
inserted idempotently by request id.
"""

import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections, models, transaction

from apps.observability.request_metrics import request_metrics
from apps.outbox.ingest import database_answers
from apps.outbox.outbox import outbox, register

from .entry_values import entry_values
from .models import AuditEntry
from .records import RequestRecord, on_record, record_from_payload, record_payload
from .redaction import kept_body, mask_secrets
from .rollups import deltas_of, rollups_add, secondary_update
from .tail import publisher as tail_publisher

KIND = "audit"

logger = logging.getLogger(__name__)

# Called with the ids of the entries an ingest batch added, once they are committed: how an app
# above this one attaches what waited for a request's entry (feedback sent before it was written,
# apps/experiments). A listener must be quick (one query for the batch) and never raise into the
# ingest: the entries are written either way, and a listener catches up on its own (a sweep).
_written_listeners: list[Callable[[list[str]], None]] = []


def on_entries_written(listener: Callable[[list[str]], None]) -> Callable[[list[str]], None]:
    if listener not in _written_listeners:
        _written_listeners.append(listener)
    return listener


def connect() -> None:
    """Called once at start-up (AuditConfig.ready), in every process. ``GATEWAY_AUDIT_ENABLED=false``
    leaves the proxy without an audit log: only for measuring what the audit path costs (make bench)."""
    register(KIND, audit_entries_write, payload=record_payload)
    # The request metrics (apps/observability), counted off the request like the tail's summaries.
    on_record(request_metrics.hand_off)
    if settings.GATEWAY_AUDIT_ENABLED:
        on_record(_spool)
        # The console's live tail: a summary queued on the request, published off it (tail.py).
        on_record(tail_publisher.hand_off)


def _spool(record: RequestRecord) -> None:
    # Requests refused before their key was known belong to no organization: they are in the server
    # log only.
    if record.organization_id is not None:
        outbox().put(KIND, record)


def entry_payload(record: RequestRecord) -> dict[str, Any]:
    """A request record as a row, bodies redacted as the organization chose; runs in the ingest,
    never on the request."""
    usage = record.usage
    limit = settings.GATEWAY_AUDIT_MAX_BODY_BYTES
    return {
        "id": record.request_id,
        "organization_id": record.organization_id,
        "created_at": record.started_at.isoformat(),
        "endpoint": record.endpoint,
        "team_id": record.team_id,
        "api_key_id": record.api_key_id,
        "api_key_prefix": record.api_key_prefix or "",
        "requested_model": (record.requested_model or "")[:200],
        "provider": record.provider or "",
        "provider_key_id": record.provider_key_id,
        "model": (record.model or "")[:200],
        "stream": record.stream,
        "stream_completed": record.stream_completed,
        "client_disconnected": record.client_disconnected,
        "status": record.status,
        "error_type": record.error_type or "",
        "error_code": record.error_code or "",
        "attempts": [
            {
                "provider": a.provider,
                "provider_key_id": a.provider_key_id,
                "model": a.model,
                "alias": a.alias,
                "status": a.status,
                "outcome": a.outcome,
                "latency_ms": a.latency_ms,
                "trial": a.trial,
                "backoff_ms": a.backoff_ms,
                # An upstream's error may quote a credential (its own key, or one a client sent).
                "error": mask_secrets(a.error) if a.error else a.error,
            }
            for a in record.attempts
        ],
        "cache": record.cache,
        "prompt_template_id": record.prompt_template_id,
        "prompt_template": record.prompt_template or "",
        "prompt_version": record.prompt_version,
        "prompt_label": record.prompt_label or "",
        "experiment_id": record.experiment_id,
        "experiment_variant": record.experiment_variant or "",
        "policy_action": record.policy_action or "",
        "policy_reason": record.policy_reason or "",
        "policy_decisions": list(record.policy_decisions),
        "input_tokens": usage.input_tokens if usage else 0,
        "output_tokens": usage.output_tokens if usage else 0,
        "cached_input_tokens": usage.cached_input_tokens if usage else 0,
        "reasoning_tokens": usage.reasoning_tokens if usage else 0,
        "cache_write_tokens": usage.cache_write_tokens if usage else 0,
        "usage_estimated": usage.estimated if usage else False,
        "cost_usd": str(record.cost_usd),
        "price_source": record.price_source or "",
        "cache_savings_usd": str(record.cache_savings_usd),
        "latency_ms": record.latency_ms,
        "ttft_ms": record.ttft_ms,
        "upstream_ms": round(record.upstream_ms, 2),
        "client_ip": record.client_ip or None,
        "user_agent": record.user_agent,
        "body_mode": record.log_bodies,
        "request_body": kept_body(
            record.request_body, record.log_bodies, limit, truncated=record.request_body_truncated
        ),
        "response_body": kept_body(
            record.response_body, record.log_bodies, limit, truncated=record.response_body_truncated
        ),
    }


def audit_entries_write(payloads: list[dict[str, Any]]) -> None:
    """Inserts entries; one that exists already (a replayed batch) is left as it is and is not
    counted again in the aggregates. The aggregates (secondary path) are updated after the entries
    are safely written, and their failure never fails the write.

    ``payloads`` are spooled records (``record_payload``, of this release or an older one). Every
    value is put in its column's terms (entry_values.py): whatever a client sent, the database takes
    the row, so no request falls out of the log or the spend totals."""
    payloads = [entry_values(entry_payload(record_from_payload(payload))) for payload in payloads]
    ids = [payload["id"] for payload in payloads]
    existing = {str(pk) for pk in AuditEntry.objects.filter(id__in=ids).values_list("id", flat=True)}
    new = [payload for payload in payloads if payload["id"] not in existing]
    if not new:
        return
    try:
        # The entries and their rollups commit together: a database lost between the two would
        # leave entries the totals never count. Lost before the commit, the whole batch stays on
        # the spool and is written again.
        with transaction.atomic():
            _insert(new)
            rollups_add(deltas_of(new))
    except DatabaseError:
        if not database_answers():
            raise
        # The database answers, so the batch itself failed: the entries alone (the ingest isolates
        # a row the database refuses), then the rollups, whose failure is logged for reconcile.
        _insert(new)
        secondary_update(new)
    _entries_written([payload["id"] for payload in new])


def _entries_written(ids: list[str]) -> None:
    for listener in _written_listeners:
        try:
            listener(ids)
        except Exception:
            logger.exception("Audit: a listener of written entries failed; it catches up later")


# Fields whose values the writer already holds in the database's own terms (str, int, float, bool
# or None): the ORM's conversion would return them unchanged.
_PLAIN_FIELDS = (
    models.CharField,
    models.TextField,
    models.IntegerField,
    models.FloatField,
    models.BooleanField,
)


def _insert(payloads: list[dict[str, Any]]) -> None:
    """One ``executemany`` of a prepared INSERT: what ``bulk_create`` does, without building a model
    instance and compiling SQL per row, which cost more CPU than the requests themselves (make
    bench). Values other than plain ones go through their field's own ``get_db_prep_save``, so every
    database stores them as the ORM would."""
    if not payloads:
        return
    database = connections["default"]  # the real connection: the proxy object costs a lookup per use
    fields = AuditEntry._meta.concrete_fields
    table = database.ops.quote_name(str(AuditEntry._meta.db_table))
    columns = ", ".join(database.ops.quote_name(str(field.column)) for field in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    # Names come from the model, values are bound parameters.
    sql = f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) ON CONFLICT DO NOTHING"  # noqa: S608
    converters = [
        (field.attname, None if isinstance(field, _PLAIN_FIELDS) else field.get_db_prep_save)
        for field in fields
    ]
    rows = []
    for number, values in enumerate(payloads):  # entry_values: created_at and cost_usd as objects
        rows.append(
            [
                values[name] if convert is None else convert(values[name], database)
                for name, convert in converters
            ]
        )
        if number % 20 == 19:
            time.sleep(0)  # an ingest thread in a worker lets the worker's own threads in
    with transaction.atomic(), database.cursor() as cursor:
        cursor.executemany(sql, rows)
