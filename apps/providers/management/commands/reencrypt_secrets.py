"""Re-encrypts every provider key's secret under the first of ``GATEWAY_ENCRYPTION_KEYS``.

Rotating the encryption key: put the new key first, deploy, run this, then drop the old key
(apps/core/crypto.py). The plaintext never changes, so routing is not disturbed and no
configuration generation is bumped.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from apps.core import crypto
from apps.providers.models import ProviderKey


class Command(BaseCommand):
    help = "Re-encrypts every stored provider key secret under the first GATEWAY_ENCRYPTION_KEYS key."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch-size", type=int, default=500, help="Rows per transaction (default 500).")

    def handle(self, *args, batch_size: int, **options) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        done, last_pk = 0, None
        while True:
            with transaction.atomic():
                # Locked, so a rotation committed meanwhile is never overwritten by the old secret.
                rows = ProviderKey.objects.select_for_update().only("id", "secret_encrypted").order_by("pk")
                if last_pk is not None:
                    rows = rows.filter(pk__gt=last_pk)
                batch = list(rows[:batch_size])
                if not batch:
                    break
                for provider_key in batch:
                    try:
                        provider_key.secret_encrypted = crypto.reencrypt(provider_key.secret_encrypted)
                    except crypto.InvalidToken as error:
                        raise CommandError(
                            f"The secret of provider key {provider_key.pk} cannot be decrypted with any of "
                            f"GATEWAY_ENCRYPTION_KEYS. {done} secret(s) in earlier batches were "
                            "re-encrypted, the rest left as they were; running again is safe."
                        ) from error
                # bulk_update leaves updated_at alone: the key itself did not change.
                ProviderKey.objects.bulk_update(batch, ["secret_encrypted"])
            done += len(batch)
            last_pk = batch[-1].pk
        self.stdout.write(f"Re-encrypted {done} provider key secret(s).")
