"""Each organization's routing configuration, held in this worker's memory.

Provider keys (with their secrets decrypted), model aliases, prices and teams are read through
their domains' snapshot selectors (plain frozen data: the proxy queries no other app's models) and
kept until the organization's configuration generation changes (``apps/core/generations.py``).
The generation is read on every request in the same Redis round trip as the API key's revocation
marker (``apps/proxy/auth.py``), so a change made anywhere (a rotation, a new deployment, a team's
regions) applies to the next request on every worker, and the usual request does no database read.
A copy is also read again once it is older than ``GATEWAY_CONFIG_MAX_AGE_SECONDS``, in case a
change bumped nothing; the requests that arrive meanwhile are served the copy held, and a worker
reads an organization once however many requests need it at the same moment (``ConfigStore``).

The organization's policies are compiled after the read, in a thread of their own
(``runtime.policy_builds``), not in the thread every database call of the worker shares
(``database_sync_to_async`` is thread-sensitive): a slow build holds up that organization's requests
only, which wait for it, and never another organization's key or configuration read. Compiling
still takes the GIL in turns with every thread, so what bounds its cost is the save-time check
(``apps/policies/patterns.py``: 250 ms of compile time per organization at most).
"""

import asyncio
import contextvars
import json
import logging
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError

from apps.cache.settings import CacheSettings, effective_settings
from apps.cache.shared import cache_epoch
from apps.catalog.pricing import Price
from apps.catalog.selectors import AliasSnapshot, active_alias_snapshots, price_at, price_versions
from apps.core.errors import NotFound, ServiceUnavailable
from apps.core.model_patterns import ModelAllowList
from apps.experiments.assignment import EMPTY_CATALOG as EMPTY_EXPERIMENTS
from apps.experiments.assignment import ExperimentCatalog
from apps.experiments.selectors import experiment_snapshots
from apps.limits.selectors import OrganizationLimits, organization_limits
from apps.organizations.selectors import organization_snapshot
from apps.policies.engine import ModelCatalog, PolicyEngine, PolicySnapshot
from apps.policies.engine_cache import engine_for_proxy
from apps.policies.selectors import active_policy_snapshots
from apps.prompts.compiled import EMPTY_CATALOG, PromptCatalog
from apps.prompts.selectors import prompt_snapshots
from apps.providers.models import Provider
from apps.providers.selectors import ProviderKeySnapshot, usable_provider_keys
from apps.teams.selectors import TeamSnapshot, team_snapshots

from .runtime import runtime

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class OrganizationConfig:
    """One organization's configuration, assembled from each domain's snapshot selector."""

    organization_id: str
    generation: int
    allowed_data_regions: frozenset[str]
    log_bodies: str
    keys_by_provider: dict[str, tuple[ProviderKeySnapshot, ...]]
    aliases: dict[str, AliasSnapshot]
    teams_by_id: dict[str, TeamSnapshot]
    teams_by_slug: dict[str, TeamSnapshot]
    prices: dict[tuple[str, str], list[Price]]
    limits: OrganizationLimits = field(default_factory=OrganizationLimits)
    limits_fail_mode: str = "open"
    # The models the organization's requests may call, compiled (routing.refuse_unallowed_model).
    allowed_models: ModelAllowList | None = None
    # /v1/models for callers under an allow-list, by (team id, key's patterns): routing.models_body_for.
    restricted_models_bodies: dict[tuple, bytes] = field(default_factory=dict)
    # The response cache's settings: the organization's (key None) and each team's (caching.py).
    cache_settings: dict[str | None, CacheSettings] = field(default_factory=dict)
    # The organization's cache purge epoch, part of every L2 key; None: unknown (Redis unreachable
    # when the configuration was read), and L2 is skipped rather than risk serving purged entries.
    cache_epoch: int | None = 0
    # The organization's active policies, compiled once for this generation (policing.py), from
    # ``policy_snapshots`` by ``build_policies`` after the read, off the database thread.
    policies: PolicyEngine | None = None
    policy_snapshots: tuple[PolicySnapshot, ...] = ()
    # Its prompt templates, every version compiled, labels resolved (templating.py).
    prompts: PromptCatalog = EMPTY_CATALOG
    # Its running experiments, by target (experimenting.py).
    experiments: ExperimentCatalog = EMPTY_EXPERIMENTS
    # The /v1/models answer, rendered once per generation.
    models_body: bytes = b""
    # alias -> its deployments then its fallbacks' (routing.resolve_model), built on first use.
    planned_deployments: dict[str, list] = field(default_factory=dict)
    # (provider, model) -> (price, in force from, in force until): the hot path looks a price up
    # once per request, so the version search runs only when the window is left.
    _price_cache: dict[tuple[str, str], tuple[Price | None, datetime, datetime]] = field(default_factory=dict)

    def cache_settings_for(self, team_id: str | None) -> CacheSettings:
        settings = self.cache_settings.get(team_id)
        return settings if settings is not None else self.cache_settings[None]

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


def model_object(alias: AliasSnapshot) -> dict[str, Any]:
    """An alias in OpenAI's model shape (the list's items, GET /v1/models/{model})."""
    return {"id": alias.alias, "object": "model", "created": alias.created, "owned_by": "organization"}


def render_models_body(aliases: dict[str, AliasSnapshot] | list[AliasSnapshot]) -> bytes:
    if isinstance(aliases, dict):
        aliases = list(aliases.values())
    return json.dumps(
        {"object": "list", "data": [model_object(alias) for alias in sorted(aliases, key=lambda a: a.alias)]},
        separators=(",", ":"),
    ).encode()


def load_organization_config(organization_id: str, generation: int) -> OrganizationConfig | None:
    """The organization's configuration with its policies compiled (``read_organization_config``
    then ``build_policies``, in the calling thread)."""
    config = read_organization_config(organization_id, generation)
    if config is not None:
        build_policies(config)
    return config


def read_organization_config(organization_id: str, generation: int) -> OrganizationConfig | None:
    """Reads the organization through its domains' selectors (thirteen queries, one thread hop) and its
    cache purge epoch (one Redis read); its policies are read, not compiled (``build_policies``)."""
    organization = organization_snapshot(organization_id)
    if organization is None:
        return None
    keys: dict[str, list[ProviderKeySnapshot]] = {}
    for key in usable_provider_keys(organization_id):
        keys.setdefault(key.provider, []).append(key)
    aliases = {alias.alias: alias for alias in active_alias_snapshots(organization_id)}
    teams = team_snapshots(organization_id)
    return OrganizationConfig(
        organization_id=organization_id,
        generation=generation,
        allowed_data_regions=organization.allowed_data_regions,
        log_bodies=organization.log_bodies,
        keys_by_provider={provider: tuple(rows) for provider, rows in keys.items()},
        aliases=aliases,
        teams_by_id={team.id: team for team in teams},
        teams_by_slug={team.slug: team for team in teams},
        prices=price_versions(organization_id),
        limits=organization_limits(organization_id),
        limits_fail_mode=organization.limits_fail_mode,
        allowed_models=ModelAllowList.of(organization.allowed_models),
        cache_settings={
            None: effective_settings(organization, None),
            **{team.id: effective_settings(organization, team) for team in teams},
        },
        cache_epoch=cache_epoch(organization_id),
        policy_snapshots=active_policy_snapshots(organization_id),
        prompts=prompt_snapshots(organization_id),
        experiments=experiment_snapshots(organization_id),
        models_body=render_models_body(aliases),
    )


def build_policies(config: OrganizationConfig) -> OrganizationConfig:
    """The organization's policies compiled (every pattern and term list now), their scopes and denied
    models matched on the deployments the configuration's aliases resolve to; the engine of the last
    read is reused when neither changed."""
    catalog = ModelCatalog.from_aliases(config.aliases.values(), Provider.values)
    if not config.policy_snapshots:  # nothing to compile (and nothing to wait for on the event loop)
        config.policies = PolicyEngine.build((), catalog=catalog)
    else:  # compiled once while the organization's policies and models stay the same
        config.policies = engine_for_proxy(config.organization_id, tuple(config.policy_snapshots), catalog)
    return config


_read_async = database_sync_to_async(read_organization_config)


async def _load_async(organization_id: str, generation: int) -> OrganizationConfig | None:
    config = await _read_async(organization_id, generation)
    if config is None:
        return None
    if not config.policy_snapshots:
        return build_policies(config)  # an empty engine: nothing to compile
    return await asyncio.get_running_loop().run_in_executor(runtime.policy_builds, build_policies, config)


# What a database that cannot be reached raises (psycopg's PoolTimeout and refused connections
# arrive as OperationalError); any other error is a bug and is not hidden behind an old copy.
DATABASE_UNREACHABLE = (OperationalError, InterfaceError)
# After a read failed so, the next ones wait this long before trying the database again: meanwhile
# every request is answered at once, from the last good copy or with a 503.
RETRY_DATABASE_SECONDS = 2.0
_WARNING_SECONDS = 30.0


class ConfigStore:
    """One read per organization and generation at a time (single flight): every request that needs
    a new copy while it is being read waits for that read rather than starting its own (each read
    queries the database and decrypts every provider key). When only the copy's age ran out, the
    request that finds it so reads it again and the ones that arrive meanwhile are served the copy
    held; when the generation changed, every request waits for the new copy: a changed
    configuration (a deleted key, a region taken away) is never served from the old one.

    Generations are compared for equality only, and of two reads the one started last is kept: a
    Redis that restarted empty gives generations that are neither "newer" nor "older" than the
    copy held, only different (apps/core/generations.py).

    While the database cannot be reached, an organization's last good copy is served for
    ``GATEWAY_CONFIG_OUTAGE_MAX_AGE_SECONDS`` after it was read (a 503 in OpenAI's shape after that,
    or when there is none): a failed read makes the next ones skip the database for
    ``RETRY_DATABASE_SECONDS``, and when that ends one read tries again in the background while the
    requests are still served the copy held, so no request waits on the pool's timeout but the
    first (and those of an organization this worker never read)."""

    def __init__(self) -> None:
        # organization id -> (configuration, monotonic time it was read, order its read started in)
        self._configs: dict[str, tuple[OrganizationConfig, float, int]] = {}
        # (organization id, generation) -> the read under way
        self._reads: dict[tuple[str, int], asyncio.Task] = {}
        self._started = 0
        self._database_away_until = 0.0
        self._last_warning = -_WARNING_SECONDS
        self.clock = time.monotonic  # seams for the tests
        self.load = _load_async

    async def get(self, organization_id: str, generation: int | None) -> OrganizationConfig | None:
        """The configuration at ``generation``; None (Redis unreachable) keeps what is held, within
        the age limit.

        Whatever the generation says, a copy older than GATEWAY_CONFIG_MAX_AGE_SECONDS is read again:
        a safety net for a change that bumped nothing (a write around the services, a bump lost
        while Redis was unreachable)."""
        held = self._configs.get(organization_id)
        now = self.clock()
        if held is not None:
            config, read_at, _ = held
            if (generation is None or config.generation == generation) and (
                now - read_at < settings.GATEWAY_CONFIG_MAX_AGE_SECONDS
            ):
                return config
        if generation is None:  # not known yet (or Redis unreachable): the copy held is the best guess
            generation = held[0].generation if held is not None else -1
        key = (organization_id, generation)
        task = self._under_way(key)
        if task is not None and held is not None and held[0].generation == generation:
            return held[0]  # only the age ran out, and another request is reading it again
        away = now < self._database_away_until
        if away and task is None:
            return self._last_good(organization_id, generation)
        if task is None:
            self._started += 1
            task = asyncio.get_running_loop().create_task(
                self._read_and_keep(*key, self._started), context=contextvars.Context()
            )
            self._reads[key] = task
            task.add_done_callback(lambda done: self._finished(key, done))
        if (
            self._database_away_until
            and held is not None
            and self._usable(held, now)
            and held[0].generation == generation
        ):
            # The database failed lately: this read is the probe, and nobody waits for it (a changed
            # configuration is waited for: it must not be served from the copy before the change).
            self._database_away_until = now + RETRY_DATABASE_SECONDS
            return self._last_good(organization_id, generation)
        # Shielded: a client that leaves must not cancel the read the other requests wait for.
        return await asyncio.shield(task)

    def holds(self, organization_id: str) -> bool:
        return organization_id in self._configs

    def _under_way(self, key: tuple[str, int]) -> asyncio.Task | None:
        task = self._reads.get(key)
        # A read of another event loop (a test's that ended) cannot be awaited from this one.
        return task if task is not None and task.get_loop() is asyncio.get_running_loop() else None

    async def _read_and_keep(
        self, organization_id: str, generation: int, order: int
    ) -> OrganizationConfig | None:
        try:
            config = await self.load(organization_id, generation)
        except DATABASE_UNREACHABLE as error:
            self._database_away_until = self.clock() + RETRY_DATABASE_SECONDS
            self._warn(error)
            return self._last_good(organization_id, generation)
        self._database_away_until = 0.0
        if config is None:  # the organization is gone
            self._configs.pop(organization_id, None)
            return None
        held = self._configs.get(organization_id)
        # A read that ends after one started later must not replace it (whatever the generations).
        if held is None or held[2] < order:
            self._configs[organization_id] = (config, self.clock(), order)
        return config

    def _usable(self, held: tuple[OrganizationConfig, float, int] | None, now: float) -> bool:
        return held is not None and now - held[1] < settings.GATEWAY_CONFIG_OUTAGE_MAX_AGE_SECONDS

    def _last_good(self, organization_id: str, generation: int) -> OrganizationConfig:
        """The copy held, while the database cannot be reached; labelled with the generation asked
        for, so admission does not ask for it again and again (nothing could read it anyway)."""
        held = self._configs.get(organization_id)
        if held is None or not self._usable(held, self.clock()):
            raise ServiceUnavailable(
                "This organization's configuration cannot be read right now (the database is "
                "unreachable); retry shortly.",
                code="configuration_unavailable",
                headers={"retry-after": "5"},
            )
        config = held[0]
        return config if config.generation == generation else replace(config, generation=generation)

    def _warn(self, error: Exception) -> None:
        now = self.clock()
        if now - self._last_warning >= _WARNING_SECONDS:
            self._last_warning = now
            # The error's type only: its text may hold the database's address.
            logger.warning(
                "Database unreachable reading an organization's configuration (%s); serving the copies "
                "held for up to %s s",
                type(error.__cause__ or error).__name__,
                settings.GATEWAY_CONFIG_OUTAGE_MAX_AGE_SECONDS,
            )

    def _finished(self, key: tuple[str, int], task: asyncio.Task) -> None:
        if self._reads.get(key) is task:
            del self._reads[key]
        if not task.cancelled():
            task.exception()  # raised to the requests that waited; retrieved even if they all left

    def clear(self) -> None:
        self._configs.clear()
        self._reads.clear()
        self._database_away_until = 0.0


async def load_config(organization_id: str, generation: int | None) -> OrganizationConfig:
    config = await runtime.configs.get(organization_id, generation)
    if config is None:  # the organization was deleted after the key was cached
        raise NotFound("This API key's organization no longer exists.", code="organization_not_found")
    return config
