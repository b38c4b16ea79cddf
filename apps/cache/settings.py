"""The cache settings that apply to one request: the organization's, with its team's overrides."""

from dataclasses import dataclass

from apps.organizations.selectors import OrganizationSnapshot
from apps.teams.selectors import TeamSnapshot


@dataclass(frozen=True, slots=True)
class CacheSettings:
    enabled: bool
    ttl_seconds: int
    # False: only an explicit ``temperature: 0`` is cached.
    any_temperature: bool
    # L3 is on only when the organization opted in and named an embeddings model.
    semantic_enabled: bool
    semantic_threshold: float
    embedding_model: str


def effective_settings(organization: OrganizationSnapshot, team: TeamSnapshot | None) -> CacheSettings:
    """A team's ``None`` means the organization's value."""
    enabled = organization.cache_enabled
    ttl_seconds = organization.cache_ttl_seconds
    if team is not None:
        if team.cache_enabled is not None:
            enabled = team.cache_enabled
        if team.cache_ttl_seconds is not None:
            ttl_seconds = team.cache_ttl_seconds
    return CacheSettings(
        enabled=enabled,
        ttl_seconds=ttl_seconds,
        any_temperature=organization.cache_any_temperature,
        semantic_enabled=enabled
        and organization.cache_semantic_enabled
        and bool(organization.cache_embedding_model),
        semantic_threshold=float(organization.cache_semantic_threshold),
        embedding_model=organization.cache_embedding_model,
    )
