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
