"""The organization's settings as the management API shows and takes them
(``/api/v1/organizations/current``): its own (apps/organizations), its budget and rate limits
(apps/limits), its default price and embeddings model (apps/catalog), composed here, above them."""

from decimal import ROUND_HALF_EVEN, Decimal

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.catalog.inputs import DefaultPriceInputSerializer
from apps.catalog.selectors import default_price_of
from apps.core.api.fields import DataRegionsField, ModelPatternsField, StrictBooleanField, StrictCharField
from apps.limits.api.serializers import BudgetField, RateLimitsField
from apps.organizations.api.serializers import cache_ttl_field
from apps.organizations.models import FailMode, LogBodies, Organization


@extend_schema_field({"type": "number", "minimum": 0, "maximum": 1, "example": 0.95})
class SimilarityThresholdField(serializers.Field):
    """A JSON number from 0 to 1, kept to 4 decimal places (a float would drift in the database)."""

    default_error_messages = {"invalid": "A number from 0 to 1."}
    PLACES = Decimal("0.0001")

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float) or not 0 <= data <= 1:
            self.fail("invalid")
        return Decimal(str(data)).quantize(self.PLACES, rounding=ROUND_HALF_EVEN)

    def to_representation(self, value):
        return float(value)


@extend_schema_field(
    {
        "type": "object",
        "nullable": True,
        "description": "The price (USD per million tokens) of a model that has no price of its own nor a "
        "shipped one. null: none, and a request for an unpriced model is refused (400 model_not_priced) "
        "wherever a budget applies.",
        "properties": {
            "input_per_mtok": {"type": "string", "format": "decimal", "example": "5.00"},
            "output_per_mtok": {"type": "string", "format": "decimal", "example": "15.00"},
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


class OrganizationSettingsSerializer(serializers.Serializer):
    log_bodies = serializers.ChoiceField(choices=LogBodies.choices, required=False)
    log_retention_days = serializers.IntegerField(min_value=1, max_value=3650, required=False)
    allowed_data_regions = DataRegionsField(required=False)
    allowed_models = ModelPatternsField()
    # A price for the models that have none (neither the organization's nor the shipped list's).
    default_price = DefaultPriceField()
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
    # The response cache (docs/cache.md); a team may override the first two.
    cache_enabled = StrictBooleanField(required=False)
    cache_ttl_seconds = cache_ttl_field(required=False)
    cache_any_temperature = StrictBooleanField(
        required=False,
        help_text="False: only requests with an explicit temperature of 0 are cached; true: any request.",
    )
    cache_semantic_enabled = StrictBooleanField(
        required=False,
        help_text="The semantic tier (L3): a similar earlier prompt's answer is served. Needs "
        "cache_embedding_model.",
    )
    cache_semantic_threshold = SimilarityThresholdField(
        required=False, help_text="The cosine similarity from which L3 serves an earlier answer."
    )
    cache_embedding_model = StrictCharField(
        max_length=200,
        allow_blank=True,
        required=False,
        help_text="An embeddings model alias of the organization's catalog, for L3; blank for none.",
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
