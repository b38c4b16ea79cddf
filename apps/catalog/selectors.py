from datetime import datetime

from .models import ModelPrice
from .pricing import Price, in_force, shipped_price


def price_versions(organization_id) -> dict[tuple[str, str], list[Price]]:
    """Every price version an organization set, per (provider, model), newest first."""
    versions: dict[tuple[str, str], list[Price]] = {}
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


def price_at(
    versions: dict[tuple[str, str], list[Price]], provider: str, model: str, at: datetime
) -> Price | None:
    """The organization's version in force at ``at``, else the shipped table's."""
    own = versions.get((provider, model))
    if own:
        price = in_force(own, at)
        if price is not None:
            return price
    return shipped_price(provider, model, at)
