from rest_framework import serializers

from apps.limits.api.serializers import BudgetField, RateLimitsField
from apps.teams.inputs import TeamInputSerializer, TeamMemberInputSerializer
from apps.teams.models import Team, TeamMembership


# The writable fields are the input's (apps/teams/inputs.py); ModelSerializer first, so the schema's
# docstring lookup stops at it (the input has none) and Meta.fields orders them as before.
class TeamSerializer(serializers.ModelSerializer, TeamInputSerializer):
    budget = BudgetField()
    rate_limits = RateLimitsField()

    class Meta:
        model = Team
        fields = (
            "id",
            "name",
            "slug",
            "allowed_data_regions",
            "allowed_models",
            "budget",
            "rate_limits",
            "cache_enabled",
            "cache_ttl_seconds",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("id", "created_at", "updated_at")


class TeamMemberSerializer(serializers.ModelSerializer):
    user_id = serializers.UUIDField(read_only=True)
    email = serializers.EmailField(source="user.email", read_only=True)
    added_at = serializers.DateTimeField(source="created_at", read_only=True)

    class Meta:
        model = TeamMembership
        fields = ("user_id", "email", "added_at")
        read_only_fields = fields


class TeamMemberAddSerializer(TeamMemberInputSerializer):
    """One of ``user_id`` or ``email``: a user of the organization (another organization's user
    reads as one that does not exist)."""
