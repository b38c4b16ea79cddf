"""Writing events: the outbox's ingest hands over batches of the payloads ``raise_event`` spooled.

The handler is idempotent (a batch may be written twice after a crash or a replay: the event id is
the primary key and a second insert is ignored), skips events of organizations deleted meanwhile,
and puts every value in its column's terms, so that no payload can make the insert fail and fall
out to the dead-letter file.

The new events are handed, in the same transaction, to the apps that listen for them (``on_written``:
the webhooks app starts its deliveries there, pending rows whose tasks are enqueued on commit), so an
event is never written without them, and an event written twice is handed over once. The events app
imports none of its listeners: they register themselves at start-up.
"""

import json
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from apps.core.storable import json_value, text, uuid_text
from apps.organizations.models import Organization
from apps.outbox.outbox import register

from .models import Event
from .publish import KIND

logger = logging.getLogger(__name__)

_TYPE_LENGTH = Event._meta.get_field("type").max_length
# An event's data is a few fields; this bounds what one buggy producer can make a row hold.
DATA_LIMIT_BYTES = 64 * 1024


_listeners: list[Callable[[Iterable[Event]], None]] = []


def on_written(listener: Callable[[Iterable[Event]], None]) -> None:
    """``listener(new_events)`` runs inside the transaction that writes them (at start-up, once)."""
    if listener not in _listeners:
        _listeners.append(listener)


def connect() -> None:
    """Called once at start-up (EventsConfig.ready), in every process."""
    register(KIND, events_write)


@transaction.atomic
def events_write(payloads: list[dict[str, Any]]) -> None:
    events = [event for event in map(_event, payloads) if event is not None]
    if not events:
        return
    existing = {
        str(pk)
        for pk in Organization.objects.filter(id__in={event.organization_id for event in events}).values_list(
            "id", flat=True
        )
    }
    # An organization deleted after its event was raised takes its events with it (CASCADE): the
    # row would be deleted at once, and the foreign key would refuse the whole batch.
    kept = [event for event in events if event.organization_id in existing]
    if len(kept) < len(events):
        logger.info("Events: %d event(s) of deleted organizations skipped", len(events) - len(kept))
    already = {
        str(pk)
        for pk in Event.objects.filter(id__in=[event.id for event in kept]).values_list("id", flat=True)
    }
    Event.objects.bulk_create(kept, ignore_conflicts=True)
    new = {str(event.id): event for event in kept if str(event.id) not in already}  # a batch may repeat one
    for listener in _listeners:
        listener(new.values())


def _event(payload: Any) -> Event | None:
    """The row of a spooled payload, or None (logged) for one that cannot be an event."""
    if not isinstance(payload, dict) or payload.get("v") != 1:
        # A payload of a later release (or none at all): refused, so it is dead-lettered and kept.
        raise ValueError(f"not an event payload of version 1 ({type(payload).__name__})")
    event_id = uuid_text(payload.get("id"))
    organization_id = uuid_text(payload.get("organization_id"))
    if event_id is None or organization_id is None:
        logger.error("Events: a payload without a valid id or organization id skipped")
        return None
    return Event(
        id=event_id,
        organization_id=organization_id,
        type=text(payload.get("type"), _TYPE_LENGTH),
        created_at=_moment(payload.get("created_at")),
        data=_data(payload.get("data")),
    )


def _moment(value: Any) -> datetime:
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return datetime.now(UTC)  # never happens with raise_event's payloads; the row is kept anyway
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _data(value: Any) -> dict[str, Any]:
    # json_value: no NUL (PostgreSQL refuses it in jsonb), no lone surrogate, strings and nesting
    # bounded, only finite numbers.
    data = json_value(value if isinstance(value, dict) else {"value": value})
    if len(json.dumps(data)) > DATA_LIMIT_BYTES:
        return {"truncated": True}
    return data
