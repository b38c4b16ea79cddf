from apps.core.background import task
from apps.core.database import DatabaseUnreachable

from . import services


# A database outage is logged in one line, without a traceback: the task runs again on schedule.
@task(throws=(DatabaseUnreachable,))
def expire_semantic_entries() -> int:
    """Periodic (CELERY_BEAT_SCHEDULE): deletes the expired L3 entries; returns how many."""
    return services.semantic_entries_expire()
