from rest_framework import serializers

from apps.core.api.fields import DataRegionsField
from apps.organizations.models import LogBodies, Organization


class OrganizationSettingsSerializer(serializers.Serializer):
    log_bodies = serializers.ChoiceField(choices=LogBodies.choices, required=False)
    log_retention_days = serializers.IntegerField(min_value=1, max_value=3650, required=False)
    allowed_data_regions = DataRegionsField(required=False)


class OrganizationSerializer(serializers.ModelSerializer):
    settings = OrganizationSettingsSerializer(source="*", required=False)
    role = serializers.SerializerMethodField()

    class Meta:
        model = Organization
        fields = ("id", "name", "slug", "plan", "role", "settings", "created_at", "updated_at")
        read_only_fields = ("id", "slug", "plan", "role", "created_at", "updated_at")
        extra_kwargs = {"name": {"max_length": 200, "allow_blank": False}}

    def get_role(self, organization) -> str:
        return self.context["request"].auth.membership.role
