"""The catalog's writes as they are written (the bodies of POST and PATCH /api/v1/models and POST
/api/v1/model-prices, an organization's ``settings.default_price``, the admin's forms, the console's
forms): their types and shapes, defined once. ``model_alias_create``, ``model_alias_update`` and
``model_price_create`` parse their raw input with these before what a schema cannot say (fallbacks
that name other aliases of the organization, a rename of an alias others fall back to, a name or a
price version taken); the API's schema is written from them."""

from collections.abc import Mapping

from django.core.validators import RegexValidator
from rest_framework import serializers

from apps.core.api.fields import InstantField, PriceField, StrictBooleanField, StrictCharField
from apps.core.api.serializers import ClosedSerializer
from apps.providers.models import Provider

from .models import Deployment

ALIAS_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@\-]{0,199}$"
ALIAS_MESSAGE = (
    "Letters, digits and . _ : @ - only, starting with a letter or digit; a '/' means provider/model."
)


def alias_field(**kwargs) -> StrictCharField:
    """An alias name: a string (not a number) that cannot be read as ``provider/model``."""
    return StrictCharField(
        max_length=200, validators=[RegexValidator(ALIAS_PATTERN, ALIAS_MESSAGE)], **kwargs
    )


# One place an alias is served, as it is written and shown (the API's Deployment: its id read only).
class DeploymentSerializer(serializers.ModelSerializer):
    provider = serializers.ChoiceField(choices=Provider.choices)
    upstream_model = StrictCharField(max_length=200)
    priority = serializers.IntegerField(min_value=0, max_value=1000, required=False)

    class Meta:
        model = Deployment
        fields = ("id", "provider", "upstream_model", "priority")
        read_only_fields = ("id",)


# An alias's writable fields; the API's ModelAliasSerializer is these and the read-only ones, its
# PATCH these parsed partial. Not closed: the API has always passed over a field it does not know
# here. (No docstring: the API's schema would take it as its component's description.)
class ModelAliasInputSerializer(serializers.Serializer):
    alias = alias_field()
    description = StrictCharField(max_length=500, required=False, allow_blank=True)
    deployments = DeploymentSerializer(many=True)
    fallbacks = serializers.ListField(child=alias_field(), required=False, max_length=10)
    is_active = StrictBooleanField(required=False)

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


# A price version's writable fields; the API's ModelPriceSerializer is these and the read-only ones.
# Not closed, as the API's never was. (No docstring, as above.)
class ModelPriceInputSerializer(serializers.Serializer):
    provider = serializers.ChoiceField(choices=Provider.choices)
    model = StrictCharField(max_length=200)
    input_per_mtok = PriceField()
    output_per_mtok = PriceField()
    cached_input_per_mtok = PriceField(required=False, allow_null=True)
    reasoning_per_mtok = PriceField(required=False, allow_null=True)
    effective_from = InstantField()


# The organization's default price for unpriced models (its ``settings.default_price``, parsed by
# the organization's settings, which hand it to ``default_price_set``).
class DefaultPriceInputSerializer(ClosedSerializer):
    input_per_mtok = PriceField()
    output_per_mtok = PriceField()
