from rest_framework import serializers

from apps.core.api.fields import DataRegionsField, StrictCharField, StrictSlugField
from apps.teams.models import Team


class TeamSerializer(serializers.ModelSerializer):
    name = StrictCharField(max_length=200)
    slug = StrictSlugField(max_length=80, required=False)
    allowed_data_regions = DataRegionsField(required=False)

    class Meta:
        model = Team
        fields = ("id", "name", "slug", "allowed_data_regions", "created_at", "updated_at")
        read_only_fields = ("id", "created_at", "updated_at")
