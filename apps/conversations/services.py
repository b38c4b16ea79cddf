"""Stored Responses: what the proxy keeps of each turn it was asked to store (``store``, the
Responses API's default), so that ``previous_response_id`` continues it and ``GET`` or ``DELETE
/v1/responses/{id}`` reads or removes it, for the organization's retention period (docs/proxy.md,
"Conversation state").

The proxy hands a turn over after its answer (``remember``): into the hot tier at once (hot.py) and
onto the outbox's spool, whose ingest writes it to the database (``stored_responses_write``). A
read asks the hot tier, then the database. Nothing here writes the database on a request but
``forget``, which a client's DELETE asks for.
"""

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import redis
from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from apps.core.errors import ServiceUnavailable
from apps.organizations.models import Organization
from apps.outbox.outbox import outbox

from .hot import hot_turns
from .models import StoredResponse
from .turns import StoredTurn, seal, unseal

logger = logging.getLogger(__name__)

KIND = "stored_response"


async def remember(turn: StoredTurn) -> None:
    """Keeps ``turn``: in the hot tier now, in the database once the outbox's ingest has run."""
    payload = seal(turn)
    await hot_turns().put(payload)
    outbox().put(KIND, payload)


async def recall(organization_id: str, response_ids: list[str]) -> dict[str, StoredTurn]:
    """The organization's stored turns of those ids, by id (ids it has not, or no longer, stored
    are left out; another organization's read as unknown)."""
    if not response_ids:
        return {}
    found = await hot_turns().get_many(organization_id, response_ids)
    missing = [response_id for response_id in response_ids if response_id not in found]
    if missing:
        found.update(await _stored(organization_id, missing))
    turns = {}
    for response_id, payload in found.items():
        try:
            turns[response_id] = unseal(payload)
        except ValueError:
            logger.warning(
                "Stored response %s of organization %s is unreadable", response_id, organization_id
            )
    return turns


@database_sync_to_async
def _stored(organization_id: str, response_ids: list[str]) -> dict[str, dict[str, Any]]:
    rows = StoredResponse.objects.filter(organization_id=organization_id, response_id__in=response_ids)
    return {row.response_id: _payload_of(row) for row in rows}


def _payload_of(row: StoredResponse) -> dict[str, Any]:
    return {
        "response_id": row.response_id,
        "organization_id": str(row.organization_id),
        "native": row.native,
        "model": row.model,
        "created_at": row.created_at.isoformat(),
        "provider_key_id": str(row.provider_key_id) if row.provider_key_id else None,
        "api_key_id": str(row.api_key_id) if row.api_key_id else None,
        "content": row.content_encrypted,
    }


async def forget(organization_id: str, response_id: str) -> bool:
    """Deletes the organization's stored turn; False when it holds none of that id."""
    try:
        await hot_turns().delete(organization_id, response_id)
    except (redis.RedisError, OSError, TimeoutError) as error:
        raise ServiceUnavailable(
            "The response could not be deleted now (the shared store did not answer); retry shortly."
        ) from error
    return await _delete(organization_id, response_id)


@database_sync_to_async
def _delete(organization_id: str, response_id: str) -> bool:
    deleted, _ = StoredResponse.objects.filter(
        organization_id=organization_id, response_id=response_id
    ).delete()
    return deleted > 0


# --- The outbox's ingest ---------------------------------------------------------------------------


def stored_responses_write(payloads: Iterable[dict[str, Any]]) -> None:
    """Writes a batch of sealed turns; a turn already written (a batch written twice after a crash)
    or of an organization deleted since is passed over."""
    payloads = list(payloads)
    organizations = {payload["organization_id"] for payload in payloads}
    existing = {
        str(pk) for pk in Organization.objects.filter(id__in=organizations).values_list("id", flat=True)
    }
    rows = [
        StoredResponse(
            organization_id=payload["organization_id"],
            response_id=payload["response_id"],
            native=payload["native"],
            model=payload["model"][:200],
            created_at=datetime.fromisoformat(payload["created_at"]),
            provider_key_id=payload.get("provider_key_id"),
            api_key_id=payload.get("api_key_id"),
            content_encrypted=payload.get("content") or "",
        )
        for payload in payloads
        if payload["organization_id"] in existing
    ]
    StoredResponse.objects.bulk_create(rows, ignore_conflicts=True)


# --- Retention -------------------------------------------------------------------------------------


def stored_responses_retention_apply(*, now: datetime | None = None) -> dict[str, int]:
    """Deletes the turns older than each organization's ``log_retention_days`` (the audit log's
    retention: a stored turn is kept no longer than the log of the request that made it); returns
    ``{organization id: turns deleted}`` for those that had any."""
    now = now or timezone.now()
    deleted: dict[str, int] = {}
    batch = settings.GATEWAY_AUDIT_RETENTION_BATCH_SIZE
    for organization_id, days in Organization.objects.values_list("id", "log_retention_days"):
        if days < 1:
            continue
        expired = StoredResponse.objects.filter(
            organization_id=organization_id, created_at__lt=now - timedelta(days=days)
        )
        count = 0
        while ids := list(expired.order_by().values_list("id", flat=True)[:batch]):
            count += StoredResponse.objects.filter(id__in=ids).delete()[0]
        if count:
            deleted[str(organization_id)] = count
    return deleted
