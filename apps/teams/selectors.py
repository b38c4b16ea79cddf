"""Reads of teams."""

from dataclasses import dataclass

from .models import Team


@dataclass(frozen=True, slots=True)
class TeamSnapshot:
    """What the proxy holds of a team: plain data, no model instance."""

    id: str
    slug: str
    allowed_data_regions: frozenset[str]


def team_snapshots(organization_id) -> tuple[TeamSnapshot, ...]:
    return tuple(
        TeamSnapshot(
            id=str(team.id), slug=team.slug, allowed_data_regions=frozenset(team.allowed_data_regions)
        )
        for team in Team.objects.filter(organization_id=organization_id).only(
            "id", "slug", "allowed_data_regions"
        )
    )
