"""The ingest as a thread of the Celery worker: every worker writes its node's spool to the
database, so a node with a worker needs no ingest process (``make run`` is Daphne and one worker).

The same loop as ``manage.py outbox_ingest`` (ingest.py), started when the worker is ready and
stopped (after the file in hand, and one last round) when it shuts down. A worker on a node without
servers finds an empty spool: a directory listing every GATEWAY_OUTBOX_INGEST_SECONDS. Several
ingests on one node (workers, outbox_ingest) share the spool safely: each file is taken by one.
"""

import logging
import threading

from celery import signals
from django.conf import settings

logger = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None


def start(**_) -> None:
    global _thread
    from .outbox import outbox

    ingest = outbox().ingest
    _stop.clear()
    _thread = threading.Thread(
        target=ingest.run_forever,
        args=(_stop,),
        kwargs={"interval": settings.GATEWAY_OUTBOX_INGEST_SECONDS},
        name="outbox-ingest",
        daemon=True,
    )
    _thread.start()
    logger.info("Outbox: ingesting %s in the worker", ingest.directory)


def stop(**_) -> None:
    """At the worker's warm shutdown: stops the loop after the file in hand, then writes what the
    servers sealed meanwhile (``make run`` stops the server first, which seals its spool as it
    exits), so a stopped gateway leaves nothing waiting. One round: a database that does not answer
    leaves the files for the next start."""
    _stop.set()
    # Also when the worker is stopped before it was ready (the loop never started).
    if _thread is not None:
        _thread.join(30)
        if _thread.is_alive():
            return
    from .outbox import outbox

    try:
        outbox().ingest.run_once()
    except Exception:
        logger.exception("Outbox: the last ingest round at shutdown failed; the spool is kept")
    finally:
        from django.db import connections

        connections.close_all()


def connect() -> None:
    """Called once, by gateway_project/celery.py as a worker loads its app."""
    signals.worker_ready.connect(start, weak=False)
    signals.worker_shutdown.connect(stop, weak=False)
