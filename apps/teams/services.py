import secrets

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from apps.accounts.models import User
from apps.core.errors import Conflict, InvalidRequest
from apps.core.generations import bump_generation
from apps.core.model_patterns import checked_model_patterns
from apps.core.unique import name_taken, save_unique, unique_or_conflict
from apps.limits.services import UNSET, limits_set
from apps.organizations.models import Organization

from .models import Team, TeamMembership


def team_create(
    *,
    organization: Organization,
    name: str,
    slug: str = "",
    allowed_data_regions=(),
    allowed_models=(),
    budget=UNSET,
    rate_limits=UNSET,
    cache_enabled: bool | None = None,
    cache_ttl_seconds: int | None = None,
) -> Team:
    """``budget`` and ``rate_limits`` as ``limits_set`` takes them, set in the team's transaction: a
    refused budget creates no team. ``allowed_models``: the models the team's requests may call, within
    the organization's (apps/core/model_patterns.py); empty for any."""
    allowed_models = checked_model_patterns(allowed_models)
    slug = slug or slugify(name)[:80] or f"team-{secrets.token_hex(3)}"

    def write() -> Team:
        team = Team.objects.create(
            organization=organization,
            name=name,
            slug=slug,
            allowed_data_regions=list(allowed_data_regions),
            allowed_models=allowed_models,
            cache_enabled=cache_enabled,
            cache_ttl_seconds=cache_ttl_seconds,
        )
        limits_set(organization=organization, team=team, budget=budget, rate_limits=rate_limits)
        bump_generation(organization.id)  # the proxy resolves teams from memory
        return team

    taken = Team.objects.filter(organization=organization, slug=slug)
    return save_unique(taken=taken, conflict=_slug_taken(slug), write=write)


def _slug_taken(slug: str | None) -> Conflict:
    return name_taken("A team", "slug", slug or "", code="team_slug_taken")


def team_update(*, team: Team, budget=UNSET, rate_limits=UNSET, **changes) -> Team:
    """``changes``: the team's own fields; ``budget`` and ``rate_limits`` as ``limits_set`` takes them,
    written in the same transaction."""
    if "allowed_models" in changes:
        changes["allowed_models"] = checked_model_patterns(changes["allowed_models"])
    new_slug = changes.get("slug")
    if new_slug and new_slug != team.slug:
        if Team.objects.filter(organization=team.organization_id, slug=new_slug).exists():
            raise _slug_taken(new_slug)
    for field, value in changes.items():
        setattr(team, field, value)
    with unique_or_conflict(_slug_taken(new_slug)):
        team.save(update_fields=[*changes, "updated_at"])
        limits_set(organization=team.organization, team=team, budget=budget, rate_limits=rate_limits)
        bump_generation(team.organization_id)
    return team


@transaction.atomic
def team_delete(*, team: Team) -> None:
    usable = team.api_keys.filter(is_active=True).exclude(expires_at__lte=timezone.now())
    if usable.exists():
        raise Conflict(
            "This team still has active API keys bound to it; revoke them first.", code="team_has_active_keys"
        )
    organization_id = team.organization_id
    team.delete()
    bump_generation(organization_id)


def team_member_add(*, team: Team, user: User) -> TeamMembership:
    """Adds a user of the team's organization to the team (another organization's user, or one who
    is in no organization, is refused like a user that does not exist)."""
    if not user.memberships.filter(organization_id=team.organization_id).exists():
        raise InvalidRequest(
            "No such user in this organization.",
            code="validation_error",
            param="user_id",
            fields={"user_id": ["No such user in this organization."]},
        )
    if TeamMembership.objects.filter(team=team, user=user).exists():
        raise Conflict(f"{user.email} is a member of this team already.", code="already_a_team_member")
    try:
        with transaction.atomic():
            return TeamMembership.objects.create(team=team, user=user)
    except IntegrityError as error:  # added by a concurrent request between the check and the insert
        raise Conflict(
            f"{user.email} is a member of this team already.", code="already_a_team_member"
        ) from error


def team_member_remove(*, membership: TeamMembership) -> None:
    membership.delete()


def team_memberships_end(*, user_id, organization_id) -> None:
    """A member leaving an organization (``organization_id``; None: every organization, a reclaimed
    account) leaves its teams (apps/organizations/departures.py, registered in apps/teams/apps.py)."""
    memberships = TeamMembership.objects.filter(user_id=user_id)
    if organization_id is not None:
        memberships = memberships.filter(team__organization_id=organization_id)
    memberships.delete()
