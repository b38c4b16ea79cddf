from django.conf import settings
from django.db import models

from apps.core.models import UUIDModel
from apps.organizations.models import CACHE_TTL_VALIDATORS, Organization


class Team(UUIDModel):
    """A group inside an organization that usage (and later budgets) is charged to."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="teams")
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80)
    # Empty means the organization's regions apply; otherwise only these (within the organization's).
    allowed_data_regions = models.JSONField(default=list, blank=True)
    # Model aliases and provider/model patterns it may call (apps/core/model_patterns.py); empty: any.
    allowed_models = models.JSONField(default=list, blank=True)
    # Response cache: null means the organization's setting.
    cache_enabled = models.BooleanField(null=True, blank=True, default=None)
    cache_ttl_seconds = models.PositiveIntegerField(null=True, blank=True, validators=CACHE_TTL_VALIDATORS)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("organization", "slug"), name="unique_team_slug")]
        ordering = ("created_at",)

    def __str__(self) -> str:
        return self.name


class TeamMembership(UUIDModel):
    """A user of the team's organization who belongs to the team: a member (role) of the organization
    reads the usage of the teams they belong to, and of the API keys bound to them."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships"
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=("team", "user"), name="unique_team_membership")]
        ordering = ("created_at",)

    def __str__(self) -> str:
        return f"{self.user} in team {self.team}"
