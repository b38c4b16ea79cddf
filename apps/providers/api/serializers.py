from django.core.validators import RegexValidator
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import REGION_PATTERN, StrictBooleanField, StrictCharField
from apps.core.errors import InvalidRequest
from apps.providers.addresses import check_upstream_url
from apps.providers.models import NEEDS_API_VERSION, NEEDS_BASE_URL, Provider, ProviderKey, missing_settings

REGION_MESSAGE = "A region label: lower-case letters, digits and '-' (us, eu, us-east)."


@extend_schema_field(
    {
        "type": "string",
        "format": "upstream-url",
        "minLength": 1,  # the empty string is its own case
        "maxLength": 500,
        "description": "Empty for the provider's default address, or an http(s) URL with a host and no "
        "credentials, query or fragment. A host that does not resolve, or resolves to a refused "
        "address (link-local, metadata, private unless allowed), is a 400.",
    }
)
class UpstreamUrlField(StrictCharField):
    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", 500)
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("trim_whitespace", False)  # " https://..." is not a URL, and not quietly one
        super().__init__(**kwargs)

    def to_internal_value(self, data) -> str:
        value = super().to_internal_value(data)
        if not value:
            return value
        try:
            return check_upstream_url(value)
        except InvalidRequest as error:
            raise serializers.ValidationError(error.message) from error


class ProviderKeySerializer(serializers.ModelSerializer):
    """What the API shows of a provider key: never the secret, only its last four characters."""

    key_hint = serializers.SerializerMethodField()
    base_url = UpstreamUrlField(read_only=True)

    class Meta:
        model = ProviderKey
        fields = (
            "id",
            "provider",
            "name",
            "key_hint",
            "weight",
            "data_region",
            "base_url",
            "api_version",
            "supports_stream_usage",
            "is_active",
            "created_at",
            "updated_at",
            "rotated_at",
        )
        read_only_fields = fields

    def get_key_hint(self, provider_key: ProviderKey) -> str:
        return f"…{provider_key.key_hint}"


class WeightField(serializers.FloatField):
    """A number >= 0; JSON ``true`` is not a weight of 1."""

    def to_internal_value(self, data):
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


def region_field(**kwargs) -> StrictCharField:
    return StrictCharField(
        max_length=32, validators=[RegexValidator(REGION_PATTERN, REGION_MESSAGE)], **kwargs
    )


class _ProviderKeyFields(serializers.Serializer):
    name = StrictCharField(max_length=200, required=False, allow_blank=True)
    weight = WeightField(min_value=0, max_value=1_000_000, required=False)
    data_region = region_field()
    base_url = UpstreamUrlField(required=False)
    api_version = StrictCharField(
        max_length=32,
        required=False,
        allow_blank=True,
        validators=[RegexValidator(r"^[0-9a-zA-Z.\-]+$", "Letters, digits, '.' and '-' (2024-10-21).")],
    )
    supports_stream_usage = StrictBooleanField(required=False)


def secret_field(**kwargs) -> StrictCharField:
    return StrictCharField(max_length=4096, min_length=4, trim_whitespace=True, write_only=True, **kwargs)


class ProviderKeyCreateSerializer(_ProviderKeyFields):
    provider = serializers.ChoiceField(choices=Provider.choices)
    key = secret_field()

    def validate(self, attrs):
        missing = missing_settings(
            attrs["provider"], base_url=attrs.get("base_url", ""), api_version=attrs.get("api_version", "")
        )
        if missing:
            raise serializers.ValidationError({field: [message] for field, message in missing.items()})
        return attrs


class ProviderKeyUpdateSerializer(_ProviderKeyFields):
    """A partial update of ``instance``. The secret changes through rotate, or with ``base_url``
    (which needs it: apps/providers/services.py); the provider never changes: a key of another
    provider is another key."""

    data_region = region_field(required=False)
    is_active = StrictBooleanField(required=False)
    key = secret_field(required=False, help_text="Required with base_url: the secret for the new address.")

    def validate(self, attrs):
        refused = {}
        if "key" in self.initial_data and "base_url" not in self.initial_data:
            refused["key"] = [
                'The secret is not changed here: POST /api/v1/provider-keys/{id}/rotate with {"key": "..."}.'
            ]
        if "provider" in self.initial_data:
            refused["provider"] = ["The provider of a key cannot change; create a new key instead."]
        if refused:
            raise serializers.ValidationError(refused)
        missing = missing_settings(
            self.instance.provider,
            base_url=attrs.get("base_url", self.instance.base_url),
            api_version=attrs.get("api_version", self.instance.api_version),
        )
        # Only what this change touches: a key saved before a rule existed can still be drained.
        touched = {field: [message] for field, message in missing.items() if field in attrs}
        if touched:
            raise serializers.ValidationError(touched)
        return attrs


class ProviderKeyRotateSerializer(serializers.Serializer):
    key = secret_field()


class ProviderKeyUpdateSchema(OpenApiSerializerExtension):
    """States the PATCH's one rule between fields: ``base_url`` and ``key`` come together or not at
    all (OpenAPI 3.0 has no ``dependentRequired``; ``not``/``anyOf`` say the same)."""

    target_class = ProviderKeyUpdateSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["allOf"] = [
            {"anyOf": [{"not": {"required": ["base_url"]}}, {"required": ["key"]}]},
            {"anyOf": [{"not": {"required": ["key"]}}, {"required": ["base_url"]}]},
        ]
        return schema


class ProviderKeyCreateSchema(OpenApiSerializerExtension):
    """States ``missing_settings``: Azure OpenAI and OpenAI-compatible keys need a base URL (they have
    no default address), Azure OpenAI an api_version too. Left to the 400: a host that does not
    resolve, or resolves to a refused address."""

    target_class = ProviderKeyCreateSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["allOf"] = [
            {
                "anyOf": [
                    {"properties": {"provider": {"not": {"enum": [str(p) for p in NEEDS_BASE_URL]}}}},
                    {"required": ["base_url"], "properties": {"base_url": {"minLength": 1}}},
                ]
            },
            {
                "anyOf": [
                    {"properties": {"provider": {"not": {"enum": [str(p) for p in NEEDS_API_VERSION]}}}},
                    {"required": ["api_version"], "properties": {"api_version": {"minLength": 1}}},
                ]
            },
        ]
        return schema
