from rest_framework import serializers

from apps.accounts.models import User
from apps.core.api.fields import (
    DataRegionsField,
    ModelPatternsField,
    StrictBooleanField,
    StrictCharField,
    StrictSlugField,
)
from apps.limits.api.serializers import BudgetField, RateLimitsField
from apps.organizations.api.serializers import cache_ttl_field
from apps.teams.models import Team, TeamMembership


class TeamSerializer(serializers.ModelSerializer):
    name = StrictCharField(max_length=200)
    slug = StrictSlugField(max_length=80, required=False)
    allowed_data_regions = DataRegionsField(required=False)
    allowed_models = ModelPatternsField()
    budget = BudgetField()
    rate_limits = RateLimitsField()
    # The response cache: null means the organization's setting.
    cache_enabled = StrictBooleanField(
        required=False, allow_null=True, help_text="Null: the organization's setting."
    )
    cache_ttl_seconds = cache_ttl_field(required=False, allow_null=True)

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


class TeamMemberAddSerializer(serializers.Serializer):
    """One of ``user_id`` or ``email``: a user of the organization (another organization's user
    reads as one that does not exist)."""

    user_id = serializers.UUIDField(required=False)
    email = serializers.EmailField(required=False)

    def validate(self, attrs):
        if ("user_id" in attrs) == ("email" in attrs):
            raise serializers.ValidationError("Give one of user_id or email.")
        users = User.objects.filter(memberships__organization=self.context["organization"])
        if "user_id" in attrs:
            user, field = users.filter(id=attrs["user_id"]).first(), "user_id"
        else:
            user, field = users.filter(email__iexact=attrs["email"]).first(), "email"
        if user is None:
            raise serializers.ValidationError({field: ["No such user in this organization."]})
        return {"user": user}
