from django.db import models

from apps.core.models import UUIDModel
from apps.organizations.models import Organization


class Team(UUIDModel):
    """A group inside an organization that usage (and later budgets) is charged to."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="teams")
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80)
    # Empty means the organization's regions apply; otherwise only these (within the organization's).
    allowed_data_regions = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("organization", "slug"), name="unique_team_slug")]
        ordering = ("created_at",)

    def __str__(self) -> str:
        return self.name
