from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers

from apps.providers.inputs import (
    ProviderKeyChangeInputSerializer,
    ProviderKeyCreateInputSerializer,
    ProviderKeyRotateInputSerializer,
    UpstreamUrlField,
)
from apps.providers.models import NEEDS_API_VERSION, NEEDS_BASE_URL, ProviderKey


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
            "speaks_responses",
            "is_active",
            "created_at",
            "updated_at",
            "rotated_at",
        )
        read_only_fields = fields

    def get_key_hint(self, provider_key: ProviderKey) -> str:
        return f"…{provider_key.key_hint}"


# The bodies of POST, PATCH and rotate: the inputs' fields (apps/providers/inputs.py), which the
# services parse themselves; named here for the API's schema.
class ProviderKeyCreateSerializer(ProviderKeyCreateInputSerializer):
    pass


class ProviderKeyUpdateSerializer(ProviderKeyChangeInputSerializer):
    """A partial update of ``instance``. The secret changes through rotate, or with ``base_url``
    (which needs it: apps/providers/services.py); the provider never changes: a key of another
    provider is another key."""


class ProviderKeyRotateSerializer(ProviderKeyRotateInputSerializer):
    pass


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
