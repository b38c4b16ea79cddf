from django.conf import settings
from django.db import models

from apps.core.models import UUIDModel


class Plan(models.TextChoices):
    FREE = "free"
    GROWTH = "growth"
    ENTERPRISE = "enterprise"


class LogBodies(models.TextChoices):
    """How much of a request and response the audit log keeps."""

    FULL = "full"
    REDACTED = "redacted"
    METADATA = "metadata"


class FailMode(models.TextChoices):
    """What the proxy does with budgets and rate limits while Redis cannot be reached."""

    OPEN = "open"  # serve without checking; reconcile repairs the counters afterwards
    CLOSED = "closed"  # refuse (503) every request a budget or rate limit applies to


class Role(models.TextChoices):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"


# Higher rank can do everything a lower rank can.
ROLE_RANK = {Role.MEMBER: 1, Role.ADMIN: 2, Role.OWNER: 3}


def default_log_bodies() -> str:
    return settings.GATEWAY_DEFAULT_LOG_BODIES


class Organization(UUIDModel):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80, unique=True)
    plan = models.CharField(max_length=20, choices=Plan.choices, default=Plan.FREE)
    log_bodies = models.CharField(max_length=20, choices=LogBodies.choices, default=default_log_bodies)
    log_retention_days = models.PositiveIntegerField(default=30)
    # Empty means every region is allowed; teams, keys and the request header can only narrow it.
    allowed_data_regions = models.JSONField(default=list, blank=True)
    limits_fail_mode = models.CharField(max_length=10, choices=FailMode.choices, default=FailMode.OPEN)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("created_at",)

    def __str__(self) -> str:
        return self.name


class Membership(UUIDModel):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("organization", "user"), name="unique_membership")]
        ordering = ("created_at",)

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} ({self.role})"

    def has_role(self, role: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]
