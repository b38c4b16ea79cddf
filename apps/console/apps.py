from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "apps.console"
    label = "console"

    def ready(self) -> None:
        """Registers the console's navigation (``console`` in the context) for the pages accounts
        serves to a signed-in person (apps/accounts/views.py): accounts is below the console and
        cannot import it."""
        from apps.accounts.views import register_page_context

        from .access import console_context

        register_page_context(console_context)
