from rest_framework import serializers

from apps.events.models import EventType
from apps.webhooks.inputs import EVENT_KINDS, WebhookInputSerializer
from apps.webhooks.models import DeliveryStatus, Webhook, WebhookDelivery


class WebhookSerializer(serializers.ModelSerializer):
    """A webhook as the API shows it: never its secret."""

    events = serializers.ListField(child=serializers.ChoiceField(choices=EVENT_KINDS), read_only=True)
    previous_secret_expires_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="After a roll, the previous secret also signs until then."
    )

    class Meta:
        model = Webhook
        fields = (
            "id",
            "url",
            "events",
            "description",
            "is_active",
            "previous_secret_expires_at",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields


class WebhookWithSecretSerializer(WebhookSerializer):
    """At creation and after a roll only: the secret, which is never shown again."""

    secret = serializers.CharField(
        read_only=True, help_text="whsec_...: shown once; it signs every delivery."
    )

    class Meta(WebhookSerializer.Meta):
        fields = (*WebhookSerializer.Meta.fields, "secret")
        read_only_fields = fields


class WebhookCreateSerializer(WebhookInputSerializer):
    pass


class WebhookUpdateSerializer(WebhookInputSerializer):
    """A PATCH: only the fields it names change. The secret changes through roll-secret."""


class DeliverySerializer(serializers.ModelSerializer):
    webhook_id = serializers.UUIDField(read_only=True)
    event_id = serializers.UUIDField(read_only=True)
    event_type = serializers.ChoiceField(choices=EventType.values, read_only=True)
    status = serializers.ChoiceField(choices=DeliveryStatus.choices, read_only=True)
    next_attempt_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When the next automatic attempt is due; null when none is.",
    )

    class Meta:
        model = WebhookDelivery
        fields = (
            "id",
            "webhook_id",
            "event_id",
            "event_type",
            "attempt",
            "status",
            "response_status",
            "duration_ms",
            "error",
            "created_at",
            "next_attempt_at",
        )
        read_only_fields = fields


class DeliveryQuerySerializer(serializers.Serializer):
    # DRF reads an empty query value of an optional field as absent (?status= filters nothing); the
    # schema says so (allowEmptyValue, apps/core/api/schema.py).
    empty_values_are_absent = True

    webhook = serializers.UUIDField(required=False, source="webhook_id", help_text="A webhook's id.")
    status = serializers.ChoiceField(choices=DeliveryStatus.choices, required=False)
    event_type = serializers.ChoiceField(choices=EventType.values, required=False)
