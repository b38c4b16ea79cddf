import uuid

from django.db import models


class UUIDModel(models.Model):
    """IDs are UUIDs, timestamps are UTC (USE_TZ)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
