from celery import shared_task

from . import services


@shared_task
def expire_semantic_entries() -> int:
    """Periodic (CELERY_BEAT_SCHEDULE): deletes the expired L3 entries; returns how many."""
    return services.semantic_entries_expire()
