from django.apps import AppConfig


class OrganizationsConfig(AppConfig):
    name = "apps.organizations"
    label = "organizations"

    def ready(self) -> None:
        """Registers what a reclaimed account leaves in this app (its
        memberships, apps/accounts/reclaim.py): accounts, below, cannot import organizations."""
        from apps.accounts import reclaim
        from apps.core.lazy import imported

        reclaim.register(imported("apps.organizations.services.account_memberships_end"))
