from collections.abc import Mapping

from django.core.validators import RegexValidator
from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers

from apps.catalog.models import Deployment, ModelAlias, ModelPrice
from apps.core.api.fields import InstantField, PriceField, StrictBooleanField, StrictCharField
from apps.providers.models import Provider

ALIAS_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,199}$"
ALIAS_MESSAGE = (
    "Letters, digits and . _ : @ - only, starting with a letter or digit; a '/' means provider/model."
)


def alias_field(**kwargs) -> StrictCharField:
    """An alias name: a string (not a number) that cannot be read as ``provider/model``."""
    return StrictCharField(
        max_length=200, validators=[RegexValidator(ALIAS_PATTERN, ALIAS_MESSAGE)], **kwargs
    )


class DeploymentSerializer(serializers.ModelSerializer):
    provider = serializers.ChoiceField(choices=Provider.choices)
    upstream_model = StrictCharField(max_length=200)
    priority = serializers.IntegerField(min_value=0, max_value=1000, required=False)

    class Meta:
        model = Deployment
        fields = ("id", "provider", "upstream_model", "priority")
        read_only_fields = ("id",)


class ModelAliasSerializer(serializers.ModelSerializer):
    """The fallbacks' rule (other aliases of the organization, never the alias itself) is the
    catalog service's (``services.check_fallbacks``): the admin console enforces the same one."""

    alias = alias_field()
    description = StrictCharField(max_length=500, required=False, allow_blank=True)
    deployments = DeploymentSerializer(many=True)
    fallbacks = serializers.ListField(child=alias_field(), required=False, max_length=10)
    is_active = StrictBooleanField(required=False)

    class Meta:
        model = ModelAlias
        fields = (
            "id",
            "alias",
            "description",
            "deployments",
            "fallbacks",
            "is_active",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("id", "created_at", "updated_at")

    def to_internal_value(self, data):
        # A PATCH replaces the whole list of deployments, so each one is complete even then; DRF's
        # partial mode would otherwise let a deployment without a provider or model through.
        if self.partial and isinstance(data, Mapping) and "deployments" in data:
            complete = DeploymentSerializer(data=data["deployments"], many=True)
            if not complete.is_valid():
                raise serializers.ValidationError({"deployments": complete.errors})
        return super().to_internal_value(data)

    def validate_deployments(self, value):
        if not value:
            raise serializers.ValidationError("An alias needs at least one deployment.")
        return value


class ModelAliasSchema(OpenApiSerializerExtension):
    """States ``validate_deployments`` where an alias is written: at least one deployment. Left to
    the 400: fallbacks that name other aliases of the organization."""

    target_class = ModelAliasSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction == "request":
            schema["properties"]["deployments"]["minItems"] = 1
        return schema


class ModelPriceSerializer(serializers.ModelSerializer):
    provider = serializers.ChoiceField(choices=Provider.choices)
    model = StrictCharField(max_length=200)
    input_per_mtok = PriceField()
    output_per_mtok = PriceField()
    cached_input_per_mtok = PriceField(required=False, allow_null=True)
    reasoning_per_mtok = PriceField(required=False, allow_null=True)
    effective_from = InstantField()

    class Meta:
        model = ModelPrice
        fields = (
            "id",
            "provider",
            "model",
            "input_per_mtok",
            "cached_input_per_mtok",
            "output_per_mtok",
            "reasoning_per_mtok",
            "effective_from",
            "created_at",
        )
        read_only_fields = ("id", "created_at")


class ShippedPriceSerializer(serializers.Serializer):
    """A row of the price table the gateway ships with (apps/catalog/pricing.py)."""

    provider = serializers.CharField()
    model = serializers.CharField()
    input_per_mtok = serializers.DecimalField(max_digits=14, decimal_places=6, source="price.input")
    cached_input_per_mtok = serializers.DecimalField(
        max_digits=14, decimal_places=6, source="price.cached_input", allow_null=True
    )
    output_per_mtok = serializers.DecimalField(max_digits=14, decimal_places=6, source="price.output")
    reasoning_per_mtok = serializers.DecimalField(
        max_digits=14, decimal_places=6, source="price.reasoning", allow_null=True
    )
    effective_from = serializers.DateTimeField(source="price.effective_from")
