"""How API key secrets are made and recognised. Only the prefix and the digest are ever stored."""

import base64
import hashlib
import secrets

from django.conf import settings

PREFIX_LENGTH = 12


def generate_api_key() -> str:
    # 32 random bytes, URL-safe base64 without padding: 43 characters after the prefix.
    random_part = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
    return settings.GATEWAY_API_KEY_PREFIX + random_part


def api_key_digest(key: str | bytes) -> str:
    raw = key.encode() if isinstance(key, str) else key
    return hashlib.sha256(raw).hexdigest()


def api_key_prefix(key: str) -> str:
    return key[:PREFIX_LENGTH]
