"""Fields of the organization's own settings that other apps' serializers share (a team's cache TTL),
defined with the organization's input (apps/organizations/inputs.py). The organization's settings
endpoint composes several domains and lives above them (apps/organization_settings/api)."""

from apps.organizations.inputs import cache_ttl_field

__all__ = ["cache_ttl_field"]
