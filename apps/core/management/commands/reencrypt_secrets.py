"""Re-encrypts every secret stored at rest under the first of ``GATEWAY_ENCRYPTION_KEYS``: provider
key secrets, webhook signing secrets (the current one and, during a roll, the previous one), SSO
connections' client secrets, and the two-factor secrets allauth keeps in ``Authenticator.data``
(the TOTP key and the recovery codes' seed, encrypted by apps/accounts/adapter.py's ``MfaAdapter``).

Rotating the encryption key: put the new key first, deploy, run this, then drop the old key
(apps/core/crypto.py). The plaintext never changes, so routing, signatures, single sign-on and
two-factor codes are not disturbed, and no configuration generation is bumped.

Each app registers the secrets it stores in apps/core/stored_secrets.py (in its ``AppConfig.ready``);
the command asks the registry, so core imports none of them.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from apps.core import crypto
from apps.core.stored_secrets import StoredSecrets, registered


class Command(BaseCommand):
    help = (
        "Re-encrypts stored secrets (provider keys, webhooks, SSO connections, two-factor secrets) under "
        "the first GATEWAY_ENCRYPTION_KEYS key."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch-size", type=int, default=500, help="Rows per transaction (default 500).")

    def handle(self, *args, batch_size: int, **options) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        for secrets in registered.values():
            done = self._reencrypt(secrets, batch_size)
            self.stdout.write(f"Re-encrypted {done} {secrets.label} secret(s).")

    def _reencrypt(self, secrets: StoredSecrets, batch_size: int) -> int:
        model, fields, label = secrets.rows.model, secrets.fields, secrets.label
        done, last_pk = 0, None
        while True:
            with transaction.atomic():
                # Locked, so a change committed meanwhile (a rotated key, a used recovery code) is
                # never overwritten by the row as it was read.
                rows = secrets.rows.select_for_update().only("id", *fields).order_by("pk")
                if last_pk is not None:
                    rows = rows.filter(pk__gt=last_pk)
                batch = list(rows[:batch_size])
                if not batch:
                    return done
                for row in batch:
                    try:
                        secrets.reencrypt(row, fields)
                    except crypto.InvalidToken as error:
                        raise CommandError(
                            f"The secret of {label} {row.pk} cannot be decrypted with any of "
                            f"GATEWAY_ENCRYPTION_KEYS. {done} {label} secret(s) in earlier batches were "
                            "re-encrypted, the rest left as they were; running again is safe."
                        ) from error
                # bulk_update leaves updated_at alone: the row itself did not change.
                model._default_manager.bulk_update(batch, list(fields))
            done += len(batch)
            last_pk = batch[-1].pk
