"""A provider key as it is written (the bodies of POST and PATCH /api/v1/provider-keys and of its
rotate, the admin's form, the console's): its types and shapes, defined once, with the settings a new
key's provider needs (``missing_settings``) and the secret that a change sends only with a new base
URL. ``provider_key_create``, ``provider_key_update`` (``provider_key_check`` for the admin's form)
and ``provider_key_rotate`` parse their raw input with it before what a schema cannot say (a change
against the stored key, a new base URL's secret); the API's schema is written from it.

The secret is the ``key`` field: write-only, and no message about it repeats its value (DRF's
messages of its length and type never do)."""

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import REGION_PATTERN, StrictBooleanField, StrictCharField
from apps.core.errors import InvalidRequest

from .addresses import check_upstream_url
from .models import Provider, missing_settings

REGION_MESSAGE = "A region label: lower-case letters, digits and '-' (us, eu, us-east)."
# check_upstream_url's rules of form, for the schema: http(s) (any case, as urlsplit reads it), a host
# (a name or a bracketed IPv6 address) without credentials, a port of at most 65535, no query or
# fragment. Whether the host resolves to an address allowed is the one rule left to the 400.
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
_HOST = r"(?:[^\s/?#@\[\]:]+|\[[0-9A-Fa-f:.]+\])"
UPSTREAM_URL_PATTERN = rf"^[Hh][Tt][Tt][Pp][Ss]?://{_HOST}(?::{_PORT}?)?(?:/[^?#]*)?$"


@extend_schema_field(
    {
        "type": "string",
        "format": "upstream-url",
        "pattern": UPSTREAM_URL_PATTERN,
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


def secret_field(**kwargs) -> StrictCharField:
    return StrictCharField(max_length=4096, min_length=4, trim_whitespace=True, write_only=True, **kwargs)


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
    speaks_responses = StrictBooleanField(
        required=False,
        help_text="openai_compatible only: the server serves OpenAI's Responses API itself (recent vLLM), "
        "so /v1/responses is passed through rather than bridged over chat completions.",
    )


# A new key; the API's ProviderKeyCreateSerializer is these. A key is created active (is_active is a
# change's field). Not closed, as the API's serializers never were. (No docstrings on the inputs: the
# API's schema would take one as its components' description.)
class ProviderKeyCreateInputSerializer(_ProviderKeyFields):
    provider = serializers.ChoiceField(choices=Provider.choices)
    key = secret_field()

    def validate(self, attrs):
        missing = missing_settings(
            attrs["provider"], base_url=attrs.get("base_url", ""), api_version=attrs.get("api_version", "")
        )
        if missing:
            raise serializers.ValidationError({field: [message] for field, message in missing.items()})
        return attrs


# A change of a key (parsed partial, as the API's PATCH); the API's ProviderKeyUpdateSerializer is these.
# The secret comes only with a new base URL (the secret for that address; the services refuse the base
# URL without it); otherwise it changes through rotate. The provider never changes: a key of another
# provider is another key. What the stored key's provider needs is checked by the services.
class ProviderKeyChangeInputSerializer(_ProviderKeyFields):
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
        return attrs


# The replacement secret of a rotation; the API's ProviderKeyRotateSerializer is this.
class ProviderKeyRotateInputSerializer(serializers.Serializer):
    key = secret_field()
