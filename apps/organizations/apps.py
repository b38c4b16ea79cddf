from django.apps import AppConfig


class OrganizationsConfig(AppConfig):
    name = "apps.organizations"
    label = "organizations"

    def ready(self) -> None:
        """Registers the OpenAPI description of the management sessions (schema.py, for the
        authentication class that lives here), and what a reclaimed account leaves in this app (its
        memberships, apps/accounts/reclaim.py): accounts, below, cannot import organizations."""
        from apps.accounts import reclaim

        from . import schema  # noqa: F401
        from .services import account_memberships_end

        reclaim.register(account_memberships_end)
