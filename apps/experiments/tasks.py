from apps.core.background import task
from apps.core.database import DatabaseUnreachable

from . import services


# A database outage is logged in one line, without a traceback: the task runs again on schedule.
@task(throws=(DatabaseUnreachable,))
def sweep_pending_feedback() -> dict[str, int]:
    """Every minute (CELERY_BEAT_SCHEDULE): feedback that waited for its request's audit entry is
    attached if the entry is written, and dropped once it has waited too long."""
    return services.feedback_pending_sweep()
