"""Raising an event: the one call every part of the gateway makes when something happens that an
organization's webhooks may want to hear about.

``raise_event`` only puts the event on the outbox (apps/outbox): one line appended to this node's
spool, no database write and no broker call, so it may be called on a request's event loop. The
ingest writes the ``Event`` row later (``services.events_write``); webhook deliveries start from
there. The name keeps it apart from the request record's hand-off (``apps.audit.records.emit``).
"""

import json
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction

from apps.outbox.outbox import outbox

from .models import EventType

logger = logging.getLogger(__name__)

KIND = "event"
PAYLOAD_VERSION = 1
_TYPES = frozenset(EventType.values)


def raise_event(organization_id: Any, event_type: str, data: dict[str, Any] | None = None) -> str:
    """Puts the event on the outbox and returns its id. ``data`` is the event's own fields (plain
    JSON; Decimal, UUID and datetime values become their text, as the management API writes them).
    Raises ``ValueError`` for an unknown type, and ``OSError`` when the spool cannot be written (the
    caller chooses whether losing the event may fail what it is doing)."""
    if event_type not in _TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError("an event's data is a JSON object")
    event_id = str(uuid.uuid4())
    payload = {
        "v": PAYLOAD_VERSION,
        "id": event_id,
        "type": str(event_type),
        "organization_id": str(organization_id),
        "created_at": rfc3339(datetime.now(UTC)),
        # Through JSON once: the spool takes plain values only, and what is stored is exactly what a
        # receiver will be sent.
        "data": json.loads(json.dumps(data, cls=DjangoJSONEncoder)),
    }
    outbox().put(KIND, payload)
    return event_id


def raise_event_on_commit(organization_id: Any, event_type: str, data: dict[str, Any] | None = None) -> None:
    """For services: the event is raised once the surrounding transaction commits (at once outside
    one), so a change rolled back announces nothing. A spool that cannot be written then is logged:
    the change itself has been made and stays."""

    def publish() -> None:
        try:
            raise_event(organization_id, event_type, data)
        except OSError:
            logger.exception("Could not raise the %s event", event_type)

    transaction.on_commit(publish)


def rfc3339(moment: datetime) -> str:
    """UTC with a ``Z``; microseconds kept, so events of one request keep their order."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
