"""Writes this node's spool to the database: the ingest as a process of its own.

Run one beside the servers on every node that has no Celery worker (a Celery worker runs the same
ingest in a thread, apps/outbox/worker.py), on the same GATEWAY_OUTBOX_DIR. Several may run at
once: each spool file is taken by exactly one. SIGTERM stops it after the file in hand.
"""

import os
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand

from apps.outbox.outbox import outbox


class Command(BaseCommand):
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
        self.stdout.write(f"Stopped: {ingest.delivered} item(s) written")
