"""Writes of webhooks and their deliveries (docs/webhooks.md).

Webhooks are not part of the proxy's configuration, so no write here bumps the configuration
generation. Every value is checked here (``webhook_check``: the input's types and shapes parsed by
inputs.py, then the URL's addresses), for the API, the admin and the console alike.

Deliveries. The events the outbox's ingest writes start their deliveries in the same transaction
(``deliveries_start``): one pending row per matching active webhook, whose task is enqueued once the
transaction commits. A row whose task never reached the broker stays pending and due, and the beat
job ``deliveries_due`` (every 5 minutes) enqueues it again; a task first claims its row (a pending
row whose time has come), so a task enqueued twice sends once. An attempt that fails schedules the
next one (``RETRY_DELAYS``) until ``MAX_ATTEMPTS``; ``deliveries_due`` makes that attempt's row when
its time comes.
"""

import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError

from apps.core import crypto
from apps.core.api.serializers import validated
from apps.core.brand import header
from apps.core.errors import Conflict, InvalidRequest
from apps.events.models import Event, EventType
from apps.events.publish import rfc3339
from apps.observability import metrics
from apps.organizations.models import Organization

from . import transport
from .addresses import WebhookAddressRefused, check_webhook_url
from .inputs import WebhookInputSerializer
from .models import ALL_EVENTS, DeliveryStatus, Webhook, WebhookDelivery
from .signing import generate_secret, signature_header

logger = logging.getLogger(__name__)

# How long the previous secret keeps signing after a roll.
SECRET_OVERLAP = timedelta(hours=24)
MAX_ATTEMPTS = 3
# After attempt n fails, attempt n + 1 is due RETRY_DELAYS[n - 1] later; the beat job that sends it
# runs every 5 minutes, so it goes out up to 5 minutes after that.
RETRY_DELAYS = (timedelta(minutes=5), timedelta(minutes=25))
# A task that claims a row has this long to finish it before deliveries_due would send it again
# (far beyond the transport's timeouts: only a worker that died mid-attempt leaves a claim behind).
CLAIM = timedelta(minutes=10)
# Rows deliveries_due handles per run; more wait for the next run.
DUE_BATCH = 1000


# --- Webhooks -------------------------------------------------------------------------------------


def check_url(url: str) -> str:
    """``url`` if a webhook may have it now (its host resolved and every address checked)."""
    try:
        return check_webhook_url(url)
    except WebhookAddressRefused as error:
        raise InvalidRequest(error.message, code=error.code, fields={"url": [error.message]}) from None


def webhook_check(*, data: Mapping, partial: bool = False) -> dict[str, Any]:
    """``data`` (the API's body, inputs.py ``WebhookInputSerializer``; ``partial``: a PATCH's, only
    the fields it names) as a webhook stores it: the URL's host resolved and every address checked,
    the events sorted and each once, ``["*"]`` when they name ``*``. The admin's form runs it before
    saving, so its page shows the refusal on its field."""
    values = dict(validated(WebhookInputSerializer, data, partial=partial))
    if "url" in values:
        values["url"] = check_url(values["url"])
    if "events" in values:
        events = values["events"]
        values["events"] = [ALL_EVENTS] if ALL_EVENTS in events else sorted(set(events))
    return values


def webhook_create(*, organization: Organization, data: Mapping) -> tuple[Webhook, str]:
    """The new webhook and its secret (``whsec_...``), which is never shown again. ``data``: the
    API's body (``webhook_check``); ``events`` defaults to every kind."""
    values = {"events": [ALL_EVENTS], "description": "", "is_active": True, **webhook_check(data=data)}
    webhook = Webhook(organization=organization, **values)
    secret = generate_secret()
    webhook.set_secret(secret)
    webhook.save()
    return webhook, secret


def webhook_update(*, webhook: Webhook, data: Mapping) -> Webhook:
    """Applies ``data`` (any of ``url``, ``events``, ``description``, ``is_active``, as the API's
    PATCH body has them); a new URL is checked as at creation. The secret changes only through
    ``webhook_roll_secret``."""
    cleaned = webhook_check(data=data, partial=True)
    for field, value in cleaned.items():
        setattr(webhook, field, value)
    webhook.save(update_fields=[*cleaned, "updated_at"])
    return webhook


def webhook_delete(*, webhook: Webhook) -> None:
    """Deletes the webhook and its delivery history; its pending attempts are never sent."""
    webhook.delete()


@transaction.atomic
def webhook_roll_secret(*, webhook: Webhook) -> tuple[Webhook, str]:
    """A new secret (returned, never shown again) signs from now on; the current one keeps signing
    beside it for ``SECRET_OVERLAP``. A roll during an overlap ends it: only the two latest sign."""
    locked = Webhook.objects.select_for_update().get(pk=webhook.pk)
    secret = generate_secret()
    locked.previous_secret_encrypted = locked.secret_encrypted
    locked.previous_secret_expires_at = timezone.now() + SECRET_OVERLAP
    locked.set_secret(secret)
    locked.save(
        update_fields=[
            "secret_encrypted",
            "previous_secret_encrypted",
            "previous_secret_expires_at",
            "updated_at",
        ]
    )
    return locked, secret


@transaction.atomic
def webhook_test(*, webhook: Webhook) -> WebhookDelivery:
    """Sends a ``webhook.test`` event to this webhook only, whatever kinds it subscribes to: the
    event is written here (a management request, not the proxy's) and its delivery is an ordinary
    one, signed, recorded and retried. 409 ``webhook_inactive`` for a disabled webhook."""
    if not webhook.is_active:
        raise Conflict("The webhook is disabled; enable it to send a test.", code="webhook_inactive")
    now = timezone.now()
    event = Event.objects.create(
        id=uuid.uuid4(),
        organization_id=webhook.organization_id,
        type=EventType.WEBHOOK_TEST,
        created_at=now,
        data={"webhook_id": str(webhook.id)},
    )
    delivery = WebhookDelivery.objects.create(
        organization_id=webhook.organization_id,
        webhook=webhook,
        event=event,
        event_type=event.type,
        attempt=1,
        next_attempt_at=now,
    )
    _enqueue_on_commit([delivery.id])
    return delivery


# --- Deliveries -----------------------------------------------------------------------------------


def deliveries_start(events: Iterable[Event]) -> list[WebhookDelivery]:
    """The first attempt of every new event for each active webhook of its organization that
    subscribes to its kind (a ``webhook.test`` event only for the webhook it names). Called inside
    the transaction that writes the events; the tasks are enqueued when it commits."""
    events = list(events)
    if not events:
        return []
    webhooks: dict[str, list[Webhook]] = defaultdict(list)
    for webhook in Webhook.objects.filter(
        organization_id__in={event.organization_id for event in events}, is_active=True
    ).only("id", "organization_id", "events"):
        webhooks[str(webhook.organization_id)].append(webhook)
    now = timezone.now()
    rows = [
        WebhookDelivery(
            organization_id=event.organization_id,
            webhook=webhook,
            event_id=event.id,
            event_type=event.type,
            attempt=1,
            next_attempt_at=now,
        )
        for event in events
        for webhook in webhooks.get(str(event.organization_id), ())
        if _addressed_to(webhook, event)
    ]
    # Conflicts (the same events written twice at once) are ignored; their tasks find no row.
    WebhookDelivery.objects.bulk_create(rows, ignore_conflicts=True)
    _enqueue_on_commit([row.id for row in rows])
    return rows


def _addressed_to(webhook: Webhook, event: Event) -> bool:
    if event.type == EventType.WEBHOOK_TEST:
        return isinstance(event.data, dict) and event.data.get("webhook_id") == str(webhook.id)
    return webhook.subscribes_to(event.type)


@transaction.atomic
def delivery_retry(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """A new attempt of ``delivery``'s event to its webhook, sent now (numbered after the last one;
    an automatic retry still scheduled is replaced by it). 409 ``already_delivered`` when the
    event has reached the webhook, ``delivery_pending`` while an attempt is under way,
    ``webhook_inactive`` for a disabled webhook."""
    webhook = Webhook.objects.select_for_update().get(pk=delivery.webhook_id)
    if not webhook.is_active:
        raise Conflict("The webhook is disabled; enable it to retry.", code="webhook_inactive")
    attempts = WebhookDelivery.objects.filter(webhook_id=delivery.webhook_id, event_id=delivery.event_id)
    if attempts.filter(status=DeliveryStatus.SUCCEEDED).exists():
        raise Conflict("This event was already delivered to the webhook.", code="already_delivered")
    if attempts.filter(status=DeliveryStatus.PENDING).exists():
        raise Conflict("An attempt to deliver this event is under way.", code="delivery_pending")
    last = attempts.order_by("-attempt").values_list("attempt", flat=True).first() or 0
    attempts.filter(status=DeliveryStatus.FAILED).update(next_attempt_at=None)
    now = timezone.now()
    try:
        with transaction.atomic():
            retry = WebhookDelivery.objects.create(
                organization_id=delivery.organization_id,
                webhook_id=delivery.webhook_id,
                event_id=delivery.event_id,
                event_type=delivery.event_type,
                attempt=last + 1,
                next_attempt_at=now,
            )
    except IntegrityError:
        raise Conflict("An attempt to deliver this event is under way.", code="delivery_pending") from None
    _enqueue_on_commit([retry.id])
    return retry


def deliveries_due() -> int:
    """The beat job: makes the automatic retries whose time has come, and enqueues every pending
    attempt whose time has come (those whose task never reached the broker included). Returns
    how many attempts it enqueued."""
    now = timezone.now()
    scheduled = WebhookDelivery.objects.filter(status=DeliveryStatus.FAILED, next_attempt_at__lte=now)
    for failed in scheduled.order_by("next_attempt_at")[:DUE_BATCH]:
        _schedule_next_attempt(failed, now)
    due = list(
        WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
        .order_by("next_attempt_at")
        .values_list("id", flat=True)[:DUE_BATCH]
    )
    return _enqueue(due)


@transaction.atomic
def _schedule_next_attempt(failed: WebhookDelivery, now) -> None:
    # Taken by a conditional update: a manual retry or another run of this job may have been first.
    if not WebhookDelivery.objects.filter(pk=failed.pk, next_attempt_at=failed.next_attempt_at).update(
        next_attempt_at=None
    ):
        return
    attempts = WebhookDelivery.objects.filter(webhook_id=failed.webhook_id, event_id=failed.event_id)
    if attempts.exclude(status=DeliveryStatus.FAILED).exists():
        return  # delivered meanwhile, or an attempt is under way
    try:
        with transaction.atomic():
            WebhookDelivery.objects.create(
                organization_id=failed.organization_id,
                webhook_id=failed.webhook_id,
                event_id=failed.event_id,
                event_type=failed.event_type,
                attempt=failed.attempt + 1,
                next_attempt_at=now,
            )
    except IntegrityError:
        return  # that attempt exists already


def delivery_send(*, delivery_id: uuid.UUID | str) -> WebhookDelivery | None:
    """Makes the attempt ``delivery_id`` if it is pending and due (None otherwise: another task
    has it, or it is done) and records its outcome."""
    now = timezone.now()
    claimed = WebhookDelivery.objects.filter(
        pk=delivery_id, status=DeliveryStatus.PENDING, next_attempt_at__lte=now
    ).update(next_attempt_at=now + CLAIM)
    if not claimed:
        return None
    delivery = WebhookDelivery.objects.select_related("webhook", "event").filter(pk=delivery_id).first()
    if delivery is None:
        return None  # its webhook was deleted meanwhile
    webhook = delivery.webhook
    if not webhook.is_active:
        outcome = transport.Outcome(False, None, 0, "Not sent: the webhook is disabled.", "webhook disabled")
        return _record(delivery, outcome, retry=False)
    try:
        signing_secrets = webhook.signing_secrets(now)
    except crypto.InvalidToken:
        logger.error("Webhooks: the secret of webhook %s cannot be decrypted; not sent", webhook.id)
        outcome = transport.Outcome(
            False, None, 0, "Not sent: the webhook's secret cannot be decrypted.", "secret unreadable"
        )
        return _record(delivery, outcome, retry=True)
    body = event_body(delivery.event)
    headers = {
        header("event"): delivery.event_type,
        header("delivery"): str(delivery.id),
        header("signature"): signature_header(signing_secrets, int(time.time()), body),
        "User-Agent": f"{settings.GATEWAY_BRAND}-webhooks",
    }
    outcome = transport.send(webhook.url, body=body, headers=headers)
    if not outcome.succeeded:
        logger.info(
            "Webhooks: delivery %s (attempt %d) failed: %s",
            delivery.id,
            delivery.attempt,
            outcome.error[:200],
        )
    return _record(delivery, outcome, retry=True)


def event_body(event: Event) -> bytes:
    """The payload a receiver gets (and the signature covers), byte for byte."""
    payload = {
        "id": str(event.id),
        "type": event.type,
        "created_at": rfc3339(event.created_at),
        "organization_id": str(event.organization_id),
        "data": event.data,
    }
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def _record(delivery: WebhookDelivery, outcome: transport.Outcome, *, retry: bool) -> WebhookDelivery:
    delivery.status = DeliveryStatus.SUCCEEDED if outcome.succeeded else DeliveryStatus.FAILED
    delivery.response_status = outcome.response_status
    delivery.duration_ms = outcome.duration_ms
    delivery.error = outcome.error
    delivery.failure_reason = outcome.reason
    delivery.next_attempt_at = None
    if not outcome.succeeded and retry and delivery.attempt < MAX_ATTEMPTS:
        delivery.next_attempt_at = timezone.now() + RETRY_DELAYS[delivery.attempt - 1]
    delivery.save(
        update_fields=[
            "status",
            "response_status",
            "duration_ms",
            "error",
            "failure_reason",
            "next_attempt_at",
        ]
    )
    metrics.webhook_delivered(succeeded=outcome.succeeded)
    return delivery


def _enqueue_on_commit(delivery_ids: list) -> None:
    if delivery_ids:
        transaction.on_commit(lambda: _enqueue(delivery_ids))


def _enqueue(delivery_ids: list) -> int:
    """Hands the attempts to the broker; stops at the first failure (the broker is down: the rest
    would fail as well, each after its own wait). What was not enqueued stays pending and due, for
    ``deliveries_due``. Returns how many were enqueued."""
    from .tasks import deliver

    for done, delivery_id in enumerate(delivery_ids):
        try:
            deliver.delay(str(delivery_id))
        except (OperationalError, OSError) as error:
            logger.warning(
                "Webhooks: %d delivery task(s) not enqueued (%s); deliveries_due will send them",
                len(delivery_ids) - done,
                type(error).__name__,
            )
            return done
    return len(delivery_ids)
