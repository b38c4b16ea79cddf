"""Writes of the response cache."""

import redis
from django.db import transaction
from django.utils import timezone

from apps.core.errors import ServiceUnavailable
from apps.core.generations import bump_generation
from apps.organizations.models import Organization

from .models import SemanticEntry
from .semantic import semantic_index
from .shared import epoch_increment

# Expired entries are deleted this many at a time, so the clean-up never holds long locks.
CLEANUP_BATCH = 1000


def cache_purge(*, organization: Organization) -> None:
    """Empties every tier of the organization's cache, in every process:
    L2 by a new purge epoch (every entry's key carries it), L3 by deleting its rows (a process that
    holds them finds them gone at its next hit or refresh), L1 by the bumped configuration
    generation (every process compares it on every request)."""
    try:
        epoch_increment(organization.id)
    except redis.RedisError as error:
        raise ServiceUnavailable(
            "The shared cache cannot be reached; nothing was purged. Try again.", code="cache_unavailable"
        ) from error
    with transaction.atomic():
        SemanticEntry.objects.filter(organization=organization).delete()
        bump_generation(organization.id)
    semantic_index.forget(organization.id)


def semantic_entries_expire(*, now=None, batch: int = CLEANUP_BATCH) -> int:
    """Deletes the L3 entries past their expiry, in batches; returns how many."""
    now = now or timezone.now()
    deleted = 0
    while True:
        ids = list(SemanticEntry.objects.filter(expires_at__lte=now).values_list("id", flat=True)[:batch])
        if not ids:
            return deleted
        deleted += SemanticEntry.objects.filter(id__in=ids).delete()[0]
