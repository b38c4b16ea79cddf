from django.db import models
from django.db.models import Q

from apps.core.models import UUIDModel
from apps.organizations.models import Organization


class Scope(models.TextChoices):
    ORGANIZATION = "organization"
    TEAM = "team"
    API_KEY = "api_key"


class BudgetPeriod(models.TextChoices):
    DAILY = "daily"
    WEEKLY = "weekly"  # ISO weeks: Monday 00:00 UTC
    MONTHLY = "monthly"
    FIXED = "fixed"  # [starts_at, ends_at)


DEFAULT_THRESHOLDS = [50, 80, 100]


def default_thresholds() -> list[int]:
    return list(DEFAULT_THRESHOLDS)


class Limits(UUIDModel):
    """The budget and rate limits of one organization, team or API key (at most one row each).

    The organization's budget caps all its traffic; its rate limits are the default of every key
    that has none of its own.

    The team and the key are named, not imported: teams and keys sit above limits and set their limits
    through its services (docs/architecture.md), while the row stays limits' own."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="limits")
    team = models.OneToOneField(
        "teams.Team", on_delete=models.CASCADE, null=True, blank=True, related_name="limits"
    )
    api_key = models.OneToOneField(
        "keys.ApiKey", on_delete=models.CASCADE, null=True, blank=True, related_name="limits"
    )
    # No budget when null.
    budget_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    budget_period = models.CharField(max_length=10, choices=BudgetPeriod.choices, blank=True)
    budget_starts_at = models.DateTimeField(null=True, blank=True)
    budget_ends_at = models.DateTimeField(null=True, blank=True)
    budget_thresholds = models.JSONField(default=default_thresholds, blank=True)
    # Requests and tokens per minute; null is no limit, 0 refuses every request.
    rpm = models.PositiveIntegerField(null=True, blank=True)
    tpm = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "limits"
        constraints = [
            models.CheckConstraint(
                condition=Q(team__isnull=True) | Q(api_key__isnull=True), name="limits_one_target"
            ),
            models.UniqueConstraint(
                fields=("organization",),
                condition=Q(team__isnull=True, api_key__isnull=True),
                name="limits_one_per_organization",
            ),
        ]

    @property
    def scope(self) -> str:
        if self.team_id is not None:
            return Scope.TEAM
        if self.api_key_id is not None:
            return Scope.API_KEY
        return Scope.ORGANIZATION

    @property
    def scope_id(self) -> str:
        return str(self.team_id or self.api_key_id or self.organization_id)

    def __str__(self) -> str:
        return f"Limits of {self.scope} {self.scope_id}"
