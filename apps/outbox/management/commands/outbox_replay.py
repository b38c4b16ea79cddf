"""Delivers the dead letters again: items the database refused while it answered.

Run it after fixing what made them fail (an upgrade, a restored organization). Items the database
takes now are written, once (inserts are idempotent by request id, so a replay that is repeated or
interrupted does no harm); items it still refuses stay in the dead-letter file for the next run.
"""

from django.core.management.base import BaseCommand, CommandError

from apps.outbox.ingest import DatabaseUnavailable
from apps.outbox.outbox import outbox


class Command(BaseCommand):
    help = "Replays the outbox's dead-letter file (audit entries and other items the database refused)."

    def handle(self, *args, **options) -> None:
        box = outbox()
        try:
            report = box.replay_dead_letters()
        except DatabaseUnavailable as error:
            raise CommandError(f"Nothing replayed: {error}.") from error
        self.stdout.write(
            f"Replayed {report.replayed} item(s); {report.kept} still failing"
            + (f", kept in {box.dead_letter_path}" if report.kept else "")
            + "."
        )
        if report.unreadable:
            self.stderr.write(
                f"{report.unreadable} line(s) cannot be decrypted with GATEWAY_ENCRYPTION_KEYS (a key "
                f"removed too early?); set aside in {box.corrupt_dead_letter_path}."
            )
