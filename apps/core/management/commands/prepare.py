"""``manage.py prepare``: what ``make run`` does before it serves, in one process (one Django start
instead of three): the migrations, the first admin (``bootstrap_admin``), and the static files,
collected again only when one of them is newer than the last collection.

Collecting is the slow part (WhiteNoise compresses and hashes every file: seconds), and the files
change only with the code or an install, so an unchanged tree starts without it. A static file
that was removed stays collected until ``manage.py collectstatic --clear``.
"""

from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.core.management.base import BaseCommand

MANIFEST = "staticfiles.json"  # written last by the manifest storage: its time is the collection's
IGNORED = ["CVS", ".*", "*~"]  # collectstatic's default ignore patterns


class Command(BaseCommand):
    # Django's system checks load every URL, the admin and the API (seconds of a start); the suite
    # runs them (tests/test_deployment.py), and `manage.py check` does on demand.
    requires_system_checks: list[str] = []
    help = (
        "Migrates, creates the first admin when there is none, and collects the static files when "
        "they changed: what `make run` does before it serves."
    )

    def handle(self, *args, **options):
        verbosity = options["verbosity"]
        call_command("migrate", interactive=False, verbosity=max(0, verbosity - 1))
        call_command("bootstrap_admin", verbosity=verbosity)
        if static_files_changed():
            call_command("collectstatic", interactive=False, verbosity=max(0, verbosity - 1))


def static_files_changed() -> bool:
    """Whether a static file any finder serves is newer than the last collection (or there was
    none). A listing and a stat per file: milliseconds, against seconds for collecting."""
    try:
        collected = (Path(settings.STATIC_ROOT) / MANIFEST).stat().st_mtime
    except FileNotFoundError:
        return True
    for finder in finders.get_finders():
        for path, storage in finder.list(IGNORED):
            if Path(storage.path(path)).stat().st_mtime > collected:
                return True
    return False
