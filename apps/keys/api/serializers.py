from rest_framework import serializers

from apps.keys.inputs import ApiKeyChangeInputSerializer, ApiKeyInputSerializer
from apps.keys.models import ApiKey, KeyStatus
from apps.limits.api.serializers import BudgetField, RateLimitsField, UsageSerializer


class ApiKeySerializer(serializers.ModelSerializer):
    team_id = serializers.UUIDField(read_only=True, allow_null=True)
    status = serializers.ChoiceField(choices=KeyStatus.choices, read_only=True)
    budget = BudgetField(read_only=True)
    rate_limits = RateLimitsField(read_only=True)

    class Meta:
        model = ApiKey
        fields = (
            "id",
            "name",
            "key_prefix",
            "permissions",
            "team_id",
            "allowed_data_regions",
            "allowed_models",
            "is_active",
            "status",
            "expires_at",
            "budget",
            "rate_limits",
            "created_at",
            "last_used_at",
        )
        read_only_fields = fields


class ApiKeyDetailSerializer(ApiKeySerializer):
    """One key: with its usage, when the caller may read it (null otherwise)."""

    usage = UsageSerializer(read_only=True, allow_null=True)

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "usage")
        read_only_fields = fields


class ApiKeyCreateSerializer(ApiKeyInputSerializer):
    pass


class ApiKeyUpdateSerializer(ApiKeyChangeInputSerializer):
    """A PATCH: only the fields it names change. The secret, team and permissions never do."""


class ApiKeyCreatedSerializer(ApiKeySerializer):
    """The create response: the only time the full key is shown."""

    key = serializers.CharField(read_only=True)
    warning = serializers.CharField(read_only=True)

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key", "warning")
        read_only_fields = fields
