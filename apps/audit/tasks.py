from celery import shared_task

from . import retention


@shared_task
def apply_audit_retention() -> dict[str, int]:
    """Hourly (CELERY_BEAT_SCHEDULE): deletes entries older than each organization's retention,
    in batches. Returns ``{organization id: entries deleted}``."""
    return retention.audit_retention_apply()
