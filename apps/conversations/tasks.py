from celery import shared_task

from . import services


@shared_task
def apply_stored_response_retention() -> dict[str, int]:
    """Hourly (CELERY_BEAT_SCHEDULE): deletes stored Responses past their organization's retention."""
    return services.stored_responses_retention_apply()
