"""An API key as it is written (the body of POST and PATCH /api/v1/api-keys, the admin's form, the
console's forms): its types and shapes, defined once, the budget and rate limits with the limits'
own fields (apps/limits/inputs.py). ``api_key_create``, ``api_key_update`` and ``api_key_check``
parse their raw input with these (the team a reference of the organization in their context) before
what a schema cannot say (an expiry in the future, model patterns within bounds); the API's schema is
written from them."""

from rest_framework import serializers

from apps.core.api.fields import DataRegionsField, ModelPatternsField, StrictCharField
from apps.limits.inputs import BudgetInputField, RateLimitsInputField
from apps.organizations.tenancy import OrganizationScopedRelatedField
from apps.teams.models import Team

from .models import Permission

NAME_LENGTH = 200


# A new key's writable fields; the API's ApiKeyCreateSerializer is these. Not closed: the API has
# always passed over a field it does not know here. The team is read as one of the organization in
# the context (another organization's reads as one that does not exist). (No docstring: the API's
# schema would take it as its components' description.)
class ApiKeyInputSerializer(serializers.Serializer):
    name = StrictCharField(max_length=NAME_LENGTH)
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
    budget = BudgetInputField()
    rate_limits = RateLimitsInputField()


# What a change may name (parsed partial): a key's secret, team and permissions stay what they were,
# and a change that names them passes over them, as the API always has.
class ApiKeyChangeInputSerializer(ApiKeyInputSerializer):
    permissions = None
    team_id = None
