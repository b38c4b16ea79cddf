from apps.core.background import task
from apps.core.database import DatabaseUnreachable

from . import retention


# A database outage is logged in one line, without a traceback: the task runs again on schedule.
@task(throws=(DatabaseUnreachable,))
def apply_audit_retention() -> dict[str, int]:
    """Hourly (CELERY_BEAT_SCHEDULE): deletes entries older than each organization's retention,
    in batches. Returns ``{organization id: entries deleted}``."""
    return retention.audit_retention_apply()
