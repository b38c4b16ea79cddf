from django.db import models
from django.utils import timezone

from apps.core import crypto
from apps.core.models import UUIDModel
from apps.events.models import Event
from apps.organizations.models import Organization

ALL_EVENTS = "*"


class Webhook(UUIDModel):
    """An HTTPS endpoint of the organization that receives its events, signed with a secret that is
    encrypted at rest and shown only when it is made (at creation and at a roll)."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="webhooks")
    url = models.CharField(max_length=2000)
    # Event kinds (apps.events.models.EventType values), or ["*"] for every kind.
    events = models.JSONField(default=list)
    description = models.CharField(max_length=500, blank=True)
    is_active = models.BooleanField(default=True)
    secret_encrypted = models.TextField(editable=False)
    # During a roll the previous secret signs too, until previous_secret_expires_at.
    previous_secret_encrypted = models.TextField(blank=True, editable=False)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [models.Index(fields=("organization", "is_active"), name="webhook_org_active")]

    def __str__(self) -> str:
        return self.url

    def set_secret(self, secret: str) -> None:
        self.secret_encrypted = crypto.encrypt(secret)

    def signing_secrets(self, now=None) -> list[str]:
        """The secrets that sign a delivery now: the current one, and the previous one while a
        roll's overlap lasts."""
        secrets = [crypto.decrypt(self.secret_encrypted)]
        now = now or timezone.now()
        if (
            self.previous_secret_encrypted
            and self.previous_secret_expires_at
            and now < self.previous_secret_expires_at
        ):
            secrets.append(crypto.decrypt(self.previous_secret_encrypted))
        return secrets

    def subscribes_to(self, event_type: str) -> bool:
        return ALL_EVENTS in self.events or event_type in self.events


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class WebhookDelivery(UUIDModel):
    """One attempt to send an event to a webhook. Automatic retries and manual ones are new rows for
    the same event, numbered by ``attempt``.

    ``next_attempt_at``: on a pending row, when it is to be sent (``deliveries_due`` sends it from
    then on if its task never ran); on a failed row, when the next automatic attempt is due; null
    once that attempt exists, after a success, and after the third attempt."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="+")
    event_type = models.CharField(max_length=64)
    attempt = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    # Why a failed attempt failed, in a few words from a fixed list ("connection refused", "HTTP 500",
    # apps/webhooks/transport.py): never the URL or the answer, so any page may show it.
    failure_reason = models.CharField(max_length=64, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at", "-id")
        constraints = [
            # An ingest that writes a batch twice, or two retries at once, cannot make two attempts
            # of one number.
            models.UniqueConstraint(
                fields=("webhook", "event", "attempt"), name="webhookdelivery_one_attempt"
            ),
        ]
        indexes = [
            models.Index(fields=("organization", "-created_at"), name="delivery_org_time"),
            models.Index(fields=("status", "next_attempt_at"), name="delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} #{self.attempt} -> {self.webhook_id}"

    @property
    def is_settled(self) -> bool:
        """The attempt is over (succeeded or failed); a later attempt of its event is another row."""
        return self.status != DeliveryStatus.PENDING
