"""Webhook secrets and the signature every delivery carries (docs/webhooks.md).

``x-gateway-signature: t=<unix seconds>,v1=<hex>``: v1 is HMAC-SHA256 of ``"<t>.<raw body>"`` keyed by
the whole secret string (``whsec_...``) as UTF-8. While a secret is being rolled both secrets sign, so
the header carries two ``v1=`` values and a receiver accepts the delivery if either matches.
"""

import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"


def generate_secret() -> str:
    """``whsec_`` and 32 random bytes, URL-safe base64 without padding."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(signing_secrets: list[str], timestamp: int, body: bytes) -> str:
    return ",".join([f"t={timestamp}", *(f"v1={signature(s, timestamp, body)}" for s in signing_secrets)])
