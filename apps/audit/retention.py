"""Retention: audit entries older than their organization's ``log_retention_days`` are deleted.

In batches: a batch of ids is selected with a limit and deleted by id, until none is left. Each
DELETE is short, so the sweep never holds a long lock on the table the outbox writer inserts into,
and a sweep that is stopped half-way has still done its part (the next run picks up the rest).
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from apps.organizations.models import Organization

from .models import AuditEntry

logger = logging.getLogger(__name__)


def audit_entries_expire(*, organization_id, older_than: datetime, batch_size: int | None = None) -> int:
    """Deletes one organization's entries created before ``older_than``; returns how many."""
    batch_size = batch_size or settings.GATEWAY_AUDIT_RETENTION_BATCH_SIZE
    expired = AuditEntry.objects.filter(organization_id=organization_id, created_at__lt=older_than)
    deleted = 0
    while True:
        ids = list(expired.order_by().values_list("id", flat=True)[:batch_size])
        if not ids:
            return deleted
        count, _ = AuditEntry.objects.filter(id__in=ids).delete()
        deleted += count


def audit_retention_apply(*, now: datetime | None = None, batch_size: int | None = None) -> dict[str, int]:
    """Applies every organization's retention; returns ``{organization id: entries deleted}`` for
    the organizations that had any to delete."""
    now = now or timezone.now()
    deleted: dict[str, int] = {}
    for organization_id, days in Organization.objects.values_list("id", "log_retention_days"):
        if days < 1:
            # The API refuses 0; a 0 set elsewhere (admin, shell) is not read as "delete everything".
            logger.warning("Organization %s has log_retention_days=%s; skipped", organization_id, days)
            continue
        count = audit_entries_expire(
            organization_id=organization_id, older_than=now - timedelta(days=days), batch_size=batch_size
        )
        if count:
            deleted[str(organization_id)] = count
    if deleted:
        logger.info(
            "Audit retention deleted %s entries in %s organizations", sum(deleted.values()), len(deleted)
        )
    return deleted
