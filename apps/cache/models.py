from django.db import models

from apps.core.models import UUIDModel
from apps.organizations.models import Organization


class SemanticEntry(UUIDModel):
    """An L3 entry: the embedding of a cached request's prompt and the answer it got.

    Searched in memory (apps/cache/semantic.py) over the most recent entries of an organization,
    model and partition; removed by a purge, and by the periodic clean-up once expired."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200, help_text="The resolved model that answered.")
    partition = models.CharField(
        max_length=64,
        default="",
        help_text="Hash of what else shapes the answer (parameters, roles, data regions): "
        "only entries of a request's own partition may answer it.",
    )
    embedding_model = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    vector = models.BinaryField(help_text="float32, little-endian, dims values.")
    answer = models.BinaryField(help_text="CachedAnswer.dumps()")
    fingerprint = models.CharField(max_length=64)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [
            models.Index(
                fields=("organization", "model", "partition", "dims", "created_at"),
                name="cache_semantic_part_recent",
            ),
        ]
        verbose_name_plural = "semantic entries"

    def __str__(self) -> str:
        return f"{self.model} {self.fingerprint[:12]}"
