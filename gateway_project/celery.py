"""What ``celery -A gateway_project`` finds: the gateway's app (apps/core/background.py) and the
threads a worker runs beside its tasks.

- The outbox ingest (apps/outbox/worker.py), in every worker: a node with a worker needs no ingest
  process.
- Beat as a thread, with ``--beat-thread`` (``make run``): one process fewer than ``-B``, whose beat is
  a child process holding a second copy of Django (docs/benchmarks.md, "Issue 23"). A deployment
  with several workers runs one beat on its own (``celery beat``), or ``--beat-thread`` on one worker.
"""

import logging
import os
import warnings

from celery import bootsteps
from celery.signals import setup_logging
from click import Option

from apps.core.background import app
from apps.outbox import worker as outbox_worker

__all__ = ("app",)

# Celery runs Django's system checks as a worker starts: they load every URL, the admin and the API
# into a process that needs none of them (40 MiB and seconds). The suite runs them
# (tests/test_deployment.py), and `manage.py check` does on demand.
os.environ.setdefault("CELERY_SKIP_CHECKS", "true")

# Celery warns, in 7 lines, when its worker runs as root. Its concern is pickled task messages from an
# untrusted broker, which the gateway never accepts (JSON only, CELERY_ACCEPT_CONTENT's default); the
# image runs as uid 10001, and `make run` on a laptop as whoever starts it.
warnings.filterwarnings("ignore", message="You're running the worker with superuser privileges")

outbox_worker.connect()


@setup_logging.connect
def keep_the_gateways_logging(loglevel=None, **kwargs) -> None:
    """Celery keeps Django's logging (``LOGGING``: text or, with ``GATEWAY_LOG_FORMAT=json``, one
    JSON object per line, like every other process of the gateway) instead of installing its own
    format; the worker logs at its ``--loglevel``, as it did with Celery's."""
    if loglevel:  # the worker's --loglevel, as Celery's own set-up applied it (to every logger)
        logging.getLogger().setLevel(loglevel)


class BeatThread(bootsteps.StartStopStep):
    """Celery's embedded beat (``-B``) as a thread of the worker rather than a child process; it reads
    the same ``--schedule`` file."""

    label = "Beat (thread)"
    conditional = True

    def __init__(self, worker, beat_thread=False, **options):
        self.enabled = bool(beat_thread)
        super().__init__(worker, **options)

    def create(self, worker):
        from celery.beat import EmbeddedService

        return EmbeddedService(
            worker.app,
            thread=True,
            schedule_filename=worker.schedule_filename,
            scheduler_cls=worker.scheduler,
        )


app.user_options["worker"].add(
    Option(["--beat-thread"], is_flag=True, default=False, help="Run beat as a thread of this worker.")
)
app.steps["worker"].add(BeatThread)
