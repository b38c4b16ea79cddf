"""The organization's settings as the management API shows and takes them
(``/api/v1/organizations/current``): its own (apps/organizations), its budget and rate limits
(apps/limits), its default price and embeddings model (apps/catalog), composed here, above them."""

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.catalog.inputs import DefaultPriceInputSerializer
from apps.catalog.selectors import default_price_of
from apps.core.api.fields import PRICE_SCHEMA
from apps.limits.api.serializers import BudgetField, RateLimitsField
from apps.organizations.inputs import OrganizationSettingsInputSerializer, name_field
from apps.organizations.models import Organization

# The settings of the domains above the organization's own (apps/limits, apps/catalog).
FOREIGN = ("default_price", "budget", "rate_limits")


@extend_schema_field(
    {
        "type": "object",
        "nullable": True,
        "description": "The price (USD per million tokens) of a model that has no price of its own nor a "
        "shipped one. null: none, and a request for an unpriced model is refused (400 model_not_priced) "
        "wherever a budget applies.",
        "properties": {
            "input_per_mtok": {**PRICE_SCHEMA, "example": "5.00"},
            "output_per_mtok": {**PRICE_SCHEMA, "example": "15.00"},
        },
        "required": ["input_per_mtok", "output_per_mtok"],
        "additionalProperties": False,
    }
)
class DefaultPriceField(serializers.Field):
    """The catalog's default price version in force now (``catalog.selectors.default_price_of``)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def get_attribute(self, organization):
        return default_price_of(organization.id, timezone.now())

    def to_representation(self, price):
        return {"input_per_mtok": f"{price.input:f}", "output_per_mtok": f"{price.output:f}"}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("An object, or null.")
        checked = DefaultPriceInputSerializer(data=data)
        if not checked.is_valid():
            raise serializers.ValidationError(checked.errors)
        return dict(checked.validated_data)


# The organization's own settings (apps/organizations/inputs.py) with those of the domains above it.
# (No docstring: the API's schema would take it as its component's description.)
class OrganizationSettingsSerializer(OrganizationSettingsInputSerializer):
    # A price for the models that have none (neither the organization's nor the shipped list's).
    default_price = DefaultPriceField()
    # The organization's own: its budget caps all its traffic, its rate limits are the default of
    # every key that has none of its own.
    budget = BudgetField()
    rate_limits = RateLimitsField()

    def get_fields(self):
        # Where the schema has always shown them: after the model allow-list, before the fail mode.
        fields = super().get_fields()
        first = [*list(fields)[: list(fields).index("allowed_models") + 1], *FOREIGN]
        return {name: fields[name] for name in first} | fields


class OrganizationSerializer(serializers.ModelSerializer):
    name = name_field(required=False)
    settings = OrganizationSettingsSerializer(source="*", required=False)
    role = serializers.SerializerMethodField()

    class Meta:
        model = Organization
        fields = ("id", "name", "slug", "plan", "role", "settings", "created_at", "updated_at")
        read_only_fields = ("id", "slug", "plan", "role", "created_at", "updated_at")

    def get_role(self, organization) -> str:
        return self.context["request"].auth.membership.role
