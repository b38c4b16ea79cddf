"""The rules of a connection's fields, in one place: the API's serializer, the admin form and the
services all ask these. Each returns the normalized value or raises ``ValueError`` with a message
that never repeats a secret."""

import re
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

MAX_DOMAINS = 50
# An ASCII host name of two labels or more (an internationalized domain in its xn-- form), the
# last one not all digits so an address is not taken for a domain.
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
DOMAIN_PATTERN = re.compile(rf"^(?:{_LABEL}\.)+(?!\d+$){_LABEL}$")
_https = URLValidator(schemes=["https"])


def clean_domain(value: str) -> str:
    domain = value.strip().lower()
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
    Discovery 1.0, section 3); a trailing slash is kept, since the issuer is compared exactly."""
    message = "The issuer is an https URL without query or fragment (https://login.example.com)."
    if len(value) > 500 or value != value.strip():
        raise ValueError(message)
    try:
        _https(value)
    except ValidationError:
        raise ValueError(message) from None
    parts = urlsplit(value)
    if parts.query or parts.fragment or "?" in value or "#" in value or "@" in parts.netloc:
        raise ValueError(message)
    return value
