from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"

    def ready(self) -> None:
        # Connects the login throttle's signal (failed sign-ins are counted on every path).
        from . import login_throttle  # noqa: F401
