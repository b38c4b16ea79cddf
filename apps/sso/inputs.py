"""An SSO connection as it is written (the bodies of POST and PATCH /api/v1/sso/connections, the
admin's form, the console's): its types and shapes, defined once, the fields of one protocol among
them. ``sso_connection_create``, ``sso_connection_update`` and ``sso_connection_check`` parse their
raw input with it before what a schema cannot say (the issuer's address, a change's protocol, the
plan); the API's schema is written from it."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import StrictBooleanField, StrictCharField
from apps.core.api.serializers import ClosedSerializer

from .models import MemberRole, Protocol
from .validation import (
    CERTIFICATE_MAX_LENGTH,
    CERTIFICATE_SCHEMA_PATTERN,
    DOMAIN_SCHEMA_PATTERN,
    ENTITY_ID_MAX_LENGTH,
    ENTITY_ID_SCHEMA_PATTERN,
    ISSUER_MAX_LENGTH,
    ISSUER_SCHEMA_PATTERN,
    MAX_DOMAINS,
    SSO_URL_MAX_LENGTH,
    SSO_URL_SCHEMA_PATTERN,
    clean_certificate,
    clean_domain,
    clean_entity_id,
    clean_issuer,
    clean_sso_url,
)

SECRET_MIN_LENGTH = 8
SECRET_MAX_LENGTH = 4096
# The fields each protocol needs; a connection has those of its protocol only.
PROTOCOL_FIELDS = {
    Protocol.OIDC: ("issuer", "client_id", "client_secret"),
    Protocol.SAML: ("idp_entity_id", "idp_sso_url", "idp_certificate"),
}
OIDC_FIELDS = PROTOCOL_FIELDS[Protocol.OIDC]
SAML_FIELDS = PROTOCOL_FIELDS[Protocol.SAML]


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


def _pattern_field(*, pattern: str, max_length: int, clean, description: str):
    """A string field that the OpenAPI document states with ``pattern`` and that ``clean`` checks."""

    @extend_schema_field(
        {"type": "string", "pattern": pattern, "maxLength": max_length, "description": description}
    )
    class Field(StrictCharField):
        def __init__(self, **kwargs):
            super().__init__(max_length=max_length, trim_whitespace=False, **kwargs)

        def to_internal_value(self, data) -> str:
            try:
                return clean(super().to_internal_value(data))
            except ValueError as error:
                raise serializers.ValidationError(str(error)) from None

    return Field


EntityIdField = _pattern_field(
    pattern=ENTITY_ID_SCHEMA_PATTERN,
    max_length=ENTITY_ID_MAX_LENGTH,
    clean=clean_entity_id,
    description="SAML: the identity provider's entity id (its metadata's entityID).",
)
SsoUrlField = _pattern_field(
    pattern=SSO_URL_SCHEMA_PATTERN,
    max_length=SSO_URL_MAX_LENGTH,
    clean=clean_sso_url,
    description="SAML: the identity provider's single sign-on URL (HTTP-Redirect binding), https.",
)
CertificateField = _pattern_field(
    pattern=CERTIFICATE_SCHEMA_PATTERN,
    max_length=CERTIFICATE_MAX_LENGTH,
    clean=clean_certificate,
    description="SAML: the identity provider's signing certificate, PEM or its base64 body.",
)


# A connection's writable fields; the API's SsoConnectionWriteSerializer is these (parsed partial for a
# PATCH). Closed: an unknown field is refused. The client secret's messages (DRF's, of its length and
# type) never repeat its value. (No docstring: the API's schema would take it as its components'
# description.)
class SsoConnectionInputSerializer(ClosedSerializer):
    name = StrictCharField(max_length=200)
    protocol = serializers.ChoiceField(
        choices=Protocol.choices,
        required=False,
        help_text="oidc (default) or saml; a connection's protocol does not change.",
    )
    issuer = IssuerField(required=False)
    client_id = StrictCharField(max_length=500, required=False)
    client_secret = StrictCharField(
        min_length=SECRET_MIN_LENGTH,
        max_length=SECRET_MAX_LENGTH,
        write_only=True,
        required=False,
        help_text="Write-only: responses show client_secret_hint, its last four characters.",
    )
    idp_entity_id = EntityIdField(required=False)
    idp_sso_url = SsoUrlField(required=False)
    idp_certificate = CertificateField(required=False)
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

    def validate(self, attrs: dict) -> dict:
        """The fields of one protocol: all of them for a new connection (OpenID Connect unless
        ``protocol`` says saml), never both protocols' in one body. A change is checked against the
        stored connection's protocol by the services."""
        oidc = [field for field in OIDC_FIELDS if field in attrs]
        saml = [field for field in SAML_FIELDS if field in attrs]
        if self.partial:
            if oidc and saml:
                message = "Fields of one protocol only."
                raise serializers.ValidationError({field: [message] for field in oidc + saml})
            return attrs
        saml_connection = attrs.get("protocol") == Protocol.SAML
        errors = {}
        for field in OIDC_FIELDS:
            if saml_connection and field in attrs:
                errors[field] = ["Not a field of a SAML 2.0 connection."]
            elif not saml_connection and field not in attrs:
                errors[field] = ["Required for an OpenID Connect connection."]
        for field in SAML_FIELDS:
            if not saml_connection and field in attrs:
                errors[field] = ["Not a field of an OpenID Connect connection (protocol: saml)."]
            elif saml_connection and field not in attrs:
                errors[field] = ["Required for a SAML 2.0 connection."]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs
