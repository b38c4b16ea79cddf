from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import StrictCharField
from apps.core.api.serializers import ClosedSerializer
from apps.sso import dns
from apps.sso.inputs import OIDC_FIELDS, SAML_FIELDS, SsoConnectionInputSerializer
from apps.sso.models import Protocol, SsoConnection, SsoDomain

# One "@" with something on either side; the domain after it chooses the connection (an unknown
# one answers 404 sso_connection_not_found).
EMAIL_SCHEMA_PATTERN = r"^[^@\u0000]+@[^@\u0000]+$"


class SsoConnectionSerializer(serializers.ModelSerializer):
    """What the API shows of a connection: never the client secret, only its last four characters.
    The fields of the other protocol are null."""

    issuer = serializers.SerializerMethodField()
    client_id = serializers.SerializerMethodField()
    client_secret_hint = serializers.SerializerMethodField()
    idp_entity_id = serializers.SerializerMethodField()
    idp_sso_url = serializers.SerializerMethodField()
    idp_certificate = serializers.SerializerMethodField()
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
            "idp_entity_id",
            "idp_sso_url",
            "idp_certificate",
            "allowed_domains",
            "default_role",
            "is_active",
            "require_sso",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    @staticmethod
    def _of(connection: SsoConnection, protocol: str, value):
        return value if connection.protocol == protocol else None

    @extend_schema_field({"type": "string", "nullable": True, "description": "OpenID Connect; else null."})
    def get_issuer(self, connection: SsoConnection) -> str | None:
        return self._of(connection, Protocol.OIDC, connection.issuer)

    @extend_schema_field({"type": "string", "nullable": True, "description": "OpenID Connect; else null."})
    def get_client_id(self, connection: SsoConnection) -> str | None:
        return self._of(connection, Protocol.OIDC, connection.client_id)

    @extend_schema_field(
        {"type": "string", "nullable": True, "description": "OpenID Connect: … and the secret's last four."}
    )
    def get_client_secret_hint(self, connection: SsoConnection) -> str | None:
        return self._of(connection, Protocol.OIDC, f"…{connection.client_secret_hint}")

    @extend_schema_field({"type": "string", "nullable": True, "description": "SAML; else null."})
    def get_idp_entity_id(self, connection: SsoConnection) -> str | None:
        return self._of(connection, Protocol.SAML, connection.idp_entity_id)

    @extend_schema_field({"type": "string", "nullable": True, "description": "SAML; else null."})
    def get_idp_sso_url(self, connection: SsoConnection) -> str | None:
        return self._of(connection, Protocol.SAML, connection.idp_sso_url)

    @extend_schema_field(
        {"type": "string", "nullable": True, "description": "SAML: the certificate's base64 body; else null."}
    )
    def get_idp_certificate(self, connection: SsoConnection) -> str | None:
        return self._of(connection, Protocol.SAML, connection.idp_certificate)


class SsoConnectionWriteSerializer(SsoConnectionInputSerializer):
    """A new connection, or with ``partial=True`` a change of one (the secret replaced only when
    given)."""


class SsoConnectionWriteSchema(OpenApiSerializerExtension):
    """Unknown fields are refused (ClosedSerializer, whose schema says so). A new connection is
    one of two shapes, OpenID Connect (``protocol`` absent or ``oidc``) or SAML 2.0 (``protocol:
    saml``), each with its own fields required and the other's absent."""

    target_class = SsoConnectionWriteSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if self.target.partial:  # a change's rules depend on the stored connection
            return schema
        properties = schema["properties"]
        common = {
            name: value for name, value in properties.items() if name not in (*OIDC_FIELDS, *SAML_FIELDS)
        }
        common_required = ["name", "allowed_domains"]

        def shape(protocol: str, fields: tuple, *, protocol_required: bool) -> dict:
            return {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    **common,
                    # A pattern, not an enum: drf-spectacular would merge the two one-value enums.
                    "protocol": {
                        "type": "string",
                        "pattern": f"^{protocol}$",
                        "description": properties["protocol"].get("description", ""),
                    },
                    **{field: properties[field] for field in fields},
                },
                "required": [*common_required, *(["protocol"] if protocol_required else []), *fields],
            }

        return {
            "oneOf": [
                shape("oidc", OIDC_FIELDS, protocol_required=False),
                shape("saml", SAML_FIELDS, protocol_required=True),
            ],
            "not": {
                "required": ["require_sso", "is_active"],
                "properties": {"require_sso": {"enum": [True]}, "is_active": {"enum": [False]}},
                "description": "Only an active connection can require single sign-on.",
            },
        }


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
        schema["properties"]["email"]["pattern"] = EMAIL_SCHEMA_PATTERN
        schema["oneOf"] = [{"required": ["email"]}, {"required": ["organization"]}]
        return schema


class SsoAuthorizationSerializer(serializers.Serializer):
    authorization_url = serializers.URLField(
        read_only=True,
        help_text="The identity provider's authorization endpoint with client_id, redirect_uri, scope, "
        "state, nonce and the PKCE challenge (S256). Open it in the browser that should be signed in.",
    )


class TxtRecordSerializer(serializers.Serializer):
    name = serializers.CharField()
    type = serializers.CharField()
    value = serializers.CharField()


class SsoDomainSerializer(serializers.ModelSerializer):
    """A domain the organization's connections name, and whether the organization has proved it owns
    it (it routes and refuses nothing before)."""

    verified = serializers.BooleanField(source="is_verified")
    txt_record = serializers.SerializerMethodField(help_text="What to publish to prove it by DNS.")

    class Meta:
        model = SsoDomain
        fields = ("id", "domain", "verified", "verified_at", "verified_by", "txt_record", "created_at")

    @extend_schema_field(TxtRecordSerializer)
    def get_txt_record(self, sso_domain) -> dict:
        return {
            "name": dns.challenge_name(sso_domain.domain),
            "type": "TXT",
            "value": dns.challenge_value(sso_domain.token),
        }
