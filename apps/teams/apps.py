from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "apps.teams"
    label = "teams"

    def ready(self) -> None:
        """Registers ``team_memberships_end`` with organizations' departures
        (apps/organizations/departures.py): a member removed from an organization, or a reclaimed
        account, leaves its teams, and organizations, below teams, cannot import them."""
        from apps.core.lazy import imported
        from apps.organizations import departures

        departures.register(imported("apps.teams.services.team_memberships_end"))
