from rest_framework import serializers

from apps.core.api.fields import DataRegionsField, StrictCharField
from apps.organizations.models import LogBodies, Organization


class OrganizationSettingsSerializer(serializers.Serializer):
    log_bodies = serializers.ChoiceField(choices=LogBodies.choices, required=False)
    log_retention_days = serializers.IntegerField(min_value=1, max_value=3650, required=False)
    allowed_data_regions = DataRegionsField(required=False)


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
