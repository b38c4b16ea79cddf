from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import StrictBooleanField, StrictCharField
from apps.core.api.serializers import ClosedSerializer
from apps.sso import services
from apps.sso.models import MemberRole, Protocol, SsoConnection
from apps.sso.validation import (
    DOMAIN_SCHEMA_PATTERN,
    ISSUER_MAX_LENGTH,
    ISSUER_SCHEMA_PATTERN,
    MAX_DOMAINS,
    clean_domain,
    clean_issuer,
)

# One "@" with something on either side; the domain after it chooses the connection (an unknown
# one answers 404 sso_connection_not_found).
EMAIL_SCHEMA_PATTERN = r"^[^@\u0000]+@[^@\u0000]+$"


@extend_schema_field(
    {
        "type": "string",
        "pattern": ISSUER_SCHEMA_PATTERN,
        "maxLength": ISSUER_MAX_LENGTH,
        "description": "The OpenID Connect issuer: an https URL without query or fragment.",
    }
)
class IssuerField(StrictCharField):
    def __init__(self, **kwargs):
        super().__init__(max_length=ISSUER_MAX_LENGTH, trim_whitespace=False, **kwargs)

    def to_internal_value(self, data) -> str:
        try:
            return clean_issuer(super().to_internal_value(data))
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None


@extend_schema_field({"type": "string", "pattern": DOMAIN_SCHEMA_PATTERN, "maxLength": 253})
class DomainField(StrictCharField):
    def __init__(self, **kwargs):
        super().__init__(max_length=253, trim_whitespace=False, **kwargs)

    def to_internal_value(self, data) -> str:
        try:
            return clean_domain(super().to_internal_value(data))
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None


class SsoConnectionSerializer(serializers.ModelSerializer):
    """What the API shows of a connection: never the client secret, only its last four characters."""

    client_secret_hint = serializers.SerializerMethodField()
    allowed_domains = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = SsoConnection
        fields = (
            "id",
            "name",
            "protocol",
            "issuer",
            "client_id",
            "client_secret_hint",
            "allowed_domains",
            "default_role",
            "is_active",
            "require_sso",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    def get_client_secret_hint(self, connection: SsoConnection) -> str:
        return f"…{connection.client_secret_hint}"


class SsoConnectionWriteSerializer(ClosedSerializer):
    """A new connection, or with ``partial=True`` a change of one (the secret replaced only when
    given)."""

    name = StrictCharField(max_length=200)
    protocol = serializers.ChoiceField(choices=Protocol.choices, required=False)
    issuer = IssuerField()
    client_id = StrictCharField(max_length=500)
    client_secret = StrictCharField(
        min_length=services.SECRET_MIN_LENGTH,
        max_length=services.SECRET_MAX_LENGTH,
        write_only=True,
        help_text="Write-only: responses show client_secret_hint, its last four characters.",
    )
    allowed_domains = serializers.ListField(
        child=DomainField(),
        min_length=1,
        max_length=MAX_DOMAINS,
        help_text="Email domains whose users sign in through this connection; lowercased. A domain "
        "belongs to at most one active connection across all organizations (409 sso_domain_taken).",
    )
    default_role = serializers.ChoiceField(
        choices=MemberRole.choices, required=False, help_text="The role of members added by sign-in."
    )
    is_active = StrictBooleanField(
        required=False, help_text="Activating needs the growth or enterprise plan."
    )
    require_sso = StrictBooleanField(
        required=False,
        help_text="Refuse password sign-in to the organization's members (an active connection only; "
        "turned off when the connection is deactivated).",
    )


class SsoConnectionWriteSchema(OpenApiSerializerExtension):
    """Unknown fields are refused (ClosedSerializer): the document says so."""

    target_class = SsoConnectionWriteSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        if not self.target.partial:  # a change's rule depends on the stored connection
            schema["not"] = {
                "required": ["require_sso", "is_active"],
                "properties": {"require_sso": {"enum": [True]}, "is_active": {"enum": [False]}},
                "description": "Only an active connection can require single sign-on.",
            }
        return schema


class SsoInitiateSerializer(ClosedSerializer):
    """Either the email of the person signing in (the connection that claims its domain) or the
    organization (its slug or id, when it has one active connection)."""

    email = StrictCharField(
        max_length=254,
        required=False,
        help_text="The address of the person signing in; its domain chooses the connection and it is "
        "passed to the identity provider as login_hint.",
    )
    organization = StrictCharField(
        max_length=80, required=False, help_text="The organization's slug or id (UUID)."
    )

    def validate(self, attrs: dict) -> dict:
        if ("email" in attrs) == ("organization" in attrs):
            raise serializers.ValidationError("Give either email or organization.")
        return attrs


class SsoInitiateSchema(OpenApiSerializerExtension):
    """Exactly one of the two fields, and nothing else, as the serializer says."""

    target_class = SsoInitiateSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        schema["properties"]["email"]["pattern"] = EMAIL_SCHEMA_PATTERN
        schema["oneOf"] = [{"required": ["email"]}, {"required": ["organization"]}]
        return schema


class SsoAuthorizationSerializer(serializers.Serializer):
    authorization_url = serializers.URLField(
        read_only=True,
        help_text="The identity provider's authorization endpoint with client_id, redirect_uri, scope, "
        "state, nonce and the PKCE challenge (S256). Open it in the browser that should be signed in.",
    )
