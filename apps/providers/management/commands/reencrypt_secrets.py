"""Re-encrypts every secret stored at rest under the first of ``GATEWAY_ENCRYPTION_KEYS``: provider
key secrets, and webhook signing secrets (the current one and, during a roll, the previous one).

Rotating the encryption key: put the new key first, deploy, run this, then drop the old key
(apps/core/crypto.py). The plaintext never changes, so routing and signatures are not disturbed and
no configuration generation is bumped.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import models, transaction

from apps.core import crypto
from apps.providers.models import ProviderKey
from apps.webhooks.models import Webhook

# (model, its encrypted fields, what the report calls one row's secrets)
SECRETS: tuple[tuple[type[models.Model], tuple[str, ...], str], ...] = (
    (ProviderKey, ("secret_encrypted",), "provider key"),
    (Webhook, ("secret_encrypted", "previous_secret_encrypted"), "webhook"),
)


class Command(BaseCommand):
    help = "Re-encrypts stored secrets (provider keys, webhooks) under the first GATEWAY_ENCRYPTION_KEYS key."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch-size", type=int, default=500, help="Rows per transaction (default 500).")

    def handle(self, *args, batch_size: int, **options) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        for model, fields, label in SECRETS:
            done = self._reencrypt(model, fields, label, batch_size)
            self.stdout.write(f"Re-encrypted {done} {label} secret(s).")

    def _reencrypt(self, model, fields: tuple[str, ...], label: str, batch_size: int) -> int:
        done, last_pk = 0, None
        while True:
            with transaction.atomic():
                # Locked, so a rotation committed meanwhile is never overwritten by the old secret.
                rows = model.objects.select_for_update().only("id", *fields).order_by("pk")
                if last_pk is not None:
                    rows = rows.filter(pk__gt=last_pk)
                batch = list(rows[:batch_size])
                if not batch:
                    return done
                for row in batch:
                    for field in fields:
                        token = getattr(row, field)
                        if not token:
                            continue  # a webhook that was never rolled has no previous secret
                        try:
                            setattr(row, field, crypto.reencrypt(token))
                        except crypto.InvalidToken as error:
                            raise CommandError(
                                f"The secret of {label} {row.pk} cannot be decrypted with any of "
                                f"GATEWAY_ENCRYPTION_KEYS. {done} {label} secret(s) in earlier batches were "
                                "re-encrypted, the rest left as they were; running again is safe."
                            ) from error
                # bulk_update leaves updated_at alone: the row itself did not change.
                model.objects.bulk_update(batch, list(fields))
            done += len(batch)
            last_pk = batch[-1].pk
