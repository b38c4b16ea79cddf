"""Each organization's routing configuration, held in this worker's memory.

Provider keys (with their secrets decrypted), model aliases, prices and teams are read from the
database once and kept until the organization's configuration generation changes
(``apps/core/generations.py``). The generation is read on every request in the same Redis round
trip as the API key's revocation marker (``apps/proxy/auth.py``), so a change made anywhere (a
rotation, a new deployment, a team's regions) applies to the next request on every worker, and the
usual request does no database read. A copy is also read again once it is older than
``GATEWAY_CONFIG_MAX_AGE_SECONDS``, in case a change bumped nothing.
"""

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

from channels.db import database_sync_to_async
from django.conf import settings

from apps.catalog.models import ModelAlias
from apps.catalog.pricing import Price
from apps.catalog.selectors import price_at, price_versions
from apps.core.crypto import InvalidToken
from apps.organizations.models import Organization
from apps.providers.addresses import AddressRefused, check_ip
from apps.providers.models import ProviderKey
from apps.teams.models import Team

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProviderKeyConfig:
    id: str
    provider: str
    secret: str
    weight: float
    data_region: str
    base_url: str
    api_version: str
    supports_stream_usage: bool


@dataclass(frozen=True, slots=True)
class DeploymentConfig:
    provider: str
    upstream_model: str


@dataclass(frozen=True, slots=True)
class AliasConfig:
    alias: str
    deployments: tuple[DeploymentConfig, ...]
    fallbacks: tuple[str, ...]
    created: int  # unix seconds, for /v1/models


@dataclass(frozen=True, slots=True)
class TeamConfig:
    id: str
    slug: str
    allowed_data_regions: frozenset[str]


@dataclass(slots=True)
class OrganizationConfig:
    organization_id: str
    generation: int
    allowed_data_regions: frozenset[str]
    log_bodies: str
    keys_by_provider: dict[str, tuple[ProviderKeyConfig, ...]]
    aliases: dict[str, AliasConfig]
    teams_by_id: dict[str, TeamConfig]
    teams_by_slug: dict[str, TeamConfig]
    prices: dict[tuple[str, str], list[Price]]
    # The /v1/models answer, rendered once per generation.
    models_body: bytes = b""
    # alias -> its deployments then its fallbacks' (routing.resolve_model), built on first use.
    planned_deployments: dict[str, list] = field(default_factory=dict)
    # (provider, model) -> (price, in force from, in force until): the hot path looks a price up
    # once per request, so the version search runs only when the window is left.
    _price_cache: dict[tuple[str, str], tuple[Price | None, datetime, datetime]] = field(default_factory=dict)

    def price(self, provider: str, model: str, at: datetime) -> Price | None:
        """The price in force at ``at``: the organization's version, else the shipped one."""
        cached = self._price_cache.get((provider, model))
        if cached is not None and cached[1] <= at < cached[2]:
            return cached[0]
        price = price_at(self.prices, provider, model, at)
        changes = [
            version.effective_from
            for version in self.prices.get((provider, model), ())
            if version.effective_from > at
        ]
        valid_from = price.effective_from if price is not None else datetime.min.replace(tzinfo=UTC)
        self._price_cache[(provider, model)] = (price, valid_from, min(changes, default=_FOREVER))
        return price


_FOREVER = datetime.max.replace(tzinfo=UTC)


def _usable_address(base_url: str) -> bool:
    """Hosts given as IP literals are checked here (aiohttp does not resolve them); names are
    checked on every connection by the upstream client's resolver."""
    host = urlsplit(base_url).hostname or ""
    try:
        check_ip(host)
    except ValueError:
        return True  # a name, not an address
    except AddressRefused:
        return False
    return True


def load_organization_config(organization_id: str, generation: int) -> OrganizationConfig | None:
    organization = (
        Organization.objects.filter(pk=organization_id).only("allowed_data_regions", "log_bodies").first()
    )
    if organization is None:
        return None
    keys: dict[str, list[ProviderKeyConfig]] = {}
    for row in ProviderKey.objects.filter(organization_id=organization_id, is_active=True):
        try:
            secret = row.secret()
        except InvalidToken:
            logger.error("Provider key %s cannot be decrypted with GATEWAY_ENCRYPTION_KEYS; skipped", row.id)
            continue
        base_url = row.effective_base_url
        if not base_url or not _usable_address(base_url):
            logger.error("Provider key %s has no usable base URL; skipped", row.id)
            continue
        keys.setdefault(row.provider, []).append(
            ProviderKeyConfig(
                id=str(row.id),
                provider=row.provider,
                secret=secret,
                weight=float(row.weight),
                data_region=row.data_region,
                base_url=base_url,
                api_version=row.api_version,
                supports_stream_usage=row.supports_stream_usage,
            )
        )
    aliases = {
        alias.alias: AliasConfig(
            alias=alias.alias,
            deployments=tuple(
                DeploymentConfig(provider=d.provider, upstream_model=d.upstream_model)
                for d in alias.deployments.all()
            ),
            fallbacks=tuple(alias.fallbacks or ()),
            created=int(alias.created_at.timestamp()),
        )
        for alias in ModelAlias.objects.filter(
            organization_id=organization_id, is_active=True
        ).prefetch_related("deployments")
    }
    teams = [
        TeamConfig(id=str(team.id), slug=team.slug, allowed_data_regions=frozenset(team.allowed_data_regions))
        for team in Team.objects.filter(organization_id=organization_id).only(
            "id", "slug", "allowed_data_regions"
        )
    ]
    models_body = json.dumps(
        {
            "object": "list",
            "data": [
                {"id": alias.alias, "object": "model", "created": alias.created, "owned_by": "organization"}
                for alias in sorted(aliases.values(), key=lambda a: a.alias)
            ],
        },
        separators=(",", ":"),
    ).encode()
    return OrganizationConfig(
        organization_id=organization_id,
        generation=generation,
        allowed_data_regions=frozenset(organization.allowed_data_regions),
        log_bodies=organization.log_bodies,
        keys_by_provider={provider: tuple(rows) for provider, rows in keys.items()},
        aliases=aliases,
        teams_by_id={team.id: team for team in teams},
        teams_by_slug={team.slug: team for team in teams},
        prices=price_versions(organization_id),
        models_body=models_body,
    )


_load_async = database_sync_to_async(load_organization_config)


class ConfigStore:
    def __init__(self) -> None:
        # organization id -> (configuration, monotonic time it was read)
        self._configs: dict[str, tuple[OrganizationConfig, float]] = {}
        self.clock = time.monotonic  # a seam for the tests

    async def get(self, organization_id: str, generation: int | None) -> OrganizationConfig | None:
        """The configuration at ``generation``; None (Redis unreachable) keeps what is held, within
        the age limit.

        Whatever the generation says, a copy older than GATEWAY_CONFIG_MAX_AGE_SECONDS is read again:
        a safety net for a change that bumped nothing (a write around the services, a bump lost
        while Redis was unreachable)."""
        held = self._configs.get(organization_id)
        if held is not None:
            config, read_at = held
            if (generation is None or config.generation == generation) and (
                self.clock() - read_at < settings.GATEWAY_CONFIG_MAX_AGE_SECONDS
            ):
                return config
        config = await _load_async(organization_id, -1 if generation is None else generation)
        if config is not None:
            self._configs[organization_id] = (config, self.clock())
        return config

    def clear(self) -> None:
        self._configs.clear()


config_store = ConfigStore()
