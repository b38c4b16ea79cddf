from django.db import models

from apps.core.models import UUIDModel
from apps.organizations.models import Organization


class EventType(models.TextChoices):
    """The kinds of event (decisions.md, "Events and webhooks"); a webhook subscribes to some of them."""

    POLICY_BLOCKED = "policy.blocked"
    POLICY_REDACTED = "policy.redacted"
    BUDGET_THRESHOLD_REACHED = "budget.threshold_reached"
    BUDGET_EXCEEDED = "budget.exceeded"
    API_KEY_CREATED = "api_key.created"
    API_KEY_REVOKED = "api_key.revoked"
    PROVIDER_KEY_ROTATED = "provider_key.rotated"
    PROVIDER_FAILOVER = "provider.failover"
    WEBHOOK_TEST = "webhook.test"
    EXPERIMENT_STARTED = "experiment.started"
    EXPERIMENT_COMPLETED = "experiment.completed"


class Event(UUIDModel):
    """Something that happened in an organization, as its webhooks will receive it. Written by the
    outbox's ingest only (apps/events/services.py), never on a request."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    type = models.CharField(max_length=64, choices=EventType.choices)
    # The moment the event happened (stamped by raise_event), not when the ingest wrote the row.
    created_at = models.DateTimeField()
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = [
            models.Index(fields=("organization", "type", "-created_at"), name="event_org_type_time"),
            models.Index(fields=("organization", "-created_at"), name="event_org_time"),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"
