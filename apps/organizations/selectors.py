"""Reads of organizations."""

from dataclasses import dataclass

from django.db.models import Case, IntegerField, QuerySet, Value, When
from django.utils import timezone

from .models import ROLE_RANK, Invitation, InvitationStatus, Membership, Organization, invitation_token_digest


@dataclass(frozen=True, slots=True)
class OrganizationSnapshot:
    """What the proxy holds of an organization: plain data, no model instance."""

    id: str
    allowed_data_regions: frozenset[str]
    log_bodies: str
    limits_fail_mode: str
    # The model aliases and provider/model patterns it may call (apps/core/model_patterns.py); () any.
    allowed_models: tuple[str, ...] = ()
    # Response cache (apps/cache/settings.py reads them with the team's).
    cache_enabled: bool = True
    cache_ttl_seconds: int = 3600
    cache_any_temperature: bool = False
    cache_semantic_enabled: bool = False
    cache_semantic_threshold: float = 0.95
    cache_embedding_model: str = ""


_CACHE_FIELDS = (
    "cache_enabled",
    "cache_ttl_seconds",
    "cache_any_temperature",
    "cache_semantic_enabled",
    "cache_semantic_threshold",
    "cache_embedding_model",
)


def organization_snapshot(organization_id) -> OrganizationSnapshot | None:
    organization = (
        Organization.objects.filter(pk=organization_id)
        .only("allowed_data_regions", "allowed_models", "log_bodies", "limits_fail_mode", *_CACHE_FIELDS)
        .first()
    )
    if organization is None:
        return None
    return OrganizationSnapshot(
        id=str(organization.id),
        allowed_data_regions=frozenset(organization.allowed_data_regions),
        log_bodies=organization.log_bodies,
        limits_fail_mode=organization.limits_fail_mode,
        allowed_models=tuple(organization.allowed_models or ()),
        cache_enabled=organization.cache_enabled,
        cache_ttl_seconds=organization.cache_ttl_seconds,
        cache_any_temperature=organization.cache_any_temperature,
        cache_semantic_enabled=organization.cache_semantic_enabled,
        cache_semantic_threshold=float(organization.cache_semantic_threshold),
        cache_embedding_model=organization.cache_embedding_model,
    )


def memberships_of(organization_id) -> QuerySet[Membership]:
    """The organization's members with their users: owners first, then admins, then members, each by
    email."""
    rank = Case(
        *(When(role=role, then=Value(-value)) for role, value in ROLE_RANK.items()),
        output_field=IntegerField(),
    )
    return (
        Membership.objects.filter(organization_id=organization_id)
        .select_related("user")
        .annotate(rank=rank)
        .order_by("rank", "user__email")
    )


def invitations_of(organization_id) -> QuerySet[Invitation]:
    """Every invitation of the organization, newest first (answered ones stay listed)."""
    return Invitation.objects.filter(organization_id=organization_id).select_related("invited_by")


def invitations_for(user) -> QuerySet[Invitation]:
    """The invitations ``user`` can answer by their id: pending, not expired, to their address; none
    when the address is not verified (an account made through an invitation link answers each
    invitation through its own link, and learns nothing here of who invited its address, or as
    what)."""
    if not user.email_verified:
        return Invitation.objects.none()
    return (
        Invitation.objects.filter(
            email__iexact=user.email, status=InvitationStatus.PENDING, expires_at__gt=timezone.now()
        )
        .select_related("organization")
        .order_by("-created_at")
    )


def invitation_by_token(token: str) -> Invitation | None:
    return (
        Invitation.objects.select_related("organization")
        .filter(token_digest=invitation_token_digest(token or ""))
        .first()
    )
