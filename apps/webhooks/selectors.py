"""Reads of webhooks and their deliveries."""

from django.db.models import QuerySet

from .models import Webhook, WebhookDelivery


def webhooks_of(organization_id) -> QuerySet[Webhook]:
    """The organization's webhooks, newest first."""
    return Webhook.objects.filter(organization_id=organization_id).order_by("-created_at")


def deliveries_of(organization_id) -> QuerySet[WebhookDelivery]:
    """The organization's delivery history (one row per attempt), newest first."""
    return WebhookDelivery.objects.filter(organization_id=organization_id).order_by("-created_at", "-id")


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
