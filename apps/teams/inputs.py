"""A team and a team's new member as they are written (the bodies of POST and PATCH /api/v1/teams
and of POST /api/v1/teams/{id}/members, the admin's forms, the console's forms): their types and
shapes, defined once, the budget and rate limits with the limits' own fields (apps/limits/inputs.py).
``team_create``, ``team_update`` (``team_check``) and ``team_member_add`` parse their raw input with
these before what a schema cannot say (a slug taken, model patterns within bounds, a user of the
organization); the API's schema is written from them."""

from rest_framework import serializers

from apps.core.api.fields import (
    DataRegionsField,
    ModelPatternsField,
    StrictBooleanField,
    StrictCharField,
    StrictSlugField,
)
from apps.limits.inputs import BudgetInputField, RateLimitsInputField
from apps.organizations.api.serializers import cache_ttl_field

NAME_LENGTH = 200
SLUG_LENGTH = 80


# A team's writable fields; the API's TeamSerializer is these and the read-only ones, its PATCH these
# parsed partial. Not closed: the API has always passed over a field it does not know here. (No
# docstring: the API's schema would take it as its components' description.)
class TeamInputSerializer(serializers.Serializer):
    name = StrictCharField(max_length=NAME_LENGTH)
    slug = StrictSlugField(max_length=SLUG_LENGTH, required=False)
    allowed_data_regions = DataRegionsField(required=False)
    allowed_models = ModelPatternsField()
    budget = BudgetInputField()
    rate_limits = RateLimitsInputField()
    # The response cache: null means the organization's setting.
    cache_enabled = StrictBooleanField(
        required=False, allow_null=True, help_text="Null: the organization's setting."
    )
    cache_ttl_seconds = cache_ttl_field(required=False, allow_null=True)


# One of user_id or email; that it names a user of the organization is team_member_add's. (No
# docstring: the API's TeamMemberAddSerializer has its own.)
class TeamMemberInputSerializer(serializers.Serializer):
    user_id = serializers.UUIDField(required=False)
    email = serializers.EmailField(required=False)

    def validate(self, attrs):
        if ("user_id" in attrs) == ("email" in attrs):
            raise serializers.ValidationError("Give one of user_id or email.")
        return attrs
