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
ID_LENGTH = 200  # StoredResponse.response_id


async def remember(turn: StoredTurn) -> None:
    """Keeps ``turn``: in the hot tier now, in the database once the outbox's ingest has run."""
    payload = seal(turn)
    await hot_turns().put(payload)
    outbox().put(KIND, payload)


def _readable(response_id: Any) -> bool:
    """An id a store can be asked about: one no store could hold (too long for the column, a NUL
    PostgreSQL refuses) is simply unknown."""
    return isinstance(response_id, str) and 0 < len(response_id) <= ID_LENGTH and "\x00" not in response_id


async def recall(
    organization_id: str, response_ids: list[str], *, team_id: str | None
) -> dict[str, StoredTurn]:
    """The organization's stored turns of those ids made for ``team_id`` (None: for no team), by id.
    Ids it has not (or no longer) stored, another organization's and another team's are left out:
    each reads as unknown."""
    response_ids = [response_id for response_id in response_ids if _readable(response_id)]
    if not response_ids:
        return {}
    found = await hot_turns().get_many(organization_id, response_ids)
    missing = [response_id for response_id in response_ids if response_id not in found]
    if missing:
        found.update(await _stored(organization_id, missing))
    turns = {}
    for response_id, payload in found.items():
        try:
            turn = unseal(payload)
        except ValueError:
            logger.warning(
                "Stored response %s of organization %s is unreadable", response_id, organization_id
            )
            continue
        if turn.team_id == team_id:
            turns[response_id] = turn
    return turns


@database_sync_to_async
def _stored(organization_id: str, response_ids: list[str]) -> dict[str, dict[str, Any]]:
    rows = StoredResponse.objects.filter(
        organization_id=organization_id, response_id__in=response_ids, deleted=False
    )
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
        "team_id": str(row.team_id) if row.team_id else None,
        "content": row.content_encrypted,
    }


async def forget(turn: StoredTurn) -> None:
    """Deletes a stored turn (``recall``'s): its content goes at once, everywhere; a mark of it stays
    in the database until retention, so that the ingest, which may write the turn after this (it is
    about a second behind), cannot bring it back."""
    try:
        await hot_turns().delete(turn.organization_id, turn.response_id)
    except (redis.RedisError, OSError, TimeoutError) as error:
        raise ServiceUnavailable(
            "The response could not be deleted now (the shared store did not answer); retry shortly."
        ) from error
    await _mark_deleted(turn)


@database_sync_to_async
def _mark_deleted(turn: StoredTurn) -> None:
    StoredResponse.objects.update_or_create(
        organization_id=turn.organization_id,
        response_id=turn.response_id,
        defaults={"deleted": True, "content_encrypted": ""},
        create_defaults={
            "deleted": True,
            "content_encrypted": "",
            "native": turn.native,
            "model": turn.model[:200],
            "created_at": turn.created_at,
            "provider_key_id": turn.provider_key_id,
            "api_key_id": turn.api_key_id,
            "team_id": turn.team_id,
        },
    )


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
            team_id=payload.get("team_id"),
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
