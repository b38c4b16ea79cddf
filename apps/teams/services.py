import secrets
from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from apps.accounts.models import User
from apps.core.api.serializers import validated
from apps.core.errors import Conflict, invalid_field
from apps.core.generations import bump_generation
from apps.core.model_patterns import checked_model_patterns
from apps.core.unique import name_taken, save_unique, unique_or_conflict
from apps.limits.services import UNSET, limits_set
from apps.organizations.models import Organization

from .inputs import TeamInputSerializer, TeamMemberInputSerializer
from .models import Team, TeamMembership


def team_check(*, data: Mapping, partial: bool = False) -> dict[str, Any]:
    """``data`` (the API's body, inputs.py ``TeamInputSerializer``; ``partial``: a PATCH's, only the
    fields it names) parsed, with the model patterns checked (apps/core/model_patterns.py). The
    budget and rate limits are parsed here with the limits' fields; their rules are ``limits_set``'s.
    The admin's form runs it before saving, so its page shows a refusal on its field."""
    values = dict(validated(TeamInputSerializer, data, partial=partial))
    if "allowed_models" in values:
        values["allowed_models"] = checked_model_patterns(values["allowed_models"])
    return values


def team_create(*, organization: Organization, data: Mapping) -> Team:
    """``data``: the API's body (``team_check``); ``budget`` and ``rate_limits`` are set in the team's
    transaction (``limits_set``): a refused budget creates no team. ``allowed_models``: the models the
    team's requests may call, within the organization's; empty for any. No slug: one made from the
    name; a slug taken is a 409."""
    values = team_check(data=data)
    budget, rate_limits = values.pop("budget", UNSET), values.pop("rate_limits", UNSET)
    name = values["name"]
    slug = values.pop("slug", "") or slugify(name)[:80] or f"team-{secrets.token_hex(3)}"

    def write() -> Team:
        team = Team.objects.create(
            organization=organization,
            name=name,
            slug=slug,
            allowed_data_regions=list(values.get("allowed_data_regions", ())),
            allowed_models=values.get("allowed_models", []),
            cache_enabled=values.get("cache_enabled"),
            cache_ttl_seconds=values.get("cache_ttl_seconds"),
        )
        limits_set(organization=organization, team=team, budget=budget, rate_limits=rate_limits)
        bump_generation(organization.id)  # the proxy resolves teams from memory
        return team

    taken = Team.objects.filter(organization=organization, slug=slug)
    return save_unique(taken=taken, conflict=_slug_taken(slug), write=write)


def _slug_taken(slug: str | None) -> Conflict:
    return name_taken("A team", "slug", slug or "", code="team_slug_taken")


def team_update(*, team: Team, data: Mapping) -> Team:
    """``data``: the fields to change, as the API's PATCH body has them (``team_check``, partial);
    ``budget`` and ``rate_limits`` are written in the same transaction (``limits_set``)."""
    changes = team_check(data=data, partial=True)
    budget, rate_limits = changes.pop("budget", UNSET), changes.pop("rate_limits", UNSET)
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


def team_member_add(*, team: Team, data: Mapping) -> TeamMembership:
    """Adds a user of the team's organization to the team: ``data``, one of ``user_id`` or ``email``
    (inputs.py ``TeamMemberInputSerializer``, the API's body). Another organization's user, or one who
    is in no organization, is refused like a user that does not exist, on the field given."""
    values = validated(TeamMemberInputSerializer, data)
    users = User.objects.filter(memberships__organization=team.organization_id)
    if "user_id" in values:
        user, field = users.filter(id=values["user_id"]).first(), "user_id"
    else:
        user, field = users.filter(email__iexact=values["email"]).first(), "email"
    if user is None:
        raise invalid_field(field, "No such user in this organization.")
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
