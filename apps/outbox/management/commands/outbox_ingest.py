"""Writes this node's spool to the database: the ingest as a process of its own.

Run one beside the servers on every node that has no Celery worker (a Celery worker runs the same
ingest in a thread, apps/outbox/worker.py), on the same GATEWAY_OUTBOX_DIR. Several may run at
once: each spool file is taken by exactly one. SIGTERM stops it after the file in hand and one last
round: what the servers sealed as they stopped (a container's or a pod's sidecar is stopped right
after its server) is written, not left on the volume.
"""

import logging
import os
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connections

from apps.outbox.outbox import outbox

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    # Django's system checks load every URL, the admin and the API: seconds and ~40 MiB that an ingest
    # (a sidecar of every server pod) never uses. The suite runs them (tests/test_deployment.py).
    requires_system_checks: list[str] = []
    help = "Writes the spooled audit entries (and other outbox items) of this node to the database."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--interval",
            type=float,
            default=settings.GATEWAY_OUTBOX_INGEST_SECONDS,
            help="seconds between looks at the spool (GATEWAY_OUTBOX_INGEST_SECONDS)",
        )
        parser.add_argument(
            "--nice",
            type=int,
            default=10,
            help="CPU priority increment: on a node shared with servers, the log waits for requests",
        )

    def handle(self, *args, interval: float, nice: int, **options) -> None:
        if nice:
            os.nice(nice)
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        ingest = outbox().ingest
        self.stdout.write(f"Ingesting {ingest.directory} every {interval} s")
        ingest.run_forever(stop, interval=interval)
        try:
            ingest.run_once()
        except Exception:  # a database that does not answer leaves the files for the next start
            logger.exception("Outbox: the last ingest round at shutdown failed; the spool is kept")
        finally:
            connections.close_all()
        self.stdout.write(f"Stopped: {ingest.delivered} item(s) written")
