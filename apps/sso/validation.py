"""The rules of a connection's fields, in one place: the API's serializer, the admin form and the
services all ask these. Each returns the normalized value or raises ``ValueError`` with a message
that never repeats a secret."""

import re

MAX_DOMAINS = 50
# An ASCII host name of two labels or more (an internationalized domain in its xn-- form), the
# last one not all digits so an address is not taken for a domain.
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
DOMAIN_PATTERN = re.compile(rf"^(?:{_LABEL}\.)+(?!\d+$){_LABEL}$")
# The same, as the OpenAPI document states it: either case (the domain is stored lowercased).
DOMAIN_SCHEMA_PATTERN = DOMAIN_PATTERN.pattern.replace("a-z0-9", "A-Za-z0-9")
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
# A host name or IPv4 literal, an optional port, a path of RFC 3986's characters (no query or fragment).
_PATH = r"(?:/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*)?"
ISSUER_SCHEMA_PATTERN = rf"^https://{_HOST_LABEL}(?:\.{_HOST_LABEL})*(?::{_PORT})?{_PATH}$"
ISSUER_PATTERN = re.compile(ISSUER_SCHEMA_PATTERN)
ISSUER_MAX_LENGTH = 500


def clean_domain(value: str) -> str:
    domain = value.lower()
    if len(domain) > 253 or not DOMAIN_PATTERN.fullmatch(domain):
        raise ValueError(
            f"{value[:100]!r} is not a domain name (example.com; an internationalized one in its xn-- form)."
        )
    return domain


def clean_domains(values: list[str]) -> list[str]:
    if not values:
        raise ValueError("At least one email domain: sign-in finds the connection by the email's domain.")
    if len(values) > MAX_DOMAINS:
        raise ValueError(f"At most {MAX_DOMAINS} domains.")
    return sorted({clean_domain(value) for value in values})


def clean_issuer(value: str) -> str:
    """An OpenID Connect issuer: an https URL without credentials, query or fragment (OIDC
    Discovery 1.0, section 3); a trailing slash is kept, since the issuer is compared exactly.
    One pattern, the one the OpenAPI document states, so the API and its schema agree."""
    if len(value) > ISSUER_MAX_LENGTH or not ISSUER_PATTERN.fullmatch(value):
        raise ValueError("The issuer is an https URL without query or fragment (https://login.example.com).")
    return value


# SAML 2.0 connections: the identity provider's entity id (a URI or URN, printable ASCII without
# spaces), its single sign-on URL (https, a query allowed: some identity providers put their tenant
# there), and its signing certificate (base64 DER, the PEM armour and line breaks optional).
ENTITY_ID_MAX_LENGTH = 1024
ENTITY_ID_SCHEMA_PATTERN = r"^[!-~]+$"
_QUERY = r"(?:\?(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*)?"
SSO_URL_SCHEMA_PATTERN = ISSUER_SCHEMA_PATTERN.removesuffix("$") + _QUERY + "$"
SSO_URL_PATTERN = re.compile(SSO_URL_SCHEMA_PATTERN)
SSO_URL_MAX_LENGTH = 1000
CERTIFICATE_MAX_LENGTH = 16384
CERTIFICATE_SCHEMA_PATTERN = (
    r"^\s*(?:-----BEGIN CERTIFICATE-----)?[A-Za-z0-9+/=\s]*[A-Za-z0-9+/][A-Za-z0-9+/=\s]*"
    r"(?:-----END CERTIFICATE-----)?\s*$"
)
CERTIFICATE_PATTERN = re.compile(CERTIFICATE_SCHEMA_PATTERN)


def clean_entity_id(value: str) -> str:
    if len(value) > ENTITY_ID_MAX_LENGTH or not re.fullmatch(ENTITY_ID_SCHEMA_PATTERN, value):
        raise ValueError("The entity id is a URI without spaces (https://idp.example.com/metadata).")
    return value


def clean_sso_url(value: str) -> str:
    if len(value) > SSO_URL_MAX_LENGTH or not SSO_URL_PATTERN.fullmatch(value):
        raise ValueError(
            "The single sign-on URL is an https URL without fragment (https://idp.example.com/sso)."
        )
    return value


def clean_certificate(value: str) -> str:
    """The certificate as python3-saml takes it: base64 without armour or whitespace. Its content is
    checked when a response's signature is (an unreadable one signs no one in); the console shows
    whether it reads (``certificate_summary``)."""
    if len(value) > CERTIFICATE_MAX_LENGTH or not CERTIFICATE_PATTERN.fullmatch(value):
        raise ValueError("The certificate is PEM (-----BEGIN CERTIFICATE-----) or its base64 body.")
    body = value.replace("-----BEGIN CERTIFICATE-----", "").replace("-----END CERTIFICATE-----", "")
    return "".join(body.split())


def certificate_summary(value: str) -> dict | None:
    """The SHA-256 fingerprint, subject and expiry of a stored certificate; None when it does not read."""
    import base64
    import binascii

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    try:
        certificate = x509.load_der_x509_certificate(base64.b64decode(value, validate=True))
    except (ValueError, binascii.Error):
        return None
    return {
        "fingerprint": certificate.fingerprint(hashes.SHA256()).hex(":").upper(),
        "subject": certificate.subject.rfc4514_string(),
        "not_after": certificate.not_valid_after_utc,
    }
