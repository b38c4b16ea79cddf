"""The secrets each app stores encrypted at rest (apps/core/crypto.py), registered by the app that owns
them, so that ``manage.py reencrypt_secrets`` (apps/core/management/commands/) re-encrypts every one of
them without importing the apps above core. Register in the app's ``AppConfig.ready``, which every
process runs::

    stored_secrets.register(ProviderKey.objects.all(), ("secret_encrypted",), label="provider key")

The command re-encrypts them in the order they were registered (the order of ``INSTALLED_APPS``).
"""

from collections.abc import Callable
from dataclasses import dataclass

from django.db import models

from . import crypto


def reencrypt_tokens(row: models.Model, fields: tuple[str, ...]) -> None:
    """Each field holds one Fernet token, or nothing (a webhook that was never rolled)."""
    for field in fields:
        token = getattr(row, field)
        if token:
            setattr(row, field, crypto.reencrypt(token))


Reencrypt = Callable[[models.Model, tuple[str, ...]], None]


@dataclass(frozen=True)
class StoredSecrets:
    rows: models.QuerySet  # the rows that hold them (lazy; cloned for every batch)
    fields: tuple[str, ...]  # the columns written back
    label: str  # what the report calls one row's secrets
    reencrypt: Reencrypt = reencrypt_tokens  # raises crypto.InvalidToken when no key reads one


registered: dict[str, StoredSecrets] = {}


def register(
    rows: models.QuerySet, fields: tuple[str, ...], *, label: str, reencrypt: Reencrypt = reencrypt_tokens
) -> None:
    registered[label] = StoredSecrets(rows=rows, fields=fields, label=label, reencrypt=reencrypt)
