"""``manage.py prepare``: what ``make run`` does before it serves, in one process (one Django start
instead of three): the migrations, the first admin (``bootstrap_admin``), the static files,
collected again only when the set of them changed since the last collection, and the metrics folder
rid of the files of processes no longer running (the node's processes, which start after it, count
afresh).

Collecting is the slow part (WhiteNoise compresses and hashes every file: seconds), and the files
change only with the code or an install, so an unchanged tree starts without it. What changed is told
by a stamp of every file's path, size and modification time, compared for equality (a deployment
that keeps files' times, as rsync -a or an image build does, still collects a changed set). A static
file that was removed stays collected until ``manage.py collectstatic --clear``.
"""

import hashlib
import logging
import time
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection

from apps.core.preparation import run_steps

MANIFEST = "staticfiles.json"  # written by the manifest storage
STAMP_SUFFIX = ".stamp"  # what was collected: beside STATIC_ROOT, where it is not served
IGNORED = ["CVS", ".*", "*~"]  # collectstatic's default ignore patterns

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    # Django's system checks load every URL, the admin and the API (seconds of a start); the suite
    # runs them (tests/test_deployment.py), and `manage.py check` does on demand.
    requires_system_checks: list[str] = []
    help = (
        "Migrates, creates the first admin when there is none, collects the static files when they "
        "changed and clears stopped processes' metrics: what `make run` does before it serves."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--no-static",
            action="store_true",
            help="leave the static files alone (the container image collects them when it is built)",
        )

    def handle(self, *args, no_static: bool = False, **options):
        verbosity = options["verbosity"]
        with one_at_a_time():
            call_command("migrate", interactive=False, verbosity=max(0, verbosity - 1))
            # Says something only when it made the first owner (and the password, when generated).
            call_command("bootstrap_admin", verbosity=max(0, verbosity - 1))
        if not no_static:
            collect_static_files_if_changed(verbosity)
        run_steps()  # the apps' own (apps/core/preparation.py): the metrics of stopped processes


# Any constant: the advisory lock's number, the same in every process of every node.
PREPARE_LOCK = 0x6761_7465_7761_7900


@contextmanager
def one_at_a_time():
    """Nodes started together on one PostgreSQL (a rollout, a compose file's replicas) prepare one after
    the other: two at once would both find no organization and both create the first owner (one failing
    on the unique address and stopping its node), and would run the same migrations side by side. A
    session advisory lock, held until the block ends (PostgreSQL drops it with a holder that dies);
    SQLite is one node's own file. Through PgBouncer's transaction mode a session lock does not work:
    run the migrations on a direct connection."""
    if connection.vendor != "postgresql":
        yield
        return
    waited = 0.0
    while not _try_lock():
        if waited % LOCK_REPORT_SECONDS == 0:
            logger.info("Waiting for another node's prepare (migrations, first owner) to finish")
        time.sleep(LOCK_POLL_SECONDS)
        waited += LOCK_POLL_SECONDS
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [PREPARE_LOCK])
        except DatabaseError:  # a broken connection: the lock went with its session
            pass


LOCK_POLL_SECONDS = 0.5
LOCK_REPORT_SECONDS = 10.0


def _try_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [PREPARE_LOCK])
        return bool(cursor.fetchone()[0])


def collect_static_files_if_changed(verbosity: int) -> None:
    stamp = static_files_stamp()
    root = Path(settings.STATIC_ROOT)
    if static_files_changed(root, stamp):
        call_command("collectstatic", interactive=False, verbosity=max(0, verbosity - 1))
        _stamp_path(root).write_text(stamp)


def static_files_stamp() -> str:
    """The path, size and modification time of every static file any finder serves, hashed: a
    listing and a stat per file, milliseconds against seconds for collecting."""
    digest = hashlib.sha256()
    for finder in finders.get_finders():
        for path, storage in sorted(finder.list(IGNORED), key=lambda found: found[0]):
            status = Path(storage.path(path)).stat()
            digest.update(f"{path}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def static_files_changed(root: Path, stamp: str) -> bool:
    try:
        return not (root / MANIFEST).exists() or _stamp_path(root).read_text() != stamp
    except FileNotFoundError:
        return True


def _stamp_path(root: Path) -> Path:
    return root.with_name(root.name + STAMP_SUFFIX)
