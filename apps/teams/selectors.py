"""Reads of teams."""

from dataclasses import dataclass

from django.db.models import QuerySet

from apps.accounts.models import User
from apps.core.model_patterns import ModelAllowList
from apps.organizations.models import Role

from .models import Team, TeamMembership


@dataclass(frozen=True, slots=True)
class TeamSnapshot:
    """What the proxy holds of a team: plain data, no model instance."""

    id: str
    slug: str
    allowed_data_regions: frozenset[str]
    # The models its requests may call, compiled; None: no restriction of its own.
    allowed_models: ModelAllowList | None = None
    # Response cache: None means the organization's setting.
    cache_enabled: bool | None = None
    cache_ttl_seconds: int | None = None


def team_snapshots(organization_id) -> tuple[TeamSnapshot, ...]:
    return tuple(
        TeamSnapshot(
            id=str(team.id),
            slug=team.slug,
            allowed_data_regions=frozenset(team.allowed_data_regions),
            allowed_models=ModelAllowList.of(team.allowed_models),
            cache_enabled=team.cache_enabled,
            cache_ttl_seconds=team.cache_ttl_seconds,
        )
        for team in Team.objects.filter(organization_id=organization_id).only(
            "id", "slug", "allowed_data_regions", "allowed_models", "cache_enabled", "cache_ttl_seconds"
        )
    )


def team_members(team: Team) -> QuerySet[TeamMembership]:
    """The team's members who are still users of its organization (leaving the organization ends
    what a team membership allows, whether or not its row is gone)."""
    return TeamMembership.objects.filter(
        team=team, user__memberships__organization_id=team.organization_id
    ).select_related("user")


def team_ids_of(*, user, organization_id) -> set:
    """The ids of the organization's teams ``user`` belongs to."""
    return set(
        TeamMembership.objects.filter(user=user, team__organization_id=organization_id).values_list(
            "team_id", flat=True
        )
    )


def teams_of(organization_id) -> QuerySet[Team]:
    """The organization's teams, by name, with their limits (the console lists them)."""
    return Team.objects.filter(organization_id=organization_id).select_related("limits").order_by("name")


def team_member_candidates(team: Team) -> QuerySet[User]:
    """The users of the team's organization who are not members of the team yet, by email."""
    return (
        User.objects.filter(memberships__organization_id=team.organization_id)
        .exclude(team_memberships__team=team)
        .order_by("email")
    )


def may_read_team_usage(*, membership, team_id) -> bool:
    """Who reads the usage of a team (and of the keys bound to it): admins and owners every team's,
    a member only that of the teams they belong to. The API and the console both ask here."""
    if membership.has_role(Role.ADMIN):
        return True
    return team_id is not None and team_id in team_ids_of(
        user=membership.user, organization_id=membership.organization_id
    )
