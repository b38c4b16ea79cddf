"""Secrets at rest (provider keys, webhook secrets) are encrypted with Fernet.

``GATEWAY_ENCRYPTION_KEYS`` is a comma-separated list of Fernet keys: the first encrypts, all of
them decrypt, so a key is rotated by putting a new one first and running
``manage.py reencrypt_secrets`` before dropping the old one. Without the setting (the embedded
default) a key is derived from ``SECRET_KEY``; production should set it, because changing
``SECRET_KEY`` would otherwise make stored secrets unreadable.

The audit spool's lines, one per proxied request, are sealed with AES-256-GCM instead
(``seal_line``), under the same keys.
"""

import base64
import binascii
import hashlib
import itertools
import os
import threading
from functools import cache, lru_cache

from cryptography.exceptions import InvalidTag
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = ["InvalidToken", "decrypt", "encrypt", "open_line", "seal_line"]


def _keys() -> tuple[str, ...]:
    keys = list(settings.GATEWAY_ENCRYPTION_KEYS)
    if not keys:
        derived = hashlib.sha256(b"gateway-secrets-at-rest:" + settings.SECRET_KEY.encode()).digest()
        keys = [base64.urlsafe_b64encode(derived).decode()]
    return tuple(keys)


@cache
def _fernet() -> MultiFernet:
    try:
        return MultiFernet([Fernet(key) for key in _keys()])
    except ValueError as error:
        raise ImproperlyConfigured(
            "GATEWAY_ENCRYPTION_KEYS must be Fernet keys (32 url-safe base64-encoded bytes)"
        ) from error


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    return _fernet().decrypt(token.encode()).decode()


def reencrypt(token: str) -> str:
    """The same secret under the current first key."""
    return _fernet().rotate(token.encode()).decode()


# --- The audit spool's lines ---------------------------------------------------------------------
#
# Every proxied request appends one line to its process's spool (apps/outbox/spool.py). Fernet makes a
# new AES-CBC and HMAC context for each token: 36 us a line, 4 % of a request's CPU. Here a line is
# AES-256-GCM under a key of this process's own, derived (HKDF-SHA256) from the first encryption key
# and a random salt, with a counter for nonce: 6 us. A key per process and a counter mean a nonce is
# never used twice under one key, however many lines a process writes (random nonces under one
# shared key would wear out after 2^32 lines, weeks of a busy gateway's requests).
#
# A line: ``g1.`` + base64(salt 16 bytes | nonce 12 bytes | ciphertext and tag). Lines of an older
# release (Fernet tokens) are still read, so an upgrade leaves no spool file unreadable.

LINE_PREFIX = b"g1."
_SALT_BYTES = 16
_NONCE_BYTES = 12


def _line_key(secret: str, salt: bytes) -> bytes:
    material = base64.urlsafe_b64decode(secret)
    return HKDF(algorithm=SHA256(), length=32, salt=salt, info=b"gateway spool line").derive(material)


class _LineSealer:
    """This process's key and nonce counter; a forked child makes its own (``_after_fork``)."""

    def __init__(self) -> None:
        self.salt = os.urandom(_SALT_BYTES)
        self.cipher = AESGCM(_line_key(_keys()[0], self.salt))
        self.counter = itertools.count()  # next() is atomic: threads may seal at once

    def seal(self, plaintext: bytes) -> bytes:
        nonce = next(self.counter).to_bytes(_NONCE_BYTES, "big")
        sealed = self.salt + nonce + self.cipher.encrypt(nonce, plaintext, None)
        return LINE_PREFIX + binascii.b2a_base64(sealed, newline=False)


_sealer: _LineSealer | None = None
_sealer_lock = threading.Lock()


def seal_line(plaintext: bytes) -> bytes:
    """``plaintext`` encrypted and authenticated, as one line's bytes (no newline in it)."""
    global _sealer
    sealer = _sealer
    if sealer is None:
        with _sealer_lock:
            if _sealer is None:
                _sealer = _LineSealer()
            sealer = _sealer
    return sealer.seal(plaintext)


def _after_fork() -> None:
    # A child sharing its parent's key and counter would reuse its nonces: it makes its own (and its
    # own lock, which a fork taken while another thread held it would leave held).
    global _sealer, _sealer_lock
    _sealer, _sealer_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


@lru_cache(maxsize=64)
def _line_ciphers(salt: bytes) -> tuple[AESGCM, ...]:
    # One per encryption key: a line sealed before a rotation opens with the key it was sealed with.
    return tuple(AESGCM(_line_key(secret, salt)) for secret in _keys())


def open_line(line: bytes) -> bytes:
    """What ``seal_line`` sealed (or an older release's Fernet token); ``InvalidToken`` otherwise."""
    if not line.startswith(LINE_PREFIX):
        return _fernet().decrypt(line)
    try:
        sealed = binascii.a2b_base64(line[len(LINE_PREFIX) :], strict_mode=True)
    except binascii.Error as error:
        raise InvalidToken from error
    salt, nonce = sealed[:_SALT_BYTES], sealed[_SALT_BYTES : _SALT_BYTES + _NONCE_BYTES]
    ciphertext = sealed[_SALT_BYTES + _NONCE_BYTES :]
    if len(salt) < _SALT_BYTES or len(nonce) < _NONCE_BYTES or not ciphertext:
        raise InvalidToken
    for cipher in _line_ciphers(salt):
        try:
            return cipher.decrypt(nonce, ciphertext, None)
        except InvalidTag:
            continue
    raise InvalidToken


def forget_keys() -> None:
    """Reads the keys again on next use (the tests that change ``GATEWAY_ENCRYPTION_KEYS``)."""
    global _sealer
    _fernet.cache_clear()
    _line_ciphers.cache_clear()
    _sealer = None
