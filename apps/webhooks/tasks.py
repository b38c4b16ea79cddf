from apps.core.background import task
from apps.core.database import DatabaseUnreachable

from . import services


# Timeouts bound one attempt (apps/webhooks/transport.py); the time limit is the last resort for a
# receiver that trickles its answer a byte at a time.
@task(ignore_result=True, soft_time_limit=60, time_limit=90)
def deliver(delivery_id: str) -> None:
    """Sends one delivery attempt (enqueued when its row is committed, and by ``deliveries_due``)."""
    services.delivery_send(delivery_id=delivery_id)


# A database outage is logged in one line, without a traceback: the task runs again on schedule.
@task(ignore_result=True, throws=(DatabaseUnreachable,))
def deliveries_due() -> int:
    """Periodic (CELERY_BEAT_SCHEDULE, every 5 minutes): automatic retries whose time has come, and
    attempts whose task never reached the broker."""
    return services.deliveries_due()
