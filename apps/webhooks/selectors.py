"""Reads of webhooks and their deliveries."""

from django.db.models import QuerySet

from .models import WebhookDelivery


def deliveries_matching(
    deliveries: QuerySet[WebhookDelivery],
    *,
    webhook_id=None,
    status: str | None = None,
    event_type: str | None = None,
) -> QuerySet[WebhookDelivery]:
    """``deliveries`` (already one organization's) narrowed by the history's filters."""
    if webhook_id is not None:
        deliveries = deliveries.filter(webhook_id=webhook_id)
    if status is not None:
        deliveries = deliveries.filter(status=status)
    if event_type is not None:
        deliveries = deliveries.filter(event_type=event_type)
    return deliveries
