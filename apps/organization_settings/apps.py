from django.apps import AppConfig


class OrganizationSettingsConfig(AppConfig):
    """A surface, above the domains it composes: the organization's settings endpoint
    (``/api/v1/organizations/current``), its composed update (services.py) and the Django admin's
    organization page. It has no models."""

    name = "apps.organization_settings"
    label = "organization_settings"
