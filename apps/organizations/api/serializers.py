"""Fields of the organization's own settings that other apps' serializers share (a team's cache TTL).
The organization's settings endpoint composes several domains and lives above them
(apps/organization_settings/api)."""

from apps.core.api.fields import StrictIntegerField
from apps.organizations.models import CACHE_TTL_MAX_SECONDS


def cache_ttl_field(**kwargs) -> StrictIntegerField:
    return StrictIntegerField(
        min_value=1,
        max_value=CACHE_TTL_MAX_SECONDS,
        help_text="Seconds a cached answer may be served again (1 to 30 days).",
        **kwargs,
    )
