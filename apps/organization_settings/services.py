"""The organization's settings of every domain, changed together: its own (apps/organizations), its
budget and rate limits (apps/limits) and its default price (apps/catalog). The apps below know nothing
of each other; the composition is this surface's."""

from django.db import transaction

from apps.catalog.models import ModelAlias
from apps.catalog.services import default_price_set
from apps.core.errors import invalid_field
from apps.limits.services import UNSET, limits_set
from apps.organizations import services as organization_services
from apps.organizations.models import Organization


def organization_settings_check(*, organization: Organization, changes: dict) -> None:
    """The rules of the settings that span domains, for every way in (the API, the admin's form, the
    console): the response cache's embeddings model is an alias of the organization's catalog, and the
    semantic tier (L3) needs one. A partial change is checked against what it leaves. Raises
    ``InvalidRequest`` naming ``cache_embedding_model``."""

    def final(field: str):
        return changes[field] if field in changes else getattr(organization, field)

    model = final("cache_embedding_model")
    if model and not ModelAlias.objects.filter(organization=organization, alias=model).exists():
        raise invalid_field("cache_embedding_model", "No such model alias in this organization's catalog.")
    if final("cache_semantic_enabled") and not model:
        raise invalid_field("cache_embedding_model", "The semantic cache needs an embeddings model alias.")


def organization_settings_update(
    *, organization: Organization, budget=UNSET, rate_limits=UNSET, default_price=UNSET, **changes
) -> Organization:
    """The organization's name and settings (``changes``: handed to ``organization_update``, which
    checks them with the organization's input) with its own budget and rate limits and its default
    price for unpriced models (``catalog.services.default_price_set``), in one transaction: a budget
    ``limits_set`` refuses leaves the other settings unchanged too."""
    organization_settings_check(organization=organization, changes=changes)
    with transaction.atomic():
        organization_services.organization_update(organization=organization, data=changes)
        limits_set(organization=organization, budget=budget, rate_limits=rate_limits)
        if default_price is not UNSET:
            default_price_set(organization=organization, price=default_price)
    return organization
