from rest_framework import serializers

from apps.core.api.fields import REGION_PATTERN, StrictCharField
from apps.core.errors import InvalidRequest
from apps.providers.addresses import check_upstream_url
from apps.providers.models import Provider, ProviderKey


class ProviderKeySerializer(serializers.ModelSerializer):
    """What the API shows of a provider key: never the secret, only its last four characters."""

    key_hint = serializers.SerializerMethodField()

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


class _ProviderKeyFields(serializers.Serializer):
    name = StrictCharField(max_length=200, required=False, allow_blank=True)
    weight = serializers.FloatField(min_value=0, max_value=1_000_000, required=False)
    data_region = serializers.RegexField(REGION_PATTERN, max_length=32)
    base_url = StrictCharField(max_length=500, required=False, allow_blank=True)
    api_version = serializers.RegexField(r"^[0-9a-zA-Z.\-]{1,32}$", required=False, allow_blank=True)
    supports_stream_usage = serializers.BooleanField(required=False)

    def validate_base_url(self, value: str) -> str:
        if not value:
            return value
        try:
            return check_upstream_url(value)
        except InvalidRequest as error:
            raise serializers.ValidationError(error.message) from error


class ProviderKeyCreateSerializer(_ProviderKeyFields):
    provider = serializers.ChoiceField(choices=Provider.choices)
    key = StrictCharField(max_length=4096, min_length=4, trim_whitespace=True)

    def validate(self, attrs):
        provider = attrs["provider"]
        if provider in (Provider.AZURE_OPENAI, Provider.OPENAI_COMPATIBLE) and not attrs.get("base_url"):
            raise serializers.ValidationError({"base_url": [f"A base URL is required for {provider}."]})
        if provider == Provider.AZURE_OPENAI and not attrs.get("api_version"):
            raise serializers.ValidationError({"api_version": ["Azure OpenAI needs an api_version."]})
        return attrs


class ProviderKeyUpdateSerializer(_ProviderKeyFields):
    data_region = serializers.RegexField(REGION_PATTERN, max_length=32, required=False)
    is_active = serializers.BooleanField(required=False)


class ProviderKeyRotateSerializer(serializers.Serializer):
    key = StrictCharField(max_length=4096, min_length=4, trim_whitespace=True)
