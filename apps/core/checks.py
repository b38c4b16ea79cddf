"""Deployment checks (``manage.py check --deploy``) for what Django's own checks cannot know."""

from cryptography.fernet import Fernet
from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


@register(Tags.security, deploy=True)
def check_encryption_keys(app_configs, **kwargs) -> list:
    keys = list(settings.GATEWAY_ENCRYPTION_KEYS)
    if not keys:
        return [
            Warning(
                "GATEWAY_ENCRYPTION_KEYS is not set: every stored secret (provider keys, webhook and SSO "
                "client secrets, two-factor secrets) is encrypted with a key derived from SECRET_KEY, "
                "which also signs sessions. Anyone who learns SECRET_KEY can "
                "then read every stored secret, and rotating it makes them unreadable.",
                hint="Set GATEWAY_ENCRYPTION_KEYS to a Fernet key of its own (Fernet.generate_key() from "
                "the cryptography package), then run manage.py reencrypt_secrets.",
                id="gateway.W001",
            )
        ]
    broken = []
    for position, key in enumerate(keys, start=1):
        try:
            Fernet(key)
        except ValueError:
            broken.append(position)
    if broken:
        # Positions, not values: a key is a secret even when it is malformed.
        return [
            Error(
                f"GATEWAY_ENCRYPTION_KEYS: entry {', '.join(map(str, broken))} is not a Fernet key "
                "(32 url-safe base64-encoded bytes).",
                id="gateway.E002",
            )
        ]
    return []
