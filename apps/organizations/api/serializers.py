from rest_framework import serializers

from apps.core.api.fields import DataRegionsField, StrictCharField
from apps.limits.api.serializers import BudgetField, RateLimitsField
from apps.organizations.models import FailMode, LogBodies, Organization


class OrganizationSettingsSerializer(serializers.Serializer):
    log_bodies = serializers.ChoiceField(choices=LogBodies.choices, required=False)
    log_retention_days = serializers.IntegerField(min_value=1, max_value=3650, required=False)
    allowed_data_regions = DataRegionsField(required=False)
    # The organization's own: its budget caps all its traffic, its rate limits are the default of
    # every key that has none of its own.
    budget = BudgetField()
    rate_limits = RateLimitsField()
    limits_fail_mode = serializers.ChoiceField(
        choices=FailMode.choices,
        required=False,
        help_text="While Redis cannot be reached: open serves without checking budgets and rate limits, "
        "closed refuses (503) the requests they apply to.",
    )


class OrganizationSerializer(serializers.ModelSerializer):
    name = StrictCharField(max_length=200, required=False)
    settings = OrganizationSettingsSerializer(source="*", required=False)
    role = serializers.SerializerMethodField()

    class Meta:
        model = Organization
        fields = ("id", "name", "slug", "plan", "role", "settings", "created_at", "updated_at")
        read_only_fields = ("id", "slug", "plan", "role", "created_at", "updated_at")

    def get_role(self, organization) -> str:
        return self.context["request"].auth.membership.role
