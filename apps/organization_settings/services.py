"""The organization's settings of every domain, changed together: its own (apps/organizations), its
budget and rate limits (apps/limits) and its default price (apps/catalog). The apps below know nothing
of each other; the composition is this surface's."""

from django.db import transaction

from apps.catalog.services import default_price_set
from apps.limits.services import UNSET, limits_set
from apps.organizations import services as organization_services
from apps.organizations.models import Organization


def organization_settings_update(
    *, organization: Organization, budget=UNSET, rate_limits=UNSET, default_price=UNSET, **changes
) -> Organization:
    """The organization's name and settings with its own budget and rate limits and its default price
    for unpriced models (``catalog.services.default_price_set``), in one transaction: a budget
    ``limits_set`` refuses leaves the other settings unchanged too."""
    with transaction.atomic():
        organization_services.organization_update(organization=organization, **changes)
        limits_set(organization=organization, budget=budget, rate_limits=rate_limits)
        if default_price is not UNSET:
            default_price_set(organization=organization, price=default_price)
    return organization
