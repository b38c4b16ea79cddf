from django.core.validators import RegexValidator
from rest_framework import serializers

from apps.core.api.fields import REGION_PATTERN, StrictCharField
from apps.core.errors import InvalidRequest
from apps.providers.addresses import check_upstream_url
from apps.providers.models import Provider, ProviderKey, missing_settings

REGION_MESSAGE = "A region label: lower-case letters, digits and '-' (us, eu, us-east)."


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
    base_url = StrictCharField(max_length=500, required=False, allow_blank=True)
    api_version = StrictCharField(
        max_length=32,
        required=False,
        allow_blank=True,
        validators=[RegexValidator(r"^[0-9a-zA-Z.\-]+$", "Letters, digits, '.' and '-' (2024-10-21).")],
    )
    supports_stream_usage = serializers.BooleanField(required=False)

    def validate_base_url(self, value: str) -> str:
        if not value:
            return value
        try:
            return check_upstream_url(value)
        except InvalidRequest as error:
            raise serializers.ValidationError(error.message) from error


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
    is_active = serializers.BooleanField(required=False)
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
