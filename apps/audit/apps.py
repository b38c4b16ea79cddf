from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "apps.audit"
    label = "audit"

    def ready(self) -> None:
        from apps.limits.spend import register_spend_reader

        from . import selectors, services

        services.connect()
        # Budgets read their spend so far from the log through limits' registry (limits sits below
        # this app and does not import it).
        register_spend_reader(selectors.spend_since)
