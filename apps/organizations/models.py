import hashlib
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
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


# Response cache (apps/cache): how long an answer may be served again, at most.
CACHE_TTL_MAX_SECONDS = 30 * 24 * 3600
CACHE_TTL_VALIDATORS = [MinValueValidator(1), MaxValueValidator(CACHE_TTL_MAX_SECONDS)]


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
    # Model aliases and provider/model patterns it may call (apps/core/model_patterns.py); empty: any.
    allowed_models = models.JSONField(default=list, blank=True)
    limits_fail_mode = models.CharField(max_length=10, choices=FailMode.choices, default=FailMode.OPEN)
    # Response cache (docs/cache.md). Teams may override the first two.
    cache_enabled = models.BooleanField(default=True)
    cache_ttl_seconds = models.PositiveIntegerField(default=3600, validators=CACHE_TTL_VALIDATORS)
    # False: only a request with an explicit temperature 0 is cached (an absent one means 1 upstream).
    cache_any_temperature = models.BooleanField(default=False)
    # L3, the semantic tier: opt-in, and needs an embeddings alias of the organization's catalog.
    cache_semantic_enabled = models.BooleanField(default=False)
    cache_semantic_threshold = models.DecimalField(
        max_digits=5,
        decimal_places=4,
        default=Decimal("0.95"),
        validators=[MinValueValidator(Decimal(0)), MaxValueValidator(Decimal(1))],
    )
    cache_embedding_model = models.CharField(max_length=200, blank=True, default="")
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


def invitation_token_digest(token: str) -> str:
    """How an accept link's token is stored and looked up (the token itself is never kept)."""
    return hashlib.sha256(token.encode()).hexdigest()


class InvitationStatus(models.TextChoices):
    PENDING = "pending"
    ACCEPTED = "accepted"
    DECLINED = "declined"
    REVOKED = "revoked"
    EXPIRED = "expired"  # stored once a new invitation replaces an expired one; shown from the date before


class Invitation(UUIDModel):
    """An owner's offer of a role in the organization to an email address: nobody becomes a member
    until the account with that address accepts (docs/console.md, "Invitations"). The link that lets
    the invited person accept carries a secret token; only its SHA-256 digest is stored."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(max_length=254)  # normalized, lowercased
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    token_digest = models.CharField(max_length=64, unique=True, editable=False)
    status = models.CharField(
        max_length=16, choices=InvitationStatus.choices, default=InvitationStatus.PENDING
    )
    expires_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        constraints = [
            models.UniqueConstraint(
                fields=("organization", "email"),
                condition=models.Q(status="pending"),
                name="one_pending_invitation_per_email",
            )
        ]

    def __str__(self) -> str:
        return f"{self.email} to {self.organization} ({self.role})"

    def current_status(self, now) -> str:
        if self.status == InvitationStatus.PENDING and now >= self.expires_at:
            return InvitationStatus.EXPIRED
        return self.status
