"""The catalog as the management API shows it: the writable fields are the inputs' (apps/catalog/
inputs.py, which the services parse the body with), and the read-only ones are added here."""

from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers

from apps.catalog.inputs import ModelAliasInputSerializer, ModelPriceInputSerializer
from apps.catalog.models import ModelAlias, ModelPrice


class ModelAliasSerializer(ModelAliasInputSerializer, serializers.ModelSerializer):
    """The fallbacks' rule (other aliases of the organization, never the alias itself) is the
    catalog service's (``services.check_fallbacks``): the admin console enforces the same one."""

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


class ModelAliasSchema(OpenApiSerializerExtension):
    """States the input's ``validate_deployments`` where an alias is written: at least one
    deployment. Left to the 400: fallbacks that name other aliases of the organization."""

    target_class = ModelAliasSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction == "request":
            schema["properties"]["deployments"]["minItems"] = 1
        return schema


class ModelPriceSerializer(ModelPriceInputSerializer, serializers.ModelSerializer):
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
