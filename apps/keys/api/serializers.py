from rest_framework import serializers

from apps.core.api.fields import DataRegionsField, ModelPatternsField, StrictCharField
from apps.keys.models import ApiKey, KeyStatus, Permission
from apps.limits.api.serializers import BudgetField, RateLimitsField, UsageSerializer
from apps.organizations.tenancy import OrganizationScopedRelatedField
from apps.teams.models import Team


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


class ApiKeyCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=200)
    permissions = serializers.ListField(
        child=serializers.ChoiceField(choices=Permission.values),
        allow_empty=False,
        default=lambda: [Permission.LLM.value],
    )
    team_id = OrganizationScopedRelatedField(
        queryset=Team.objects.all(), source="team", required=False, allow_null=True
    )
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="In the future (services.api_key_check), or null."
    )
    allowed_data_regions = DataRegionsField(required=False)
    allowed_models = ModelPatternsField()
    budget = BudgetField()
    rate_limits = RateLimitsField()


class ApiKeyUpdateSerializer(serializers.Serializer):
    """A PATCH: only the fields it names change. The secret, team and permissions never do."""

    name = StrictCharField(max_length=200, required=False)
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="In the future (services.api_key_check), or null."
    )
    allowed_data_regions = DataRegionsField(required=False)
    allowed_models = ModelPatternsField()
    budget = BudgetField()
    rate_limits = RateLimitsField()


class ApiKeyCreatedSerializer(ApiKeySerializer):
    """The create response: the only time the full key is shown."""

    key = serializers.CharField(read_only=True)
    warning = serializers.CharField(read_only=True)

    class Meta(ApiKeySerializer.Meta):
        fields = (*ApiKeySerializer.Meta.fields, "key", "warning")
        read_only_fields = fields
