"""Delivers what the server processes of this node spooled (GATEWAY_OUTBOX_DELIVERY=ingest_process).

Run one per node, beside the Daphne processes, on the same GATEWAY_OUTBOX_DIR. Several may run at
once: each spool file is claimed by exactly one. SIGTERM stops it after the file in hand.
"""

import os
import signal
import threading

from django.core.management.base import BaseCommand

from apps.outbox.outbox import outbox


class Command(BaseCommand):
    help = "Writes the spooled audit entries (and other outbox items) of this node to the database."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--interval", type=float, default=0.2, help="seconds between looks at the spool")
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
        box = outbox()
        box.deliver = True  # this process is the one that delivers
        self.stdout.write(f"Ingesting {box.spool.directory} every {interval} s")
        box.ingest_forever(stop, interval=interval)
        self.stdout.write(f"Stopped: {box.delivered} item(s) delivered")
