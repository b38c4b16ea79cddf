from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "apps.console"
    label = "console"

    def ready(self) -> None:
        """Registers the console's navigation (``console`` in the context) for the pages accounts
        serves to a signed-in person (apps/accounts/views.py): accounts is below the console and
        cannot import it."""
        from apps.accounts.page_context import register_page_context
        from apps.core.lazy import imported

        # The console's code loads on its first page, not when a server process starts.
        register_page_context(imported("apps.console.access.console_context"))
