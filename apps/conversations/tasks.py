from apps.core.background import task
from apps.core.database import DatabaseUnreachable

from . import services


# A database outage is logged in one line, without a traceback: the task runs again on schedule.
@task(throws=(DatabaseUnreachable,))
def apply_stored_response_retention() -> dict[str, int]:
    """Hourly (CELERY_BEAT_SCHEDULE): deletes stored Responses past their organization's retention."""
    return services.stored_responses_retention_apply()
