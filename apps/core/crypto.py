"""Secrets at rest (provider keys, webhook secrets) are encrypted with Fernet.

``GATEWAY_ENCRYPTION_KEYS`` is a comma-separated list of Fernet keys: the first encrypts, all of
them decrypt, so a key is rotated by putting a new one first and running
``manage.py reencrypt_secrets`` before dropping the old one. Without the setting (the embedded
default) a key is derived from ``SECRET_KEY``; production should set it, because changing
``SECRET_KEY`` would otherwise make stored secrets unreadable.
"""

import base64
import hashlib
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = ["InvalidToken", "decrypt", "encrypt"]


@cache
def _fernet() -> MultiFernet:
    keys = list(settings.GATEWAY_ENCRYPTION_KEYS)
    if not keys:
        derived = hashlib.sha256(b"gateway-secrets-at-rest:" + settings.SECRET_KEY.encode()).digest()
        keys = [base64.urlsafe_b64encode(derived).decode()]
    try:
        return MultiFernet([Fernet(key) for key in keys])
    except ValueError as error:
        raise ImproperlyConfigured(
            "GATEWAY_ENCRYPTION_KEYS must be Fernet keys (32 url-safe base64-encoded bytes)"
        ) from error


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    return _fernet().decrypt(token.encode()).decode()


def encrypt_bytes(plaintext: bytes) -> bytes:
    return _fernet().encrypt(plaintext)


def decrypt_bytes(token: bytes) -> bytes:
    return _fernet().decrypt(token)


def reencrypt(token: str) -> str:
    """The same secret under the current first key."""
    return _fernet().rotate(token.encode()).decode()
