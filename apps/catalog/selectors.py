"""Reads of the model catalog and its prices."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import QuerySet

from .models import DefaultPrice, ModelAlias, ModelPrice
from .pricing import DEFAULT_PRICE_KEY, NO_DEFAULT, SHIPPED_PRICES, Price, in_force, shipped_price


@dataclass(frozen=True, slots=True)
class DeploymentSnapshot:
    provider: str
    upstream_model: str


@dataclass(frozen=True, slots=True)
class AliasSnapshot:
    """An active alias as the proxy holds it: plain data, its deployments in priority order."""

    alias: str
    deployments: tuple[DeploymentSnapshot, ...]
    fallbacks: tuple[str, ...]
    created: int  # unix seconds, for /v1/models


def active_alias_snapshots(organization_id) -> tuple[AliasSnapshot, ...]:
    """The organization's active aliases (two queries: the aliases, then their deployments)."""
    return tuple(
        AliasSnapshot(
            alias=alias.alias,
            deployments=tuple(
                DeploymentSnapshot(provider=d.provider, upstream_model=d.upstream_model)
                for d in alias.deployments.all()
            ),
            fallbacks=tuple(alias.fallbacks or ()),
            created=int(alias.created_at.timestamp()),
        )
        for alias in ModelAlias.objects.filter(
            organization_id=organization_id, is_active=True
        ).prefetch_related("deployments")
    )


def price_versions(organization_id) -> dict[tuple[str, str], list[Price]]:
    """Every price version an organization set, per (provider, model), newest first; its default
    price's versions under ``DEFAULT_PRICE_KEY``."""
    versions: dict[tuple[str, str], list[Price]] = {}
    for row in DefaultPrice.objects.filter(organization_id=organization_id).order_by("-effective_from"):
        versions.setdefault(DEFAULT_PRICE_KEY, []).append(_default_version(row))
    for row in ModelPrice.objects.filter(organization_id=organization_id).order_by("-effective_from"):
        versions.setdefault((row.provider, row.model), []).append(
            Price(
                input=row.input_per_mtok,
                output=row.output_per_mtok,
                cached_input=row.cached_input_per_mtok,
                reasoning=row.reasoning_per_mtok,
                effective_from=row.effective_from,
                source="organization",
            )
        )
    return versions


def _default_version(row: DefaultPrice) -> Price:
    if row.input_per_mtok is None:
        zero = Decimal(0)
        return Price(input=zero, output=zero, effective_from=row.effective_from, source=NO_DEFAULT)
    return Price(
        input=row.input_per_mtok,
        output=row.output_per_mtok,
        effective_from=row.effective_from,
        source="default",
    )


def price_at(
    versions: dict[tuple[str, str], list[Price]], provider: str, model: str, at: datetime
) -> Price | None:
    """The organization's version in force at ``at``, else the shipped table's, else the
    organization's default price for unpriced models; None when none of them prices the model."""
    own = versions.get((provider, model))
    if own:
        price = in_force(own, at)
        if price is not None:
            return price
    shipped = shipped_price(provider, model, at)
    if shipped is not None:
        return shipped
    return default_price_at(versions, at)


def default_price_at(versions: dict[tuple[str, str], list[Price]], at: datetime) -> Price | None:
    """The organization's default price for unpriced models in force at ``at``, if any."""
    price = in_force(versions.get(DEFAULT_PRICE_KEY, ()), at)
    return price if price is not None and price.source != NO_DEFAULT else None


def default_price_of(organization_id, at: datetime) -> Price | None:
    """The organization's default price for unpriced models now (its settings show it)."""
    return default_price_at(price_versions(organization_id), at)


# --- The console's reads ---------------------------------------------------------------------------


def model_aliases_of(organization_id) -> QuerySet[ModelAlias]:
    """The organization's aliases by name, with their deployments (in priority order)."""
    return ModelAlias.objects.filter(organization_id=organization_id).prefetch_related("deployments")


def model_prices_of(organization_id) -> QuerySet[ModelPrice]:
    """The organization's price versions, per provider and model, newest first."""
    return ModelPrice.objects.filter(organization_id=organization_id).order_by(
        "provider", "model", "-effective_from"
    )


def prices_in_force(organization_id, pairs, at: datetime) -> dict[tuple[str, str], Price | None]:
    """The price each (provider, model) costs at ``at``: the organization's version in force, else the
    shipped one (``price_at``), else None (such a model costs 0)."""
    versions = price_versions(organization_id)
    return {pair: price_at(versions, *pair, at) for pair in set(pairs)}


def shipped_prices() -> list[tuple[str, str, Price]]:
    """The list prices the gateway ships with, by provider and model."""
    return sorted(
        (
            (provider, model, price)
            for (provider, model), prices in SHIPPED_PRICES.items()
            for price in prices
        ),
        key=lambda row: (row[0], row[1], row[2].effective_from),
    )


# Chat models a person can try by name (``provider/model``, routed without an alias) with a key of
# their provider: ids the providers' chat APIs take as they are. Not the price table's keys, which
# are families (``claude-3-5-sonnet``) or models only another API serves (``o3-pro``).
CHAT_MODEL_SUGGESTIONS = {
    "openai": ("gpt-4o-mini", "gpt-4o", "gpt-4.1-nano", "gpt-4.1-mini", "gpt-4.1", "o4-mini", "o3-mini"),
    "anthropic": (
        "claude-3-5-haiku-latest",
        "claude-3-7-sonnet-latest",
        "claude-sonnet-4-0",
        "claude-opus-4-0",
    ),
}


def suggested_chat_models(providers) -> list[str]:
    """``provider/model`` names to try for each of ``providers`` the gateway knows models of."""
    return [
        f"{provider}/{model}"
        for provider in sorted(providers)
        for model in CHAT_MODEL_SUGGESTIONS.get(provider, ())
    ]
